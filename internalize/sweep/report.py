"""`internalize report DIR`: a sweep's tables (mean and spread over seeds) and its figures."""
from __future__ import annotations

import ast
import json
import math
from pathlib import Path

import numpy as np

from internalize.config import ConfigError
from internalize.sweep import (
    FigureSpec,
    SweepSpec,
    collect,
    expand,
    point_keys,
    read_spec,
    read_table,
)
from internalize.sweep.spec import label


def load_table(root: Path, spec: SweepSpec):
    """The results table as the run directories stand now (so a sweep still running, or stopped, gets
    a report of its finished runs); the stored table when the runs cannot be listed from the sweep file."""
    if (root / "runs").is_dir():
        try:
            return collect(root, spec, expand(spec))
        except ConfigError:  # the experiment's config changed since: keep what the sweep wrote
            pass
    for name in ("results.parquet", "results.csv"):
        if (root / name).exists():
            return read_table(root / name)
    raise ConfigError(f"{root} holds no sweep results (results.parquet); run `internalize sweep` first")


def stage_table(root: Path, done, keys: list[str], records: str = "per_stage"):
    """One row per stage of every finished run (per record of the summary's list `records`): the
    record and the run's grid point."""
    import pandas as pd

    rows = []
    for run in done.to_dict("records"):
        file = root / "runs" / run["run_id"] / "summary.json"
        if file.exists():
            listed = json.loads(file.read_text()).get(records, [])
        else:  # a row imported from a kept table (`sweep --done-from`): the list if the table holds it
            value = run.get(records)
            listed = json.loads(value) if isinstance(value, str) and value else []
        rows += [{**{k: run[k] for k in [*keys, "seed"]}, **record} for record in listed]
    return pd.DataFrame(rows)


def spread(values) -> str:
    """'mean ± std' over the finite values, with how many of the runs had one."""
    finite = [float(v) for v in values if v is not None and not (isinstance(v, float) and math.isnan(v))]
    if not finite:
        return "never"
    mean = float(np.mean(finite))
    std = float(np.std(finite, ddof=1)) if len(finite) > 1 else 0.0
    text = f"{mean:,.0f} ± {std:,.0f}" if abs(mean) >= 1000 else f"{mean:.4g} ± {std:.2g}"
    return text if len(finite) == len(values) else f"{text} ({len(finite)}/{len(values)})"


def power_fit(x: np.ndarray, y: np.ndarray) -> tuple[float, float, float]:
    """log y = a + b log x by least squares: (b, its standard error, a)."""
    lx, ly = np.log(x), np.log(y)
    b, a = np.polyfit(lx, ly, 1)
    if len(x) > 2:
        sigma2 = float(np.sum((ly - (a + b * lx)) ** 2)) / (len(x) - 2)
        se = math.sqrt(sigma2 / float(np.sum((lx - lx.mean()) ** 2)))
    else:
        se = float("nan")
    return float(b), se, float(a)


def tick_labels(values: list[float], log: bool, slots: int = 10) -> set[float]:
    """The x values that get a label: each at least 1/slots of the axis from the last one labelled."""
    position = np.log if log else (lambda v: v)
    values = [v for v in values if not log or v > 0]
    if len(values) < 2:
        return set(values)
    gap = (position(values[-1]) - position(values[0])) / slots
    kept = [values[0]]
    for v in values[1:]:
        if position(v) - position(kept[-1]) >= gap:
            kept.append(v)
    return set(kept)


def show(value) -> str:
    """A grid value as written in the sweep file: a column that some cases leave unset holds floats
    and nan, so 562.0 is shown as 562 and nan (not set) as -."""
    if isinstance(value, float):
        return "-" if np.isnan(value) else str(int(value)) if value.is_integer() else str(value)
    return str(value)


def group_label(keys: list[str], values) -> str:
    """A line's legend entry, "key = value, ..."; a key the group's runs do not set is left out."""
    values = values if isinstance(values, tuple) else (values,)
    return ", ".join(f"{k} = {show(v)}" for k, v in zip(keys, values) if show(v) != "-")


STYLES = [("-", "o"), ("--", "s"), (":", "^"), ("-.", "D")]


