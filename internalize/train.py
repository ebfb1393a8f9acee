"""The staged trainer: one loop for every curriculum.

It knows nothing of tasks, models or curricula. A system (built through the registry)
hands it stages; each stage says which parameters learn, how a batch is scored, and how the
stage is validated. The trainer runs the optimisation, decides when to advance, logs, and
checkpoints everything it needs to continue exactly where it stopped: the model, the optimizer's
moments, the training generator and its own counters. The system's fixed weights (System.fixed: a
frozen base it reads again at every start) are left out of the checkpoint, their SHA-256 kept.
"""
from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass, field
from typing import Optional, Protocol

import torch
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from internalize.config import ConfigError, TrainConfig
from internalize.runs import fixed_digest, load_weights, model_tensors
from internalize.system import System


class Recorder(Protocol):
    def log(self, record: dict) -> None: ...
    def checkpoint(self, state: dict, tensors: dict[str, torch.Tensor]) -> None: ...


class Discard:
    """A recorder that keeps nothing: for training done inside another run (a base trained first,
    seeds trained at once, benchmarks)."""

    def log(self, record: dict) -> None:
        pass

    def checkpoint(self, state: dict, tensors: dict[str, torch.Tensor]) -> None:
        pass


class NonFiniteLoss(RuntimeError):
    pass


def make_optimizer(system: System, params: list, cfg: TrainConfig) -> torch.optim.Optimizer:
    """The system's own optimizer if it has one for train.optimizer, else Adam or AdamW; each group
    remembers its base learning rate for the warm-ups."""
    optimizer = system.optimizer(params, cfg)
    if optimizer is None:
        if cfg.optimizer == "adamw":
            optimizer = torch.optim.AdamW(params, lr=cfg.lr, weight_decay=cfg.weight_decay)
        elif cfg.optimizer == "adam":
            optimizer = torch.optim.Adam(params, lr=cfg.lr)
        else:
            raise ValueError(f"train.optimizer={cfg.optimizer} is not adam or adamw, and this system has no "
                             "optimizer of that name")
    for group in optimizer.param_groups:
        if "lr" in group:
            group.setdefault("base_lr", group["lr"])
    return optimizer


def warm_up(optimizer: torch.optim.Optimizer, cfg: TrainConfig, stage_step: int, step: int, cap: int) -> None:
    """Scale every group's learning rate by the stage's warm-up and the run's (linear, 0 = off), and by
    the stage's cosine decay to train.min_lr_ratio over its `cap` steps (train.lr_decay=cosine)."""
    scale = 1.0
    if cfg.lr_decay == "cosine":
        scale = cfg.min_lr_ratio + (1 - cfg.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * stage_step / cap))
    if cfg.warmup_steps:
        scale *= min(1.0, (stage_step + 1) / cfg.warmup_steps)
    if cfg.run_warmup_steps:
        scale *= min(1.0, (step + 1) / cfg.run_warmup_steps)
    for group in optimizer.param_groups:
        if "base_lr" in group:
            group["lr"] = group["base_lr"] * scale


def split_loss(out) -> tuple[torch.Tensor, dict[str, float]]:
    """A stage's loss: a scalar, or (scalar, {name: part})."""
    if isinstance(out, tuple):
        loss, parts = out
        return loss, {k: float(v.detach()) if torch.is_tensor(v) else float(v) for k, v in parts.items()}
    return out, {}


@dataclass
class TrainState:
    """The trainer's counters: with the tensors of a checkpoint, all it needs to continue."""

    stage: int = 0  # 0-based stage in progress
    stage_step: int = 0  # steps taken in it
    step: int = 0
    samples: int = 0
    seconds: float = 0.0
    val: float = math.nan  # the stage's last validation loss
    per_stage: list[dict] = field(default_factory=list)
    system: dict = field(default_factory=dict)  # the system's own state (System.state)
    fixed: str = ""  # SHA-256 of the fixed weights the checkpoint leaves out (System.fixed); "" for none


def snapshot(model: torch.nn.Module, optimizer: torch.optim.Optimizer, generator: torch.Generator,
             fixed: set[str] = frozenset()) -> dict:
    """Every tensor a checkpoint holds (the model's but the `fixed` ones); optimizer moments are keyed by
    parameter name."""
    tensors = {f"model.{k}": v for k, v in model_tensors(model)[0].items() if k not in fixed}
    names = {id(p): n for n, p in model.named_parameters()}
    for p, entries in optimizer.state.items():
        for key, value in entries.items():
            tensors[f"optim.{names[id(p)]}.{key}"] = torch.as_tensor(value)
    tensors["rng.train"] = generator.get_state()
    return tensors


