"""Evaluation: answer accuracy, attention on the right keys."""
from __future__ import annotations

import numpy as np
import torch


def sign_accuracy(pred: torch.Tensor, target: torch.Tensor) -> float:
    """Fraction of entries whose sign agrees with a +-1 target (a prediction of 0 counts as -1)."""
    return float(((pred > 0) == (target > 0)).float().mean())


def child_attention_mass(attention: torch.Tensor, level: np.ndarray, children: np.ndarray, layer: int) -> float:
    """Mean attention a layer puts on the two children, over the nodes of its own level.

    attention: (T, T) for that layer, row m = query m.
    """
    rows = np.flatnonzero(level == layer)
    kids = torch.as_tensor(children[rows])  # (width, 2)
    mass = attention[torch.as_tensor(rows)[:, None], kids].sum(dim=1)  # (width,)
    return float(mass.mean())
