"""The staged trainer: one loop for every curriculum.

It knows nothing of tasks, models or curricula. A system (built by the experiment registry)
hands it stages; each stage says which parameters learn, how a batch is scored, and how the
stage is validated. The trainer runs the optimisation, decides when to advance, logs, and
checkpoints.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable, Protocol

import torch
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from internalize.config import TrainConfig


@dataclass
class Stage:
    info: dict  # what this stage is, for tables and the summary: e.g. {"padded": 8, "layer": 2}
    params: list[torch.nn.Parameter]
    loss: Callable[[Any], torch.Tensor]  # a training batch -> scalar loss
    validate: Callable[[], float]  # loss on the fixed validation set


class System(Protocol):
    num_stages: int

    def stage(self, index: int) -> Stage: ...
    def sample(self, batch_size: int, generator: torch.Generator) -> Any: ...
    def after_step(self) -> None: ...
    def evaluate(self) -> dict[str, float]: ...


class Recorder(Protocol):
    def log(self, record: dict) -> None: ...
    def checkpoint(self, state: dict) -> None: ...


class NonFiniteLoss(RuntimeError):
    pass


class RowStep(torch.optim.Optimizer):
    """One normalised gradient step per row: each row moves until its largest entry moves by `size`.

    The Theorem-1 regime of specs/logicot.md ("per-row step sized so the child weights reach about
    8-10"); rows with no gradient stay where they are.
    """

    def __init__(self, params, size: float):
        super().__init__(params, dict(size=size))

    @torch.no_grad()
    def step(self, closure=None):
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                scale = p.grad.abs().amax(dim=-1, keepdim=True)  # (rows, 1)
                p.sub_(group["size"] * p.grad / scale.clamp_min(1e-30))


def make_optimizer(params, cfg: TrainConfig) -> torch.optim.Optimizer:
    if cfg.optimizer == "row_step":
        return RowStep(params, cfg.theory.row_step)
    return torch.optim.Adam(params, lr=cfg.lr)


@dataclass
class TrainState:
    step: int = 0
    samples: int = 0
    seconds: float = 0.0
    per_stage: list[dict] = field(default_factory=list)


def train(system: System, cfg: TrainConfig, generator: torch.Generator, recorder: Recorder,
          show_progress: bool = True) -> dict:
    """Run every stage; return the figures the summary needs."""
    state = TrainState()
    optimizer = None
    columns = (TextColumn("{task.description}"), BarColumn(), TextColumn("{task.completed} steps"),
               TextColumn("val {task.fields[val]:.4f}"), TimeElapsedColumn())
    with Progress(*columns, disable=not show_progress, transient=True) as bar:
        for index in range(system.num_stages):
            stage = system.stage(index)
            if optimizer is None or cfg.reset_optimizer:
                optimizer = make_optimizer(stage.params, cfg)
            else:  # keep moments, but train this stage's parameters
                optimizer.param_groups[0]["params"] = list(stage.params)
            cap = cfg.steps_per_stage if cfg.advance == "steps" else cfg.max_steps_per_stage
            task = bar.add_task(f"stage {index + 1}/{system.num_stages}", total=cap, val=float("nan"))
            started, steps, val = time.perf_counter(), 0, stage.validate()
            # the stage's loss before it trains: the transient spike at each transition
            recorder.log(dict(step=state.step, stage=index + 1, samples=state.samples, val_loss=val))
            while steps < cap:
                loss = stage.loss(system.sample(cfg.batch_size, generator))
                if not torch.isfinite(loss):
                    raise NonFiniteLoss(f"non-finite loss at stage {index + 1}, step {steps + 1}")
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                optimizer.step()
                system.after_step()
                steps += 1
                state.step += 1
                state.samples += cfg.batch_size
                last = steps == cap
                if steps % cfg.eval_every == 0 or last:
                    val = stage.validate()
                    recorder.log(dict(step=state.step, stage=index + 1, samples=state.samples,
                                      train_loss=float(loss.detach()), val_loss=val))
                    bar.update(task, completed=steps, val=val)
                    if cfg.advance == "threshold" and val < cfg.threshold:
                        break
            state.seconds += time.perf_counter() - started
            bar.remove_task(task)
            figures = dict(stage=index + 1, **stage.info, steps=steps, samples_seen=state.samples,
                           train_seconds=state.seconds, val_loss=val, **system.evaluate())
            state.per_stage.append(figures)
            recorder.log(dict(event="stage_end", **figures))
            recorder.checkpoint(dict(stage=index + 1, step=state.step, samples=state.samples))
    return dict(stages=system.num_stages, samples_seen=state.samples, steps=state.step,
                train_seconds=state.seconds, per_stage=state.per_stage)
