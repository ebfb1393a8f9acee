"""The System protocol: everything the trainer, the runner and the command line call on a system.

A system is what the trainer trains (Log-ICoT, a GPT on semiautomata, the sparse-parity theory
model, ...). It is built from a Config through the registry (`internalize.registry`), hands the
trainer its stages, and evaluates, summarises and draws itself. This file is the one place the
protocol is declared; the trainer imports it, and never a system.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional, Union

import torch

VAL_SEED, TEST_SEED = 1_000_003, 2_000_003  # evaluation sets are seeded apart from training


def device_for(config) -> torch.device:
    if config.device == "cuda" and not torch.cuda.is_available():
        raise ValueError("device 'cuda' was asked for, but CUDA is not available here")
    return torch.device(config.device)


@dataclass
class Stage:
    info: dict  # what this stage is, for tables and the summary: e.g. {"padded": 8, "layer": 2}
    # what learns: parameters, or torch parameter groups ({"params": [...], "lr": 1e-4, ...}) with their own
    # learning rates; a group without "lr" gets train.lr
    params: list
    sample: Callable[[int, torch.Generator], Any]  # (batch size, generator) -> a fresh training batch
    # a training batch -> the scalar loss, or (scalar loss, {name: part}): each part is logged as train_<name>
    loss: Callable[[Any], Union[torch.Tensor, tuple[torch.Tensor, dict]]]
    validate: Callable[[], float]  # loss on the fixed validation set
    # train.* keys this stage sets otherwise (its steps_per_stage, lr, warmup_steps, ...): a run in
    # phases, each a stage with its own budget and learning rate
    train: dict = field(default_factory=dict)
    # (batch, rows) -> [(micro-batch, weight)]: the batch in parts of at most `rows` rows, each weighted so
    # that the weighted sum of their losses is the batch's loss (train.micro_batch: their gradients
    # accumulate); None: this stage's batches cannot be split
    split: Optional[Callable[[Any, int], list]] = None
    # parameters whose gradients train.grad_clip clips apart, each group to its own norm, logged as
    # train_<i>/grad_norm (runs trained as one, each clipped as it would be alone); None: every
    # parameter that learns, together, logged as train_grad_norm
    clip_groups: Optional[list[list]] = None


class System:
    """The protocol. Subclass it: the methods with a body have defaults; the others a system must define."""

    # -- what the trainer calls --------------------------------------------------------------
    num_stages: int
    model: torch.nn.Module

    def stage(self, index: int) -> Stage:
        """Stage `index` (0-based): the parameters that learn, how a batch is drawn and scored."""
        raise NotImplementedError

    def on_step(self, step: int) -> None:
        """Called before every training step with the global step (0-based): schedules over the whole
        run (a loss weight's warm-up) read it here."""

    def after_step(self) -> None:
        """Called after every optimizer step (rounding, clamping)."""

    def evaluate(self, stage: int) -> dict[str, float]:
        """The per-stage figures, computed at the end of stage `stage` (0-based) in that stage's format
        (keys of `stage_metrics` among them)."""
        raise NotImplementedError

    def optimizer(self, params: list, cfg) -> Optional[torch.optim.Optimizer]:
        """A system's own optimizer for train.optimizer (cfg is the TrainConfig); None: the trainer's
        adam or adamw."""
        return None

    def state(self) -> dict:
        """The system's own state beyond its model (an estimated constant): JSON, checkpointed with the
        trainer's counters, so a resumed run continues exactly."""
        return {}

    def load_state(self, state: dict) -> None:
        """Restore what `state` returned, on resume."""

    def fixed(self) -> set[str]:
        """Names in `model.state_dict()` of weights the system builds the same way at every start and
        never trains (a frozen base read from a folder): checkpoints leave them out and keep their
        SHA-256, and loading one checks them against it."""
        return set()

    # -- what the runner and the command line call -------------------------------------------
    headline: str  # the per-stage figure whose first 1.0 counts as solved (samples_to_full_accuracy)
    stage_metrics: dict[str, float]  # per-stage figures to plot after training -> their chance level

    def summary(self) -> dict:
        """The final figures of a trained run: summary.json holds them beside the trainer's counters."""
        raise NotImplementedError

    def figures(self, folder: Path, per_stage: list[dict]) -> None:
        """The system's own figures (attention maps, scores), written into `folder` as PNG."""

    def files(self, folder: Path) -> None:
        """The system's own files beyond its figures (the samples behind the summary, say), written into
        the run directory `folder`."""

    @staticmethod
    def describe(summary: dict) -> str:
        """One line of a finished run's headline figures, from its summary.json alone."""
        raise NotImplementedError

    @staticmethod
    def table_columns(records: list[dict], config) -> dict:
        """Figures a sweep's results table adds to a finished run's row, from its metrics.jsonl records
        and its config."""
        return {}


class Stacked(System):
    """Several runs of one system trained at once, as one system (a registry entry's `stacked`): runs
    whose configs differ only in the top-level fields named by `varies` (Log-ICoT: its seeds, one
    batched model; the factorisation: its objectives, one frozen base, batch and base passes shared).

    The trainer trains it like any system; its recorder hands every record to `split`, and at the
    end each run is written from `seed(i)` as if it had trained alone: each run's summary, metrics
    and figures are those of its own run (timings aside).
    """

    varies: tuple[str, ...] = ("seed",)  # the config fields in which stacked runs may differ
    seeds: list[int]
    # each run's training stream, whose state its run's checkpoint keeps (runs that read the trainer's
    # own stream, as the factorisation's do, hold it once per run)
    generators: list[torch.Generator]

    def __init__(self, configs: list):
        raise NotImplementedError

    def split(self, record: dict) -> dict[int, dict]:
        """A record the trainer logs -> each run's own record (by index into the configs); a run that
        did not train in the step the record reports is left out."""
        raise NotImplementedError

    def seed(self, index: int) -> tuple[System, dict]:
        """Run `index`'s own system, holding its trained weights, and its training result as the
        trainer would return it alone (stages, samples_seen, steps, train_seconds, per_stage)."""
        raise NotImplementedError

    # a stack that can be continued after a kill: the trainer's checkpoints of the stack are written as
    # each run's own checkpoint (a run continues from it stacked again, or alone), and read back
    resumable: bool = False

    def split_checkpoint(self, state: dict, tensors: dict) -> dict[int, tuple[dict, dict]]:
        """The trainer's checkpoint of the stack (its TrainState as a dict, its tensors) -> each run's
        own, as the run's trainer would have written it alone."""
        raise NotImplementedError

    def join_checkpoints(self, checkpoints: list[tuple[dict, dict]]) -> tuple[dict, dict]:
        """Each run's own checkpoint (split_checkpoint's, from its run directory) -> the stack's."""
        raise NotImplementedError
