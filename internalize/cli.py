"""The `internalize` command: list experiments, run one, sweep a grid, report on a sweep, write a
benchmark's data, print the config reference."""
from __future__ import annotations

import sys
from pathlib import Path
from typing import List, Optional

import typer
from rich.console import Console
from rich.table import Table

from internalize import config as configs
from internalize.config import ConfigError

app = typer.Typer(add_completion=False, no_args_is_help=True, help=__doc__)
console = Console(width=None if sys.stdout.isatty() else 120)  # tables stay whole in logs and pipes


def fail(message: str, code: int = 2) -> None:
    """One error line; exit 2 for bad input, 1 for a run that failed."""
    Console(stderr=True).print(f"[bold red]error:[/] {message}", highlight=False, soft_wrap=True)
    raise typer.Exit(code)


@app.command("list")
def list_experiments() -> None:
    """The experiments, each with a one-line description."""
    table = Table(box=None, show_header=False, pad_edge=False)
    from internalize.sweep import available

    for name, description in configs.available().items():
        table.add_row(f"[bold]{name}[/]", description)
    console.print(table)
    console.print("sweeps (internalize sweep NAME): " + ", ".join(available()), highlight=False)


@app.command()
def run(
    name: Optional[str] = typer.Argument(None, help="experiment name (see `internalize list`) or a YAML file"),
    overrides: List[str] = typer.Option([], "--set", help="override a config key: --set task.n=40"),
    out: Optional[Path] = typer.Option(None, "--out", help="run directory (default runs/NAME/RUN-ID)"),
    smoke: bool = typer.Option(False, "--smoke", help="a seconds-long scale, for tests"),
    scale: Optional[str] = typer.Option(None, "--scale", help="a named scale of the experiment"),
    resume: Optional[Path] = typer.Option(None, "--resume", help="continue the run in this directory"),
    quiet: bool = typer.Option(False, "--quiet", help="no progress bar or table"),
) -> None:
    """Train one experiment; write its run directory."""
    from internalize.runner import execute, saved_config
    from internalize.runs import default_path
    from internalize.train import NonFiniteLoss

    if resume is not None and (name or overrides or out or smoke or scale):
        fail("--resume continues a run as it was configured; give no NAME, --set, --out or scale with it")
    if resume is None and name is None:
        fail("give an experiment NAME (see `internalize list`) or --resume DIR")
    if smoke and scale and scale != "smoke":
        fail("--smoke and --scale disagree; give one")
    try:
        if resume is not None:
            config, path = saved_config(resume), resume
        else:
            config = configs.load(name, overrides, "smoke" if smoke else scale)
            path = out or default_path(Path("runs"), config)
        summary = execute(config, path, show=not quiet, resume=resume is not None)
    except ConfigError as err:
        fail(str(err))
    except NonFiniteLoss as err:
        kept = (Path(path) / "checkpoints" / "last.safetensors").exists()
        fail(f"{err}; " + (f"the last good checkpoint is kept in {path}" if kept else "no checkpoint was written"),
             code=1)
    except OSError as err:
        fail(f"cannot write to {path}: {err.strerror or err}", code=1)
    if not quiet:
        report(summary, path)


