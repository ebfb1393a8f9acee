"""A sweep's results table: one row per run, its config keys and summary figures."""
from __future__ import annotations

import functools
import json
from pathlib import Path

from internalize import config as configs
from internalize import registry
from internalize.config import ConfigError
from internalize.runs import read_metrics
from internalize.sweep.spec import SweepSpec


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


def summary_columns(summary: dict) -> dict:
    """A summary as table columns: lists and mappings as JSON, and each task's scalar figures also as
    per_task.TASK.KEY (so a claim or a plot can read one task's figure); per_stage is left out."""
    row = {key: json.dumps(value) if isinstance(value, (list, dict)) else value
           for key, value in summary.items() if key != "per_stage"}
    for task, figures in (summary.get("per_task") or {}).items():
        if isinstance(figures, dict):
            row.update({f"per_task.{task}.{k}": v for k, v in figures.items()
                        if isinstance(v, (int, float, str))})
    return row


def read_table(file: Path):
    import pandas as pd

    file = Path(file)
    try:
        return pd.read_parquet(file) if file.suffix == ".parquet" else pd.read_csv(file)
    except FileNotFoundError:
        raise ConfigError(f"no results table at {file}") from None
    except Exception as err:  # a corrupt or foreign file: pandas and pyarrow raise many kinds
        raise ConfigError(f"cannot read results table {file}: {err}") from None


def _same(kept, here) -> bool:
    """Whether a results table's cell (as read back from CSV or parquet) holds the config's value."""
    import math

    import yaml

    if _blank(kept):
        kept = None
    elif isinstance(kept, str):
        try:
            kept = yaml.safe_load(kept)
        except yaml.YAMLError:
            pass
    if isinstance(kept, (int, float)) and isinstance(here, (int, float)) and not isinstance(here, bool):
        return math.isclose(kept, here, rel_tol=1e-9, abs_tol=1e-12)
    return kept == here or (kept is None and here in ("", [], {}))


def _blank(cell) -> bool:
    import math

    return cell == "" or isinstance(cell, float) and math.isnan(cell)


def never_blank(config) -> set[str]:
    """The flattened keys of a Config whose field can hold no value a table writes as a blank cell
    (None, "", an empty list or mapping), such as numbers, flags and named choices: a blank cell under
    such a key cannot be its value, so it marks a row written before the key existed (a table that
    joined older rows to newer ones), not a run configured otherwise."""
    from pydantic import BaseModel

    out = set()
    for name, field in type(config).model_fields.items():
        value = getattr(config, name)
        if isinstance(value, BaseModel):
            out |= {f"{name}.{k}" for k in never_blank(value)}
        elif not any(_admits(field.annotation, blank) for blank in (None, "", [], {})):
            out.add(name)
    return out


@functools.lru_cache(maxsize=None)
def _adapter(annotation):
    from pydantic import TypeAdapter

    return TypeAdapter(annotation)


def _admits(annotation, value) -> bool:
    from pydantic import ValidationError

    try:
        _adapter(annotation).validate_python(value)
    except ValidationError:
        return False
    except TypeError:  # an annotation that is not hashable: assume it could
        return True
    return True


def _differences(row: dict, here: dict, unrecorded_if_blank: frozenset = frozenset()) -> list[str]:
    """The keys of a flattened config `here` whose value a results table's row holds otherwise: only the
    keys both have are compared (a key only one side knows was written by older or newer code, and so is
    a blank cell under a key of `unrecorded_if_blank`)."""
    return [k for k in sorted(here) if f"config.{k}" in row and k != "description"
            and not (k in unrecorded_if_blank and _blank(row[f"config.{k}"]))
            and not _same(row[f"config.{k}"], here[k])]


def _check_imported(row: dict, here: dict, table_file: Path, unrecorded_if_blank=frozenset()) -> None:
    """Refuse a kept row whose run was configured otherwise than the sweep configures it now (another
    base, other steps)."""
    changed = _differences(row, here, unrecorded_if_blank)
    if changed:
        shown = ", ".join(f"{k} ({row[f'config.{k}']} there, {here[k]} here)" for k in changed[:3])
        more = f" and {len(changed) - 3} more" if len(changed) > 3 else ""
        raise ConfigError(f"{table_file}: run {row['run_id']} was configured otherwise: {shown}{more}")


def _configured_as(row: dict, here: dict, point: dict) -> bool:
    """Whether a row of another sweep is the run of the flattened config `here`: it names every key the
    point sets and the seed, and no key differs."""
    return (all(f"config.{k}" in row for k in [*point, "seed", "experiment"])
            and not _differences(row, here))


def import_rows(root: Path, tasks: list[dict], table_file: Path, config_of=None) -> int:
    """Copy the finished rows of another results table into root/imported.csv (kept beside earlier
    imports, a new row replacing an old one); return how many were copied. A row stands for the run
    of the same id; with `config_of` (a task to its Config), such a row configured otherwise is
    refused, and a task no row names takes a row of another sweep configured exactly as it is (the
    same base, steps, seed and every key of its point), under the task's id and point."""
    import pandas as pd

    table = read_table(table_file)
    if not {"run_id", "status"} <= set(table.columns):
        raise ConfigError(f"{table_file} is no sweep results table (it lacks run_id and status)")
    done = table[table["status"] == "done"].to_dict("records")
    by_id = {t["id"]: t for t in tasks}
    chosen = {row["run_id"]: row for row in done if row["run_id"] in by_id}
    if config_of is not None:
        def flat(task: dict) -> dict:
            return flatten(config_of(task).model_dump(mode="json"))

        for run, row in chosen.items():
            config = config_of(by_id[run])
            _check_imported(row, flatten(config.model_dump(mode="json")), table_file,
                            frozenset(never_blank(config)))
        others = [row for row in done if row["run_id"] not in by_id]
        for t in tasks:
            if t["id"] in chosen or not others:
                continue
            here = flat(t)
            match = next((row for row in others if _configured_as(row, here, t["point"])), None)
            if match is not None:
                others.remove(match)
                chosen[t["id"]] = {**match, **t["point"], "seed": t["seed"], "run_id": t["id"]}
    if not chosen:
        raise ConfigError(f"{table_file} holds no finished run of this sweep")
    table = pd.DataFrame(list(chosen.values()))
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
        config = configs.load(str(path / "config.yaml")) if (path / "config.yaml").exists() else None
        if config is not None:
            row.update({f"config.{k}": v for k, v in flatten(config.model_dump(mode="json")).items()
                        if not isinstance(v, (list, dict))})
        row.update({k: v for k, v in t["point"].items()})
        row["seed"] = t["seed"]
        if (path / "summary.json").exists():
            summary = json.loads((path / "summary.json").read_text())
            row["status"] = "done"
            row.update(summary_columns(summary))
            row.update(stage_columns(summary.get("per_stage") or []))
            if config is not None and (path / "metrics.jsonl").exists():
                row.update(registry.system_class(config.system).table_columns(read_metrics(path), config))
        elif (path / "error.txt").exists():
            row["status"] = "failed"
            lines = (path / "error.txt").read_text().strip().splitlines()
            row["error"] = lines[-1] if lines else "unknown error"
        rows.append(row)
    table = pd.DataFrame(rows)
    table.to_csv(root / "results.csv", index=False)
    table.to_parquet(root / "results.parquet", index=False)
    return table
