"""Where a finished strategies_base run puts its first trace token: per task, on test inputs, the
probability the model gives, right after the prompt, to the first token of each strategy's trace, and
what is left for tokens that start no strategy's trace (every such sample is unfaithful at once).

    python scripts/first_token.py RUN_DIR [--inputs 400] [--by-length TASK] [--out FILE.json]

`--by-length TASK` also splits that task's inputs by their length in characters.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import torch

from internalize.config import load
from internalize.registry import build
from internalize.runs import load_checkpoint, load_weights
from internalize.systems.strategies.benchmark import prompt


def first_token_mass(system, task: str, inputs: int) -> list[dict]:
    """One record per test input of `task`: its length, the mass on the strategies' first tokens
    (each distinct token counted once) and the mass elsewhere."""
    bench, tok = system.bench, system.bench.tokenizer
    rows = bench.test[bench.test["task"] == task].head(inputs)
    found = []
    for x, problem in zip(rows["input"], rows["problem"]):
        traces = [t for t in bench.tasks[task].traces(json.loads(problem)).values() if t is not None]
        firsts = sorted({tok.encode(t)[0] for t in traces})
        with torch.no_grad():
            probs = torch.softmax(system.model(torch.tensor([tok.encode(prompt(x))]))[0][0, -1], -1)
        on = float(probs[firsts].sum())
        found.append(dict(length=len(x), on_strategies=on, elsewhere=1.0 - on, distinct=len(firsts)))
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run", type=Path)
    parser.add_argument("--inputs", type=int, default=400)
    parser.add_argument("--by-length")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    config = load(str(args.run / "config.yaml"))
    system = build(config)
    state, tensors = load_checkpoint(args.run)
    load_weights(system.model, tensors, system.fixed(), state["train"].get("fixed", ""))
    system.model.eval()
    found = {}
    for task in system.bench.names:
        records = first_token_mass(system, task, args.inputs)
        found[task] = dict(inputs=len(records), elsewhere=float(np.mean([r["elsewhere"] for r in records])),
                           over_01=float(np.mean([r["elsewhere"] > 0.1 for r in records])))
        if task == args.by_length:
            lengths = sorted({r["length"] for r in records})
            found[task]["by_length"] = {
                str(n): dict(inputs=sum(r["length"] == n for r in records),
                             elsewhere=float(np.mean([r["elsewhere"] for r in records if r["length"] == n])))
                for n in lengths}
    print(f"{'task':<16} {'inputs':>6} {'mass elsewhere':>15} {'inputs over 0.1':>16}")
    for task, f in found.items():
        print(f"{task:<16} {f['inputs']:>6} {f['elsewhere']:>15.3f} {f['over_01']:>16.3f}")
        for n, g in (f.get("by_length") or {}).items():
            print(f"  length {n:<7} {g['inputs']:>6} {g['elsewhere']:>15.3f}")
    if args.out:
        args.out.write_text(json.dumps(found, indent=2))


if __name__ == "__main__":
    main()
