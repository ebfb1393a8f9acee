"""One run, start to finish: build, train (or continue), evaluate, plot, summarise."""
from __future__ import annotations

import json
import time
from dataclasses import asdict
from pathlib import Path

import torch

from internalize import config as configs
from internalize.config import Config, ConfigError


def saved_config(path: Path) -> Config:
    """The resolved config of an existing run directory."""
    file = Path(path) / "config.yaml"
    if not file.exists():
        raise ConfigError(f"no run to resume at {path} (it has no config.yaml)")
    return configs.load(str(file))


def first_solved(per_stage: list[dict], headline: str) -> dict | None:
    """The record of the first stage whose headline figure reached 1.0 (None if none did)."""
    return next((r for r in per_stage if r[headline] >= 1.0), None)


def seeded_system(config: Config):
    """The config's system, built after seeding torch with its seed; a bad config is a ConfigError."""
    from internalize.registry import build

    torch.manual_seed(config.seed)
    try:
        return build(config)
    except ValueError as err:
        raise ConfigError(str(err)) from None


def identity(config: Config) -> dict:
    """The fields that open every summary: which experiment, system, task and seed."""
    task = getattr(config, "task", None)
    return dict(experiment=config.experiment, system=config.system, task=getattr(task, "name", None), seed=config.seed)


def execute(config: Config, path: Path, show: bool = True, resume: bool = False) -> dict:
    """Train one run into `path` and return its summary.

    Bad input raises ConfigError before anything is written. With `resume`, a finished run is
    left as it is, a run with a checkpoint continues from it, and one without starts over in place.
    """
    from internalize.runs import Run, check_same, load_checkpoint, start_from
    from internalize.train import train

    path = Path(path)
    if resume and (path / "config.yaml").exists():
        check_same(path, config)
    if resume and (path / "summary.json").exists():
        return json.loads((path / "summary.json").read_text())
    started = time.perf_counter()
    system = seeded_system(config)
    checkpoint = load_checkpoint(path) if resume else None
    if checkpoint is None and getattr(getattr(config, "model", None), "init", None) is not None:
        start_from(system.model, Path(config.model.init), fixed=system.fixed(), longer=True)
    if resume:
        run = Run.open(path, config, keep_lines=checkpoint[0]["metrics_lines"] if checkpoint else 0)
    else:
        run = Run.create(path, config)
    setup_seconds = time.perf_counter() - started
    result = train(system, config.train, torch.Generator().manual_seed(config.seed), run, show_progress=show,
                   resume=(checkpoint[0]["train"], checkpoint[1]) if checkpoint else None)
    return finish(config, system, run, result, started, setup_seconds)


def summarise(config: Config, system, result: dict) -> dict:
    """A trained run's summary: who it is, the system's final figures, the trainer's counters, and
    the samples (and seconds) until the headline figure first reached 1.0."""
    summary = dict(**identity(config), **system.summary(), **result)
    solved = first_solved(result["per_stage"], system.headline)
    summary["samples_to_full_accuracy"] = solved["samples_seen"] if solved else None
    summary["seconds_to_full_accuracy"] = solved["train_seconds"] if solved else None
    return summary


def finish(config: Config, system, run, result: dict, started: float, setup_seconds: float) -> dict:
    """After training: the summary, the loss curve, the per-stage and the system's figures."""
    from internalize import plots
    from internalize.runs import read_metrics

    summary = summarise(config, system, result)
    plots.loss_curve(read_metrics(run.path), run.figures / "val_loss.png",
                     f"{config.experiment}: validation loss per stage")
    for key, chance in system.stage_metrics.items():
        plots.stage_accuracy(result["per_stage"], run.figures / f"{key}.png", key, chance)
    system.figures(run.figures, result["per_stage"])
    system.files(run.path)
    summary["wall_seconds"] = time.perf_counter() - started
    summary["setup_seconds"] = setup_seconds  # building the system and the run, before the first step
    run.write_summary(summary)
    return summary


def evaluate_run(path: Path, overrides: list[str] = ()) -> dict:
    """Evaluate a finished run's final weights again with the current code (a metric added since it
    ran, say), its `eval.*` settings changed by `overrides` (more test examples, say): the system's
    summary, without training figures, written to PATH/evaluation.json; the system's files (the
    factorisation's generations.parquet) under PATH/evaluation/."""
    from internalize.runs import atomic_write, start_from

    path = Path(path)
    if not (path / "config.yaml").exists():
        raise ConfigError(f"{path} is not a run directory (it has no config.yaml)")
    if not (path / "summary.json").exists():
        raise ConfigError(f"{path} has not finished (no summary.json); continue it with internalize run --resume")
    if any(not o.startswith("eval.") for o in overrides):
        raise ConfigError("evaluate changes eval.* settings only (the weights fix the rest of the config)")
    config = configs.load(str(path / "config.yaml"), list(overrides))
    system = seeded_system(config)
    state = start_from(system.model, path, "evaluate", system.fixed())
    system.load_state(state["train"].get("system") or {})
    found = dict(**identity(config), overrides=list(overrides), **system.summary())
    atomic_write(path / "evaluation.json", lambda p: p.write_text(json.dumps(found, indent=2)))
    folder = path / "evaluation"  # the system's files of this evaluation (generations.parquet), apart from the run's
    folder.mkdir(exist_ok=True)
    system.files(folder)
    if not any(folder.iterdir()):
        folder.rmdir()
    return found


