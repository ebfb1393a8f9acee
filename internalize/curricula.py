"""Curricula: which chain-of-thought tokens are hidden in each stage.

A curriculum is a pure function of (stage, number of thinking tokens) to the set of thinking
tokens removed, plus its stage count and what is supervised and trained; per example it may
also draw its own variation (removal smoothing, a mixture of lengths). The trainer never
special-cases one: systems ask for `num_stages`, `removed` and `sample_removed`.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import numpy as np
import torch
from pydantic import model_validator

from internalize.config import Strict


@dataclass(frozen=True)
class Curriculum:
    """Base: remove nothing, one stage."""

    name: str = "full_cot"
    description: str = "never hide anything: explicit chain of thought"
    answer_only: bool = False  # supervise the answer alone (no intermediate targets)
    train_all_layers: bool = False  # train every layer jointly instead of the frontier alone
    hint: bool = False  # sequences carry a length-hint token (mixture)

    def num_stages(self, thinking: int) -> int:
        return 1

    def _removed(self, stage: int, thinking: int) -> np.ndarray:
        return np.zeros(thinking, dtype=bool)

    def removed(self, stage: int, thinking: int) -> np.ndarray:
        """(thinking,) bool: the tokens hidden in this 0-based stage."""
        if not 0 <= stage < self.num_stages(thinking):
            raise ValueError(f"{self.name} has {self.num_stages(thinking)} stages, no stage {stage}")
        return self._removed(stage, thinking)

    def sample_removed(self, stage: int, thinking: int, batch: int, generator: torch.Generator) -> np.ndarray:
        """(batch, thinking) bool: what each example of a training batch hides."""
        return np.broadcast_to(self.removed(stage, thinking), (batch, thinking)).copy()


def _prefix(count: int, thinking: int, from_right: bool = False) -> np.ndarray:
    mask = np.zeros(thinking, dtype=bool)
    count = max(0, min(count, thinking))
    if from_right:
        mask[thinking - count:] = True
    else:
        mask[:count] = True
    return mask


@dataclass(frozen=True)
class E2E(Curriculum):
    name: str = "e2e"
    description: str = "hide every thinking token from the start; answer-only loss; all layers trained"
    answer_only: bool = True
    train_all_layers: bool = True

    def _removed(self, stage: int, thinking: int) -> np.ndarray:
        return np.ones(thinking, dtype=bool)


@dataclass(frozen=True)
class TreeLevels(Curriculum):
    name: str = "log_icot"
    description: str = "hide one whole tree level per stage: log2(k) stages"

    @staticmethod
    def leaves(thinking: int) -> int:
        k = thinking + 2  # a parity tree over k leaves has k - 2 thinking tokens
        if k & (k - 1):
            raise ValueError(f"log_icot needs k - 2 thinking tokens with k a power of two (got {thinking})")
        return k

    def num_stages(self, thinking: int) -> int:
        return self.leaves(thinking).bit_length() - 1

    def _removed(self, stage: int, thinking: int) -> np.ndarray:
        k = self.leaves(thinking)
        return _prefix(k - (k >> stage), thinking)  # stage t = stage + 1 hides k(1 - 2^-(t-1)) tokens


@dataclass(frozen=True)
class Directional(Curriculum):
    """Remove `per_stage` more tokens each stage, from the left (earliest first) or the right.

    Stage 0 shows the full chain; the last stage hides all of it. With `smoothing` = lambda > 0,
    each training example of a removal stage removes o extra tokens, P(o) proportional to
    exp(-lambda o) (Deng et al.); stage 0 stays pure chain-of-thought training: smoothing it as well
    lost some chain-of-thought accuracy (docs/automata_log.md).
    """

    name: str = "left"
    description: str = "remove the earliest remaining thinking tokens first, per_stage a stage"
    per_stage: int = 1
    from_right: bool = False
    smoothing: float = 0.0

    def num_stages(self, thinking: int) -> int:
        return 1 + math.ceil(thinking / self.per_stage)

    def _removed(self, stage: int, thinking: int) -> np.ndarray:
        return _prefix(stage * self.per_stage, thinking, self.from_right)

    def sample_removed(self, stage: int, thinking: int, batch: int, generator: torch.Generator) -> np.ndarray:
        if self.smoothing <= 0 or stage == 0:
            return super().sample_removed(stage, thinking, batch, generator)
        base = int(self.removed(stage, thinking).sum())
        offsets = np.arange(thinking - base + 1)
        weights = torch.as_tensor(np.exp(-self.smoothing * offsets))
        extra = torch.multinomial(weights, batch, replacement=True, generator=generator).numpy()
        return np.stack([_prefix(base + int(o), thinking, self.from_right) for o in extra])


@dataclass(frozen=True)
class Inductive(Curriculum):
    """Stage s keeps every 2^s-th thinking token: the model learns 2-step, then 4-step compositions,
    about log2 of the chain's length removal stages in all."""

    name: str = "inductive"
    description: str = "stride doubling: stage s keeps every 2^s-th thinking token"

    def num_stages(self, thinking: int) -> int:
        return 1 + max(1, math.ceil(math.log2(thinking + 1))) if thinking else 1

    def _removed(self, stage: int, thinking: int) -> np.ndarray:
        position = np.arange(1, thinking + 1)  # thinking token j is the state after j steps
        return position % (1 << stage) != 0


