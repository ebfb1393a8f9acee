"""The benchmark's splits as Parquet, and per-task statistics of what was written.

Each task draws distinct inputs from its own seeded stream (so changing one task never shifts
another's examples); each input appears once, with a strategy drawn uniformly, and the inputs are
cut 80/10/10 into train / validation / test, so no input is in two splits.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

from internalize.systems.strategies.benchmark.common import Task, final_answer
from internalize.systems.strategies.benchmark.suite import TASKS, task_of
from internalize.systems.strategies.benchmark.tokenizer import Tokenizer, frame

# 10,000 per task is 60,000 examples, 48,000 for training: the base model's 16,000 steps of batch
# 96 see each about 32 times (at 3,000 a task, over 100 times). Every task has well over 10,000
# distinct inputs but base_conversion (12,240).
DEFAULT_PER_TASK = 10000
SPLITS = (("train", 0.8), ("validation", 0.1), ("test", 0.1))
COLUMNS = ["task", "strategy", "input", "trace", "answer", "text", "problem"]
MIN_PER_TASK = 10  # so that every split holds at least one input of every task


def _distinct_problems(task: Task, n: int, rng: np.random.Generator) -> list[dict]:
    problems, seen = [], set()
    for _ in range(100 * n + 1000):
        problem = task.sample(rng)
        key = task.format_input(problem)
        if key not in seen:
            seen.add(key)
            problems.append(problem)
            if len(problems) == n:
                return problems
    raise ValueError(f"{task.name}: found only {len(problems)} distinct inputs, fewer than per_task={n}")


def build_splits(seed: int = 0, per_task: int = DEFAULT_PER_TASK,
                 formats: dict[str, str] | None = None) -> dict[str, pd.DataFrame]:
    """`formats`: a task's trace format by name (a task not named: "default"); the inputs and strategies
    drawn do not depend on it, only the traces written."""
    formats = formats or {}
    for name, format in formats.items():
        task_of(name, format)
    if per_task < MIN_PER_TASK:
        raise ValueError(f"per_task must be at least {MIN_PER_TASK} (got {per_task})")
    n_validation = n_test = max(1, round(per_task * SPLITS[1][1]))
    bounds = {"train": (0, per_task - n_validation - n_test),
              "validation": (per_task - n_validation - n_test, per_task - n_test),
              "test": (per_task - n_test, per_task)}
    rows = {split: [] for split in bounds}
    for index, name in enumerate(TASKS):
        task = task_of(name, formats.get(name, "default"))
        rng = np.random.default_rng([seed, index])
        problems = _distinct_problems(task, per_task, rng)
        choices = rng.integers(len(task.strategies), size=per_task)
        for split, (lo, hi) in bounds.items():
            for problem, choice in zip(problems[lo:hi], choices[lo:hi]):
                strategy = task.strategies[int(choice)]
                input, trace = task.format_input(problem), task.trace(problem, strategy)
                rows[split].append({
                    "task": task.name, "strategy": strategy, "input": input, "trace": trace,
                    "answer": final_answer(trace), "text": frame(input, trace),
                    "problem": json.dumps(problem),
                })
    return {split: pd.DataFrame(r, columns=COLUMNS) for split, r in rows.items()}


def dataset_stats(frames: dict[str, pd.DataFrame], formats: dict[str, str] | None = None) -> dict:
    """Per task: trace lengths in characters, longest framed text in tokens, strategy shares, and
    the share of inputs on which two or more strategies write the identical trace."""
    every = pd.concat(frames.values(), ignore_index=True)
    tokenizer = Tokenizer()
    tasks = {}
    for name, group in every.groupby("task", sort=False):
        task = task_of(name, (formats or {}).get(name, "default"))
        lengths = group["trace"].str.len()
        coinciding = 0
        for problem in group["problem"]:
            traces = [t for t in task.traces(json.loads(problem)).values() if t is not None]
            coinciding += len(set(traces)) < len(traces)
        shares = group["strategy"].value_counts(normalize=True)
        tasks[name] = {
            "examples": len(group),
            "trace_chars": {"min": int(lengths.min()), "mean": float(lengths.mean()), "max": int(lengths.max())},
            "text_tokens_max": max(len(tokenizer.encode(t)) for t in group["text"]),
            "strategy_share": {s: float(shares.get(s, 0.0)) for s in task.strategies},
            "coinciding_share": coinciding / len(group),
        }
    return {"splits": {split: len(frame) for split, frame in frames.items()}, "tasks": tasks}


def write_dataset(out: Path, seed: int = 0, per_task: int = DEFAULT_PER_TASK,
                  formats: dict[str, str] | None = None) -> dict:
    """Write train / validation / test .parquet under `out`; return dataset_stats of them."""
    frames = build_splits(seed, per_task, formats)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    for split, data in frames.items():
        data.to_parquet(out / f"{split}.parquet", index=False)
    return dataset_stats(frames, formats)


def format_stats(stats: dict) -> str:
    lines = ["splits: " + ", ".join(f"{split} {n}" for split, n in stats["splits"].items()),
             f"{'task':<16} {'examples':>8} {'trace min/mean/max':>19} {'tokens max':>10} {'coinciding':>10}  strategy shares"]
    for name, t in stats["tasks"].items():
        c = t["trace_chars"]
        shares = ", ".join(f"{s} {v:.2f}" for s, v in t["strategy_share"].items())
        lines.append(f"{name:<16} {t['examples']:>8} {c['min']:>6}/{c['mean']:>5.1f}/{c['max']:<6} "
                     f"{t['text_tokens_max']:>10} {t['coinciding_share']:>10.3f}  {shares}")
    return "\n".join(lines)


def write_command(out: Path, seed: int, per_task: int | None, formats: dict[str, str]) -> str:
    """`internalize data strategies`: write the splits into `out`; their per-task statistics as text."""
    return format_stats(write_dataset(out, seed, DEFAULT_PER_TASK if per_task is None else per_task, formats))
