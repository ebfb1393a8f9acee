"""k-parity with its parity-tree chain of thought (docs/logicot.md).

Positions are 0-indexed here: inputs 0..n-1, then tree level 1 left to right, level 2, ...,
the root (the answer) last, T = n + k - 1 in all. The spec counts from 1 (level 1 of n=30, k=16
is positions 31-38 there, 30-37 here).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch


def check_sizes(n: int, k: int) -> None:
    """Raise ValueError unless 2 <= k <= n and k is a power of two."""
    if k < 2:
        raise ValueError(f"task.k must be at least 2 (got {k})")
    if k & (k - 1):
        raise ValueError(f"task.k must be a power of two (got {k})")
    if k > n:
        raise ValueError(f"task.k must not exceed task.n (got k={k}, n={n})")


@dataclass(frozen=True)
class TreeLayout:
    """Where every node of the parity tree sits, and which two positions it multiplies."""

    n: int
    k: int
    support: tuple[int, ...]  # the k relevant input positions, in leaf order
    level: np.ndarray  # (T,) 0 for inputs, l for a level-l node
    children: np.ndarray  # (T, 2) the two child positions; -1 for inputs

    @property
    def depth(self) -> int:  # L = log2 k
        return self.k.bit_length() - 1

    @property
    def length(self) -> int:  # T
        return self.n + self.k - 1

    @property
    def answer(self) -> int:
        return self.length - 1

    @property
    def thinking(self) -> np.ndarray:
        """The k - 2 non-root internal nodes, in sequence order."""
        return np.arange(self.n, self.length - 1)

    def positions(self, level: int) -> np.ndarray:
        return np.flatnonzero(self.level == level)


def build_layout(n: int, k: int, support: tuple[int, ...]) -> TreeLayout:
    depth = k.bit_length() - 1
    length = n + k - 1
    level = np.zeros(length, dtype=np.int64)
    children = np.full((length, 2), -1, dtype=np.int64)
    below = np.asarray(support, dtype=np.int64)  # nodes of the level below, left to right
    start = n
    for lvl in range(1, depth + 1):
        width = len(below) // 2
        here = np.arange(start, start + width)
        level[here] = lvl
        children[here] = below.reshape(width, 2)
        below, start = here, start + width
    return TreeLayout(n=n, k=k, support=tuple(int(s) for s in support), level=level, children=children)


class ParityTree:
    """Uniform bits in {+1,-1}^n; a secret support of k bits drawn once from the seed."""

    def __init__(self, n: int, k: int, seed: int, pairing: str = "sorted"):
        check_sizes(n, k)
        if pairing not in ("sorted", "random"):
            raise ValueError(f"task.pairing must be 'sorted' or 'random' (got {pairing!r})")
        rng = np.random.default_rng(seed)
        support = np.sort(rng.choice(n, size=k, replace=False))
        if pairing == "random":
            support = rng.permutation(support)
        self.layout = build_layout(n, k, tuple(int(s) for s in support))

    def sample(self, batch: int, generator: torch.Generator) -> torch.Tensor:
        """Ground-truth values of every position, (batch, T), entries +-1."""
        lay = self.layout
        values = torch.empty(batch, lay.length)
        bits = torch.randint(0, 2, (batch, lay.n), generator=generator)
        values[:, : lay.n] = 1.0 - 2.0 * bits  # (B, n)
        for lvl in range(1, lay.depth + 1):
            pos = torch.as_tensor(lay.positions(lvl))
            kids = torch.as_tensor(lay.children[lay.positions(lvl)])  # (width, 2)
            values[:, pos] = values[:, kids[:, 0]] * values[:, kids[:, 1]]
        return values
