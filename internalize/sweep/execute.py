"""Running a sweep: its runs on a local process pool or on Ray, resumed and retried; then its table."""
from __future__ import annotations

import json
import os
import shutil
import time
import traceback
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from multiprocessing import get_context
from pathlib import Path
from typing import Callable, Optional

import yaml

from internalize import config as configs
from internalize.config import ConfigError
from internalize.sweep.spec import SweepSpec, expand, locate, read_spec
from internalize.sweep.table import collect, import_rows, imported


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
        execute(config, path, show=job.get("show", False), resume=resume)  # a `before` run shows its own
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
    """Train one stack's runs at once (runner.execute_stacked); one outcome per run; never raises."""
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


def stacks(jobs: list[dict], key, workers: int = 1) -> list[dict]:
    """The jobs of a sweep grouped into stacks: one job trains unfinished runs that share their
    key(job) (runner.stack_key: the config without the fields the stacked class lets runs differ in).
    Where there are fewer stacks than `workers`, the largest are halved until each worker has one
    (a stack is one process: one stack of every run would leave the other cores idle)."""
    groups: dict[str, list[dict]] = {}
    for job in jobs:
        groups.setdefault(key(job), []).append(job)
    parts = list(groups.values())
    while len(parts) < workers and max(map(len, parts), default=1) > 1:
        largest = max(parts, key=len)
        parts.remove(largest)
        parts += [largest[:len(largest) // 2], largest[len(largest) // 2:]]
    return [dict(stack=True, ids=[j["id"] for j in group], paths=[j["path"] for j in group],
                 overrides=[j["overrides"] for j in group], experiment=group[0]["experiment"],
                 scale=group[0]["scale"], threads=group[0]["threads"]) for group in parts]


def run_job(job: dict) -> list[dict]:
    """A worker's job: one run, or one stack of runs."""
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


TICK = 5.0  # seconds between two looks at the runs in progress
PLAIN_EVERY = 600.0  # seconds between two lines on them in a log file


def run_local(jobs: list[dict], workers: int, on_done: Callable[[dict], None],
              on_tick: Optional[Callable[[list[dict]], None]] = None) -> None:
    """The jobs on a pool of `workers` processes; on_done(outcome) as each run ends, on_tick(the jobs
    in progress) every TICK seconds."""
    with ProcessPoolExecutor(max_workers=workers, mp_context=get_context("spawn"),
                             initializer=watch_parent, initargs=(os.getpid(),)) as pool:
        futures = {pool.submit(run_job, job): job for job in jobs}
        pending = set(futures)
        while pending:
            done, pending = wait(pending, timeout=TICK, return_when=FIRST_COMPLETED)
            for future in done:
                for outcome in future.result():
                    on_done(outcome)
            if on_tick is not None:
                on_tick([futures[f] for f in pending if f.running()])


def run_ray(jobs: list[dict], workers: int, address: Optional[str], on_done: Callable[[dict], None],
            on_tick: Optional[Callable[[list[dict]], None]] = None) -> None:
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
        of = {remote.remote(job): job for job in jobs}
        pending = list(of)
        while pending:
            done, pending = ray.wait(pending, num_returns=1, timeout=TICK)
            for ref in done:
                for outcome in ray.get(ref):
                    on_done(outcome)
            if on_tick is not None:  # Ray does not say which have started: those that have logged show
                on_tick([of[ref] for ref in pending])
    finally:
        if started_here:
            ray.shutdown()


def latest_step(path: Path) -> Optional[int]:
    """The step of a run's last logged record (its metrics.jsonl's last line), None before its first."""
    try:
        with open(Path(path) / "metrics.jsonl", "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 65536))
            lines = f.read().splitlines()
    except FileNotFoundError:
        return None
    for line in reversed(lines):
        try:
            return int(json.loads(line)["step"])
        except (ValueError, KeyError, TypeError):
            continue  # a line being written, or one without a step
    return None


def progress(jobs: list[dict]) -> str:
    """Where the jobs in progress stand: each one's step (a stack's runs step together: its slowest),
    with its number of runs where it trains several."""
    shown = []
    for job in jobs:
        steps = [latest_step(p) for p in job.get("paths", [job.get("path")]) if p]
        steps = [s for s in steps if s is not None]
        if steps:
            runs = len(job.get("paths", [])) if job.get("stack") else 1
            shown.append(f"step {min(steps):,}" + (f" ({runs} runs)" if runs > 1 else ""))
    return ("training at " + ", ".join(shown)) if shown else ""


def job_ids(job: dict) -> list[str]:
    """The runs of a job: a stack's, or the one run's."""
    return job["ids"] if job.get("stack") else [job["id"]]


def time_left(done: list[float], running: list[float], pending: int, workers: int) -> Optional[float]:
    """Seconds until a sweep's last job ends, if every job takes as long as the finished ones did on
    average: the running jobs (seconds each has run so far) end then, or now where they have run
    longer, and the pending ones go to whichever worker frees first. None before a job has finished."""
    if not done:
        return None
    mean = sum(done) / len(done)
    free = sorted(max(0.0, mean - elapsed) for elapsed in running[:workers])
    free += [0.0] * (workers - len(free))
    for _ in range(pending + len(running[workers:])):
        free.sort()
        free[0] += mean
    return max(free)


def sweep_dir(spec: SweepSpec, file: Path, out: Optional[Path]) -> Path:
    return Path(out or spec.out or Path("runs") / "sweeps" / Path(file).stem)


def run_sweep(file: Path, executor: str = "local", address: Optional[str] = None, workers: Optional[int] = None,
              out: Optional[Path] = None, show: bool = True, threads: Optional[int] = None,
              stack: bool = False, done_from: Optional[Path] = None,
              seeds: Optional[list[int]] = None) -> dict:
    """Run every unfinished run of a sweep; write the results table; return counts. With `seeds`,
    only those of the sweep's seeds run (the others stay pending in the table: a first look at every
    point, or a long sweep done a seed at a time). With
    `stack`, the unfinished runs that can share one model train at once, as one job (systems whose
    registry entry has a stacked class, which says what its runs may differ in: Log-ICoT's seeds of
    a point, the factorisation's objectives over one seed; the others refuse). With `done_from`, a results table's finished rows
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
    unknown = sorted(set(seeds or []) - set(spec.seeds))
    if unknown:
        raise ConfigError(f"--seeds {','.join(map(str, unknown))}: not among the sweep's seeds "
                          f"({', '.join(map(str, spec.seeds))})")
    root = sweep_dir(spec, file, out)
    runs = root / "runs"
    try:
        runs.mkdir(parents=True, exist_ok=True)
        # python mode, not json: a grid value of .inf must read back as inf (json mode writes null)
        (root / "sweep.yaml").write_text(yaml.safe_dump(spec.model_dump(), sort_keys=False))
    except OSError as err:
        raise ConfigError(f"cannot write sweep directory {root}: {err.strerror or err}") from None
    from internalize.runs import check_same

    for before in spec.before:  # what the runs read, first (one at a time: each may use every core)
        path = Path(before.out)
        if (path / "summary.json").exists():  # reused only as the sweep configures it
            check_same(path, configs.load(before.experiment, before.overrides(), before.scale))
            continue
        if show:
            print(f"before the sweep: {before.experiment} into {path}", flush=True)
        outcome = run_one(dict(id=str(path), experiment=before.experiment, overrides=before.overrides(),
                               scale=before.scale, path=str(path), threads=threads, show=show))
        if outcome["status"] == "failed":
            raise ConfigError(f"the run before the sweep ({before.experiment} into {path}) failed: "
                              f"{outcome['error']} (see {path / 'error.txt'})")
    if done_from is not None:
        import_rows(root, tasks, done_from,
                    config_of=lambda t: configs.load(spec.experiment, t["overrides"], spec.scale))
    kept = imported(root)
    for t in tasks:  # a finished run counts only as the sweep configures it now (not a file edited since)
        if (runs / t["id"] / "summary.json").exists() and t["id"] not in kept:
            check_same(runs / t["id"], configs.load(spec.experiment, t["overrides"], spec.scale))
    unfinished = [t for t in tasks if not (runs / t["id"] / "summary.json").exists() and t["id"] not in kept]
    todo = [t for t in unfinished if seeds is None or t["seed"] in seeds]
    # seed by seed: every case's first seed starts before any second seed, so a sweep stopped early
    # (or still running) already holds one run of every point
    todo.sort(key=lambda t: spec.seeds.index(t["seed"]))
    key = None
    if stack:
        from internalize.registry import stacked_class
        from internalize.runner import stack_key

        try:
            varies = stacked_class(configs.load(spec.experiment, [], spec.scale).system).varies
        except ValueError as err:
            raise ConfigError(f"--stack: {err}") from None
        keys = {t["id"]: stack_key(configs.load(spec.experiment, t["overrides"], spec.scale), varies) for t in todo}
        key = lambda job: keys[job["id"]]  # noqa: E731
    cores = os.cpu_count() or 1
    workers = max(1, min(workers or cores, len(todo) or 1))
    jobs = [dict(id=t["id"], experiment=spec.experiment, overrides=t["overrides"], scale=spec.scale,
                 path=str(runs / t["id"]), threads=threads or max(1, cores // workers)) for t in todo]
    if stack:
        jobs = stacks(jobs, key, workers)  # at least `workers` of them: see stacks
    outcomes = {}
    with Progress(TextColumn("sweep"), BarColumn(), MofNCompleteColumn(), TextColumn("{task.fields[failed]} failed"),
                  TimeElapsedColumn(), TextColumn("{task.fields[now]}"), disable=not show, transient=True) as bar:
        task = bar.add_task("runs", total=len(todo), failed=0, now="")
        # a log file or a pipe: one line per finished run, and where the runs in progress stand every
        # PLAIN_EVERY seconds (a stack of runs may train for hours before its first ends)
        plain = show and not bar.console.is_terminal
        said = [time.monotonic()]
        of_run = {i: job for job in jobs for i in job_ids(job)}  # a job is named by its first run below
        seen: dict[str, float] = {}  # job -> when it was first seen running
        took: dict[str, float] = {}  # job -> its seconds, once every run of it has ended well

        def on_tick(running: list[dict]) -> None:
            now_s = time.monotonic()
            for job in running:
                seen.setdefault(job_ids(job)[0], now_s)
            running = sorted(running, key=lambda job: seen[job_ids(job)[0]])
            ended = len({job_ids(of_run[i])[0] for i in outcomes})  # a stack's outcomes come all at once
            left = time_left(list(took.values()), [now_s - seen[job_ids(job)[0]] for job in running],
                             len(jobs) - ended - len(running), workers)
            now = "; ".join(filter(None, [progress(running), f"about {clock(left)} left" if left is not None else ""]))
            bar.update(task, now=now)
            if plain and now and now_s - said[0] >= PLAIN_EVERY:
                said[0] = now_s
                bar.console.print(f"{len(outcomes)}/{len(todo)} runs finished; {now}", highlight=False,
                                  soft_wrap=True)

        def on_done(outcome: dict) -> None:
            outcomes[outcome["id"]] = outcome
            ids = job_ids(of_run[outcome["id"]])
            if all(outcomes.get(i, {}).get("status") == "done" for i in ids):
                took[ids[0]] = sum(outcomes[i]["seconds"] for i in ids)  # a stack's: its whole time
            bar.update(task, advance=1, failed=sum(o["status"] == "failed" for o in outcomes.values()))
            if plain:
                bar.console.print(f"run {len(outcomes)}/{len(todo)} {outcome['status']}: {outcome['id']} "
                                  f"({clock(outcome['seconds'])})", highlight=False, soft_wrap=True)

        if jobs:
            if executor == "ray":
                run_ray(jobs, workers, address, on_done, on_tick)
            elif executor == "local":
                run_local(jobs, workers, on_done, on_tick)
            else:
                raise ConfigError(f"unknown executor {executor!r}; choose local or ray")
    table = collect(root, spec, tasks)
    return dict(root=root, total=len(tasks), ran=len(todo), skipped=len(tasks) - len(unfinished),
                left=len(unfinished) - len(todo),
                imported=sum(t["id"] in kept and not (runs / t["id"] / "summary.json").exists() for t in tasks),
                failed=[o for o in outcomes.values() if o["status"] == "failed"], table=table)


