"""The registry: every system by name, the config sections it reads, and the datasets it writes.

A leaf: it imports nothing of the package, so the core reads it and never a system. A system
registers itself when its module is imported. The built-in systems are found the way an installed
package of a user's is: through the `internalize.systems` entry points (pyproject.toml), each
naming the module that registers that system; a user's own file registers through a config's
`imports:` (docs/extending.md).
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from importlib import metadata
from typing import Any, Callable

GROUP = "internalize.systems"


@dataclass(frozen=True, eq=False)
class SystemEntry:
    """What the core knows of a system."""

    target: str  # "module:Class" of the System, imported only when a run builds it
    # the config sections it reads beyond the shared ones, name -> pydantic class (a section with a
    # `name` field names its part: task.name, model.name); train, eval or log given here replace the
    # shared section by a subclass with the system's own keys
    sections: dict[str, type] = field(default_factory=dict)
    stacked: str = ""  # "module:Class" that trains several runs at once (internalize.system.Stacked), if any
    # called on every validated config of this system: refuses a combination of keys that conflict, and
    # fills in what a mode derives from the others (ValueError: one error line)
    check: Callable[[Any], None] | None = None


SYSTEMS: dict[str, SystemEntry] = {}
DATASETS: dict[str, str] = {}  # `internalize data NAME` -> "module:function(out, seed, per_task, formats) -> str"
_discovered = False


def register(name: str, entry: SystemEntry) -> SystemEntry:
    """Make system `name` buildable by configs (`system: NAME`); a later registration replaces it."""
    SYSTEMS[name] = entry
    return entry


def register_dataset(name: str, target: str) -> None:
    DATASETS[name] = target


def _entry_points() -> list:
    return list(metadata.entry_points(group=GROUP))


def discover() -> None:
    """Import every module named by an `internalize.systems` entry point (once): each registers its systems."""
    global _discovered
    if not _discovered:
        for point in _entry_points():
            importlib.import_module(point.value)
        _discovered = True


def names() -> list[str]:
    discover()
    return sorted(SYSTEMS)


def get(name: str) -> SystemEntry:
    """System `name`'s entry, its module imported first if an entry point names it; ValueError if unknown."""
    if name not in SYSTEMS:
        point = next((p for p in _entry_points() if p.name == name), None)
        if point is not None:
            importlib.import_module(point.value)
        else:
            discover()
    if name not in SYSTEMS:
        found = names()
        hint = "" if found else " (no system is registered: is the package installed, `pip install -e .`?)"
        raise ValueError(f"unknown system {name!r}; available: {', '.join(found)}{hint}")
    return SYSTEMS[name]


def load(target: str):
    module, _, attribute = target.partition(":")
    return getattr(importlib.import_module(module), attribute)


def system_class(name: str):
    return load(get(name).target)


def stacked_class(name: str):
    """The class that trains several runs of system `name` at once; ValueError if it has none."""
    if not get(name).stacked:
        able = [n for n in names() if SYSTEMS[n].stacked]
        raise ValueError(f"system {name!r} cannot train runs stacked; systems that can: {', '.join(able)}")
    return load(SYSTEMS[name].stacked)


def build(config):
    """The system a config describes, ready for the trainer."""
    return system_class(config.system)(config)


def describe(summary: dict) -> str:
    """One line of a finished run's headline figures."""
    return system_class(summary["system"]).describe(summary)


def dataset(name: str) -> Callable:
    discover()
    if name not in DATASETS:
        raise ValueError(f"unknown dataset {name!r}; available: {', '.join(DATASETS) or 'none'}")
    return load(DATASETS[name])
