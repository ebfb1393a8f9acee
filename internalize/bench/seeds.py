"""Many seeds of the Log-ICoT model trained at once (stacked) against the same seeds one after
another, each seed's summary checked equal."""
from __future__ import annotations

import time

import torch

from internalize.bench.timing import Line, threads


def one_after_another(config, seeds: list[int]) -> list[dict]:
    from internalize.runner import seeded_system, summarise
    from internalize.train import Discard, train

    out = []
    for seed in seeds:
        cfg = config.model_copy(update={"seed": seed})
        system = seeded_system(cfg)
        result = train(system, cfg.train.model_copy(update={"checkpoint_every": 0}),
                       torch.Generator().manual_seed(seed), Discard(), show_progress=False)
        out.append(summarise(cfg, system, result))
    return out


def stacked_seeds(quick: bool) -> list[Line]:
    from internalize import config as configs
    from internalize.runner import stacked_summaries

    count = 4 if quick else 16
    seeds = list(range(count))
    config = configs.load("logicot", [], "smoke" if quick else None)
    with threads(1):
        started = time.perf_counter()
        together = stacked_summaries([config.model_copy(update={"seed": s}) for s in seeds])
        stacked = time.perf_counter() - started
        started = time.perf_counter()
        alone = one_after_another(config, seeds)
        sequential = time.perf_counter() - started
    same = all(a["zero_filled_accuracy"] == b["zero_filled_accuracy"]
               and a["samples_to_full_accuracy"] == b["samples_to_full_accuracy"] for a, b in zip(together, alone))
    return [Line("seeds_stacked", f"{count} seeds of Log-ICoT (`logicot`{' --smoke' if quick else ''}) trained at once "
                 "against one after another, one thread, training only", ratio=sequential / stacked, goal=4.0,
                 ours=stacked, theirs=sequential, unit="s",
                 note=("every seed's accuracy and samples to 100% equal" if same
                       else "SEEDS DIFFER between the two ways"), extra={"identical": same})]
