"""A sweep file: its typed spec, and its expansion into runs (config overrides times seeds)."""
from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any, Literal, Optional, Union

import yaml
from pydantic import ValidationError

from internalize import config as configs
from internalize.config import ConfigError, Strict
from internalize.runs import TIMINGS

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
    # summary mappings two levels deep (task -> cell -> figures, e.g. steering): a table each, a row a cell
    cells: list[str] = []
    figures: list[FigureSpec] = []


class BeforeRun(Strict):
    """A run the sweep's runs read (a base model they set as model.base): trained before them in `out`,
    skipped once finished there, continued from its checkpoint when interrupted; so the sweep and what
    it rests on are one command."""
    experiment: str
    out: str  # its run directory (relative paths: from where the sweep is run, as model.base reads them)
    scale: Optional[str] = None
    set: dict[str, Any] = {}

    def overrides(self) -> list[str]:
        return as_overrides(self.set)


class SweepSpec(Strict):
    experiment: str
    before: list[BeforeRun] = []
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
        if isinstance(raw, dict) and isinstance(raw.get("report"), str):
            raw["report"] = shared_report(raw["report"], file)
        return SweepSpec.model_validate(raw)
    except yaml.YAMLError as err:
        raise ConfigError(f"{file}: not valid YAML ({err.__class__.__name__})") from None
    except ValidationError as err:
        raise ConfigError(f"{file}: {configs._format(err)}") from None


def shared_report(name: str, file: Path) -> dict:
    """`report: NAME`: the report block of the sweep NAME (a bundled name or a path), so sweeps that
    measure the same things write their tables and figures from one block. That sweep must spell its
    report out (no chains)."""
    other = locate(name)
    try:
        raw = yaml.safe_load(other.read_text()) or {}
    except yaml.YAMLError as err:  # named here: read_spec would blame the sweep that names it
        raise ConfigError(f"{file}: report: {name!r}: {other} is not valid YAML ({err.__class__.__name__})") from None
    report = raw.get("report") if isinstance(raw, dict) else None
    if not isinstance(report, dict):
        raise ConfigError(f"{file}: report: {name!r} names a sweep whose report is "
                          f"{'another name' if isinstance(report, str) else 'not given'}; "
                          f"name a sweep that spells its report out")
    return report


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


def as_overrides(settings: dict[str, Any]) -> list[str]:
    """Dotted settings as command-line overrides (`key=value`, the value in JSON)."""
    return [f"{k}={json.dumps(v)}" for k, v in settings.items()]


def label(value: Any) -> str:
    """A grid value as a run id writes it: a mapping as key:value pairs and a list as its items, comma
    joined (`task.formats=grid_path:choices`), so a run's directory name holds no quotes, braces or spaces;
    a path's slashes as '%' (`model.hf_path=models%gpt2`), so each run is one directory."""
    if isinstance(value, dict):
        return ",".join(f"{k}:{label(v)}" for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return ",".join(label(v) for v in value)
    return str(value).replace("/", "%")


def run_id(point: dict[str, Any], seed: int) -> str:
    return "__".join([*(f"{k}={label(v)}" for k, v in point.items() if v is not None), f"seed={seed}"])


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
            overrides = as_overrides(settings)
            configs.load(spec.experiment, overrides, spec.scale)  # refuse a bad sweep before any run starts
            tasks.append(dict(id=run_id(point, seed), point=point, seed=seed, overrides=overrides))
    for before in spec.before:
        configs.load(before.experiment, before.overrides(), before.scale)
    if len({t["id"] for t in tasks}) != len(tasks):
        raise ConfigError("the sweep repeats a grid point or seed")
    check_figures(spec)
    return tasks


