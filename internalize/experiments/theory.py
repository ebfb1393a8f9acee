"""The theory regime's optimizer, shared by Log-ICoT and the sparse-parity model (train.mode=theory)."""
from __future__ import annotations

from typing import Optional

import torch

from internalize.config import TrainConfig


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


def row_step_optimizer(params: list, cfg: TrainConfig) -> Optional[torch.optim.Optimizer]:
    """RowStep when train.optimizer is row_step; None (the trainer's Adam or AdamW) otherwise."""
    return RowStep(params, cfg.theory.row_step) if cfg.optimizer == "row_step" else None
