"""The `internalize` command: list experiments, run one."""
from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import List, Optional

import typer
from rich.console import Console
from rich.table import Table

from internalize import config as configs
from internalize.config import ConfigError

app = typer.Typer(add_completion=False, no_args_is_help=True, help=__doc__)
console = Console()
TIMINGS = ("train_seconds", "wall_seconds", "seconds_to_full_accuracy")


def fail(message: str) -> None:
    Console(stderr=True).print(f"[bold red]error:[/] {message}", highlight=False, soft_wrap=True)
    raise typer.Exit(2)


@app.command("list")
def list_experiments() -> None:
    """The experiments, each with a one-line description."""
    table = Table(box=None, show_header=False, pad_edge=False)
    for name, description in configs.available().items():
        table.add_row(f"[bold]{name}[/]", description)
    console.print(table)


@app.command()
def run(
    name: str = typer.Argument(..., help="experiment name (see `internalize list`) or a YAML file"),
    overrides: List[str] = typer.Option([], "--set", help="override a config key: --set task.n=40"),
    out: Optional[Path] = typer.Option(None, "--out", help="run directory (default runs/NAME/RUN-ID)"),
    smoke: bool = typer.Option(False, "--smoke", help="a seconds-long scale, for tests"),
    scale: Optional[str] = typer.Option(None, "--scale", help="a named scale of the experiment"),
    quiet: bool = typer.Option(False, "--quiet", help="no progress bar or table"),
) -> None:
    """Train one experiment; write its run directory."""
    from internalize.runs import default_path

    if smoke and scale and scale != "smoke":
        fail("--smoke and --scale disagree; give one")
    try:
        config = configs.load(name, overrides, "smoke" if smoke else scale)
        path = out or default_path(Path("runs"), config)
        summary = execute(config, path, show=not quiet)
    except ConfigError as err:
        fail(str(err))
    if not quiet:
        report(summary, path)


def execute(config, path: Path, show: bool = True) -> dict:
    """Build, train, evaluate and plot one run; bad input raises ConfigError before `path` exists."""
    import torch

    from internalize.analysis import plots
    from internalize.experiments import build
    from internalize.runs import Run, read_metrics
    from internalize.train import train

    started = time.perf_counter()
    torch.manual_seed(config.seed)
    try:
        system = build(config)
    except ValueError as err:
        raise ConfigError(str(err)) from None
    run = Run.create(path, config, system.model.state_dict)
    result = train(system, config.train, torch.Generator().manual_seed(config.seed), run, show_progress=show)
    summary = dict(experiment=config.experiment, seed=config.seed, **system.summary(), **result)
    solved = [r for r in result["per_stage"] if r["zero_filled_accuracy"] >= 1.0]
    summary["samples_to_full_accuracy"] = solved[0]["samples_seen"] if solved else None
    summary["seconds_to_full_accuracy"] = solved[0]["train_seconds"] if solved else None
    metrics = read_metrics(run.path)
    plots.loss_curve(metrics, run.figures / "val_loss.png", f"{config.experiment}: validation loss per stage")
    plots.stage_accuracy(result["per_stage"], run.figures / "zero_filled_accuracy.png")
    lay = system.layout
    with torch.no_grad():
        for layer in range(1, lay.depth + 1):
            attention = system.model.attention(layer).cpu().numpy()
            plots.attention_heatmap(attention, lay.level, lay.children, layer,
                                    run.figures / f"attention_layer{layer}.png")
    summary["wall_seconds"] = time.perf_counter() - started
    run.write_summary(summary)
    return summary


def report(summary: dict, path: Path) -> None:
    table = Table(title=f"{summary['experiment']} (seed {summary['seed']})")
    table.caption = "padded: thinking tokens hidden; trains: the layer that learns; accuracy: zero-filled, one pass"
    for col in ("stage", "padded", "trains", "steps", "samples", "val loss", "accuracy", "seconds"):
        table.add_column(col, justify="right")
    for r in summary["per_stage"]:
        table.add_row(str(r["stage"]), str(r["padded"]), str(r["layer"]), str(r["steps"]), f"{r['samples_seen']:,}",
                      f"{r['val_loss']:.2e}", f"{r['zero_filled_accuracy']:.3f}", f"{r['train_seconds']:.2f}")
    console.print(table)
    mass = ", ".join(f"{m:.3f}" for m in summary["child_attention_mass"])
    cot = summary["explicit_cot_accuracy"]
    cot = "n/a" if cot is None else f"{cot:.3f}"
    console.print(f"zero-filled accuracy {summary['zero_filled_accuracy']:.3f} in one pass; "
                  f"explicit CoT ({summary['layers']} passes) {cot}; "
                  f"child attention mass per layer [{mass}]", highlight=False)
    console.print(f"run directory: {path}", highlight=False)


def main() -> None:
    try:
        app()
    except KeyboardInterrupt:
        sys.exit(130)


if __name__ == "__main__":
    main()
