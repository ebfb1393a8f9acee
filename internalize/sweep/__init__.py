"""Sweeps: a grid of config overrides times seeds, run by a local process pool or by Ray.

A sweep file:

    experiment: logicot
    out: runs/sweeps/k_by_seed        # optional; default runs/sweeps/<file stem>
    scale: smoke                      # optional
    set: {train.val_size: 1024}       # optional: fixed overrides for every run
    cases:                            # optional: settings that go together, crossed with the grid
      - {curriculum.name: log_icot}
      - {curriculum.name: e2e, train.max_steps_per_stage: 2000}
    grid:
      task.k: [4, 8]
    seeds: [0, 1, 2, 3]
    report:                           # optional: what `internalize report` shows
      metrics: [zero_filled_accuracy, samples_to_full_accuracy]
      figures:
        - {x: task.k, y: samples_to_full_accuracy, logx: true, logy: true, fit: power}
        - {x: fidelity, y: alignment, scatter: true, group: objective.name}  # two summary figures

Runs start seed by seed (each point's first seed, then each point's second, ...). Re-running a
sweep skips finished runs, continues interrupted ones from their checkpoints and retries failed
ones; a failing run is recorded with its error and never stops the others.

A sweep whose run directories are gone but whose results table was kept (say, committed beside the
docs) is finished with `--done-from TABLE`: the table's finished rows are copied into the sweep
directory's imported.csv, count as done, and stand in the results table for runs that have not
finished here; only the rest run. Delete imported.csv to run them again.
"""
from __future__ import annotations

import itertools
import json
import os
import shutil
import time
import traceback
from concurrent.futures import ProcessPoolExecutor, as_completed
from multiprocessing import get_context
from pathlib import Path
from typing import Any, Callable, Literal, Optional, Union

import yaml
from pydantic import ValidationError

from internalize import config as configs
from internalize import registry
from internalize.config import ConfigError, Strict
from internalize.runs import TIMINGS, read_metrics

TIMING_COLUMNS = (*TIMINGS, "run_seconds")


class FigureSpec(Strict):
    x: str  # a grid key (with per_stage: a key of the per-stage records, e.g. removed)
    y: str  # a summary figure (with per_stage: a per-stage figure, e.g. ood_accuracy)
    per_stage: bool = False  # one point per stage of every run instead of one per run
    records: str = "per_stage"  # with per_stage: the summary's list of records read (trajectory: snapshots)
    only: dict[str, Any] = {}  # keep the runs whose grid keys have these values, e.g. {task.automaton: cyclic}
    group: Union[str, list[str], None] = None  # another grid key (or several): one line per value
    logx: bool = False
    logy: bool = False
    fit: Literal["none", "power"] = "none"  # power: a straight line in log-log, its slope reported
    # scatter: x is a summary figure too; each run a point, each group its mean with both spreads
    scatter: bool = False
    title: str = ""

    @property
    def group_keys(self) -> list[str]:
        return [self.group] if isinstance(self.group, str) else list(self.group or [])


class ReportSpec(Strict):
    metrics: list[str] = ["zero_filled_accuracy", "samples_to_full_accuracy", "train_seconds"]
    per_task: list[str] = []  # figures of the summary's per_task mapping (task -> figures): a second table
    figures: list[FigureSpec] = []


class SweepSpec(Strict):
    experiment: str
    out: Optional[str] = None
    scale: Optional[str] = None
    set: dict[str, Any] = {}
    cases: list[dict[str, Any]] = []  # settings that go together (e.g. width with depth), crossed with the grid
    grid: dict[str, list[Any]] = {}
    seeds: list[int] = [0]
    report: ReportSpec = ReportSpec()


SWEEP_DIR = Path(__file__).parents[1] / "sweeps"


def available() -> list[str]:
    return sorted(p.stem for p in SWEEP_DIR.glob("*.yaml"))


def locate(name_or_path) -> Path:
    """A sweep file by path, or a bundled sweep by name."""
    path = Path(name_or_path)
    if path.exists():
        return path
    if (SWEEP_DIR / f"{name_or_path}.yaml").exists():
        return SWEEP_DIR / f"{name_or_path}.yaml"
    raise ConfigError(f"no sweep file {name_or_path}; bundled sweeps: {', '.join(available())}")


def read_spec(file: Path) -> SweepSpec:
    file = locate(file)
    try:
        raw = yaml.safe_load(file.read_text()) or {}
        return SweepSpec.model_validate(raw)
    except yaml.YAMLError as err:
        raise ConfigError(f"{file}: not valid YAML ({err.__class__.__name__})") from None
    except ValidationError as err:
        raise ConfigError(f"{file}: {configs._format(err)}") from None


