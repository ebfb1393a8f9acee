"""Sweep throughput: the same 8 runs with 1 and with 2 local workers, side by side in one run.

    python benchmarks/sweep_workers.py [--sweep bench_k_by_seed]

Three passes, each into a fresh temporary directory:
  1 worker, 1 thread      the baseline of process-level scaling
  1 worker, 2 threads     what `--workers 1` does on 2 cores (torch uses the second core inside a run)
  2 workers, 1 thread     the default on 2 cores
and the speed-ups of the last over the first two.
"""
from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from internalize.sweep import run_sweep


def timed(sweep: str, workers: int, threads: int) -> float:
    with tempfile.TemporaryDirectory() as tmp:
        started = time.perf_counter()
        result = run_sweep(sweep, workers=workers, threads=threads, out=Path(tmp) / "sweep", show=False)
        seconds = time.perf_counter() - started
    if result["failed"] or result["ran"] != result["total"]:
        raise SystemExit(f"the sweep did not run cleanly: {result['failed']}")
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sweep", default="bench_k_by_seed")
    args = parser.parse_args()
    one_thread = timed(args.sweep, 1, 1)
    two_threads = timed(args.sweep, 1, 2)
    two_workers = timed(args.sweep, 2, 1)
    print(f"sweep {args.sweep}, 8 runs:")
    print(f"  1 worker  x 1 thread   {one_thread:6.1f} s")
    print(f"  1 worker  x 2 threads  {two_threads:6.1f} s")
    print(f"  2 workers x 1 thread   {two_workers:6.1f} s")
    print(f"  speed-up of 2 workers: {one_thread / two_workers:.2f}x over 1 worker x 1 thread, "
          f"{two_threads / two_workers:.2f}x over 1 worker x 2 threads")


if __name__ == "__main__":
    main()
