"""linear_equation: solve a*x + b = c for the integer x, with a dividing b and c.

Input: `{a}x+{b}={c}`, or `{a}x-{|b|}={c}` when b < 0, e.g. `3x+6=21`, `3x-6=-21`.
Sizes: a in 2..9, b/a in -19..19 without 0, x in -19..19.
Trace: three comma-separated equations; the last is `x=` and the answer.
- subtract_first: move b across, simplify, divide:      `3x=21-6,3x=15,x=5`   (`3x=-21+6,3x=-15,x=-5`)
- divide_first: divide every term by a, simplify, subtract:
                                                        `x+6/3=21/3,x+2=7,x=5` (`x-6/3=-21/3,x-2=-7,x=-5`)
The first equation starts with a digit in one and with 'x' in the other, so the two strategies
never write the same trace.

Format `columns` (task.formats {linear_equation: columns}) writes subtract_first's c - b the way
addition's right_to_left writes a sum, one column at a time; divide_first is unchanged. After
moving b across, the equation is rewritten so that a sum of two naturals (|c| first) or a
difference (the larger first) is left, with both sides multiplied by -1 where c - b < 0; then each
column from the ones writes its digit and its carry (`{digit}c{carry}`, for a sum) or borrow
(`{digit}b{borrow}`, for a difference); then the result and x:
    `3x+6=21`:  `3x=21-6,3x=21-6,5b1,1b0,3x=15,x=5`
    `6x-12=-54`: `6x=-54+12,-6x=54-12,2b0,4b0,-6x=42,x=-7`
    `2x+28=-2`: `2x=-2-28,-2x=2+28,0c1,3c0,-2x=30,x=-15`
"""
from __future__ import annotations

import re
from dataclasses import replace

import numpy as np

from internalize.systems.strategies.benchmark.common import (
    NATURAL,
    NUMBER,
    Task,
    column_steps,
    unknown_strategy,
)

NAME = "linear_equation"
STRATEGIES = ("subtract_first", "divide_first")
_POSITIVE = r"[1-9][0-9]*"
_INPUT = re.compile(rf"({_POSITIVE})x([+-])({_POSITIVE})=({NUMBER})")
_STEP = (
    rf"{_POSITIVE}x={NUMBER}(?:[+-]{_POSITIVE})?"  # a*x = c - b, a*x = c - b simplified
    rf"|x[+-]{_POSITIVE}/{_POSITIVE}={NUMBER}/{_POSITIVE}"  # x + b/a = c/a
    rf"|x[+-]{_POSITIVE}={NUMBER}"  # x + b/a = c/a simplified
)
GRAMMAR = re.compile(rf"(?:(?:{_STEP}),)*x={NUMBER}")
_COLUMN_STEP = (
    rf"-?{_POSITIVE}x={NUMBER}(?:[+-]{NATURAL})?"  # a*x = c - b, the natural sum or difference, the result
    rf"|[0-9][cb][01]"  # a column: its digit and its carry (sum) or borrow (difference)
    rf"|x[+-]{_POSITIVE}/{_POSITIVE}={NUMBER}/{_POSITIVE}"
    rf"|x[+-]{_POSITIVE}={NUMBER}"
)
GRAMMAR_COLUMNS = re.compile(rf"(?:(?:{_COLUMN_STEP}),)*x={NUMBER}")


def sample(rng: np.random.Generator) -> dict:
    a = int(rng.integers(2, 10))
    quotient = int(rng.choice([q for q in range(-19, 20) if q != 0]))
    x = int(rng.integers(-19, 20))
    return {"a": a, "b": a * quotient, "c": a * (x + quotient)}


def _signed(value: int) -> str:
    """value as a term after another: '+6' or '-6'."""
    return f"+{value}" if value > 0 else f"-{-value}"


def format_input(problem: dict) -> str:
    return f"{problem['a']}x{_signed(problem['b'])}={problem['c']}"


def parse_input(text: str) -> dict:
    match = _INPUT.fullmatch(text)
    if not match:
        raise ValueError("expected a*x+b=c, e.g. 3x+6=21")
    a, sign, b, c = int(match[1]), match[2], int(match[3]), int(match[4])
    b = b if sign == "+" else -b
    if b % a or c % a:
        raise ValueError("a must divide b and c")
    return {"a": a, "b": b, "c": c}


def solution(problem: dict) -> int:
    return (problem["c"] - problem["b"]) // problem["a"]


def trace(problem: dict, strategy: str) -> str:
    a, b, c, x = problem["a"], problem["b"], problem["c"], solution(problem)
    if strategy == "subtract_first":
        return f"{a}x={c}{_signed(-b)},{a}x={c - b},x={x}"
    if strategy == "divide_first":
        return f"x{_signed(b)}/{a}={c}/{a},x{_signed(b // a)}={c // a},x={x}"
    raise unknown_strategy(NAME, strategy)


def trace_columns(problem: dict, strategy: str) -> str:
    if strategy != "subtract_first":
        return trace(problem, strategy)
    a, b, c, x = problem["a"], problem["b"], problem["c"], solution(problem)
    flip = c - b < 0  # both sides times -1, so that the right side is a natural
    lead = f"{'-' if flip else ''}{a}x="
    if (c >= 0) == (-b >= 0):  # same signs: a sum of the magnitudes
        left, right, subtract = abs(c), abs(b), False
    else:  # a difference, the larger magnitude first
        left, right, subtract = max(abs(c), abs(b)), min(abs(c), abs(b)), True
    op = "-" if subtract else "+"
    return (f"{a}x={c}{_signed(-b)},{lead}{left}{op}{right},{column_steps(left, right, subtract)},"
            f"{lead}{abs(c - b)},x={x}")


def is_correct(problem: dict, answer: str) -> bool:
    return answer == str(solution(problem))


TASK = Task(NAME, STRATEGIES, sample, format_input, parse_input, trace, GRAMMAR, is_correct)
FORMATS = {"default": TASK, "columns": replace(TASK, trace=trace_columns, grammar=GRAMMAR_COLUMNS)}