def check_figures(spec: SweepSpec) -> None:
    """Refuse a figure that names a key the sweep does not vary (a typo would otherwise show only as a
    missing figure at the end of the sweep): its x (unless per stage), group and only keys."""
    keys = [*point_keys(spec), "seed"]
    for i, fig in enumerate(spec.report.figures):
        named = [*([] if fig.per_stage or fig.scatter else [fig.x]), *fig.group_keys, *fig.only]
        for key in named:
            if key not in keys:
                raise ConfigError(f"report.figures.{i}: {key!r} is not a key of the sweep's grid or cases "
                                  f"(they are: {', '.join(keys)})")


def run_id(point: dict[str, Any], seed: int) -> str:
    return "__".join([*(f"{k}={v}" for k, v in point.items() if v is not None), f"seed={seed}"])


def point_of(run: str) -> str:
    """A run id without its seed: the id of its grid point (the runs `--stack-seeds` trains at once)."""
    return run.rsplit("__seed=", 1)[0]


def point_keys(spec: SweepSpec) -> list[str]:
    """The keys that tell the sweep's runs apart (besides the seed): every case key, then the grid's."""
    keys = [k for case in spec.cases for k in case]
    return list(dict.fromkeys(keys + list(spec.grid)))


def expand(spec: SweepSpec) -> list[dict]:
    """Every run of the sweep: its id, point, seed and overrides, each config validated."""
    keys = list(spec.grid)
    case_keys = [k for k in point_keys(spec) if k not in keys]
    tasks = []
    for case, values in itertools.product(spec.cases or [{}], itertools.product(*(spec.grid[k] for k in keys))):
        point = {**{k: case.get(k) for k in case_keys}, **dict(zip(keys, values))}
        for seed in spec.seeds:
            settings = {**spec.set, **{k: v for k, v in point.items() if v is not None}, "seed": seed}
            overrides = [f"{k}={json.dumps(v)}" for k, v in settings.items()]
            configs.load(spec.experiment, overrides, spec.scale)  # refuse a bad sweep before any run starts
            tasks.append(dict(id=run_id(point, seed), point=point, seed=seed, overrides=overrides))
    if len({t["id"] for t in tasks}) != len(tasks):
        raise ConfigError("the sweep repeats a grid point or seed")
    check_figures(spec)
    return tasks


def run_one(job: dict) -> dict:
    """Run (or continue, or retry) one run of a sweep; never raises. Executes in a worker."""
    import torch

    from internalize.runner import execute

    if job.get("threads"):
        torch.set_num_threads(job["threads"])
    path = Path(job["path"])
    started = time.perf_counter()
    (path / "error.txt").unlink(missing_ok=True)
    try:
        config = configs.load(job["experiment"], job["overrides"], job["scale"])
        resume = (path / "config.yaml").exists()
        if path.exists() and not resume:  # a run killed before it wrote its config: start over
            shutil.rmtree(path)
        execute(config, path, show=False, resume=resume)
        return dict(id=job["id"], status="done", seconds=time.perf_counter() - started)
    except Exception as err:  # a failing run is recorded, the sweep goes on
        return failed(job["id"], path, err, started)


def failed(run: str, path: Path, err: Exception, started: float) -> dict:
    """Record a run's failure in its directory (error.txt, no summary); its outcome."""
    path.mkdir(parents=True, exist_ok=True)
    (path / "summary.json").unlink(missing_ok=True)
    (path / "error.txt").write_text(traceback.format_exc())
    return dict(id=run, status="failed", error=f"{type(err).__name__}: {err}", seconds=time.perf_counter() - started)


def run_stack(job: dict) -> list[dict]:
    """Train one point's seeds at once (runner.execute_stacked); one outcome per run; never raises."""
    import torch

    from internalize.runner import execute_stacked

    if job.get("threads"):
        torch.set_num_threads(job["threads"])
    started = time.perf_counter()
    paths = [Path(p) for p in job["paths"]]
    try:
        group = [configs.load(job["experiment"], overrides, job["scale"]) for overrides in job["overrides"]]
        execute_stacked(group, paths)
        seconds = (time.perf_counter() - started) / len(paths)
        return [dict(id=i, status="done", seconds=seconds) for i in job["ids"]]
    except Exception as err:
        return [failed(run, path, err, started) for run, path in zip(job["ids"], paths)]


def stacks(jobs: list[dict]) -> list[dict]:
    """The jobs of a sweep grouped by point: one job trains every unfinished seed of its point."""
    groups: dict[str, list[dict]] = {}
    for job in jobs:
        groups.setdefault(point_of(job["id"]), []).append(job)
    return [dict(stack=True, ids=[j["id"] for j in group], paths=[j["path"] for j in group],
                 overrides=[j["overrides"] for j in group], experiment=group[0]["experiment"],
                 scale=group[0]["scale"], threads=group[0]["threads"]) for group in groups.values()]


