"""What a factorisation trained on the base's own samples (data.response_source=base) learns from:
the samples of a finished strategies_base run (a GPT with the character tokenizer), at temperature 1,
on validation inputs, and where each objective's token weights put their mass.

    python scripts/base_samples.py RUN_DIR [--inputs 1200] [--seed 0] [--out FILE.json]

Per task: the samples' fidelity, their strategy shares against the data's, and, among the unfaithful
samples, the share of each objective's response weight that falls on the tokens from the first wrong
character on (what training on that sample teaches beyond a faithful prefix), and the first wrong
token's weight over the response's mean token weight. And the base's own lean, scored exactly
(every canonical trace's probability, `strategy_mass`): how far each input's strategy distribution
p(s | x) sits from the task's overall one, as the mean total variation and as the mutual information
I(S; X) in nats against the overall distribution's entropy H(S) (0 when the strategy a sample takes
does not depend on its input; inputs whose strategies write one trace are left out). Token weights
are the objectives' own (internalize.systems.strategies.objectives.token_weights: sum for the ELBO, the base's surprisal **
gamma for model_directed and token_weighting, uniform for global_scale, surprisal ** -gamma for
token_inverse), the surprisal the base's own on the sample.
"""
from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F

from internalize.config import load
from internalize.registry import build
from internalize.runs import load_checkpoint, load_weights
from internalize.systems.strategies.benchmark import TASKS, frame, prompt
from internalize.systems.strategies.data import credit
from internalize.systems.strategies.objectives import token_weights

KINDS = {"elbo": "sum", "model_directed": "surprisal", "global_scale": "uniform", "token_inverse": "inverse"}


def first_wrong(bench, task: str, x: str, problem: str, trace: str) -> int:
    """The index of the first character of `trace` that no strategy's trace of this input shares."""
    traces = [t for t in bench.tasks[task].traces(json.loads(problem)).values() if t is not None]
    return max(len(os.path.commonprefix([t, trace])) for t in traces)


def strategy_lean(masses: list[dict[str, float]]) -> dict:
    """How much the strategy depends on the input: {inputs, tv, mutual_information, entropy} over the
    inputs whose faithful mass is positive, each p(s | x) the strategies' masses normalised."""
    rows = np.array([[m[s] for s in sorted(m)] for m in masses if sum(m.values()) > 0])
    if len(rows) == 0:
        return dict(inputs=0, tv=None, mutual_information=None, entropy=None)
    p = rows / rows.sum(axis=1, keepdims=True)
    overall = p.mean(axis=0)

    def entropy(q: np.ndarray) -> np.ndarray:
        return -(q * np.log(np.where(q > 0, q, 1.0))).sum(axis=-1)

    return dict(inputs=len(p), tv=float(0.5 * np.abs(p - overall).sum(axis=1).mean()),
                mutual_information=float(entropy(overall) - entropy(p).mean()), entropy=float(entropy(overall)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run", type=Path)
    parser.add_argument("--inputs", type=int, default=1200)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    config = load(str(args.run / "config.yaml"))
    torch.manual_seed(config.seed)
    system = build(config)
    load_weights(system.model, load_checkpoint(args.run)[1])
    system.model.eval()
    bench = system.bench
    rows = bench.frames["validation"].sample(n=min(args.inputs, len(bench.frames["validation"])), random_state=args.seed)
    traces = bench.generate(system.decode, rows, 1.0, torch.Generator().manual_seed(args.seed), steps=bench.longest)
    verdicts = bench.verdicts(rows, traces)
    f = load("strategies_factorize").objective
    masses = system.strategy_mass(rows)
    found = {}
    for task in bench.names:
        here = [i for i, t in enumerate(rows["task"]) if t == task]
        shares = credit([verdicts[i] for i in here], TASKS[task].strategies)
        wrong = [i for i in here if traces[i] is not None and not verdicts[i].valid]
        after, lean = {k: [] for k in KINDS}, {k: [] for k in KINDS}
        for i in wrong:
            x, trace = rows["input"].iloc[i], traces[i]
            tokens, response = bench.encode(pd.DataFrame({"input": [x], "text": [frame(x, trace)]}))
            with torch.no_grad():
                logits, _ = system.model(tokens[:, :-1])
            where = response[:, 1:]
            surprisal = F.cross_entropy(logits.transpose(1, 2), tokens[:, 1:], reduction="none") * where
            start = len(bench.tokenizer.encode(prompt(x))) - 1  # target index of the trace's first character
            at = start + first_wrong(bench, task, x, rows["problem"].iloc[i], trace)
            for name, kind in KINDS.items():
                w = token_weights(name, surprisal, where, f.alpha, f.gamma)[0]
                after[name].append(float(w[at:].sum() / w.sum()))
                lean[name].append(float(w[at] / w[where[0]].mean()))
        distinct = [i for i in here if len(set(bench.tasks[task].traces(json.loads(rows["problem"].iloc[i])).values())
                                           - {None}) > 1]
        found[task] = dict(
            lean=strategy_lean([masses[i] for i in distinct]),
            fidelity_exact=float(np.mean([sum(masses[i].values()) for i in here])),
            samples=len(here), fidelity=float(np.mean([verdicts[i].valid for i in here])),
            unclosed=float(np.mean([traces[i] is None for i in here])),
            strategy_shares=shares, data_shares=bench.split_shares(task, "validation"),
            weight_after_first_error={k: float(np.mean(v)) if v else None for k, v in after.items()},
            first_error_weight_over_mean={k: float(np.mean(v)) if v else None for k, v in lean.items()})
    text = json.dumps(found, indent=2)
    print(text)
    if args.out:
        args.out.write_text(text)


if __name__ == "__main__":
    main()