def group_styles(names: list, keys: list[str]) -> list[tuple[str, str, str]]:
    """(colour, line style, marker) of each group: with several keys and at most four combinations of
    the keys after the first, the colour follows the first key's value and the style the rest, so a
    reader tells both apart (beta_elbo warmed up against beta_elbo constant); else a colour each."""
    names = [tuple(show(v) for v in (n if isinstance(n, tuple) else (n,))) for n in names]
    rest = sorted({n[1:] for n in names})
    if len(keys) < 2 or len(rest) > len(STYLES):
        return [(f"C{i % 10}", "-", "o") for i in range(len(names))]
    firsts = list(dict.fromkeys(n[0] for n in names))
    return [(f"C{firsts.index(n[0]) % 10}", *STYLES[rest.index(n[1:])]) for n in names]


def place_legend(fig, ax, fontsize: int) -> None:
    """The legend inside the axes for a few entries; for many, beside them, off the data, the figure
    widened to hold it and the title set from the axes' left edge."""
    entries = len(ax.get_legend_handles_labels()[0])
    if entries > 5:
        width, height = fig.get_size_inches()
        fig.set_size_inches(width + 3.5, height)
        ax.legend(fontsize=fontsize, loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0)
        title = ax.get_title()  # from the axes' left edge, over the legend: centred, a long one runs off the figure
        ax.set_title("")
        ax.set_title(title, fontsize=10, loc="left")
    elif entries:
        ax.legend(fontsize=fontsize)


