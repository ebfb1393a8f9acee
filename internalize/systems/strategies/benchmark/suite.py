"""The six tasks by name, and the validator that scores any (input, trace) pair."""
from __future__ import annotations

import os

from internalize.systems.strategies.benchmark import (
    addition,
    base_conversion,
    grid_path,
    linear_equation,
    list_sum,
    sorting,
)
from internalize.systems.strategies.benchmark.common import (
    MAX_CHARS,
    Task,
    Verdict,
    final_answer,
)

_MODULES = (list_sum, sorting, grid_path, linear_equation, base_conversion, addition)
TASKS: dict[str, Task] = {module.NAME: module.TASK for module in _MODULES}
# Each task's trace formats by name (`task.formats`); "default" is TASKS's. A variant changes how
# some strategy writes its steps, never which strategies there are.
FORMATS: dict[str, dict[str, Task]] = {m.NAME: getattr(m, "FORMATS", {"default": m.TASK}) for m in _MODULES}


def task_of(name: str, format: str = "default") -> Task:
    """The task `name` written in trace format `format`; ValueError (one line) for unknown names."""
    if name not in FORMATS:
        raise ValueError(f"unknown task {name!r}; the benchmark has {', '.join(FORMATS)}")
    if format not in FORMATS[name]:
        raise ValueError(f"{name} has no trace format {format!r} (it has {', '.join(FORMATS[name])})")
    return FORMATS[name][format]

_NONE = frozenset()


def validate(task: str, input: str, trace: str, format: str = "default") -> Verdict:
    """Parse `trace` by the task's grammar, check its final answer, and name every strategy whose
    canonical trace on `input` (in trace format `format`) is exactly `trace`. Never raises: it scores
    model samples."""
    try:
        return _validate(task, input, trace, format)
    except Exception as error:  # noqa: BLE001 - a bug here must cost one sample, not an evaluation run
        return Verdict(False, False, _NONE, f"validator error: {type(error).__name__}")


def _validate(task, input, trace, format) -> Verdict:
    if not isinstance(task, str) or task not in TASKS:
        return Verdict(False, False, _NONE, f"unknown task (known: {', '.join(TASKS)})")
    if not isinstance(format, str) or format not in FORMATS[task]:
        return Verdict(False, False, _NONE, f"unknown trace format (known: {', '.join(FORMATS[task])})")
    if not isinstance(input, str) or not isinstance(trace, str):
        return Verdict(False, False, _NONE, "input and trace must be strings")
    if len(input) > MAX_CHARS or len(trace) > MAX_CHARS:
        return Verdict(False, False, _NONE, f"longer than {MAX_CHARS} characters")
    spec = FORMATS[task][format]
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


_SEPARATORS = ",;|:"


def departure(task: str, input: str, trace: str, format: str = "default") -> tuple[str, str] | None:
    """Where an unfaithful trace goes wrong: (the strategy whose trace on `input` it follows longest,
    the segment of that trace where it first differs; "none" when no strategy's trace starts with its
    first character). Segments are the text between the separators
    `, ; | :`, numbered from 1; "answer" is the text after the last '='. None when the trace is some
    strategy's, or the task, its format or the input is unknown. Never raises."""
    try:
        spec = FORMATS[task][format]
        traces = {s: t for s, t in spec.traces(spec.parse_input(input)).items() if t is not None}
    except Exception:  # noqa: BLE001 - a diagnostic: no input it is given may stop an evaluation
        return None
    if not isinstance(trace, str) or not traces or trace in traces.values():
        return None

    def shared(reference: str) -> int:
        return len(os.path.commonprefix([reference, trace]))

    strategy = max(traces, key=lambda s: shared(traces[s]))  # the first of the longest on a tie
    reference, at = traces[strategy], shared(traces[strategy])
    if at == 0:
        return "none", "1"
    if at > reference.rfind("="):
        return strategy, "answer"
    return strategy, str(1 + sum(reference[:at].count(c) for c in _SEPARATORS))
