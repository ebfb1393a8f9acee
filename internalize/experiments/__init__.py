"""The experiment registry: the one place (with the command line) that knows every part."""
from __future__ import annotations

from internalize.config import Config


def system_class(task: str):
    if task == "automaton":
        from internalize.experiments.automata import AutomataSystem

        return AutomataSystem
    if task == "sparse_parity":
        from internalize.experiments.sparse_parity import SparseParitySystem

        return SparseParitySystem
    from internalize.experiments.logicot import LogICoTSystem

    return LogICoTSystem


def build(config: Config):
    """The system a config describes, ready for the trainer."""
    return system_class(config.task.name)(config)


def describe(summary: dict) -> str:
    """One line of a finished run's headline figures."""
    return system_class(summary["task"]).describe(summary)