def figure(table, spec: FigureSpec, path: Path) -> list[str]:
    """One figure: mean and spread of y against x (one line per group); returns fit lines for the report."""
    import matplotlib
    import pandas as pd

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter, NullFormatter

    if spec.scatter:
        return scatter(table, spec, path)
    fits = []
    table = table.copy()
    categories = None  # names on the x axis (a curriculum, say) instead of numbers: points, no lines
    if not pd.api.types.is_numeric_dtype(table[spec.x]):
        categories = sorted(table[spec.x].astype(str).unique())
        table[spec.x] = table[spec.x].astype(str).map({c: i for i, c in enumerate(categories)})
    keys = spec.group_keys
    groups = list(table.groupby(keys, sort=True, dropna=False)) if keys else [((), table)]
    styles = group_styles([name for name, _ in groups], keys)
    fig, ax = plt.subplots(figsize=(6, 4))
    for (name, part), (color, line, marker) in zip(groups, styles):
        part = part[np.isfinite(part[spec.y].astype(float))]
        if spec.logy:
            part = part[part[spec.y] > 0]
        if part.empty:
            continue
        label = group_label(keys, name)
        ax.scatter(part[spec.x], part[spec.y], s=12, alpha=0.35, color=color, marker=marker)
        stats = part.groupby(spec.x)[spec.y].agg(["mean", "std"]).reset_index()
        ax.errorbar(stats[spec.x], stats["mean"], yerr=stats["std"].fillna(0), color=color, marker=marker,
                    ls=line, lw=0 if categories else 1.5, elinewidth=1.5, capsize=3, label=label or None)
        if spec.fit == "power" and part[spec.x].nunique() > 1:
            x, y = part[spec.x].to_numpy(float), part[spec.y].to_numpy(float)
            b, se, a = power_fit(x, y)
            grid = np.geomspace(x.min(), x.max(), 50)
            ax.plot(grid, np.exp(a) * grid**b, ls="--", lw=1, color=color,
                    label=f"{label + ': ' if label else ''}fit slope {b:.2f} ± {se:.2f}")
            fits.append(f"{spec.y} ~ {spec.x}^b{' (' + label + ')' if label else ''}: "
                        f"b = {b:.3f} ± {se:.3f} over {len(x)} runs")
    ax.set_xscale("log" if spec.logx else "linear")
    ax.set_yscale("log" if spec.logy else "linear")
    plain = FuncFormatter(lambda v, _: f"{v:,.0f}" if abs(v) >= 1000 else f"{v:g}")
    if categories:
        ax.set_xticks(range(len(categories)), categories)
        ax.set_xlim(-0.5, len(categories) - 0.5)
    else:
        xs = sorted(table[spec.x].unique())
        labelled = tick_labels(xs, spec.logx)
        ax.set_xticks(xs)
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: plain(v) if v in labelled else ""))
    if table[spec.y].between(0, 1).all() and not spec.logy:  # a rate or an accuracy: its whole range
        ax.set_ylim(-0.03, 1.03)
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.yaxis.set_major_formatter(plain)
    ax.yaxis.set_minor_formatter(plain if spec.logy else NullFormatter())
    ax.set_xlabel(spec.x)
    ax.set_ylabel(spec.y)
    ax.set_title(spec.title or f"{spec.y} against {spec.x}", fontsize=10)
    ax.grid(alpha=0.3, which="both", lw=0.4)
    place_legend(fig, ax, 8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return fits


def scatter(table, spec: FigureSpec, path: Path) -> list[str]:
    """y against x, both summary figures: a faint point per run, each group's mean with the standard
    deviation of each coordinate over its runs."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    keys = spec.group_keys
    groups = list(table.groupby(keys, sort=True, dropna=False)) if keys else [((), table)]
    fig, ax = plt.subplots(figsize=(6, 4.2))
    for (name, part), (color, _, marker) in zip(groups, group_styles([name for name, _ in groups], keys)):
        part = part[np.isfinite(part[spec.x].astype(float)) & np.isfinite(part[spec.y].astype(float))]
        if part.empty:
            continue
        x, y = part[spec.x].astype(float), part[spec.y].astype(float)
        ax.scatter(x, y, s=14, alpha=0.35, color=color, marker=marker)
        ax.errorbar(x.mean(), y.mean(), xerr=x.std() if len(x) > 1 else 0, yerr=y.std() if len(y) > 1 else 0,
                    color=color, marker=marker, ms=7, capsize=3, label=group_label(keys, name) or None)
    for axis, key in ((ax.set_xlim, spec.x), (ax.set_ylim, spec.y)):
        if table[key].astype(float).between(0, 1).all():
            axis(-0.03, 1.03)
    ax.set_xlabel(spec.x)
    ax.set_ylabel(spec.y)
    ax.set_title(spec.title or f"{spec.y} against {spec.x}", fontsize=10)
    ax.grid(alpha=0.3, lw=0.4)
    place_legend(fig, ax, 7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return []


def as_mapping(value) -> dict:
    """A summary's mapping as the results table holds it: a dict, its JSON, or (tables written before
    mappings were stored as JSON) its Python literal; {} for a missing value."""
    if isinstance(value, dict):
        return value
    if not isinstance(value, str) or not value:
        return {}
    try:
        return json.loads(value)
    except ValueError:
        return ast.literal_eval(value)


def per_task_table(done, keys: list[str], metrics: list[str]) -> list[str]:
    """The lines of a table of each grid point's per-task figures (mean ± std over seeds)."""
    import pandas as pd

    if "per_task" not in done.columns:
        return ["", "(no per-task table: the runs' summaries hold no per_task)"]
    rows = [{**{k: run[k] for k in keys}, "task": task, **{m: values.get(m) for m in metrics}}
            for run in done.to_dict("records") for task, values in as_mapping(run["per_task"]).items()]
    if not rows:
        return []
    frame = pd.DataFrame(rows)
    header = [*keys, "task", "runs", *metrics]
    lines = ["", "## Per task", "", "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for point, part in frame.groupby([*keys, "task"], sort=True, dropna=False):
        point = point if isinstance(point, tuple) else (point,)
        lines.append("| " + " | ".join([*map(show, point), str(len(part)),
                                        *(spread(list(part[m])) for m in metrics)]) + " |")
    return lines


def cells_table(done, keys: list[str], name: str) -> list[str]:
    """The lines of a table of a summary mapping two levels deep, {task: {cell: {figure: value}}} (the
    factorisation's steering): one row per grid point, task and cell, each figure mean ± std over seeds."""
    import pandas as pd

    if name not in done.columns:
        return ["", f"(no {name} table: the runs' summaries hold no {name})"]
    rows = [{**{k: run[k] for k in keys}, "task": task, "cell": cell, **figures}
            for run in done.to_dict("records") for task, cells in as_mapping(run[name]).items()
            for cell, figures in (cells or {}).items() if isinstance(figures, dict)]
    if not rows:
        return []
    frame = pd.DataFrame(rows)
    figures = [c for c in frame.columns if c not in (*keys, "task", "cell")]
    header = [*keys, "task", "cell", "runs", *figures]
    lines = ["", f"## {name.capitalize()}", "", "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for point, part in frame.groupby([*keys, "task", "cell"], sort=True, dropna=False):
        lines.append("| " + " | ".join([*map(show, point), str(len(part)),
                                        *(spread(list(part[f])) for f in figures)]) + " |")
    return lines


def write_report(root: Path, table=None) -> Path:
    """DIR/report.md from `table` (a sweep's fresh results) or, without one, the run directories."""
    root = Path(root)
    if not (root / "sweep.yaml").exists():
        raise ConfigError(f"{root} is not a sweep directory (no sweep.yaml)")
    spec = read_spec(root / "sweep.yaml")
    table = load_table(root, spec) if table is None else table
    keys = point_keys(spec)
    table = table.copy()
    for key in keys:  # a mapping or list value (task.formats, task.tasks) groups by its plain label
        if key in table.columns:
            table[key] = table[key].map(lambda v: label(v) if isinstance(v, (dict, list, tuple)) else v)
    done = table[table["status"] == "done"]
    failed = table[table["status"] == "failed"]
    lines = [f"# Sweep {root.resolve().name} (experiment {spec.experiment})", "",
             f"{len(done)} of {len(table)} runs finished, {len(failed)} failed, "
             f"{len(table) - len(done) - len(failed)} not run. Seeds: {', '.join(map(str, spec.seeds))}."
             + (f" Fixed: {', '.join(f'{k}={v}' for k, v in spec.set.items())}." if spec.set else ""), "",
             "Each cell: mean ± standard deviation over seeds (k/n when only k of n runs have a value; "
             "never: none has).", ""]
    metrics = [m for m in spec.report.metrics if m in table.columns]
    header = [*keys, "runs", *metrics]
    lines += ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    points = done.groupby(keys, sort=True, dropna=False) if keys else [((), done)]
    for point, part in points:
        point = point if isinstance(point, tuple) else (point,)
        cells = [*map(show, point), str(len(part)), *(spread(list(part[m])) for m in metrics)]
        lines.append("| " + " | ".join(cells) + " |")
    if spec.report.per_task:
        lines += per_task_table(done, keys, spec.report.per_task)
    for name in spec.report.cells:
        lines += cells_table(done, keys, name)
    if len(failed):
        lines += ["", "## Failed runs", "", "| run | error |", "|---|---|"]
        lines += [f"| {r.run_id} | {str(r.error).replace('|', '/')} |" for r in failed.itertuples()]
    if spec.report.figures and len(done):
        (root / "figures").mkdir(exist_ok=True)
        for old in (root / "figures").glob("*.png"):  # every figure here is the report's: none goes stale
            old.unlink()
        lines += ["", "## Figures", ""]
        stages = {f.records: stage_table(root, done, keys, f.records) for f in spec.report.figures if f.per_stage}
        for fig in spec.report.figures:
            data = stages[fig.records] if fig.per_stage else done
            for key, value in fig.only.items():
                data = data[data[key] == value] if key in data.columns else data.iloc[:0]
            missing = [c for c in (fig.x, fig.y, *fig.group_keys) if c not in data.columns]
            if missing:
                lines.append(f"(no figure of {fig.y} against {fig.x}: no column {', '.join(missing)})")
                continue
            name = f"{fig.y}_vs_{fig.x}" + ("_by_" + "_and_".join(fig.group_keys) if fig.group_keys else "")
            name = name.replace(".", "_")
            name += "".join(f"_{v}" for v in fig.only.values())
            if data.empty:
                lines.append(f"(no figure of {fig.y} against {fig.x}: no run has {fig.only})")
                continue
            fits = figure(data, fig, root / "figures" / f"{name}.png")
            lines += [f"![{fig.y} against {fig.x}](figures/{name}.png)", ""]
            lines += [f"- {line}" for line in fits]
            lines.append("")
    (root / "report.md").write_text("\n".join(lines) + "\n")
    return root / "report.md"
