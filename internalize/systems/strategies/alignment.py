"""The factorisation's alignment measures: which test inputs pair up, the chance of two traces
agreeing when z is ignored, and the agreement among faithful pairs."""
from __future__ import annotations

import json
from itertools import product

import numpy as np
import torch

from internalize.system import TEST_SEED
from internalize.systems.strategies.benchmark import TASKS


def draw_pairs(bench, count: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """`count` (source, target) positions in the test frame: distinct inputs of one task, the pairs
    spread evenly over the tasks."""
    rng = np.random.default_rng(seed)
    tasks = bench.test["task"].to_numpy()
    per = max(1, count // len(bench.names))
    src, tgt = [], []
    for name in bench.names:
        rows = np.flatnonzero(tasks == name)
        if len(rows) < 2:
            continue
        for _ in range(per):
            a, b = rng.choice(rows, size=2, replace=False)
            src.append(a)
            tgt.append(b)
    return np.array(src, dtype=int), np.array(tgt, dtype=int)


def pair_chance(bench, src: np.ndarray, tgt: np.ndarray, shares: dict) -> dict[str, float]:
    """Per task: P(the compatible sets intersect) for strategies drawn independently on the two
    inputs of each pair by `shares` ({task: {strategy: share}})."""
    tasks = bench.test["task"].to_numpy()
    problems = [json.loads(p) for p in bench.test["problem"]]
    sets = {}

    def compatible(i: int) -> dict[str, frozenset]:
        if i not in sets:
            traces = bench.tasks[tasks[i]].traces(problems[i])
            sets[i] = {s: frozenset(o for o, u in traces.items() if u == t) for s, t in traces.items()}
        return sets[i]

    found: dict[str, list[float]] = {n: [] for n in bench.names}
    for a, b in zip(src, tgt):
        p = shares.get(tasks[a])
        if p is None:
            continue
        sa, sb = compatible(a), compatible(b)
        found[tasks[a]].append(sum(p[s] * p[u] for s, u in product(p, p) if sa[s] & sb[u]))
    return {n: float(np.mean(v)) for n, v in found.items() if v}


def consistent_when_valid(pairs: list) -> float | None:
    """The share of pairs with intersecting strategy sets among those whose two traces are both
    faithful (None when no pair is): alignment with fidelity's share taken out."""
    both = [bool(x.strategies & y.strategies) for x, y in pairs if x.valid and y.valid]
    return float(np.mean(both)) if both else None


def pca2(x: np.ndarray) -> np.ndarray:
    """(N, d) -> (N, 2): the projection on the first two principal components (zeros past rank)."""
    centred = x - x.mean(0)
    _, _, vt = np.linalg.svd(centred, full_matrices=False)
    out = centred @ vt[:2].T
    return np.pad(out, ((0, 0), (0, 2 - out.shape[1])))


STEER_INPUTS = 60  # new inputs per (task, strategy) that a steering z is applied to
LIFT_RESAMPLES = 1000  # bootstrap resamples of the pairs behind each lift interval


def consistent(sources, targets) -> np.ndarray:
    """(pairs,) bool: the two traces' strategy sets intersect (an unfaithful trace has none)."""
    return np.array([bool(x.strategies & y.strategies) for x, y in zip(sources, targets)], dtype=bool)


def lift_interval(lifts: dict[str, np.ndarray], rng: np.random.Generator,
                  resamples: int = LIFT_RESAMPLES) -> tuple[dict[str, list[float]], list[float]]:
    """95% bootstrap intervals [low, high]: per task, of the mean of its pairs' differences (each pair's
    consistency minus its control's, the pairs resampled with replacement); and of the mean over tasks
    of those means, each task's pairs resampled within it."""
    draws = {n: d[rng.integers(len(d), size=(resamples, len(d)))].mean(1) for n, d in lifts.items() if len(d)}

    def interval(values: np.ndarray) -> list[float]:
        return [float(np.quantile(values, 0.025)), float(np.quantile(values, 0.975))]

    overall = interval(np.mean(list(draws.values()), axis=0)) if draws else None
    return {n: interval(v) for n, v in draws.items()}, overall


@torch.no_grad()
def steering(system) -> dict:
    """Per task and strategy: the share of that strategy among the valid traces on new inputs when
    z is the mean posterior mean of the test traces only that strategy writes."""
    tokens, _ = system.bench.test_data
    means = system.posterior_means(tokens)
    tasks = system.bench.test["task"].to_numpy()
    found = {}
    gen = torch.Generator(device=system.device).manual_seed(system.config.seed + TEST_SEED + 2)
    for n in system.bench.names:
        found[n] = {}
        for s in TASKS[n].strategies:
            own = [i for i, v in enumerate(system.bench.test_verdicts) if tasks[i] == n and v.strategies == {s}]
            if not own:
                found[n][s] = None
                continue
            z = means[own].mean(0)
            rows = np.flatnonzero(tasks == n)[:STEER_INPUTS]
            verdicts = system.traces_with(system.bench.test.iloc[rows], z.expand(len(rows), -1), 1.0, gen, "steering",
                                          row=rows, strategy=s)
            valid = [v for v in verdicts if v.valid]
            found[n][s] = float(np.mean([s in v.strategies for v in valid])) if valid else None
    return found
