"""The System protocol: everything the trainer, the runner and the command line call on a system.

A system is what the trainer trains (Log-ICoT, a GPT on semiautomata, the sparse-parity theory
model, ...). It is built from a Config by the registry in `internalize.experiments`, hands the
trainer its stages, and evaluates, summarises and draws itself. This file is the one place the
protocol is declared; the trainer imports it, and never a system.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Protocol

import torch


@dataclass
class Stage:
    info: dict  # what this stage is, for tables and the summary: e.g. {"padded": 8, "layer": 2}
    params: list[torch.nn.Parameter]
    sample: Callable[[int, torch.Generator], Any]  # (batch size, generator) -> a fresh training batch
    loss: Callable[[Any], torch.Tensor]  # a training batch -> scalar loss
    validate: Callable[[], float]  # loss on the fixed validation set


class System(Protocol):
    # -- what the trainer calls --------------------------------------------------------------
    num_stages: int
    model: torch.nn.Module

    def stage(self, index: int) -> Stage:
        """Stage `index` (0-based): the parameters that learn, how a batch is drawn and scored."""

    def after_step(self) -> None:
        """Called after every optimizer step (rounding, clamping); most systems do nothing."""

    def evaluate(self) -> dict[str, float]:
        """The per-stage figures, computed at each stage end (keys of `stage_metrics` among them)."""

    # -- what the runner and the command line call -------------------------------------------
    headline: str  # the per-stage figure whose first 1.0 counts as solved (samples_to_full_accuracy)
    stage_metrics: dict[str, float]  # per-stage figures to plot after training -> their chance level

    def summary(self) -> dict:
        """The final figures of a trained run: summary.json holds them beside the trainer's counters."""

    def figures(self, folder: Path, per_stage: list[dict]) -> None:
        """The system's own figures (attention maps, scores), written into `folder` as PNG."""

    @staticmethod
    def describe(summary: dict) -> str:
        """One line of a finished run's headline figures, from its summary.json alone."""
