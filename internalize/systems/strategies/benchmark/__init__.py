"""The multi-strategy benchmark (docs/strategies.md): six tasks, each solvable by
two or three strategies that write different traces, a validator per task, one character-level
tokenizer and the Parquet splits. Trace formats are documented in each task's module."""
from internalize.systems.strategies.benchmark.common import Task, Verdict, final_answer
from internalize.systems.strategies.benchmark.dataset import (
    COLUMNS,
    DEFAULT_PER_TASK,
    build_splits,
    dataset_stats,
    format_stats,
    write_dataset,
)
from internalize.systems.strategies.benchmark.suite import (
    FORMATS,
    TASKS,
    departure,
    task_of,
    validate,
)
from internalize.systems.strategies.benchmark.tokenizer import (
    CHARS,
    SPECIALS,
    Tokenizer,
    frame,
    prompt,
    unframe,
)

__all__ = [
    "CHARS", "COLUMNS", "DEFAULT_PER_TASK", "FORMATS", "SPECIALS", "TASKS", "Task", "Tokenizer", "Verdict",
    "build_splits", "dataset_stats", "departure", "final_answer", "format_stats", "frame", "prompt", "task_of",
    "unframe", "validate", "write_dataset",
]