@app.command()
def sweep(
    file: str = typer.Argument(..., help="a sweep file (YAML: experiment, grid, seeds) or a bundled sweep's name"),
    executor: str = typer.Option("local", "--executor", help="local (a process pool) or ray"),
    address: Optional[str] = typer.Option(None, "--address", help="an existing Ray cluster (default: start one here)"),
    workers: Optional[int] = typer.Option(None, "--workers", help="parallel runs (default: the cores)"),
    threads: Optional[int] = typer.Option(None, "--threads", help="torch threads per run (default: cores / workers)"),
    out: Optional[Path] = typer.Option(None, "--out", help="sweep directory (default: its out, or runs/sweeps/NAME)"),
    quiet: bool = typer.Option(False, "--quiet", help="no progress bar"),
    stack: bool = typer.Option(False, "--stack", "--stack-seeds",
                               help="train the runs that can share one model at once, as one job (Log-ICoT: a "
                                    "point's seeds; the factorisation: a seed's objectives); same results"),
    done_from: Optional[Path] = typer.Option(None, "--done-from",
                                             help="a kept results table of this sweep: its finished runs count as done"),
    seeds: Optional[str] = typer.Option(None, "--seeds",
                                        help="run only these of the sweep's seeds, comma-separated (e.g. 0 or 0,1)"),
) -> None:
    """Run every unfinished run of a sweep, then write its results table and report."""
    from internalize.sweep import run_sweep
    from internalize.sweep.report import write_report

    if executor not in ("local", "ray"):
        fail(f"unknown executor {executor!r}; choose local or ray")
    if (workers is not None and workers < 1) or (threads is not None and threads < 1):
        fail("--workers and --threads must be at least 1")
    try:
        chosen = [int(s) for s in seeds.split(",")] if seeds is not None else None
    except ValueError:
        fail(f"--seeds {seeds!r}: give seeds as integers, comma-separated (e.g. 0,1)")
    try:
        result = run_sweep(file, executor, address, workers, out, show=not quiet, threads=threads,
                           stack=stack, done_from=done_from, seeds=chosen)
        path = write_report(result["root"], result["table"])
    except ConfigError as err:
        fail(str(err))
    kept = f" ({result['imported']} of them imported)" if result["imported"] else ""
    console.print(f"{result['total']} runs: {result['ran']} run now, {result['skipped']} already finished{kept}, "
                  f"{len(result['failed'])} failed"
                  + (f", {result['left']} left to the other seeds" if result["left"] else ""), highlight=False)
    for outcome in result["failed"]:
        console.print(f"  failed: {outcome['id']}: {outcome['error']}", highlight=False)
    console.print(f"results: {result['root'] / 'results.parquet'}; report: {path}", highlight=False)
    if result["failed"]:
        raise typer.Exit(1)


@app.command("evaluate")
def evaluate_command(
    directory: Path = typer.Argument(..., help="a finished run directory"),
    overrides: List[str] = typer.Option([], "--set", help="change an eval.* setting: --set eval.test_size=3000"),
) -> None:
    """Evaluate a finished run's final weights again with the current code; write DIR/evaluation.json."""
    from internalize.registry import describe
    from internalize.runner import evaluate_run

    try:
        found = evaluate_run(directory, overrides)
    except ConfigError as err:
        fail(str(err))
    console.print(describe(found), highlight=False)
    console.print(f"evaluation: {directory / 'evaluation.json'}", highlight=False)


@app.command("report")
def report_command(directory: Path = typer.Argument(..., help="a sweep directory")) -> None:
    """Write DIR/report.md: tables over seeds and the sweep's figures."""
    from internalize.sweep.report import write_report

    try:
        console.print(f"report: {write_report(directory)}", highlight=False)
    except ConfigError as err:
        fail(str(err))


@app.command()
def data(
    name: str = typer.Argument(..., help="the dataset: strategies (the six-task multi-strategy benchmark)"),
    out: Path = typer.Option(..., "--out", help="directory for train/validation/test.parquet"),
    seed: int = typer.Option(0, "--seed", help="draws every input and strategy"),
    per_task: Optional[int] = typer.Option(None, "--per-task", help="examples per task over the three splits"),
    format: list[str] = typer.Option([], "--format", help="TASK=FORMAT: a task's trace format, e.g. "
                                     "linear_equation=columns (repeatable; train with the same task.formats)"),
) -> None:
    """Write a benchmark's splits as Parquet and print its per-task statistics."""
    from internalize import registry

    try:
        write = registry.dataset(name)
    except ValueError as err:
        fail(str(err))
    formats = dict(f.split("=", 1) for f in format if "=" in f)
    if len(formats) != len(format):
        fail(f"--format takes TASK=FORMAT, e.g. linear_equation=columns (got {[f for f in format if '=' not in f][0]!r})")
    existing = [f.name for f in (out / f"{s}.parquet" for s in ("train", "validation", "test")) if f.exists()]
    if existing:
        fail(f"{out} already holds {', '.join(existing)}; choose another --out")
    try:
        stats = write(out, seed, per_task, formats)
    except ValueError as err:
        fail(str(err))
    except OSError as err:
        fail(f"cannot write to {out}: {err.strerror or err}", code=1)
    console.print(stats, highlight=False, markup=False)
    console.print(f"wrote {out}/train.parquet, validation.parquet, test.parquet", highlight=False)


@app.command()
def reference(out: Optional[Path] = typer.Option(None, "--out", help="write it here (default: print it)")) -> None:
    """The config reference (docs/config.md), generated from the typed configs."""
    from internalize.reference import config_reference

    text = config_reference()
    if out is None:
        console.print(text, markup=False, highlight=False, soft_wrap=True)
    else:
        out.write_text(text)
        console.print(f"wrote {out}", highlight=False)