@dataclass(frozen=True)
class Mixture(Curriculum):
    """Every example hides its first r tokens, r uniform over {0..thinking}; a hint says how many stay."""

    name: str = "mixture"
    description: str = "a mixture of removal lengths with a length-hint token, one stage"
    hint: bool = True

    def sample_removed(self, stage: int, thinking: int, batch: int, generator: torch.Generator) -> np.ndarray:
        counts = torch.randint(0, thinking + 1, (batch,), generator=generator).numpy()
        return np.stack([_prefix(int(c), thinking) for c in counts])


def _directional(name: str, description: str, from_right: bool = False):
    return lambda per_stage, smoothing: Directional(name=name, description=description, from_right=from_right,
                                                    per_stage=per_stage, smoothing=smoothing)


# name -> factory(per_stage, smoothing); `curriculum.name` in a config is one of these names
CURRICULA: dict[str, Callable[[int, float], Curriculum]] = {
    "log_icot": lambda per_stage, smoothing: TreeLevels(),
    "stepwise": _directional("stepwise", "hide one more thinking token per stage (Deng et al. 2024): k - 1 stages"),
    "left": _directional("left", Directional.description),
    "right": _directional("right", "remove the tokens nearest the answer first", from_right=True),
    "inductive": lambda per_stage, smoothing: Inductive(),
    "mixture": lambda per_stage, smoothing: Mixture(),
    "full_cot": lambda per_stage, smoothing: Curriculum(),
    "e2e": lambda per_stage, smoothing: E2E(),
}


def register_curriculum(name: str, factory: Callable[[int, float], Curriculum]) -> None:
    """Make a curriculum selectable by `curriculum.name` (a user's own, or an extension's)."""
    CURRICULA[name] = factory


def get_curriculum(name: str, per_stage: int = 1, smoothing: float = 0.0) -> Curriculum:
    """A curriculum by name; `per_stage` and `smoothing` apply to left, right and stepwise."""
    if per_stage < 1:
        raise ValueError(f"curriculum.per_stage must be at least 1 (got {per_stage})")
    if name not in CURRICULA:
        raise ValueError(f"unknown curriculum {name!r}; choose from {sorted(CURRICULA)}")
    return CURRICULA[name](per_stage, smoothing)


class CurriculumConfig(Strict):
    """The `curriculum` section, read by the systems that remove chain-of-thought tokens in stages."""
    # which thinking tokens each stage hides: log_icot one tree level a stage; stepwise one token;
    # left / right from that end; inductive doubling strides; mixture one stage over every removal
    # length with a length hint; full_cot nothing; e2e everything from the start (answer-only loss)
    name: str = "log_icot"
    per_stage: int = 1  # tokens removed per stage (stepwise, left, right)
    smoothing: float = 0.0  # Deng et al.'s removal smoothing lambda (0: off; they use 4)

    @model_validator(mode="after")
    def _known(self):
        if self.name not in CURRICULA:
            raise ValueError(f"name {self.name!r} is not a curriculum; choose from {', '.join(CURRICULA)}")
        return self
