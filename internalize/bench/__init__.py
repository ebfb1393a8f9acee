"""`internalize bench`: every speed figure of the toolkit in one table.

Each line is a ratio measured side by side in one process (the two sides alternate, best of a
few rounds), so it holds on a busy machine; the absolute rates are printed beside it for
information. A line has a goal when the project has one; the table says whether it is met and,
if not, by how much. `--quick` shrinks every measurement (under a minute in all, for tests).
Lines that compare against Hugging Face need `transformers` and are skipped without it.
"""
from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field
from typing import Callable, Optional


@dataclass
class Line:
    name: str
    what: str  # what is compared, in words
    ratio: Optional[float] = None  # ours / theirs (or the share, for utilisation)
    goal: Optional[float] = None  # the ratio wanted; None: measured for information
    ours: Optional[float] = None  # the absolute figures behind the ratio
    theirs: Optional[float] = None
    unit: str = ""
    note: str = ""
    skipped: Optional[str] = None  # why the line was not measured
    extra: dict = field(default_factory=dict)

    @property
    def met(self) -> Optional[bool]:
        if self.goal is None or self.ratio is None:
            return None
        return self.ratio >= self.goal

    @property
    def verdict(self) -> str:
        if self.skipped:
            return f"skipped: {self.skipped}"
        if self.met is None:
            return "no goal"
        return "met" if self.met else f"missed by {self.goal / self.ratio:.2f}x"

    def as_dict(self) -> dict:
        return {**asdict(self), "met": self.met, "verdict": self.verdict}


Measure = Callable[[bool], list[Line]]


def _registry() -> dict[str, Measure]:
    from internalize.bench import chunks, decode, gpt, precision, process, seeds

    return {"training": gpt.training, "utilisation": gpt.utilisation, "sampling": decode.sampling,
            "answering": decode.answering, "precision": precision.precision, "seeds": seeds.stacked_seeds,
            "length_chunks": chunks.length_chunks, "startup": process.startup,
            "sweep": process.sweep_workers}


def names() -> list[str]:
    return list(_registry())


def run(quick: bool = False, only: Optional[list[str]] = None, progress: Callable[[str], None] = print) -> list[Line]:
    registry = _registry()
    unknown = [n for n in only or [] if n not in registry]
    if unknown:
        raise ValueError(f"no benchmark {unknown[0]!r}; there are {', '.join(registry)}")
    lines = []
    for name, measure in registry.items():
        if only and name not in only:
            continue
        progress(f"measuring {name} ...")
        started = time.perf_counter()
        measured = measure(quick)
        for line in measured:
            line.extra["seconds"] = time.perf_counter() - started  # what measuring this group took
        lines.extend(measured)
    return lines


def write_json(lines: list[Line], path, quick: bool) -> None:
    import platform

    import torch

    meta = {"quick": quick, "torch": torch.__version__, "machine": platform.machine(),
            "processor": platform.processor(), "cores": __import__("os").cpu_count()}
    path.write_text(json.dumps({"meta": meta, "lines": [line.as_dict() for line in lines]}, indent=2) + "\n")
