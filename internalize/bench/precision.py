"""bfloat16 autocast against fp32: the same small experiment trained both ways, its training speed
and its final accuracy side by side."""
from __future__ import annotations

import tempfile
from pathlib import Path

from internalize.bench import Line
from internalize.bench.timing import threads

# C_6 counter, T = 8, left removal: about 1,650 steps of the semiautomata GPT (width 128, depth 2)
EXPERIMENT = "automata_direction"
OVERRIDES = ["curriculum.name=left", "task.length=8"]


def precision(quick: bool) -> list[Line]:
    from internalize import config as configs
    from internalize.runner import execute

    runs = {}
    with tempfile.TemporaryDirectory() as tmp, threads(1):
        for precision in ("fp32", "bf16"):
            config = configs.load(EXPERIMENT, [*OVERRIDES, f"train.precision={precision}"],
                                  "smoke" if quick else None)
            runs[precision] = execute(config, Path(tmp) / precision, show=False)
    fp32, bf16 = runs["fp32"], runs["bf16"]
    return [Line("precision_bf16", f"bfloat16 autocast against fp32: {EXPERIMENT} "
                 f"({', '.join(OVERRIDES)}{', smoke scale' if quick else ''}) trained both ways, one thread; the ratio "
                 "is fp32's training seconds over bf16's", ratio=fp32["train_seconds"] / bf16["train_seconds"],
                 ours=bf16["train_seconds"], theirs=fp32["train_seconds"], unit="s",
                 note=f"final ID accuracy bf16 {bf16['id_accuracy']:.3f} against fp32 {fp32['id_accuracy']:.3f}",
                 extra={"id_accuracy": {"bf16": bf16["id_accuracy"], "fp32": fp32["id_accuracy"]}})]