@app.command()
def claims(
    check: bool = typer.Option(False, "--check", help="write nothing; exit 1 naming each stale page"),
    record: Optional[Path] = typer.Option(None, "--record", help="first write this finished run as the "
                                          "one-row table docs/results/runs/EXPERIMENT/results.csv"),
    name: Optional[str] = typer.Option(None, "--as", help="with --record: the table's name instead of "
                                       "EXPERIMENT[_SCALE] (a run with --set overrides of its own)"),
) -> None:
    """The claims tables (docs/claims/*.yaml), written from the committed result rows."""
    from internalize import claims as tables

    try:
        if name is not None and record is None:
            raise ConfigError("--as names the table of --record RUN; give both")
        if record is not None:
            console.print(f"wrote {tables.record_run(record, name=name)}", highlight=False)
        stale = tables.sync(check)
    except ConfigError as err:
        fail(str(err))
    if check and stale:
        fail(f"stale claims tables: {', '.join(stale)}; run `internalize claims`", code=1)
    console.print(f"rewrote {', '.join(stale)}" if stale and not check else "claims tables current", highlight=False)


@app.command()
def bench(
    quick: bool = typer.Option(False, "--quick", help="small sizes: under a minute in all"),
    only: Optional[str] = typer.Option(None, "--only", help="comma-separated lines to measure (default: all)"),
    out: Optional[Path] = typer.Option(None, "--out", help="also write the table as JSON here"),
) -> None:
    """Speed, measured: each line a ratio taken side by side in one run, with its goal."""
    from internalize import bench as benchmarks

    chosen = [n.strip() for n in only.split(",") if n.strip()] if only else None
    unknown = [n for n in chosen or [] if n not in benchmarks.names()]
    if unknown:
        fail(f"no benchmark {unknown[0]!r}; there are {', '.join(benchmarks.names())}")
    lines = benchmarks.run(quick, chosen, progress=lambda m: Console(stderr=True).print(m, highlight=False))
    table = Table(title="internalize bench" + (" --quick" if quick else ""))
    for column in ("line", "ratio", "goal", "verdict", "ours", "theirs"):
        table.add_column(column, no_wrap=True)
    fmt = lambda v: "" if v is None else f"{v:,.3g}" if abs(v) < 1000 else f"{v:,.0f}"  # noqa: E731
    for line in lines:
        table.add_row(line.name, fmt(line.ratio), fmt(line.goal), line.verdict,
                      *(f"{fmt(v)} {line.unit}" if v is not None else "" for v in (line.ours, line.theirs)))
    console.print(table)
    for line in lines:
        console.print(f"[bold]{line.name}[/]: {line.what}" + (f" ({line.note})" if line.note else ""), highlight=False)
    if out is not None:
        benchmarks.write_json(lines, out, quick)
        console.print(f"wrote {out}", highlight=False)


STANDARD = ("stage", "steps", "samples_seen", "val_loss", "train_seconds")


def report(summary: dict, path: Path) -> None:
    """The per-stage table (what each stage is, its cost, its figures), then the run's headline."""
    from internalize.registry import describe

    rows = summary["per_stage"]
    keys = list(rows[0])
    info = keys[1:keys.index("steps")]  # a stage record is: stage, what the stage is, steps, ..., its figures
    figures = [k for k in keys if k not in STANDARD and k not in info and not isinstance(rows[0][k], (list, dict))]
    table = Table(title=f"{summary['experiment']} (seed {summary['seed']})")
    for col in ("stage", *info, "steps", "samples", "val loss", *figures, "seconds"):
        table.add_column(col.replace("_accuracy", "").replace("_", " "), justify="right")

    def cell(value) -> str:
        return f"{value:.3f}" if isinstance(value, float) else "-" if value is None else str(value)

    for r in rows:
        table.add_row(str(r["stage"]), *(cell(r[k]) for k in info), str(r["steps"]), f"{r['samples_seen']:,}",
                      f"{r['val_loss']:.2e}", *(cell(r[k]) for k in figures), f"{r['train_seconds']:.2f}")
    console.print(table)
    console.print(describe(summary), highlight=False)
    console.print(f"run directory: {path}", highlight=False)


def main() -> None:
    try:
        app()
    except KeyboardInterrupt:
        sys.exit(130)


if __name__ == "__main__":
    main()
