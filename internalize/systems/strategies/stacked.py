"""Factorisation runs over one frozen base, one seed and one response source, trained at once: the
runs of an objectives table (elbo, model_directed, ...) differ only in `objective.*`, so they read
the same training batches, and the frozen base's work is done once for all of them: the responses it
samples (data.response_source=base or base_faithful: the larger part of such a run's time), the
validation responses, and its surprisal of each batch's tokens (the objectives that weigh by it).

Each run keeps what makes it itself: its LoRA copies and heads (built as its own run builds them),
its optimizer moments, its gradient clipped alone, its c, its beta schedule, its snapshots and its
final evaluation. A step adds the runs' losses (their parameters are disjoint, so each gradient is
that of its own run) and the trainer takes one optimizer step over all of them. Each run's metrics,
summary and figures equal those of the run trained alone, timings aside (bitwise on one thread,
tests/test_strategies_stack.py); a run's `train_seconds` is the stack's divided by the runs.

`internalize sweep NAME --stack` trains a sweep's runs this way, one stack per (seed, response source,
...) group. On a CPU the runs' own passes cost what they cost alone; what a stack saves is the base's
shared work (docs/strategies.md gives the measured ratios).
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import torch
from torch import nn

from internalize.config import Config
from internalize.registry import build
from internalize.runs import fixed_digest, frozen_names
from internalize.system import Stacked, Stage, System
from internalize.systems.strategies.data import by_rows
from internalize.systems.strategies.factorize import FactorizeSystem
from internalize.systems.strategies.latent import share_frozen


@dataclass
class Piece:
    """A training batch (or micro-batch) and its weight in the step's loss."""

    batch: tuple
    weight: float


