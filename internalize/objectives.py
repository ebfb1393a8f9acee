"""Training objectives."""
from __future__ import annotations

import torch


def squared_error(pred: torch.Tensor, target: torch.Tensor, where: torch.Tensor) -> torch.Tensor:
    """Mean of (pred - target)^2 over the supervised positions. pred, target: (B, T); where: (T,)."""
    return ((pred[:, where] - target[:, where]) ** 2).mean()
