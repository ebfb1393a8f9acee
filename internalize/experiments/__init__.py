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
    from internalize.system import Stacked, System


@dataclass(frozen=True)
class Entry:
    target: str  # "module:Class", imported only when the system is built
    tasks: tuple[str, ...]  # task.name values it trains; the first is the default
    models: tuple[str, ...]  # model.name values it trains; the first is the default
    stacked: str = ""  # "module:Class" that trains several seeds at once (internalize.system.Stacked), if any


SYSTEMS: dict[str, Entry] = {
    "logicot": Entry("internalize.experiments.logicot:LogICoTSystem", ("parity_tree",), ("logicot",),
                     stacked="internalize.experiments.logicot_stack:StackedLogICoT"),
    "automata": Entry("internalize.experiments.automata:AutomataSystem", ("automaton",), ("gpt",)),
    "sparse_parity": Entry("internalize.experiments.sparse_parity:SparseParitySystem", ("sparse_parity",),
                           ("linear_attention",)),
    "strategies_base": Entry("internalize.experiments.strategies:StrategiesBaseSystem", ("strategies",), ("gpt",)),
    "strategies_factorize": Entry("internalize.experiments.factorize:FactorizeSystem", ("strategies",), ("latent",)),
}


def register(name: str, entry: Entry) -> None:
    """Add a system from outside the package (a user's own, or a test's)."""
    SYSTEMS[name] = entry


def load(target: str):
    module, _, cls = target.partition(":")
    return getattr(importlib.import_module(module), cls)


def system_class(name: str) -> type[System]:
    if name not in SYSTEMS:
        raise ValueError(f"unknown system {name!r}; available: {', '.join(SYSTEMS)}")
    return load(SYSTEMS[name].target)


def stacked_class(name: str) -> type[Stacked]:
    """The class that trains several seeds of system `name` at once; ValueError if it has none."""
    system_class(name)  # an unknown name fails as above
    if not SYSTEMS[name].stacked:
        able = [n for n, e in SYSTEMS.items() if e.stacked]
        raise ValueError(f"system {name!r} cannot train seeds stacked; systems that can: {', '.join(able)}")
    return load(SYSTEMS[name].stacked)


def build(config: Config) -> System:
    """The system a config describes, ready for the trainer."""
    return system_class(config.system)(config)


def describe(summary: dict) -> str:
    """One line of a finished run's headline figures."""
    return system_class(summary["system"]).describe(summary)
