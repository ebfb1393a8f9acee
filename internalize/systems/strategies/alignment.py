"""The factorisation's alignment measures: which test inputs pair up, the chance of two traces
agreeing when z is ignored, and the agreement among faithful pairs."""
from __future__ import annotations

import json
from itertools import product

import numpy as np
import torch

from internalize.system import TEST_SEED
from internalize.systems.strategies.benchmark import TASKS


def draw_pairs(bench, count: int, seed: int, frame=None) -> tuple[np.ndarray, np.ndarray]:
    """`count` (source, target) positions in the test frame: distinct inputs of one task, the pairs
    spread evenly over the tasks (the remainder of count / tasks one more each for the first tasks,
    drawn after the others, so the evenly spread pairs do not depend on it); positions in `frame`
    (default: the whole test frame)."""
    rng = np.random.default_rng(seed)
    tasks = (bench.test if frame is None else frame)["task"].to_numpy()
    rows = {n: np.flatnonzero(tasks == n) for n in bench.names}
    rows = {n: r for n, r in rows.items() if len(r) >= 2}
    per, extra = divmod(count, len(bench.names))
    if per == 0:  # fewer pairs than tasks: one a task
        per, extra = 1, 0
    order = [n for n in bench.names if n in rows]
    drawn = [n for n in order for _ in range(per)] + [n for n in order[:extra]]
    pairs = [rng.choice(rows[n], size=2, replace=False) for n in drawn]
    src, tgt = ([int(p[i]) for p in pairs] for i in (0, 1))
    return np.array(src, dtype=int), np.array(tgt, dtype=int)


def pair_chance(bench, src: np.ndarray, tgt: np.ndarray, shares: dict) -> dict[str, float]:
    """Per task: P(the compatible sets intersect) for strategies drawn independently on the two
    inputs of each pair by `shares` ({task: {strategy: share}})."""
    tasks = bench.test["task"].to_numpy()
    sets: dict[int, dict[str, frozenset]] = {}
    found: dict[str, list[float]] = {n: [] for n in bench.names}
    for a, b in zip(src, tgt):
        p = shares.get(tasks[a])
        if p is None:
            continue
        sa, sb = (sets.setdefault(i, compatible(bench, i)) for i in (a, b))
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
    """Per task and strategy, a cell {share, chance, inputs, coinciding}: each task's test inputs are
    split in two halves (alternate positions); the strategy's z is the mean posterior mean of the
    first half's test traces that it alone writes, and it is applied to every input of the second
    half. `share`: among those inputs where no other strategy writes the same trace, the share whose
    sampled trace is that strategy's alone; `chance`: that strategy's share among those inputs' own
    test labels; `inputs`: how many; `coinciding`: the inputs set apart. None where the first half
    holds no trace of the strategy alone, or the second half no input to score."""
    bench = system.bench
    tokens, _ = bench.test_data
    means = system.posterior_means(tokens)
    tasks, labels = bench.test["task"].to_numpy(), bench.test["strategy"].to_numpy()
    gen = torch.Generator(device=system.device).manual_seed(system.config.seed + TEST_SEED + 2)
    found = {}
    for n in bench.names:
        rows = np.flatnonzero(tasks == n)
        fit, apply = rows[0::2], rows[1::2]
        writers = {i: compatible(bench, i) for i in apply}
        found[n] = {}
        for s in TASKS[n].strategies:
            own = [i for i in fit if bench.test_verdicts[i].strategies == {s}]
            alone = np.array([i for i in apply if writers[i][s] == frozenset({s})], dtype=int)
            if not own or not len(alone):
                found[n][s] = None
                continue
            z = means[own].mean(0)
            verdicts = system.traces_with(bench.test.iloc[alone], z.expand(len(alone), -1), 1.0, gen, "steering",
                                          row=alone, strategy=s)
            found[n][s] = dict(share=float(np.mean([v.strategies == {s} for v in verdicts])),
                               chance=float(np.mean(labels[alone] == s)), inputs=int(len(alone)),
                               coinciding=int(len(apply) - len(alone)))
    return found


def compatible(bench, i: int) -> dict[str, frozenset]:
    """Test row i: each strategy -> the strategies whose trace on that input is the same as its own
    (the strategies that get stuck there share the trace None)."""
    traces = bench.tasks[bench.test["task"].iat[i]].traces(json.loads(bench.test["problem"].iat[i]))
    return {s: frozenset(o for o, u in traces.items() if u == t) for s, t in traces.items()}
