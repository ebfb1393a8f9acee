"""Many seeds of Log-ICoT trained at once, each as it trains alone.

The gates of a stage depend on the tree's levels only, which every seed shares, so S seeds stack
into one model (W^(l) of shape (S, T, T)) and one batched forward. Each seed keeps what makes it
itself: its secret support, its validation and test sets, its own data generator, its own Adam
moments and step count. A seed whose validation loss is under the threshold stops (no more
batches drawn, no more steps) while the others go on; the stage ends for all once every seed has
stopped or the cap is reached, exactly where each would have ended alone. The one trainer
(internalize/train.py) runs this system like any other.

`internalize sweep NAME --stack` trains each point's seeds this way and writes every seed's
run directory as its own run would (runner.execute_stacked); `runner.stacked_summaries(configs)`
returns the summaries in memory. They equal those of `internalize run` one seed at a time, timings aside
(tests/test_logicot_stack.py): bitwise on one thread; with several, a batched product may round
its last bit differently. A seed's `train_seconds` is the stack's time divided by the number of
seeds. `internalize bench` measures the speed-up.
"""
from __future__ import annotations

import time

import numpy as np
import torch

from internalize.config import Config
from internalize.system import Stacked, Stage, System
from internalize.systems.logicot.model import LogICoT
from internalize.systems.logicot.system import LogICoTSystem