def run_job(job: dict) -> list[dict]:
    """A worker's job: one run, or one point's seeds stacked."""
    return run_stack(job) if job.get("stack") else [run_one(job)]


def watch_parent(parent: int, every: float = 2.0) -> None:
    """In a pool worker: exit once the sweep process that started it is gone (killed, say), instead of
    training on unseen; the run continues from its checkpoint when the sweep is run again."""
    import threading

    def watch():
        while os.getppid() == parent:
            time.sleep(every)
        os._exit(1)

    threading.Thread(target=watch, daemon=True).start()


def run_local(jobs: list[dict], workers: int, on_done: Callable[[dict], None]) -> None:
    with ProcessPoolExecutor(max_workers=workers, mp_context=get_context("spawn"),
                             initializer=watch_parent, initargs=(os.getpid(),)) as pool:
        for future in as_completed([pool.submit(run_job, job) for job in jobs]):
            for outcome in future.result():
                on_done(outcome)


def run_ray(jobs: list[dict], workers: int, address: Optional[str], on_done: Callable[[dict], None]) -> None:
    try:
        import ray
    except ImportError:
        raise ConfigError("the ray executor needs Ray: pip install 'internalize[ray]'") from None
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    started_here = not ray.is_initialized()
    if started_here:
        if address:
            ray.init(address=address, log_to_driver=False)
        else:  # a private local instance on loopback
            ray.init(num_cpus=workers, include_dashboard=False, log_to_driver=False,
                     _node_ip_address="127.0.0.1")
    try:
        remote = ray.remote(num_cpus=1)(run_job)
        pending = [remote.remote(job) for job in jobs]
        while pending:
            done, pending = ray.wait(pending, num_returns=1)
            for outcome in ray.get(done[0]):
                on_done(outcome)
    finally:
        if started_here:
            ray.shutdown()


def sweep_dir(spec: SweepSpec, file: Path, out: Optional[Path]) -> Path:
    return Path(out or spec.out or Path("runs") / "sweeps" / Path(file).stem)


