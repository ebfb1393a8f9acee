"""Sparse parity with its prefix-parity chain of thought (docs/sparse_parity.md).

Bits b_1..b_d in {0, 1}; a hidden support S = (s_1, ..., s_k) of k positions, drawn once per seed;
the chain c_j = c_{j-1} xor b_{s_j} (c_1 = b_{s_1}); the answer y = c_k. Positions are 0-indexed.
"""
from __future__ import annotations

import torch


def check_support(d: int, k: int) -> None:
    """Raise ValueError unless 2 <= k <= d."""
    if k < 2:
        raise ValueError(f"task.k must be at least 2 (got {k})")
    if k > d:
        raise ValueError(f"task.k must not exceed task.d (got k={k}, d={d})")


class SparseParity:
    def __init__(self, d: int, k: int, seed: int, order: str = "sorted"):
        check_support(d, k)
        if order not in ("sorted", "random"):
            raise ValueError(f"task.order must be sorted or random (got {order!r})")
        self.d, self.k = d, k
        drawn = torch.randperm(d, generator=torch.Generator().manual_seed(seed))[:k]
        self.support = tuple(int(s) for s in (drawn.sort().values if order == "sorted" else drawn))

    def chain(self, bits: torch.Tensor) -> torch.Tensor:
        """(B, d) bits -> (B, k) prefix parities c_1..c_k over the support, in its order."""
        picked = bits[:, list(self.support)].long()
        return (picked.cumsum(dim=1) % 2).to(bits.dtype)

    def sample(self, batch: int, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        """Fresh uniform bits and their chain: (B, d), (B, k), float 0/1."""
        bits = torch.randint(0, 2, (batch, self.d), generator=generator).float()
        return bits, self.chain(bits)
