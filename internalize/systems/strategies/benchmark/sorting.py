"""sorting: sort 3 to 6 distinct digits ascending.

Input: the digits with no separator, e.g. `5213`.
Trace: the list after each step, comma-separated, then '=' and the sorted digits.
- bubble: the list after each left-to-right pass of neighbour swaps; a pass that swaps nothing
  ends the sort and is not written (so a sorted input writes `=0123`):   `2135,1235=1235`
- insertion: the list after inserting element i into the sorted prefix, for i = 1..n-1, each
  written even when nothing moved:                                       `2513,1253,1235=1235`
- selection: the list after swapping the minimum of the unsorted suffix into position i, for
  i = 0..n-2, each written even when nothing moved:                      `1253,1253,1235=1235`
"""
from __future__ import annotations

import re

import numpy as np

from internalize.systems.strategies.benchmark.common import Task, unknown_strategy

NAME = "sorting"
STRATEGIES = ("bubble", "insertion", "selection")
_INPUT = re.compile(r"[0-9]{2,10}")
GRAMMAR = re.compile(r"(?:[0-9]+(?:,[0-9]+)*)?=[0-9]+")


def sample(rng: np.random.Generator) -> dict:
    n = int(rng.integers(3, 7))
    return {"digits": [int(d) for d in rng.choice(10, size=n, replace=False)]}


def format_input(problem: dict) -> str:
    return "".join(str(d) for d in problem["digits"])


def parse_input(text: str) -> dict:
    if not _INPUT.fullmatch(text) or len(set(text)) != len(text):
        raise ValueError("expected two to ten distinct digits")
    return {"digits": [int(c) for c in text]}


def _bubble(xs: list[int]) -> list[list[int]]:
    states = []
    while True:
        swapped = False
        for i in range(len(xs) - 1):
            if xs[i] > xs[i + 1]:
                xs[i], xs[i + 1] = xs[i + 1], xs[i]
                swapped = True
        if not swapped:
            return states
        states.append(list(xs))


def _insertion(xs: list[int]) -> list[list[int]]:
    states = []
    for i in range(1, len(xs)):
        value, j = xs[i], i
        while j > 0 and xs[j - 1] > value:
            xs[j] = xs[j - 1]
            j -= 1
        xs[j] = value
        states.append(list(xs))
    return states


def _selection(xs: list[int]) -> list[list[int]]:
    states = []
    for i in range(len(xs) - 1):
        j = min(range(i, len(xs)), key=xs.__getitem__)
        xs[i], xs[j] = xs[j], xs[i]
        states.append(list(xs))
    return states


_SORTS = {"bubble": _bubble, "insertion": _insertion, "selection": _selection}


def trace(problem: dict, strategy: str) -> str:
    if strategy not in _SORTS:
        raise unknown_strategy(NAME, strategy)
    states = _SORTS[strategy](list(problem["digits"]))
    text = lambda xs: "".join(str(d) for d in xs)
    return ",".join(text(s) for s in states) + "=" + text(sorted(problem["digits"]))


def is_correct(problem: dict, answer: str) -> bool:
    return answer == "".join(str(d) for d in sorted(problem["digits"]))


TASK = Task(NAME, STRATEGIES, sample, format_input, parse_input, trace, GRAMMAR, is_correct)
