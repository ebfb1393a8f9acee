"""Can factorisation runs over one frozen base train faster as one batched model? Three ways to
train N LoRA copies of the same GPT, each on its own batch, measured side by side on one thread
(the ways: internalize/bench/stacking.py; what `internalize sweep --stack` does instead, and the
bench line `factorize_stacked` measures, is internalize/systems/strategies/stacked.py):

    python benchmarks/factorize_stacking.py [--runs 6] [--batch 64] [--length 64] [--width 128] [--profile]
                                            [--math-attention]

Each way's gradients are checked against the first's before timing.
"""
from __future__ import annotations

import argparse
import time

import torch
import torch.nn.functional as F

from internalize.bench.stacking import math_attention, ways, worst_gradient_gap


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=6)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--length", type=int, default=64)
    parser.add_argument("--width", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--profile", action="store_true", help="torch.profiler's table of one step of each way")
    parser.add_argument("--math-attention", action="store_true",
                        help="attention as two matrix products and a softmax in every way (vmap batches those; "
                             "it has no batching rule for the CPU flash kernel and loops over the runs)")
    args = parser.parse_args()
    if args.math_attention:
        F.scaled_dot_product_attention = math_attention
    torch.set_num_threads(1)
    steps = ways(args.runs, args.batch, args.length, args.width)
    for label, gap in worst_gradient_gap(steps).items():
        print(f"{label}: gradients within {gap:.1e} of one after another")
    if args.profile:
        from torch.profiler import ProfilerActivity, profile

        for label, way in steps.items():
            with profile(activities=[ProfilerActivity.CPU]) as prof:
                way()
            print(f"== {label}\n" + prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=8))
        return
    best = {label: float("inf") for label in steps}
    for _ in range(args.rounds):  # the ways alternate, so each sees the same machine; best round wins
        for label, way in steps.items():
            started = time.perf_counter()
            way()
            best[label] = min(best[label], time.perf_counter() - started)
    print(f"{args.runs} runs, batch {args.batch} x {args.length}, width {args.width}, depth 4, one thread:")
    for label, seconds in best.items():
        print(f"  {label:18s} {seconds:6.3f} s a step for all runs ({best['one after another'] / seconds:.2f}x)")


if __name__ == "__main__":
    main()
