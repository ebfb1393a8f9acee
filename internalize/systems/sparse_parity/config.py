"""The sparse-parity system's config sections: the task and the one-layer linear-attention model."""
from __future__ import annotations

from typing import Literal, Optional

from pydantic import model_validator

from internalize.config import Strict
from internalize.systems.sparse_parity.task import check_support


class SparseParityConfig(Strict):
    name: Literal["sparse_parity"] = "sparse_parity"
    d: int = 64  # input bits
    k: int = 8  # size of the hidden support
    # the order the chain visits the support: left to right (sorted), or a random order of it
    order: Literal["sorted", "random"] = "sorted"

    @model_validator(mode="after")
    def _sizes(self):
        check_support(self.d, self.k)
        return self


class LinearAttentionConfig(Strict):
    name: Literal["linear_attention"] = "linear_attention"
    nudge: float = 0.8  # each loss is taken at A + (nudge / d) * U(0, 1): integer weights have zero gradient
    nonnegative: bool = True  # clamp the weights at 0 after every update
    quantize: bool = True  # round the weights to integers after every update


def theory_budget(config) -> tuple[int, Optional[int]]:
    """20,000 samples a stage; e2e gets the internalization route's budget, one step per support bit."""
    return 20_000, config.task.k
