"""Shared parts of the strategies benchmark (docs/strategies.md).

Every task is one `Task` record: a seeded sampler of structured problems, the input text of a
problem and its strict parser, each strategy's canonical trace, the trace grammar (one regular
expression, the union of the strategies' formats) and an answer check. Every trace format puts the
final answer after the trace's last '=', so one rule reads the answer of any task.
"""
from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

# Longer strings are refused before a regex or int() sees them: a validator scores model samples,
# and no generated input or trace comes near this.
MAX_CHARS = 2000

# Written with explicit [0-9] classes: Python's \d and int() also accept non-ASCII digits.
NATURAL = r"(?:0|[1-9][0-9]*)"
NUMBER = r"-?(?:0|[1-9][0-9]*)"


@dataclass(frozen=True)
class Verdict:
    """What a validator says of one trace. `strategies`: the strategies whose canonical trace on
    this input is exactly this trace (a set: on some inputs two strategies write the same one)."""

    parses: bool
    correct: bool
    strategies: frozenset[str]
    reason: str = ""

    @property
    def valid(self) -> bool:
        """The fidelity criterion: the trace parses, its answer is right, and some strategy writes it."""
        return self.parses and self.correct and bool(self.strategies)


@dataclass(frozen=True)
class Task:
    name: str
    strategies: tuple[str, ...]
    sample: Callable[[np.random.Generator], dict]  # a problem, JSON-ready
    format_input: Callable[[dict], str]
    parse_input: Callable[[str], dict]  # raises ValueError on anything format_input cannot write
    trace: Callable[[dict, str], str | None]  # None where the strategy cannot finish (grid_path)
    grammar: re.Pattern
    is_correct: Callable[[dict, str], bool]  # (problem, final answer text)

    def traces(self, problem: dict) -> dict[str, str | None]:
        return {s: self.trace(problem, s) for s in self.strategies}


def final_answer(trace: str) -> str:
    """The text after the last '=': where every format writes its final answer."""
    return trace.rsplit("=", 1)[-1]


def column_steps(left: int, right: int, subtract: bool = False) -> str:
    """left + right or left - right (naturals, left >= right for a difference) column by column from
    the ones: `{digit}c{carry}` or `{digit}b{borrow}` per column of the longer number."""
    steps, carry = [], 0
    for place in range(len(str(max(left, right)))):
        l, r = left // 10**place % 10, right // 10**place % 10
        value = l - r - carry if subtract else l + r + carry
        carry = int(value < 0 if subtract else value > 9)
        steps.append(f"{value % 10}{'b' if subtract else 'c'}{carry}")
    return ",".join(steps)


def unknown_strategy(task: str, strategy: str) -> ValueError:
    return ValueError(f"{task} has no strategy {strategy!r}")