def restore(model: torch.nn.Module, optimizer: Optional[torch.optim.Optimizer], generator: torch.Generator,
            tensors: dict[str, torch.Tensor], fixed: set[str] = frozenset(), fixed_sha256: str = "") -> None:
    """Load a snapshot (without its `fixed` tensors, as load_weights); the optimizer's moments only when
    given one (not after a reset)."""
    try:
        load_weights(model, tensors, fixed, fixed_sha256)
    except ValueError as err:
        raise ConfigError(f"cannot resume: {err}") from None
    params = dict(model.named_parameters())
    for key, value in tensors.items():
        if key.startswith("optim.") and optimizer is not None:
            name, entry = key[6:].rsplit(".", 1)
            optimizer.state[params[name]][entry] = value.to(params[name].device)
    generator.set_state(tensors["rng.train"])


def clock(seconds: float) -> str:
    """A duration as minutes and seconds, `2m05s`; from an hour on, hours and minutes, `1h05m`."""
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m" if hours else f"{minutes}m{secs:02d}s"


def progress_line(index: int, stages: int, state: TrainState, cap: int, seconds: float, left: float,
                  most: bool = False) -> str:
    """One evaluation's progress as plain text: `stage 1/2  step 300/1000  val 0.4120  2m05s  4m52s left
    in the stage` (`at most` where the stage may end early, on a validation threshold)."""
    return (f"stage {index + 1}/{stages}  step {state.stage_step}/{cap}  val {state.val:.4f}  {clock(seconds)}  "
            f"{'at most ' if most else ''}{clock(left)} left in the stage")


def stage_end_line(index: int, stages: int, figures: dict) -> str:
    """A stage's evaluation as plain text, its numbers only: `end of stage 2/8  fidelity 0.9649
    fidelity_greedy 0.9981` (empty when it has none, as a stack of runs, which logs each run's own)."""
    shown = [f"{k} {v:.4f}" for k, v in figures.items() if isinstance(v, float)]
    return f"end of stage {index + 1}/{stages}  " + "  ".join(shown) if shown else ""


