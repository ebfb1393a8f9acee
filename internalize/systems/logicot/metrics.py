"""Log-ICoT's loss and measures: squared error, sign accuracy, attention on the right keys."""
from __future__ import annotations

import numpy as np
import torch


def squared_error(pred: torch.Tensor, target: torch.Tensor, where: torch.Tensor) -> torch.Tensor:
    """Mean of (pred - target)^2 over the supervised positions. pred, target: (B, T); where: (T,)."""
    return ((pred[:, where] - target[:, where]) ** 2).mean()


def sign_accuracy(pred: torch.Tensor, target: torch.Tensor) -> float:
    """Fraction of entries whose sign agrees with a +-1 target (a prediction of 0 counts as -1)."""
    return float(((pred > 0) == (target > 0)).float().mean())


def child_masses(attention: torch.Tensor, level: np.ndarray, children: np.ndarray,
                 layer: int) -> tuple[np.ndarray, torch.Tensor]:
    """The positions of a layer's own level and the attention each puts on its two children.

    attention: (T, T) for that layer, row m = query m.
    """
    rows = np.flatnonzero(level == layer)
    kids = torch.as_tensor(children[rows])  # (width, 2)
    return rows, attention[torch.as_tensor(rows)[:, None], kids].sum(dim=1)  # (width,), (width,)


def child_attention_mass(attention: torch.Tensor, level: np.ndarray, children: np.ndarray, layer: int) -> float:
    """Mean attention a layer puts on the two children, over the nodes of its own level."""
    return float(child_masses(attention, level, children, layer)[1].mean())


def weakest_row(attention: torch.Tensor, level: np.ndarray, children: np.ndarray, layer: int) -> dict:
    """The node of a layer's own level whose children get the least attention: its position, that
    mass, and where its heaviest key points (position, level, weight, whether a child)."""
    rows, mass = child_masses(attention, level, children, layer)
    i = int(mass.argmin())
    row = int(rows[i])
    weight, key = attention[row].max(dim=0)
    return dict(row=row, child_mass=float(mass[i]), top_key=int(key), top_key_level=int(level[int(key)]),
                top_weight=float(weight), top_is_child=int(key) in children[row])


def child_weights(weights: torch.Tensor, allowed: torch.Tensor, level: np.ndarray, children: np.ndarray,
                  layer: int) -> tuple[float, float]:
    """(mean W on the two children, mean over rows of sum |W| on every other allowed key), own level."""
    rows = np.flatnonzero(level == layer)
    on_children = torch.zeros_like(allowed)
    on_children[torch.as_tensor(rows)[:, None], torch.as_tensor(children[rows])] = True
    block = weights.detach()[torch.as_tensor(rows)]  # (width, T)
    child = float(block[on_children[torch.as_tensor(rows)]].mean())
    others = allowed[torch.as_tensor(rows)] & ~on_children[torch.as_tensor(rows)]
    return child, float((block.abs() * others).sum(dim=1).mean())


def representation_spread(states: list[torch.Tensor], level: np.ndarray) -> list[float]:
    """Per layer l: std over examples of h^(l) at the level-l nodes, averaged over those nodes.

    About 1 when layer l holds the +-1 values of its level; near 0 when the representation has
    collapsed to the same value for every input.
    """
    return [float(h.detach()[:, torch.as_tensor(np.flatnonzero(level == layer))].std(dim=0).mean())
            for layer, h in enumerate(states, start=1)]
