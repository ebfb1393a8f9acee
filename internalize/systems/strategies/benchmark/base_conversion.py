"""base_conversion: a decimal number (16..4095) written in base 4, 8 or 16.

Input: `{number}>{base}`, e.g. `200>16`.
Trace: the steps, then '=' and the digits in the target base (0-9, a-f, no leading zeros).
- direct: repeated division by the base; each step is `{quotient}r{remainder digit}`, and the
  answer is the remainders read last to first:          `12r8,0rc=c8`
- via_binary: the binary digits, ':', then those digits left-padded with zeros and cut into
  groups of 2, 3 or 4 bits (one per target digit), separated by '|':
                                                        `11001000:1100|1000=c8`  (`200>8`: `11001000:011|001|000=310`)
The two formats differ in their first step's grammar, so they never write the same trace.

Format `halving` (task.formats {base_conversion: halving}) writes how via_binary finds the binary
digits: the number halved (rounding down) until 1, each quotient a step; each bit is then one
number's parity, read from the last step back to the input. direct is unchanged:
                                                        `100,50,25,12,6,3,1:11001000:1100|1000=c8`
"""
from __future__ import annotations

import re
from dataclasses import replace

import numpy as np

from internalize.systems.strategies.benchmark.common import (
    NATURAL,
    Task,
    unknown_strategy,
)

NAME = "base_conversion"
STRATEGIES = ("direct", "via_binary")
BASES = (4, 8, 16)
DIGITS = "0123456789abcdef"
_BITS = {4: 2, 8: 3, 16: 4}
_INPUT = re.compile(r"([1-9][0-9]*)>(4|8|16)")
_DIRECT = rf"{NATURAL}r[0-9a-f](?:,{NATURAL}r[0-9a-f])*"
_VIA_BINARY = r"[01]+:[01]+(?:\|[01]+)*"
GRAMMAR = re.compile(rf"(?:{_DIRECT}|{_VIA_BINARY})=[0-9a-f]+")
_HALVING = rf"{NATURAL}(?:,{NATURAL})*:{_VIA_BINARY}"
GRAMMAR_HALVING = re.compile(rf"(?:{_DIRECT}|{_HALVING})=[0-9a-f]+")


def sample(rng: np.random.Generator) -> dict:
    return {"number": int(rng.integers(16, 4096)), "base": int(rng.choice(BASES))}


def format_input(problem: dict) -> str:
    return f"{problem['number']}>{problem['base']}"


def parse_input(text: str) -> dict:
    match = _INPUT.fullmatch(text)
    if not match:
        raise ValueError("expected number>base with base 4, 8 or 16, e.g. 200>16")
    return {"number": int(match[1]), "base": int(match[2])}


def convert(number: int, base: int) -> str:
    digits = ""
    while number:
        number, remainder = divmod(number, base)
        digits = DIGITS[remainder] + digits
    return digits or "0"


def trace(problem: dict, strategy: str) -> str:
    number, base = problem["number"], problem["base"]
    answer = convert(number, base)
    if strategy == "direct":
        steps, n = [], number
        while n:
            n, remainder = divmod(n, base)
            steps.append(f"{n}r{DIGITS[remainder]}")
        return ",".join(steps) + "=" + answer
    if strategy == "via_binary":
        bits, width = bin(number)[2:], _BITS[base]
        padded = bits.zfill(-(-len(bits) // width) * width)
        groups = [padded[i:i + width] for i in range(0, len(padded), width)]
        return f"{bits}:{'|'.join(groups)}={answer}"
    raise unknown_strategy(NAME, strategy)


def trace_halving(problem: dict, strategy: str) -> str:
    if strategy != "via_binary":
        return trace(problem, strategy)
    halves, n = [], problem["number"] // 2
    while n:
        halves.append(str(n))
        n //= 2
    return ",".join(halves) + ":" + trace(problem, strategy)


def is_correct(problem: dict, answer: str) -> bool:
    return answer == convert(problem["number"], problem["base"])


TASK = Task(NAME, STRATEGIES, sample, format_input, parse_input, trace, GRAMMAR, is_correct)
FORMATS = {"default": TASK, "halving": replace(TASK, trace=trace_halving, grammar=GRAMMAR_HALVING)}