class SeedAdam(torch.optim.Optimizer):
    """torch.optim.Adam's single-tensor update, per seed (the leading dimension) and only for the
    seeds in `active`: each seed's moments and step count are exactly those of its own Adam."""

    def __init__(self, params, lr: float, active: list[bool], betas=(0.9, 0.999), eps: float = 1e-8):
        super().__init__(params, dict(lr=lr, betas=betas, eps=eps))
        self.active = active

    @torch.no_grad()
    def step(self, closure=None):
        for group in self.param_groups:
            beta1, beta2 = group["betas"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                if not state:
                    state["step"] = torch.zeros(p.shape[0])
                    state["exp_avg"] = torch.zeros_like(p)
                    state["exp_avg_sq"] = torch.zeros_like(p)
                for s in np.flatnonzero(self.active):
                    state["step"][s] += 1
                    grad, exp_avg, exp_avg_sq, param = p.grad[s], state["exp_avg"][s], state["exp_avg_sq"][s], p[s]
                    exp_avg.lerp_(grad, 1 - beta1)
                    exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
                    step = float(state["step"][s])
                    step_size = group["lr"] / (1 - beta1 ** step)
                    denom = (exp_avg_sq.sqrt() / (1 - beta2 ** step) ** 0.5).add_(group["eps"])
                    param.addcdiv_(exp_avg, denom, value=-step_size)


class StackedLogICoT(Stacked):
    headline = "zero_filled_accuracy"
    stage_metrics: dict = {}

    def __init__(self, configs: list[Config]):
        config, seeds = configs[0], [c.seed for c in configs]
        if config.train.optimizer != "adam" or config.theory.enabled or config.model.quantize:
            raise ValueError("stacked seeds train Log-ICoT with Adam (train.optimizer=adam, no theory mode or "
                             "quantisation)")
        self.config, self.seeds = config, list(seeds)
        self.solo = [LogICoTSystem(config.model_copy(update={"seed": s})) for s in self.seeds]
        first = self.solo[0]
        self.layout, self.curriculum, self.num_stages = first.layout, first.curriculum, first.num_stages
        self.model = LogICoT(self.layout.level, config.model.link, config.model.mask, seeds=len(self.seeds))
        self.val = torch.stack([s.val for s in self.solo])  # (S, N, T)
        self.generators = [torch.Generator().manual_seed(s) for s in self.seeds]  # each run's trainer stream
        self.active = [True] * len(self.seeds)
        self.records: list[list[dict]] = [[] for _ in self.seeds]  # per seed, per stage
        self.steps = [0] * len(self.seeds)  # the stage's steps taken by each seed
        self.before = [0] * len(self.seeds)  # each seed's steps in the stages before this one
        self.losses = torch.zeros(len(self.seeds))  # each seed's loss on its last batch
        self.started, self.seconds = 0.0, 0.0  # the stage's start; the stack's training time so far

    def stage(self, index: int) -> Stage:
        solo = self.solo[0]
        padded, plan, trained, supervised, info = solo.wiring(index)  # the same for every seed
        params = [self.model.W[layer - 1] for layer in trained]
        self.active[:] = [True] * len(self.seeds)
        self.before = [sum(r["steps"] for r in records) for records in self.records]
        self.steps = [0] * len(self.seeds)
        self.started = time.perf_counter()

        def per_seed_losses(values: torch.Tensor) -> torch.Tensor:
            pred = self.model(solo.inputs(values, padded), plan)  # (S, B, T)
            return ((pred[..., supervised] - values[..., supervised]) ** 2).flatten(1).mean(1)  # (S,)

        def sample(batch_size: int, generator: torch.Generator) -> torch.Tensor:
            # a stopped seed draws nothing; its rows are zeros and its loss is left out
            rows = [s.sample(batch_size, g) if on else torch.zeros(batch_size, self.layout.length)
                    for s, g, on in zip(self.solo, self.generators, self.active)]
            for i, on in enumerate(self.active):
                self.steps[i] += on
            return torch.stack(rows)

        def loss(values: torch.Tensor) -> torch.Tensor:
            losses = per_seed_losses(values)
            self.losses = losses.detach()
            return (losses * torch.tensor(self.active, dtype=losses.dtype)).sum()

        @torch.no_grad()
        def validate() -> float:
            """Each active seed's validation loss; a seed under the threshold stops. What the trainer
            sees is the largest loss of the seeds still training (0 once all have stopped)."""
            losses = per_seed_losses(self.val)
            for i, on in enumerate(self.active):
                if on:
                    self.last_val[i] = float(losses[i])
                    # the check before a stage's first step only logs, as the trainer's does alone
                    if self.steps[i] and self.config.train.advance == "threshold" \
                            and losses[i] < self.config.train.threshold:
                        self.active[i] = False
            running = [v for v, on in zip(self.last_val, self.active) if on]
            return max(running) if running else 0.0

        self.last_val = [float("nan")] * len(self.seeds)
        self.stage_info = info
        return Stage(info=info, params=params, sample=sample, loss=loss, validate=validate)

    def optimizer(self, params: list, cfg) -> torch.optim.Optimizer:
        return SeedAdam(params, cfg.lr, self.active)

    def evaluate(self, stage: int) -> dict[str, float]:
        """At each stage's end: every seed's own stage record, as its run would log it."""
        self.seconds += time.perf_counter() - self.started
        for i, solo in enumerate(self.solo):
            self.load_into(solo, i)
            done = self.before[i] + self.steps[i]
            self.records[i].append(dict(stage=len(self.records[i]) + 1, **self.stage_info, steps=self.steps[i],
                                        samples_seen=done * self.config.train.batch_size,
                                        train_seconds=self.seconds / len(self.seeds), val_loss=self.last_val[i],
                                        **solo.evaluate(stage)))
        return {}

    def split(self, record: dict) -> dict[int, dict]:
        if record.get("event") == "stage_end":
            return {i: dict(event="stage_end", **records[-1]) for i, records in enumerate(self.records)}
        if "train_loss" not in record:  # the stage's loss before it trains: every seed logs its own
            return {i: dict(step=b, stage=record["stage"], samples=b * self.config.train.batch_size,
                            val_loss=self.last_val[i]) for i, b in enumerate(self.before)}
        taken = max(self.steps)  # the stage's steps so far; a seed that stopped earlier took fewer
        out = {}
        for i, (b, n) in enumerate(zip(self.before, self.steps)):
            if n == taken:
                out[i] = dict(step=b + n, stage=record["stage"], samples=(b + n) * self.config.train.batch_size,
                              train_loss=float(self.losses[i]), val_loss=self.last_val[i])
        return out

    def seed(self, index: int) -> tuple[System, dict]:
        solo, per_stage = self.solo[index], self.records[index]
        self.load_into(solo, index)
        return solo, dict(stages=self.num_stages, samples_seen=per_stage[-1]["samples_seen"],
                          steps=sum(r["steps"] for r in per_stage), train_seconds=per_stage[-1]["train_seconds"],
                          per_stage=per_stage)

    def load_into(self, solo: LogICoTSystem, i: int) -> None:
        with torch.no_grad():
            for mine, theirs in zip(self.model.W, solo.model.W):
                theirs.copy_(mine[i])


__all__ = ["StackedLogICoT", "SeedAdam"]
