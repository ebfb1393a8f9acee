"""Curricula: which chain-of-thought tokens are hidden in each stage.

A curriculum is a pure function of (stage, number of thinking tokens) to the set of thinking
tokens removed, plus its stage count and what is supervised and trained. The trainer never
special-cases one: it asks for `num_stages` and `removed`, nothing else.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np


@dataclass(frozen=True)
class Curriculum:
    name: str
    description: str
    stage_count: Callable[[int], int]  # thinking tokens -> number of stages
    removed_count: Callable[[int, int], int]  # (stage, thinking tokens) -> leading tokens removed
    answer_only: bool = False  # supervise the answer alone (no intermediate targets)
    train_all_layers: bool = False  # train every layer jointly instead of the frontier alone

    def num_stages(self, thinking: int) -> int:
        return self.stage_count(thinking)

    def removed(self, stage: int, thinking: int) -> np.ndarray:
        """(thinking,) bool: the tokens hidden in this 0-based stage."""
        if not 0 <= stage < self.num_stages(thinking):
            raise ValueError(f"{self.name} has {self.num_stages(thinking)} stages, no stage {stage}")
        mask = np.zeros(thinking, dtype=bool)
        mask[: self.removed_count(stage, thinking)] = True
        return mask


def _tree_leaves(thinking: int) -> int:
    """A parity tree over k leaves has k - 2 thinking tokens."""
    k = thinking + 2
    if k & (k - 1):
        raise ValueError(f"log_icot needs k - 2 thinking tokens with k a power of two (got {thinking})")
    return k


def _log_icot_count(stage: int, thinking: int) -> int:
    # stage t = stage + 1 hides the first k(1 - 2^-(t-1)) tokens: whole tree levels 1..t-1
    k = _tree_leaves(thinking)
    return k - (k >> stage)


CURRICULA = {
    c.name: c
    for c in (
        Curriculum(
            "log_icot",
            "hide one whole tree level per stage: log2(k) stages",
            stage_count=lambda thinking: _tree_leaves(thinking).bit_length() - 1,
            removed_count=_log_icot_count,
        ),
        Curriculum(
            "stepwise",
            "hide one more thinking token per stage (Deng et al. 2024): k - 1 stages",
            stage_count=lambda thinking: thinking + 1,
            removed_count=lambda stage, thinking: stage,
        ),
        Curriculum(
            "full_cot",
            "never hide anything: explicit chain of thought",
            stage_count=lambda thinking: 1,
            removed_count=lambda stage, thinking: 0,
        ),
        Curriculum(
            "e2e",
            "hide every thinking token from the start; answer-only loss; all layers trained",
            stage_count=lambda thinking: 1,
            removed_count=lambda stage, thinking: thinking,
            answer_only=True,
            train_all_layers=True,
        ),
    )
}


def get_curriculum(name: str) -> Curriculum:
    if name not in CURRICULA:
        raise ValueError(f"unknown curriculum {name!r}; choose from {sorted(CURRICULA)}")
    return CURRICULA[name]
