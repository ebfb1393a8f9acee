"""The Theorem-1 regime, a `theory` section that Log-ICoT and the sparse-parity model read.

With `theory.enabled`, each stage is one normalised row step (RowStep) on one fresh batch of
`theory.samples` examples, and the weights are rounded to integers after it. The regime fixes the
trainer's batch size, advance rule and steps per stage: a config that sets any of them otherwise is
refused (one error line), never silently rewritten. The model rounds its weights unless the config
says `model.quantize=false` (the ablation that shows the rounding matters).
"""
from __future__ import annotations

from typing import Callable, Optional

import torch

from internalize.config import Strict


class TheoryConfig(Strict):
    enabled: bool = False  # one normalised row step per stage on theory.samples, then integer weights
    # the one batch per stage; None: the task's own budget (Log-ICoT: round(n ** (2 + eps)); sparse parity: 20,000)
    samples: Optional[int] = None
    eps: float = 0.9  # Log-ICoT's default sample count is n^(2 + eps)
    row_step: float = 9.0  # each row moves until its largest entry changes by this much


class RowStep(torch.optim.Optimizer):
    """One normalised gradient step per row: each row moves until its largest entry moves by `size`.

    The Theorem-1 regime of Log-ICoT ("per-row step sized so the child weights reach about 8-10");
    rows with no gradient stay where they are.
    """

    def __init__(self, params, size: float):
        super().__init__(params, dict(size=size))

    @torch.no_grad()
    def step(self, closure=None):
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                scale = p.grad.abs().amax(dim=-1, keepdim=True)  # (rows, 1)
                p.sub_(group["size"] * p.grad / scale.clamp_min(1e-30))


def row_step_optimizer(params: list, theory: TheoryConfig) -> Optional[torch.optim.Optimizer]:
    """RowStep when the theory regime is on; None (the trainer's Adam or AdamW) otherwise."""
    return RowStep(params, theory.row_step) if theory.enabled else None


def derive(config, key: str, value) -> None:
    """Set `key` (train.X or model.X) to what the regime needs; refuse a config that set it otherwise."""
    section, name = key.split(".")
    part = getattr(config, section)
    if name in part.model_fields_set and getattr(part, name) != value:
        raise ValueError(f"theory.enabled fixes {key}={value}; the config sets {key}={getattr(part, name)}")
    setattr(part, name, value)


def check(budget: Callable) -> Callable:
    """A registry check for a system with a `theory` section: budget(config) -> (samples per stage, the
    e2e curriculum's step count or None)."""
    def apply(config) -> None:
        if not config.theory.enabled:
            return
        samples, e2e_steps = budget(config)
        if "optimizer" in config.train.model_fields_set and config.train.optimizer != "adam":
            raise ValueError(f"theory.enabled steps with its own row step; the config sets "
                             f"train.optimizer={config.train.optimizer}")
        derive(config, "train.batch_size", config.theory.samples or samples)
        derive(config, "train.advance", "steps")
        derive(config, "train.steps_per_stage", 1)
        if "quantize" not in config.model.model_fields_set:  # rounding is the regime's default; off: the ablation
            config.model.quantize = True
        if config.curriculum.name == "e2e" and e2e_steps is not None and config.train.first_stage_steps is None:
            config.train.first_stage_steps = e2e_steps
    return apply
