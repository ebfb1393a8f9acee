"""list_sum: the sum of 3 to 6 single digits.

Input: the digits joined by '+', e.g. `3+5+1+7`.
Trace: the steps, then '=' and the sum.
- left_to_right: the prefix sums, each after the position (1-based, in the input) of the digit it
  adds and ':', comma-separated:                                  `1:3,2:8,3:9,4:16=16`
- right_to_left: the suffix sums, from the last digit, the same way: `4:7,3:8,2:13,1:16=16`
- tree: each level of a pairwise reduction (neighbours added, an odd last element carried up
  unchanged), levels separated by '|':                            `8,8|16=16`   (`3+5+1`: `8,1|9=9`)
The running sums name the digit they add: where it sits in the input is then written, not
counted (without the positions, models lost their place in long lists: docs/strategies.md). The
two running sums start at different positions and tree has no ':', so no two strategies ever
write the same trace.
"""
from __future__ import annotations

import itertools
import re

import numpy as np

from internalize.systems.strategies.benchmark.common import (
    NATURAL,
    Task,
    unknown_strategy,
)

NAME = "list_sum"
STRATEGIES = ("left_to_right", "right_to_left", "tree")
_INPUT = re.compile(r"[0-9](?:\+[0-9]){2,}")
_LIST = rf"{NATURAL}(?:,{NATURAL})*"
_RUNNING = rf"[1-9]:{NATURAL}(?:,[1-9]:{NATURAL})*"
GRAMMAR = re.compile(rf"(?:{_LIST}(?:\|{_LIST})*|{_RUNNING})={NATURAL}")


def sample(rng: np.random.Generator) -> dict:
    n = int(rng.integers(3, 7))
    return {"digits": [int(d) for d in rng.integers(0, 10, size=n)]}


def format_input(problem: dict) -> str:
    return "+".join(str(d) for d in problem["digits"])


def parse_input(text: str) -> dict:
    if not _INPUT.fullmatch(text):
        raise ValueError("expected three or more single digits joined by '+'")
    return {"digits": [int(c) for c in text[::2]]}


def _join(numbers) -> str:
    return ",".join(str(n) for n in numbers)


def _running(positions: list[int], digits: list[int]) -> str:
    """The running sums of the digits at these 1-based positions, each after its position."""
    sums = itertools.accumulate(digits[p - 1] for p in positions)
    return ",".join(f"{p}:{total}" for p, total in zip(positions, sums))


def trace(problem: dict, strategy: str) -> str:
    digits = problem["digits"]
    if strategy == "left_to_right":
        steps = _running(list(range(1, len(digits) + 1)), digits)
    elif strategy == "right_to_left":
        steps = _running(list(range(len(digits), 0, -1)), digits)
    elif strategy == "tree":
        levels, level = [], list(digits)
        while len(level) > 1:
            level = [sum(level[i:i + 2]) for i in range(0, len(level), 2)]
            levels.append(_join(level))
        steps = "|".join(levels)
    else:
        raise unknown_strategy(NAME, strategy)
    return f"{steps}={sum(digits)}"


def is_correct(problem: dict, answer: str) -> bool:
    return answer == str(sum(problem["digits"]))


TASK = Task(NAME, STRATEGIES, sample, format_input, parse_input, trace, GRAMMAR, is_correct)
