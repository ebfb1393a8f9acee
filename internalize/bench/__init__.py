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
from typing import Callable, Optional

from internalize.bench.timing import Line, Measure


def _registry() -> dict[str, Measure]:
    from internalize.bench import (
        chunks,
        decode,
        factorize,
        gpt,
        precision,
        process,
        seeds,
    )

    return {"training": gpt.training, "utilisation": gpt.utilisation, "sampling": decode.sampling,
            "answering": decode.answering, "precision": precision.precision, "seeds": seeds.stacked_seeds,
            "length_chunks": chunks.length_chunks, "startup": process.startup,
            "sweep": process.sweep_workers, "factorize_utilisation": factorize.utilisation,
            "factorize_stacked": factorize.stacked}


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