class StackedFactorize(Stacked):
    varies = ("objective",)
    headline = "alignment"
    stage_metrics: dict = {}
    num_stages = 1

    def __init__(self, configs: list[Config]):
        self.config = configs[0]
        self.seeds = [c.seed for c in configs]
        self.runs: list[FactorizeSystem] = []
        for config in configs:  # each built as its own run builds it (runner.seeded_system)
            torch.manual_seed(config.seed)
            self.runs.append(build(config))
        first = self.runs[0]
        for run in self.runs[1:]:  # one frozen base in memory for the whole stack
            share_frozen(first.net, run.net)
        self.model = nn.ModuleList([r.net for r in self.runs])
        self.memo: dict = {}  # the frozen base's surprisal of the current batch's rows, for every run
        for run in self.runs:
            run.memo = self.memo
            run.draws = first.draws  # the base's training draws are the first run's, shared
        self.losses: list = []  # each run's loss on the last batch
        self.last_val = [float("nan")] * len(self.runs)
        self.records: list[list[dict]] = [[] for _ in self.runs]
        self.step, self.started, self.seconds = 0, 0.0, 0.0
        # each run's SHA-256 of its frozen base, as its own checkpoint keeps it
        self.digests = [fixed_digest(r.model, r.fixed()) for r in self.runs]

    def stage(self, index: int) -> Stage:
        val = self.runs[0].validation()  # the base's validation responses drawn once
        for run in self.runs:
            run.val_data = val
        stages = [run.stage(index) for run in self.runs]
        self.started = time.perf_counter()

        def sample(batch_size: int, generator: torch.Generator):
            self.generators = [generator] * len(self.runs)  # the trainer's stream: every run's, as alone
            self.memo.clear()
            self.losses = [0.0] * len(self.runs)
            return Piece(stages[0].sample(batch_size, generator), 1.0)

        def loss(piece: Piece):
            total, parts = 0.0, {}
            for i, s in enumerate(stages):
                value, own = s.loss(piece.batch)
                total = total + value
                # each run's batch loss summed over the micro-batches as the trainer sums a run's alone
                self.losses[i] = self.losses[i] + value.detach() * piece.weight
                parts.update({f"{i}/{k}": v for k, v in own.items()})
            return total, parts

        def split(piece: Piece, rows: int) -> list:
            return [(Piece(part, weight), weight) for part, weight in by_rows(piece.batch, rows)]

        @torch.no_grad()
        def validate() -> float:
            self.memo.clear()
            self.last_val = [s.validate() for s in stages]
            return sum(self.last_val)

        # clipped together, the runs' gradients would couple: each run's is clipped alone
        return Stage(info={}, params=[p for s in stages for p in s.params], sample=sample, loss=loss,
                     validate=validate, split=split, clip_groups=[r.net.learnable() for r in self.runs])

    def on_step(self, step: int) -> None:
        self.step = step
        for run in self.runs:
            run.on_step(step)

    def evaluate(self, stage: int = 0) -> dict[str, float]:
        """Every run's own stage record, as its run would log it; the stack itself reports nothing."""
        self.seconds += time.perf_counter() - self.started
        steps = self.step + 1
        for i, run in enumerate(self.runs):
            self.records[i].append(dict(stage=stage + 1, steps=steps, samples_seen=steps * self.config.train.batch_size,
                                        train_seconds=self.seconds / len(self.runs), val_loss=self.last_val[i],
                                        **run.evaluate(stage)))
        return {}

    def split(self, record: dict) -> dict[int, dict]:
        if record.get("event") == "stage_end":
            return {i: dict(event="stage_end", **records[-1]) for i, records in enumerate(self.records)}
        head = {k: record[k] for k in ("step", "stage", "samples")}
        if "train_loss" not in record:  # the stage's loss before it trains
            return {i: dict(head, val_loss=v) for i, v in enumerate(self.last_val)}
        out = {}
        for i in range(len(self.runs)):
            own = {k[len(f"train_{i}/"):]: v for k, v in record.items() if k.startswith(f"train_{i}/")}
            out[i] = dict(head, train_loss=float(self.losses[i]), val_loss=self.last_val[i],
                          **{f"train_{k}": v for k, v in own.items()})
        return out

    def seed(self, index: int) -> tuple[System, dict]:
        per_stage = self.records[index]
        return self.runs[index], dict(stages=1, samples_seen=per_stage[-1]["samples_seen"],
                                      steps=per_stage[-1]["steps"], train_seconds=per_stage[-1]["train_seconds"],
                                      per_stage=per_stage)

    def state(self) -> dict:
        return {"runs": [r.state() for r in self.runs], "seconds": self.seconds, "records": self.records}

    def load_state(self, state: dict) -> None:
        for run, own in zip(self.runs, state["runs"]):
            run.load_state(own)
            run.draws = self.runs[0].draws  # shared again (each run's checkpoint holds the same counts)
        self.seconds = state.get("seconds", 0.0)
        self.records = state.get("records", self.records)

    def fixed(self) -> set[str]:
        return frozen_names(self.model)

    resumable = True

    def split_checkpoint(self, state: dict, tensors: dict) -> dict[int, tuple[dict, dict]]:
        n, out = len(self.runs), {}
        for i, run in enumerate(self.runs):
            prefix = (f"model.{i}.", f"optim.{i}.")
            own = {k.replace(f".{i}.", ".", 1): v for k, v in tensors.items() if k.startswith(prefix)}
            own["rng.train"] = tensors["rng.train"]
            out[i] = (dict(state, seconds=state["seconds"] / n, val=self.last_val[i], per_stage=self.records[i],
                           system=state["system"]["runs"][i], fixed=self.digests[i]), own)
        return out

    def join_checkpoints(self, checkpoints: list[tuple[dict, dict]]) -> tuple[dict, dict]:
        states = [state for state, _ in checkpoints]
        counters = ("stage", "stage_step", "step", "samples")
        if any({k: s[k] for k in counters} != {k: states[0][k] for k in counters} for s in states):
            raise ValueError("the runs' checkpoints are at different steps: they were not written by one stack")
        if [s["fixed"] for s in states] != self.digests:
            raise ValueError("the frozen base the runs were trained over has changed since")
        tensors = {"rng.train": checkpoints[0][1]["rng.train"]}
        for i, (_, own) in enumerate(checkpoints):
            tensors.update({k.replace(".", f".{i}.", 1): v for k, v in own.items() if k != "rng.train"})
        self.last_val = [s["val"] for s in states]
        state = dict(states[0], seconds=sum(s["seconds"] for s in states), val=sum(s["val"] for s in states),
                     per_stage=[], fixed=fixed_digest(self.model, self.fixed()),
                     system={"runs": [s["system"] for s in states], "seconds": sum(s["seconds"] for s in states),
                             "records": [s["per_stage"] for s in states]})
        return state, tensors


__all__ = ["StackedFactorize"]
