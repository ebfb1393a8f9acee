"""bfloat16 autocast against fp32: the speed of a GPT training step both ways, side by side, and the
final accuracy of a small experiment trained both ways."""
from __future__ import annotations

import tempfile
from pathlib import Path

import torch

from internalize.bench.gpt import batch_of, models, stepper
from internalize.bench.timing import Line, side_by_side, threads

# C_6 counter, left removal, at the smoke scale (T = 6; a full-size pair takes minutes: benchmarks/README.md)
EXPERIMENT = "automata_direction"
OVERRIDES = ["curriculum.name=left"]


def autocast(step):
    def run():
        with torch.autocast("cpu", torch.bfloat16):
            step()
    return run


def precision(quick: bool) -> list[Line]:
    from internalize import config as configs
    from internalize.runner import execute

    batch, length = (16, 32) if quick else (64, 64)
    fp32_model, _ = models(128, length)
    bf16_model, _ = models(128, length)
    tokens = batch_of(batch, length)
    accuracy = {}
    with threads(1):
        fp32, bf16 = side_by_side(stepper(fp32_model, tokens, False), autocast(stepper(bf16_model, tokens, False)),
                                  repeats=2 if quick else 5, rounds=2 if quick else 3)
        with tempfile.TemporaryDirectory() as tmp:
            for name in ("fp32", "bf16"):
                config = configs.load(EXPERIMENT, [*OVERRIDES, f"train.precision={name}"], "smoke")
                accuracy[name] = execute(config, Path(tmp) / name, show=False)["id_accuracy"]
    return [Line("precision_bf16", f"bfloat16 autocast against fp32: a GPT training step (width 128, depth 4, batch "
                 f"{batch} x {length}, one thread); accuracy from {EXPERIMENT} ({', '.join(OVERRIDES)}, smoke scale) "
                 "trained both ways", ratio=fp32 / bf16, ours=batch * length / bf16, theirs=batch * length / fp32,
                 unit="tokens/s", note=f"final ID accuracy bf16 {accuracy['bf16']:.3f} against fp32 {accuracy['fp32']:.3f}",
                 extra={"id_accuracy": accuracy})]
