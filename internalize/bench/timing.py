"""Side-by-side timing: both sides alternate in rounds, so each sees the same machine; best round wins."""
from __future__ import annotations

import contextlib
import importlib.util
import time
from dataclasses import asdict, dataclass, field
from typing import Callable, Optional

import torch


@dataclass
class Line:
    name: str
    what: str  # what is compared, in words
    ratio: Optional[float] = None  # ours / theirs (or the share, for utilisation)
    goal: Optional[float] = None  # the ratio wanted; None: measured for information
    ours: Optional[float] = None  # the absolute figures behind the ratio
    theirs: Optional[float] = None
    unit: str = ""
    note: str = ""
    skipped: Optional[str] = None  # why the line was not measured
    extra: dict = field(default_factory=dict)

    @property
    def met(self) -> Optional[bool]:
        if self.goal is None or self.ratio is None:
            return None
        return self.ratio >= self.goal

    @property
    def verdict(self) -> str:
        if self.skipped:
            return f"skipped: {self.skipped}"
        if self.met is None:
            return "no goal"
        return "met" if self.met else f"missed by {self.goal / self.ratio:.2f}x"

    def as_dict(self) -> dict:
        return {**asdict(self), "met": self.met, "verdict": self.verdict}


Measure = Callable[[bool], list[Line]]


@contextlib.contextmanager
def threads(n: int):
    """torch's intra-op threads set to n while open."""
    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def seconds(fn: Callable[[], object], repeats: int) -> float:
    started = time.perf_counter()
    for _ in range(repeats):
        fn()
    return (time.perf_counter() - started) / repeats


def side_by_side(a: Callable[[], object], b: Callable[[], object], repeats: int, rounds: int,
                 warmup: int = 2) -> tuple[float, float]:
    """The best seconds per call of a and of b over `rounds` alternating rounds of `repeats` calls."""
    for _ in range(warmup):
        a(), b()
    best_a = best_b = float("inf")
    for _ in range(rounds):
        best_a = min(best_a, seconds(a, repeats))
        best_b = min(best_b, seconds(b, repeats))
    return best_a, best_b


def installed(package: str) -> bool:
    """Whether an optional package (transformers, peft: the `strategies` extra) can be imported."""
    return importlib.util.find_spec(package) is not None