def train(system: System, cfg: TrainConfig, generator: torch.Generator, recorder: Recorder,
          show_progress: bool = True, resume: Optional[tuple[dict, dict]] = None) -> dict:
    """Run every stage (from a checkpoint's (state, tensors) if given); return the summary figures."""
    state = TrainState(**resume[0]) if resume else TrainState()
    pending = resume[1] if resume else None
    optimizer = None
    device = next(system.model.parameters()).device.type
    if resume:
        system.load_state(state.system)
    fixed = system.fixed()

    def save() -> None:
        if not all(torch.isfinite(p).all() for p in system.model.parameters()):
            raise NonFiniteLoss(f"non-finite parameters at stage {state.stage + 1}, step {state.stage_step}")
        state.system = system.state()
        if fixed and not state.fixed:  # once: they never change (on resume, restore checked them)
            state.fixed = fixed_digest(system.model, fixed)
        recorder.checkpoint(asdict(state), snapshot(system.model, optimizer, generator, fixed))

    columns = (TextColumn("{task.description}"), BarColumn(), TextColumn("{task.completed} steps"),
               TextColumn("val {task.fields[val]:.4f}"), TimeElapsedColumn(), TimeRemainingColumn())
    with Progress(*columns, disable=not show_progress, transient=True) as bar:
        # where no bar can draw (a log file, a pipe), each evaluation prints one plain line instead
        plain = show_progress and not bar.console.is_terminal
        run_cfg = cfg
        for index in range(state.stage, system.num_stages):
            stage = system.stage(index)
            cfg = type(run_cfg).model_validate({**run_cfg.model_dump(), **stage.train}) if stage.train else run_cfg
            fresh = state.stage_step == 0
            reset = fresh and cfg.reset_optimizer
            if optimizer is None or reset:
                optimizer = make_optimizer(system, stage.params, cfg)
            elif fresh:  # keep the moments of every parameter seen so far
                kept, optimizer = optimizer.state, make_optimizer(system, stage.params, cfg)
                for group in optimizer.param_groups:
                    optimizer.state.update({p: kept[p] for p in group["params"] if p in kept})
            if pending is not None:
                restore(system.model, None if reset else optimizer, generator, pending, fixed, state.fixed)
                pending = None
            if fresh:  # the stage's loss before it trains: the transient spike at each transition
                state.val = stage.validate()
                recorder.log(dict(step=state.step, stage=index + 1, samples=state.samples, val_loss=state.val))
            rule = (cfg.first_stage_advance or cfg.advance) if index == 0 else cfg.advance
            cap = cfg.steps_per_stage if rule == "steps" else cfg.max_steps_per_stage
            if index == 0 and cfg.first_stage_steps:
                cap = cfg.first_stage_steps
            task = bar.add_task(f"stage {index + 1}/{system.num_stages}", total=cap,
                                completed=state.stage_step, val=state.val)
            learning = [p for group in optimizer.param_groups for p in group["params"]]  # what clipping sees
            started, begun, before = time.perf_counter(), state.stage_step, state.seconds  # the stage's pace from here
            if cfg.micro_batch is not None and stage.split is None:
                raise ConfigError(f"train.micro_batch: {type(system).__name__} cannot split its batches")
            while state.stage_step < cap:
                system.on_step(state.step)
                batch = stage.sample(cfg.batch_size, generator)
                micro = stage.split(batch, cfg.micro_batch) if cfg.micro_batch is not None else [(batch, 1.0)]
                optimizer.zero_grad(set_to_none=True)
                loss, parts = 0.0, {}
                for piece, weight in micro:  # gradients accumulate over the micro-batches
                    with torch.autocast(device, torch.bfloat16, enabled=cfg.precision == "bf16"):
                        piece_loss, piece_parts = split_loss(stage.loss(piece))
                    if not torch.isfinite(piece_loss):
                        raise NonFiniteLoss(f"non-finite loss at stage {index + 1}, step {state.stage_step + 1}")
                    (piece_loss * weight if len(micro) > 1 else piece_loss).backward()
                    loss = loss + piece_loss.detach() * weight
                    for k, v in piece_parts.items():
                        parts[k] = parts.get(k, 0.0) + v * weight
                if cfg.grad_clip and stage.clip_groups is None:
                    parts["grad_norm"] = float(torch.nn.utils.clip_grad_norm_(learning, cfg.grad_clip))
                elif cfg.grad_clip:
                    for i, group in enumerate(stage.clip_groups):
                        parts[f"{i}/grad_norm"] = float(torch.nn.utils.clip_grad_norm_(group, cfg.grad_clip))
                warm_up(optimizer, cfg, state.stage_step, state.step, cap)
                optimizer.step()
                system.after_step()
                state.stage_step += 1
                state.step += 1
                state.samples += cfg.batch_size
                advance = state.stage_step == cap
                if state.stage_step % cfg.eval_every == 0 or advance:
                    state.val = stage.validate()
                    recorder.log(dict(step=state.step, stage=index + 1, samples=state.samples,
                                      train_loss=float(loss.detach()), val_loss=state.val,
                                      **{f"train_{k}": v for k, v in parts.items()}))
                    bar.update(task, completed=state.stage_step, val=state.val)
                    if plain:  # the time left: the stage's steps to go at its pace so far (checkpoints aside)
                        elapsed = state.seconds + time.perf_counter() - started
                        left = (elapsed - before) / (state.stage_step - begun) * (cap - state.stage_step)
                        bar.console.print(progress_line(index, system.num_stages, state, cap, elapsed, left,
                                                        most=rule == "threshold"),
                                          highlight=False, soft_wrap=True)
                    advance = advance or (rule == "threshold" and state.val < cfg.threshold)
                if advance:
                    break
                if cfg.checkpoint_every and state.step % cfg.checkpoint_every == 0:
                    state.seconds += time.perf_counter() - started
                    started = time.perf_counter()
                    save()
            state.seconds += time.perf_counter() - started
            bar.remove_task(task)
            evaluated = system.evaluate(index)
            figures = dict(stage=index + 1, **stage.info, steps=state.stage_step, samples_seen=state.samples,
                           train_seconds=state.seconds, val_loss=state.val, **evaluated)
            if show_progress and (line := stage_end_line(index, system.num_stages, evaluated)):
                bar.console.print(line, highlight=False, soft_wrap=True)
            state.per_stage.append(figures)
            recorder.log(dict(event="stage_end", **figures))
            state.stage, state.stage_step = index + 1, 0
            save()
    return dict(stages=system.num_stages, samples_seen=state.samples, steps=state.step,
                train_seconds=state.seconds, per_stage=state.per_stage)
