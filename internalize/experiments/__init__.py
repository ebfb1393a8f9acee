"""The system registry: the one place (with the command line) that knows every part.

An experiment's YAML names its system (`system: automata`); the registry maps that name to the
class that builds it, and to the tasks and models it can train (the first of each is the default
when a config names none). Adding a system is its own files plus one line here.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from internalize.config import Config
    from internalize.system import System


@dataclass(frozen=True)
class Entry:
    target: str  # "module:Class", imported only when the system is built
    tasks: tuple[str, ...]  # task.name values it trains; the first is the default
    models: tuple[str, ...]  # model.name values it trains; the first is the default


SYSTEMS: dict[str, Entry] = {
    "logicot": Entry("internalize.experiments.logicot:LogICoTSystem", ("parity_tree",), ("logicot",)),
    "automata": Entry("internalize.experiments.automata:AutomataSystem", ("automaton",), ("gpt",)),
    "sparse_parity": Entry("internalize.experiments.sparse_parity:SparseParitySystem", ("sparse_parity",),
                           ("linear_attention",)),
    "strategies_base": Entry("internalize.experiments.strategies:StrategiesBaseSystem", ("strategies",), ("gpt",)),
    "strategies_factorize": Entry("internalize.experiments.factorize:FactorizeSystem", ("strategies",), ("latent",)),
}


def register(name: str, entry: Entry) -> None:
    """Add a system from outside the package (a user's own, or a test's)."""
    SYSTEMS[name] = entry


def system_class(name: str) -> type[System]:
    if name not in SYSTEMS:
        raise ValueError(f"unknown system {name!r}; available: {', '.join(SYSTEMS)}")
    module, _, cls = SYSTEMS[name].target.partition(":")
    return getattr(importlib.import_module(module), cls)


def build(config: Config) -> System:
    """The system a config describes, ready for the trainer."""
    return system_class(config.system)(config)


def describe(summary: dict) -> str:
    """One line of a finished run's headline figures."""
    return system_class(summary["system"]).describe(summary)
