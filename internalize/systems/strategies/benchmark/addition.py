"""addition: the sum of two numbers of 2 to 4 digits each.

Input: `{a}+{b}`, e.g. `457+68`.
Trace: the steps, then '=' and the sum.
- right_to_left: column addition from the ones; each column writes its digit and its carry out
  as `{digit}c{carry}`:                                  `5c1,2c1,5c0=525`
- place_value: the partial sum of each place, highest first (400+0, 50+60, 7+8), ';', then the
  running total as they are combined left to right:      `400,110,15;510,525=525`
The two formats differ in grammar ('c' against ';'), so they never write the same trace.

Format `operands` (task.formats {addition: operands}) writes each step's two digits before what it
computes, a missing digit as 0: right_to_left `7+8:5c1,5+6:2c1,4+0:5c0=525`, place_value
`4+0:400,5+6:110,7+8:15;510,525=525`. Each strategy's first token is then a digit copied from the
input (the first number's last or first), not a sum computed in one pass; the default format's first
token is the one a model sampling at temperature 1 gets wrong (scripts/first_token.py).
"""
from __future__ import annotations

import itertools
import re
from dataclasses import replace

import numpy as np

from internalize.systems.strategies.benchmark.common import (
    NATURAL,
    Task,
    column_steps,
    unknown_strategy,
)

NAME = "addition"
STRATEGIES = ("right_to_left", "place_value")
_INPUT = re.compile(r"([1-9][0-9]+)\+([1-9][0-9]+)")  # two digits or more: place_value needs two places
_COLUMNS = r"[0-9]c[01](?:,[0-9]c[01])*"
_PLACES = rf"{NATURAL}(?:,{NATURAL})*;{NATURAL}(?:,{NATURAL})*"
GRAMMAR = re.compile(rf"(?:{_COLUMNS}|{_PLACES})={NATURAL}")


def _number(rng: np.random.Generator) -> int:
    digits = int(rng.integers(2, 5))
    return int(rng.integers(10 ** (digits - 1), 10**digits))


def sample(rng: np.random.Generator) -> dict:
    return {"a": _number(rng), "b": _number(rng)}


def format_input(problem: dict) -> str:
    return f"{problem['a']}+{problem['b']}"


def parse_input(text: str) -> dict:
    match = _INPUT.fullmatch(text)
    if not match:
        raise ValueError("expected a+b of numbers with two digits or more, e.g. 457+68")
    return {"a": int(match[1]), "b": int(match[2])}


def trace(problem: dict, strategy: str) -> str:
    a, b = problem["a"], problem["b"]
    width = max(len(str(a)), len(str(b)))
    digit = lambda n, place: n // 10**place % 10
    if strategy == "right_to_left":
        return f"{column_steps(a, b)}={a + b}"
    if strategy == "place_value":
        partials = [(digit(a, p) + digit(b, p)) * 10**p for p in reversed(range(width))]
        running = list(itertools.accumulate(partials))[1:]
        return f"{','.join(map(str, partials))};{','.join(map(str, running))}={a + b}"
    raise unknown_strategy(NAME, strategy)


_PAIR = r"[0-9]\+[0-9]:"
GRAMMAR_OPERANDS = re.compile(rf"(?:{_PAIR}[0-9]c[01](?:,{_PAIR}[0-9]c[01])*"
                              rf"|{_PAIR}{NATURAL}(?:,{_PAIR}{NATURAL})*;{NATURAL}(?:,{NATURAL})*)={NATURAL}")


def trace_operands(problem: dict, strategy: str) -> str:
    """The default trace with each step's two digits written before it (`a+b:`)."""
    a, b = problem["a"], problem["b"]
    width = max(len(str(a)), len(str(b)))
    operands = [f"{a // 10**p % 10}+{b // 10**p % 10}:" for p in range(width)]  # from the ones
    steps, rest = trace(problem, strategy).split("=", 1)
    if strategy == "right_to_left":
        return ",".join(o + step for o, step in zip(operands, steps.split(","))) + "=" + rest
    partials, running = steps.split(";")
    written = ",".join(o + step for o, step in zip(reversed(operands), partials.split(",")))
    return f"{written};{running}={rest}"


def is_correct(problem: dict, answer: str) -> bool:
    return answer == str(problem["a"] + problem["b"])


TASK = Task(NAME, STRATEGIES, sample, format_input, parse_input, trace, GRAMMAR, is_correct)
FORMATS = {"default": TASK, "operands": replace(TASK, trace=trace_operands, grammar=GRAMMAR_OPERANDS)}
