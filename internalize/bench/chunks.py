"""train.length_chunks: a strategies_base training step on batches of the mixed benchmark, its
losses computed on length-sorted groups of rows each cut to its longest row, against one padded
batch."""
from __future__ import annotations

import torch

from internalize.bench.timing import Line, side_by_side, threads

CHUNKS = 4


def length_chunks(quick: bool) -> list[Line]:
    from internalize import config as configs
    from internalize.registry import build

    batch = 32 if quick else 96
    overrides = ["task.per_task=200", *(["model.width=64"] if quick else [])]
    system = build(configs.load("strategies_base", overrides))
    batches = [system.bench.sample(batch, torch.Generator().manual_seed(i)) for i in range(4)]
    optimizer = torch.optim.AdamW(system.model.parameters(), lr=1e-4)
    pad = system.bench.tokenizer.pad_id
    real = float(sum((t != pad).sum() for t, _ in batches))
    padded = float(sum(t.numel() for t, _ in batches))

    def stepper(chunks: int):
        def run():
            system.config.train.length_chunks = chunks
            for b in batches:
                optimizer.zero_grad()
                system.loss_of(b).backward()
                optimizer.step()
        return run

    with threads(1):
        whole, chunked = side_by_side(stepper(1), stepper(CHUNKS), repeats=1 if quick else 3, rounds=2 if quick else 3)
    m = system.config.model
    return [Line("length_chunks", f"a strategies_base training step (width {m.width}, depth {m.depth}, batch {batch} "
                 f"of the mixed benchmark, one thread): the loss on {CHUNKS} length-sorted groups of rows against "
                 "one padded batch", ratio=whole / chunked, ours=len(batches) * batch / chunked,
                 theirs=len(batches) * batch / whole, unit="examples/s",
                 note=f"real tokens are {real / padded:.2f} of the padded batch's",
                 extra={"real_share": real / padded})]