def run_sweep(file: Path, executor: str = "local", address: Optional[str] = None, workers: Optional[int] = None,
              out: Optional[Path] = None, show: bool = True, threads: Optional[int] = None,
              stack_seeds: bool = False, done_from: Optional[Path] = None) -> dict:
    """Run every unfinished run of a sweep; write the results table; return counts. With
    `stack_seeds`, each point's unfinished seeds train at once, as one job (systems whose registry
    entry has a stacked class; the others refuse). With `done_from`, a results table's finished rows
    count as done (see the module's docstring)."""
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
    )

    from internalize.train import clock

    file = locate(file)
    spec = read_spec(file)
    tasks = expand(spec)
    root = sweep_dir(spec, file, out)
    runs = root / "runs"
    try:
        runs.mkdir(parents=True, exist_ok=True)
        # python mode, not json: a grid value of .inf must read back as inf (json mode writes null)
        (root / "sweep.yaml").write_text(yaml.safe_dump(spec.model_dump(), sort_keys=False))
    except OSError as err:
        raise ConfigError(f"cannot write sweep directory {root}: {err.strerror or err}") from None
    if done_from is not None:
        import_rows(root, tasks, done_from)
    kept = imported(root)
    todo = [t for t in tasks if not (runs / t["id"] / "summary.json").exists() and t["id"] not in kept]
    # seed by seed: every case's first seed starts before any second seed, so a sweep stopped early
    # (or still running) already holds one run of every point
    todo.sort(key=lambda t: spec.seeds.index(t["seed"]))
    if stack_seeds:
        from internalize.registry import stacked_class

        try:
            stacked_class(configs.load(spec.experiment, [], spec.scale).system)
        except ValueError as err:
            raise ConfigError(f"--stack-seeds: {err}") from None
    cores = os.cpu_count() or 1
    points = len({point_of(t["id"]) for t in todo}) if stack_seeds else len(todo)
    workers = max(1, min(workers or cores, points or 1))
    jobs = [dict(id=t["id"], experiment=spec.experiment, overrides=t["overrides"], scale=spec.scale,
                 path=str(runs / t["id"]), threads=threads or max(1, cores // workers)) for t in todo]
    if stack_seeds:
        jobs = stacks(jobs)
    outcomes = {}
    with Progress(TextColumn("sweep"), BarColumn(), MofNCompleteColumn(), TextColumn("{task.fields[failed]} failed"),
                  TimeElapsedColumn(), disable=not show, transient=True) as bar:
        task = bar.add_task("runs", total=len(todo), failed=0)
        plain = show and not bar.console.is_terminal  # a log file or a pipe: one line per finished run

        def on_done(outcome: dict) -> None:
            outcomes[outcome["id"]] = outcome
            bar.update(task, advance=1, failed=sum(o["status"] == "failed" for o in outcomes.values()))
            if plain:
                bar.console.print(f"run {len(outcomes)}/{len(todo)} {outcome['status']}: {outcome['id']} "
                                  f"({clock(outcome['seconds'])})", highlight=False, soft_wrap=True)

        if jobs:
            if executor == "ray":
                run_ray(jobs, workers, address, on_done)
            elif executor == "local":
                run_local(jobs, workers, on_done)
            else:
                raise ConfigError(f"unknown executor {executor!r}; choose local or ray")
    table = collect(root, spec, tasks)
    return dict(root=root, total=len(tasks), ran=len(todo), skipped=len(tasks) - len(todo),
                imported=sum(t["id"] in kept and not (runs / t["id"] / "summary.json").exists() for t in tasks),
                failed=[o for o in outcomes.values() if o["status"] == "failed"], table=table)


def flatten(tree: dict, prefix: str = "") -> dict:
    out = {}
    for key, value in tree.items():
        if isinstance(value, dict):
            out.update(flatten(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def stage_columns(stages: list[dict]) -> dict:
    """What the per-stage records add to a run's row: the last stage's validation loss and, for every
    accuracy each stage reports, its lowest value over the stages (how well the run held on)."""
    if not stages:
        return {}
    out = {"final_val_loss": stages[-1].get("val_loss")}
    for key in stages[0]:
        values = [s.get(key) for s in stages]
        if key.endswith("_accuracy") and all(isinstance(v, (int, float)) for v in values):
            out[f"lowest_{key}"] = min(values)
    return out


def read_table(file: Path):
    import pandas as pd

    file = Path(file)
    try:
        return pd.read_parquet(file) if file.suffix == ".parquet" else pd.read_csv(file)
    except FileNotFoundError:
        raise ConfigError(f"no results table at {file}") from None
    except Exception as err:  # a corrupt or foreign file: pandas and pyarrow raise many kinds
        raise ConfigError(f"cannot read results table {file}: {err}") from None


def import_rows(root: Path, tasks: list[dict], table_file: Path) -> int:
    """Copy the finished rows of another results table of this sweep into root/imported.csv (kept
    beside earlier imports, a new row replacing an old one); return how many were copied."""
    import pandas as pd

    table = read_table(table_file)
    if not {"run_id", "status"} <= set(table.columns):
        raise ConfigError(f"{table_file} is no sweep results table (it lacks run_id and status)")
    ids = {t["id"] for t in tasks}
    table = table[(table["status"] == "done") & table["run_id"].isin(ids)]
    if table.empty:
        raise ConfigError(f"{table_file} holds no finished run of this sweep")
    fresh = set(table["run_id"])
    rows = [row for run, row in imported(root).items() if run not in fresh]
    merged = pd.concat([pd.DataFrame(rows), table], ignore_index=True) if rows else table
    merged.to_csv(root / "imported.csv", index=False)
    return len(table)


def imported(root: Path) -> dict[str, dict]:
    """The rows that `--done-from` copied into this sweep, by run id."""
    if not (root / "imported.csv").exists():
        return {}
    return {row["run_id"]: row for row in read_table(root / "imported.csv").to_dict("records")}


def collect(root: Path, spec: SweepSpec, tasks: list[dict]):
    """results.parquet and results.csv: one row per run, its config keys and summary figures (a run
    with no directory: its imported row, if any)."""
    import pandas as pd

    rows = []
    kept = imported(root)
    for t in tasks:
        path = root / "runs" / t["id"]
        if t["id"] in kept and not (path / "summary.json").exists():
            rows.append(kept[t["id"]])
            continue
        row = dict(run_id=t["id"], status="pending", error=None)
        if (path / "config.yaml").exists():
            row.update({f"config.{k}": v for k, v in flatten(configs.load(str(path / "config.yaml")).model_dump(
                mode="json")).items() if not isinstance(v, (list, dict))})
        row.update({k: v for k, v in t["point"].items()})
        row["seed"] = t["seed"]
        if (path / "summary.json").exists():
            summary = json.loads((path / "summary.json").read_text())
            row["status"] = "done"
            for key, value in summary.items():
                if key == "per_stage":
                    continue
                row[key] = json.dumps(value) if isinstance(value, (list, dict)) else value
            row.update(stage_columns(summary.get("per_stage") or []))
            if (path / "metrics.jsonl").exists():
                row.update(registry.system_class(summary["system"]).table_columns(read_metrics(path)))
        elif (path / "error.txt").exists():
            row["status"] = "failed"
            lines = (path / "error.txt").read_text().strip().splitlines()
            row["error"] = lines[-1] if lines else "unknown error"
        rows.append(row)
    table = pd.DataFrame(rows)
    table.to_csv(root / "results.csv", index=False)
    table.to_parquet(root / "results.parquet", index=False)
    return table
