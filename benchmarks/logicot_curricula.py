"""Log-ICoT against stepwise ICoT, side by side in one run.

For each seed, trains `logicot` (log_icot, log2 k stages) and `logicot_stepwise` (k - 1 stages)
with the same task and model, and prints training samples per second, samples and seconds until
zero-filled accuracy first reaches 1.0, and the ratios stepwise / log_icot.

    python benchmarks/logicot_curricula.py [--seeds 3] [--set task.n=64 --set task.k=32]
"""
from __future__ import annotations

import argparse
import statistics

import torch

from internalize.config import load
from internalize.registry import build
from internalize.train import Discard, train


def measure(name: str, seed: int, overrides: list[str]) -> dict:
    config = load(name, [*overrides, f"seed={seed}"])
    torch.manual_seed(seed)
    system = build(config)
    result = train(system, config.train, torch.Generator().manual_seed(seed), Discard(), show_progress=False)
    solved = next((r for r in result["per_stage"] if r["zero_filled_accuracy"] >= 1.0), None)
    return dict(stages=result["stages"], rate=result["samples_seen"] / result["train_seconds"],
                samples=solved["samples_seen"] if solved else float("nan"),
                seconds=solved["train_seconds"] if solved else float("nan"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--set", dest="overrides", action="append", default=[])
    args = parser.parse_args()
    rows = {}
    for name in ("logicot", "logicot_stepwise"):
        runs = [measure(name, seed, args.overrides) for seed in range(args.seeds)]
        rows[name] = {key: statistics.median(r[key] for r in runs) for key in runs[0]}
    print(f"median over {args.seeds} seeds; threads={torch.get_num_threads()}; overrides={args.overrides}")
    print(f"{'':18}{'stages':>8}{'samples/s':>12}{'samples to 100%':>18}{'seconds to 100%':>18}")
    for name, r in rows.items():
        print(f"{name:18}{r['stages']:>8.0f}{r['rate']:>12,.0f}{r['samples']:>18,.0f}{r['seconds']:>18.2f}")
    a, b = rows["logicot"], rows["logicot_stepwise"]
    print(f"{'stepwise/log_icot':18}{b['stages'] / a['stages']:>8.2f}{b['rate'] / a['rate']:>12.2f}"
          f"{b['samples'] / a['samples']:>18.2f}{b['seconds'] / a['seconds']:>18.2f}")


if __name__ == "__main__":
    main()
