"""Sweep throughput: the same 8 runs with 1 and with 2 local workers, side by side in one run.

    python benchmarks/sweep_workers.py [--sweep smoke_k_by_seed] [--workers 2]

Each pass runs into a fresh temporary directory; the ratio is wall time with 1 worker over wall
time with N (the issue asks for at least 1.7 with 2 workers on 2 cores).
"""
from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from internalize.sweep import run_sweep


def timed(sweep: str, workers: int) -> float:
    with tempfile.TemporaryDirectory() as tmp:
        started = time.perf_counter()
        result = run_sweep(sweep, workers=workers, out=Path(tmp) / "sweep", show=False)
        seconds = time.perf_counter() - started
    if result["failed"] or result["ran"] != result["total"]:
        raise SystemExit(f"the sweep did not run cleanly: {result['failed']}")
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sweep", default="smoke_k_by_seed")
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    one = timed(args.sweep, 1)
    many = timed(args.sweep, args.workers)
    print(f"sweep {args.sweep}: 1 worker {one:.1f} s, {args.workers} workers {many:.1f} s, "
          f"speed-up {one / many:.2f}x")


if __name__ == "__main__":
    main()