class Split:
    """The recorder of a stacked training: each record goes, split by run, to each run's own; a
    checkpoint of a resumable stack is written as each run's own checkpoint."""

    def __init__(self, system, runs: list):
        self.system, self.runs = system, runs

    def log(self, record: dict) -> None:
        for i, own in self.system.split(record).items():
            self.runs[i].log(own)

    def checkpoint(self, state: dict, tensors: dict) -> None:
        if self.system.resumable:  # otherwise an interrupted stack starts over
            for i, (own_state, own_tensors) in self.system.split_checkpoint(state, tensors).items():
                self.runs[i].checkpoint(own_state, own_tensors, keep_previous=True)


def stack_key(config: Config, varies: tuple[str, ...]) -> str:
    """What runs trained as one stack share: the config without the fields they may differ in."""
    dump = config.model_dump(mode="json")
    return json.dumps({k: v for k, v in dump.items() if k not in varies}, sort_keys=True)


def train_stacked(group: list[Config], recorder=None, resume=None) -> tuple:
    """Train runs at once that differ only in what the system's stacked class lets them differ in
    (its `varies`: Log-ICoT's seeds, the factorisation's objectives): the stacked system, and each
    run's own (system, training result) as if it had trained alone. recorder(system, resumed) makes
    the recorder; resume(system), if given, returns the stack's checkpoint to continue from, or None."""
    from internalize.registry import stacked_class
    from internalize.train import Discard, train

    first = group[0]
    try:
        cls = stacked_class(first.system)
    except ValueError as err:
        raise ConfigError(str(err)) from None
    if len({stack_key(c, cls.varies) for c in group}) > 1:
        raise ConfigError(f"stacked {first.system} runs must differ in {', '.join(cls.varies)} alone")
    try:
        torch.manual_seed(first.seed)
        system = cls(group)
    except ValueError as err:
        raise ConfigError(str(err)) from None
    checkpoint = resume(system) if resume is not None else None
    recorder = Discard() if recorder is None else recorder(system, checkpoint is not None)
    every = first.train.checkpoint_every if cls.resumable else 0
    train(system, first.train.model_copy(update={"checkpoint_every": every}),
          torch.Generator().manual_seed(first.seed), recorder, show_progress=False, resume=checkpoint)
    return system, [system.seed(i) for i in range(len(group))]


def stacked_summaries(group: list[Config]) -> list[dict]:
    """Each run's summary of a stacked training, in memory (no run directory)."""
    _, seeds = train_stacked(group)
    return [summarise(config, solo, result) for config, (solo, result) in zip(group, seeds)]


def common_checkpoints(path: Path) -> dict:
    """A stacked run's checkpoints (the last and the one before it), by the counters they hold."""
    from internalize.runs import CHECKPOINT, PREVIOUS, load_checkpoint

    held = [load_checkpoint(path, name) for name in (PREVIOUS, CHECKPOINT)] if (path / "checkpoints").exists() else []
    return {tuple(c[0]["train"][k] for k in ("stage", "stage_step", "step")): c for c in held if c is not None}


def execute_stacked(group: list[Config], paths: list[Path]) -> list[dict]:
    """Train runs that can stack (train_stacked) at once and write each into its path as `execute`
    would: config, metrics, figures, summary, and a checkpoint of its final weights. A resumable
    stack whose runs all hold its checkpoints (an interrupted stack of the same runs) continues from
    them; otherwise the directories in `paths` are started over."""
    import shutil

    from internalize.runs import Run, check_same, fixed_digest, model_tensors
    from internalize.train import TrainState

    started = time.perf_counter()
    paths = [Path(p) for p in paths]
    for config, path in zip(group, paths):
        check_same(path, config)
    found = []  # each run's checkpoint, read only for a stack that can continue from them

    def resume(system):
        if not system.resumable:
            return None
        held = [common_checkpoints(p) for p in paths]
        steps = set.intersection(*(set(h) for h in held))
        if not steps:  # a run without a checkpoint, or none at a step they all reached: start over
            return None
        found.extend(h[max(steps)] for h in held)  # killed while the runs wrote theirs: the step before
        try:
            return system.join_checkpoints([(c[0]["train"], c[1]) for c in found])
        except ValueError:  # checkpoints of another stack, or over a changed base: start over
            return None

    runs, setup = [], []

    def recorder(system, resumed: bool):
        setup.append((time.perf_counter() - started) / len(group))  # building the stack, each run's share
        for i, (config, path) in enumerate(zip(group, paths)):
            if resumed:
                runs.append(Run.open(path, config, keep_lines=found[i][0]["metrics_lines"]))
            else:
                shutil.rmtree(path, ignore_errors=True)
                runs.append(Run.create(path, config))
        return Split(system, runs)

    system, seeds = train_stacked(group, recorder, resume)
    summaries = []
    for i, (config, run, (solo, result)) in enumerate(zip(group, runs, seeds)):
        state = TrainState(stage=result["stages"], step=result["steps"], samples=result["samples_seen"],
                           seconds=result["train_seconds"], per_stage=result["per_stage"])
        fixed = solo.fixed()  # a frozen base: left out, its SHA-256 kept, as a run's own checkpoint does
        state.fixed = fixed_digest(solo.model, fixed) if fixed else ""
        tensors = {f"model.{k}": v for k, v in model_tensors(solo.model)[0].items() if k not in fixed}
        run.checkpoint(asdict(state), {**tensors, "rng.train": system.generators[i].get_state()}, keep_previous=True)
        summaries.append(finish(config, solo, run, result, started, setup[0]))
    return summaries
