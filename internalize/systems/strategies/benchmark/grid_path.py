"""grid_path: a monotone path (moves R and D only) from start to goal around obstacles.

Input: the grid rows joined by '/', '.' free, '#' an obstacle, 'S' the start, 'G' the goal,
e.g. `S.#./..../...G`. Generated grids are 4 or 5 rows by 4 or 5 columns with 1 to 5 obstacles,
the start top-left and the goal bottom-right; the parser takes any grid up to 10x10 with the goal
below and/or right of the start.
Trace: the cell after each move as two digits (row, column), comma-separated, then '=' and the
moves as a string of R (column + 1) and D (row + 1).
A move is allowed when it stays inside the start-goal rectangle and lands on a free cell. Each
strategy walks greedily from the start (examples on `S.#./..../...G`):
- right_first: R when allowed, else D:                          `01,11,12,13,23=RDRRD`
- down_first: D when allowed, else R:                           `10,20,21,22,23=DDRRR`
- alternating: prefers R on even steps (0, 2, ...) and D on odd ones, and takes the other move
  when the preferred one is not allowed:                        `01,11,12,22,23=RDRDR`
In the default format the strategies coincide on about a quarter of the inputs, and alternating
always shares its first move with right_first: the moves alone do not name the strategy. The
`choices` format (`task.formats={grid_path: choices}`) writes, for each step, the move the
strategy prefers there, whether that move was blocked ('#', or '.' when free), the move taken and
the cell it reaches; then '=' and the moves. Every strategy's trace names it, and no two
strategies' traces coincide (right_first prefers R at every step, down_first D, alternating R then
D in turn):
- right_first:  `R.R01,R#D11,R.R12,R.R13,R#D23=RDRRD`
- down_first:   `D.D10,D.D20,D#R21,D#R22,D#R23=DDRRR`
- alternating:  `R.R01,D.D11,R.R12,D.D22,R.R23=RDRDR`
The sampler redraws a grid until every strategy reaches the goal; validating an input on which a
strategy gets stuck simply leaves that strategy out of every verdict. Any monotone path that
reaches the goal is a correct answer, so the answer depends on the strategy.
"""
from __future__ import annotations

import re
from dataclasses import replace

import numpy as np

from internalize.systems.strategies.benchmark.common import Task, unknown_strategy

NAME = "grid_path"
STRATEGIES = ("right_first", "down_first", "alternating")
_INPUT = re.compile(r"[.#SG]{2,10}(?:/[.#SG]{2,10}){1,9}")
GRAMMAR = re.compile(r"[0-9]{2}(?:,[0-9]{2})*=[RD]+")
GRAMMAR_CHOICES = re.compile(r"[RD][.#][RD][0-9]{2}(?:,[RD][.#][RD][0-9]{2})*=[RD]+")
_STEP = {"R": (0, 1), "D": (1, 0)}


def sample(rng: np.random.Generator) -> dict:
    # Corner to corner on 4x4 to 5x5 with 1-5 obstacles: smaller grids or rectangles force the
    # three walks onto one path too often (3x3 to 5x5 with a random start and goal: 44% of inputs
    # had two strategies coincide; this: about 27%), and 3x3 has too few distinct inputs.
    while True:
        rows, cols = (int(v) for v in rng.integers(4, 6, size=2))
        start, goal = [0, 0], [rows - 1, cols - 1]
        free = [(r, c) for r in range(rows) for c in range(cols) if [r, c] not in (start, goal)]
        blocked = {free[i] for i in rng.choice(len(free), size=int(rng.integers(1, 6)), replace=False)}
        grid = ["".join("#" if (r, c) in blocked else "." for c in range(cols)) for r in range(rows)]
        problem = {"grid": grid, "start": start, "goal": goal}
        if all(_walk(problem, s) is not None for s in STRATEGIES):
            return problem


def format_input(problem: dict) -> str:
    rows = [list(row) for row in problem["grid"]]
    (sr, sc), (gr, gc) = problem["start"], problem["goal"]
    rows[sr][sc], rows[gr][gc] = "S", "G"
    return "/".join("".join(row) for row in rows)


def parse_input(text: str) -> dict:
    if not _INPUT.fullmatch(text):
        raise ValueError("expected grid rows of '.#SG' joined by '/'")
    rows = text.split("/")
    if len({len(row) for row in rows}) != 1:
        raise ValueError("grid rows differ in length")
    cells = {ch: [[r, c] for r, row in enumerate(rows) for c, x in enumerate(row) if x == ch] for ch in "SG"}
    if len(cells["S"]) != 1 or len(cells["G"]) != 1:
        raise ValueError("expected exactly one S and one G")
    start, goal = cells["S"][0], cells["G"][0]
    if goal[0] < start[0] or goal[1] < start[1] or goal == start:
        raise ValueError("the goal must lie below and/or right of the start")
    grid = [row.replace("S", ".").replace("G", ".") for row in rows]
    return {"grid": grid, "start": start, "goal": goal}


def _allowed(problem: dict, r: int, c: int, move: str) -> bool:
    dr, dc = _STEP[move]
    gr, gc = problem["goal"]
    return r + dr <= gr and c + dc <= gc and problem["grid"][r + dr][c + dc] != "#"


def _walk(problem: dict, strategy: str) -> list[tuple[int, int, str, str]] | None:
    """[(row, col, move, the move preferred)] after each move, or None when the walk gets stuck."""
    if strategy not in STRATEGIES:
        raise unknown_strategy(NAME, strategy)
    (r, c), goal, steps = problem["start"], tuple(problem["goal"]), []
    while (r, c) != goal:
        if strategy == "right_first":
            order = "RD"
        elif strategy == "down_first":
            order = "DR"
        else:
            order = "RD" if len(steps) % 2 == 0 else "DR"
        move = next((m for m in order if _allowed(problem, r, c, m)), None)
        if move is None:
            return None
        r, c = r + _STEP[move][0], c + _STEP[move][1]
        steps.append((r, c, move, order[0]))
    return steps


def trace(problem: dict, strategy: str) -> str | None:
    steps = _walk(problem, strategy)
    if steps is None:
        return None
    return ",".join(f"{r}{c}" for r, c, _, _ in steps) + "=" + "".join(m for _, _, m, _ in steps)


def trace_choices(problem: dict, strategy: str) -> str | None:
    steps = _walk(problem, strategy)
    if steps is None:
        return None
    return (",".join(f"{p}{'.' if m == p else '#'}{m}{r}{c}" for r, c, m, p in steps) + "="
            + "".join(m for _, _, m, _ in steps))


def is_correct(problem: dict, answer: str) -> bool:
    """Any monotone path from start to goal through free cells."""
    if not re.fullmatch(r"[RD]+", answer):
        return False
    (r, c), grid = problem["start"], problem["grid"]
    for move in answer:
        r, c = r + _STEP[move][0], c + _STEP[move][1]
        if r >= len(grid) or c >= len(grid[0]) or grid[r][c] == "#":
            return False
    return [r, c] == list(problem["goal"])


TASK = Task(NAME, STRATEGIES, sample, format_input, parse_input, trace, GRAMMAR, is_correct)
FORMATS = {"default": TASK, "choices": replace(TASK, trace=trace_choices, grammar=GRAMMAR_CHOICES)}
