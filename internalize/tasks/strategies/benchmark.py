"""The six tasks by name, and the validator that scores any (input, trace) pair."""
from __future__ import annotations

from internalize.tasks.strategies import (
    addition,
    base_conversion,
    grid_path,
    linear_equation,
    list_sum,
    sorting,
)
from internalize.tasks.strategies.common import MAX_CHARS, Task, Verdict, final_answer

TASKS: dict[str, Task] = {
    module.NAME: module.TASK
    for module in (list_sum, sorting, grid_path, linear_equation, base_conversion, addition)
}

_NONE = frozenset()


def validate(task: str, input: str, trace: str) -> Verdict:
    """Parse `trace` by the task's grammar, check its final answer, and name every strategy whose
    canonical trace on `input` is exactly `trace`. Never raises: it scores model samples."""
    try:
        return _validate(task, input, trace)
    except Exception as error:  # noqa: BLE001 - a bug here must cost one sample, not an evaluation run
        return Verdict(False, False, _NONE, f"validator error: {type(error).__name__}")


def _validate(task, input, trace) -> Verdict:
    if not isinstance(task, str) or task not in TASKS:
        return Verdict(False, False, _NONE, f"unknown task (known: {', '.join(TASKS)})")
    if not isinstance(input, str) or not isinstance(trace, str):
        return Verdict(False, False, _NONE, "input and trace must be strings")
    if len(input) > MAX_CHARS or len(trace) > MAX_CHARS:
        return Verdict(False, False, _NONE, f"longer than {MAX_CHARS} characters")
    spec = TASKS[task]
    try:
        problem = spec.parse_input(input)
    except ValueError as error:
        return Verdict(False, False, _NONE, f"input: {error}")
    if not spec.grammar.fullmatch(trace):
        return Verdict(False, False, _NONE, "trace does not parse")
    correct = spec.is_correct(problem, final_answer(trace))
    strategies = frozenset(s for s, t in spec.traces(problem).items() if t == trace)
    reason = "" if correct and strategies else "wrong final answer" if not correct else "matches no strategy"
    return Verdict(True, correct, strategies, reason)
