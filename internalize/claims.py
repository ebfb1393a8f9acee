"""Claims tables written from the committed result rows: `internalize claims [--check]`.

Every number of a page's claims table is computed from the rows of a committed results table
(docs/results/NAME/results.csv: one row per run) at full precision and formatted once, by a spec
docs/claims/PAGE.yaml:

    page: docs/logicot.md            # the page, from the repository root
    marker: logicot                  # the page holds <!-- claims: logicot --> ... <!-- /claims -->
    tables:                          # short names for tables under docs/results/: NAME/results.csv,
      sizes: logicot_sizes           # a file (strategies_base_eval3000/exact.csv), or with aliases
      theory: {path: logicot_theory, aliases: {theory.samples: train.theory.samples}}
    table: sizes                     # the default table of every template (a row may set its own)
    where: [task.k=16]               # filters added to every template (a row may set its own)
    columns: [claim, measured, command]
    rows:
      - claim: each level-l row of layer l attends to its two children
        measured: "child mass {range child_attention_mass .3f} over {count} runs"
        command: "`internalize sweep logicot_sizes`"
      - claim: ...
        measured:                    # a number no committed table holds: typed text, marked so,
          text: "0.511, then 1.000"  # with a comment in the YAML naming where it comes from
          typed: true

Only the text between the markers is rewritten. A cell is text with templates in braces
(`{{` and `}}` are literal braces; a typed cell's templates are filled too), each a few words
separated by spaces:

    {FUNCTION ARGUMENT TOKEN ...}

FUNCTION, over the values of column ARGUMENT in the rows that pass the filters:

    mean, sd, min, max, sum   sd is the sample sd (ddof 1; 0 for one value), as the reports' spread
    meansd                    "mean ± sd", both in the format
    range                     "lo-hi" (one value when both format alike)
    value                     the one matching row's value (more or fewer rows: an error)
    list                      every value, ", "-joined, by seed where the table has one
    count [CONDITION]         how many rows (that meet CONDITION)
    kofn CONDITION            "k of n": rows meeting CONDITION of the rows that pass the filters
    fit Y~X                   b of the power law Y ∝ X^b, least squares over the rows (the reports' fit)
    ratio A B                 mean of A over mean of B, each COLUMN or COLUMN@TABLE (the filters: both)

TOKEN, in any order:

    @NAME                     the table (a name from `tables`), instead of the default
    by:KEY                    first the mean of each group of rows alike in KEY: the function then
                              runs over those means (the range of five objectives' mean alignments)
    KEY=VALUE                 a filter (also != < <= > >=); several filters must all hold; VALUE is
                              a number for a numeric column, else text (true/false for booleans)
    /60, *100                 every value divided or multiplied (seconds to minutes, say)
    .3f  ,.0f  .2g  d         a Python format spec for each number (default g)

A CONDITION is written like a filter (`zero_filled_accuracy>=1`). A column is named as the table
names it, or as a config key (`task.n` reads `config.task.n` where the sweep did not vary it); a
column may end in [i] or [i:j], which picks elements of a list value (`zero_filled[0:3]`); a `*`
for one dotted segment takes the values of every column it matches (`per_task.*.fidelity`). A list
value (a JSON list in the CSV) counts as its elements. Rows whose `status` is not `done` are left
out unless a filter names `status`. An empty value in a matched row is an error, and so are an
unknown table, column or function and a filter that matches no row: each is one line naming the
spec, the row and the cell.

`sync()` rewrites the tables (`sync(check=True)` only names the stale pages); `record_run(run_dir)`
(`internalize claims --record RUN_DIR`) writes a finished single run as a one-row table.
"""
from __future__ import annotations

import json
import math
import operator
import re
from pathlib import Path

import numpy as np
import yaml

from internalize.config import ConfigError

ROOT = Path(__file__).resolve().parents[1]
RESULTS = Path("docs") / "results"
CLAIMS = Path("docs") / "claims"
OPS = {"<=": operator.le, ">=": operator.ge, "!=": operator.ne, "<": operator.lt, ">": operator.gt, "=": operator.eq}
CONDITION = re.compile(r"^(.+?)(<=|>=|!=|=|<|>)(.*)$")
TEMPLATE = re.compile(r"\{\{|\}\}|\{([^{}]*)\}")
SLICE = re.compile(r"^(.+?)\[(-?\d*)(?::(-?\d*))?\]$")
FUNCTIONS = {"mean", "sd", "min", "max", "sum", "meansd", "range", "value", "list", "count", "kofn", "fit", "ratio"}


class Table:
    """One committed results table: its rows (a DataFrame) and its column aliases."""

    def __init__(self, name: str, path: str, root: Path, aliases: dict | None = None):
        import pandas as pd

        file = root / RESULTS / (path if path.endswith(".csv") else f"{path}/results.csv")
        if not file.exists():
            raise ConfigError(f"table {name!r}: no file {file.relative_to(root)}")
        self.name, self.rows, self.aliases = name, pd.read_csv(file), dict(aliases or {})

    def column(self, key: str) -> str:
        alias = self.aliases.get(key)
        for candidate in (key, alias, f"config.{key}", f"config.{alias}"):
            if candidate in self.rows.columns:
                return candidate
        raise ConfigError(f"table {self.name!r} has no column {key!r}")

    def columns(self, key: str) -> list[str]:
        """The column `key`, or with `*` in it (one dotted segment), every column it matches, in order."""
        if "*" not in key:
            return [self.column(key)]
        pattern = re.compile("^" + re.escape(key).replace(r"\*", r"[^.]+") + "$")
        found = [c for c in self.rows.columns if pattern.match(c)]
        if not found:
            raise ConfigError(f"table {self.name!r} has no column like {key!r}")
        return found


def number(text: str) -> float | None:
    return float(text) if re.fullmatch(r"[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?", text.strip()) else None


def passes(table: Table, rows, token: str):
    """A boolean mask: which rows meet the condition `token` (KEY OP VALUE); an empty value never does
    (except for !=)."""
    match = CONDITION.match(token)
    if not match:
        raise ConfigError(f"{token!r} is no condition (KEY=VALUE, KEY>=VALUE, ...)")
    key, op, text = match.groups()
    column = rows[table.column(key)]
    if column.dtype == bool or (column.dtype == object and set(column.dropna()) <= {True, False}):
        if text.lower() not in ("true", "false"):
            raise ConfigError(f"{token!r}: {key} is true or false")
        value, cast = text.lower() == "true", bool
    elif column.dtype.kind in "iuf":
        value, cast = number(text), float
        if value is None:
            raise ConfigError(f"{token!r}: {key} is a number column")
    elif op in ("=", "!="):
        value, cast = text, str
    else:
        raise ConfigError(f"{token!r}: {key} is a text column (= or != only)")
    return column.map(lambda v: OPS[op](cast(v), value) if v == v else op == "!=")


def elements(value, pick) -> list[float]:
    """A cell's numbers: a JSON list's elements (`pick`, an index or a slice, chooses some), or the value."""
    if isinstance(value, str) and value.startswith("["):
        value = json.loads(value)
    if isinstance(value, list):
        try:
            value = value if pick is None else value[pick] if isinstance(pick, slice) else [value[pick]]
        except IndexError:
            raise ConfigError(f"[{pick}] is past the end of a list of {len(value)}") from None
        return [v for item in value for v in elements(item, None)]
    if pick is not None:
        raise ConfigError(f"[...] picks elements of a list, and {value!r} is not one")
    if not isinstance(value, (bool, int, float, np.bool_, np.integer, np.floating)):
        raise ConfigError(f"{value!r} is not a number")
    return [float(value)]


def values(table: Table, rows, key: str) -> list[float]:
    """Every number of column `key` over `rows` (by seed where the table has one); never an empty one."""
    pick, match = None, SLICE.match(key)
    if match:
        key, start, stop = match.groups()
        if stop is None and not start:
            raise ConfigError(f"{match.group(0)!r}: [] needs an index")
        pick = int(start) if stop is None else slice(int(start) if start else None, int(stop) if stop else None)
    ordered = rows.sort_values("seed", kind="stable") if "seed" in rows.columns else rows
    raw = [v for column in table.columns(key) for v in ordered[column].tolist()]
    empty = sum(1 for v in raw if v is None or (isinstance(v, float) and math.isnan(v)))
    if empty:
        raise ConfigError(f"{key} is empty in {empty} of the {len(raw)} matched rows of {table.name!r}; "
                          "filter them out")
    out = [v for value in raw for v in elements(value, pick)]
    if not out:
        raise ConfigError(f"{key} holds no value in the matched rows of {table.name!r}")
    return out


def formatted(value: float, spec: str) -> str:
    return format(int(round(value)), spec) if spec.endswith("d") else format(value, spec)


def matching(tables: dict[str, Table], name: str | None, filters: list[str], conditions: tuple = ()):
    """(the table, its rows that pass every filter): its finished rows unless a filter or condition
    names `status`."""
    if name is None or name not in tables:
        raise ConfigError(("no table (give @NAME, or `table:` in the spec)" if name is None else
                          f"unknown table {name!r} (the spec names {', '.join(sorted(tables)) or 'none'})"))
    table = tables[name]
    rows = table.rows
    if "status" in rows.columns and not any(CONDITION.match(f).group(1) == "status" for f in [*filters, *conditions]):
        rows = rows[rows["status"] == "done"]
    for i, token in enumerate(filters):
        rows = rows[passes(table, rows, token)]
        if rows.empty:
            raise ConfigError(f"no row of {name!r} where {' '.join(filters[:i + 1])}")
    if rows.empty:
        raise ConfigError(f"{name!r} has no finished row")
    return table, rows


def evaluate(expression: str, tables: dict[str, Table], default: str | None, where: tuple = ()) -> str:
    """One template's text: `FUNCTION [ARGUMENT] [TOKEN ...]`."""
    function, *rest = expression.split() or [""]
    if function not in FUNCTIONS:
        raise ConfigError(f"unknown function {function!r} (one of {', '.join(sorted(FUNCTIONS))})")
    takes = 2 if function == "ratio" else 0 if function == "count" and not (rest and CONDITION.match(rest[0])) else 1
    if len(rest) < takes:
        raise ConfigError(f"{function} takes {'two columns' if takes == 2 else 'a column or condition'}")
    argument, rest = rest[:takes], rest[takes:]
    name, filters, scale, spec, by = default, list(where), 1.0, "g", None
    for token in rest:
        if token.startswith("@"):
            name = token[1:]
        elif token.startswith("by:"):
            by = token[3:]
        elif token[0] in "/*" and number(token[1:]) is not None:
            scale = scale / float(token[1:]) if token[0] == "/" else scale * float(token[1:])
        elif CONDITION.match(token):
            filters.append(token)
        else:
            try:
                spec = formatted(1.0, token) and token
            except ValueError:
                raise ConfigError(f"{token!r} is no table, filter, scale or format") from None
    if function == "ratio":
        sides = []
        for column, _, other in (side.partition("@") for side in argument):
            table, rows = matching(tables, other or name, filters)
            sides.append(float(np.mean(values(table, rows, column))))
        return formatted(sides[0] / sides[1] * scale, spec)
    table, rows = matching(tables, name, filters, tuple(argument) if function in ("count", "kofn") else ())
    if function in ("count", "kofn"):
        meet = int(passes(table, rows, argument[0]).sum()) if argument else len(rows)
        return f"{meet:,d} of {len(rows):,d}" if function == "kofn" else f"{meet:,d}"
    if function == "fit":
        y, _, x = argument[0].partition("~")
        if not x:
            raise ConfigError("fit takes Y~X")
        from internalize.sweep.report import power_fit

        return formatted(power_fit(np.array(values(table, rows, x)), np.array(values(table, rows, y)))[0] * scale, spec)
    if by is None:
        found = [v * scale for v in values(table, rows, argument[0])]
    else:
        groups = rows.groupby(table.column(by), sort=True, dropna=False)
        found = [float(np.mean(values(table, part, argument[0]))) * scale for _, part in groups]
    if function == "value":
        if len(found) != 1:
            raise ConfigError(f"value needs one row and one number, and {len(found)} match")
        return formatted(found[0], spec)
    if function == "list":
        return ", ".join(formatted(v, spec) for v in found)
    if function == "range":
        lo, hi = formatted(min(found), spec), formatted(max(found), spec)
        return lo if lo == hi else f"{lo}-{hi}"
    mean, sd = float(np.mean(found)), float(np.std(found, ddof=1)) if len(found) > 1 else 0.0
    if function == "meansd":
        return f"{formatted(mean, spec)} ± {formatted(sd, spec)}"
    return formatted({"mean": mean, "sd": sd, "min": min(found), "max": max(found), "sum": sum(found)}[function], spec)


def fill(text: str, tables: dict[str, Table], default: str | None, where: tuple = ()) -> str:
    """A cell's text with every template replaced by its value."""
    rest = TEMPLATE.sub("", text)
    if "{" in rest or "}" in rest:
        raise ConfigError(f"unbalanced braces in {text!r} (write {{{{ and }}}} for literal ones)")
    def one(match: re.Match) -> str:
        if match.group(1) is None:
            return match.group(0)[0]
        try:
            return evaluate(match.group(1).strip(), tables, default, where)
        except ConfigError as err:
            raise ConfigError(f"{{{match.group(1).strip()}}}: {err}") from None

    return TEMPLATE.sub(one, text)


def render(spec: dict, root: Path = ROOT, where: str = "spec") -> str:
    """The markdown table a spec describes, every number computed from its tables."""
    for key in ("page", "marker", "columns", "rows"):
        if key not in spec:
            raise ConfigError(f"{where}: no `{key}`")
    tables = {}
    for name, entry in (spec.get("tables") or {}).items():
        entry = {"path": entry} if isinstance(entry, str) else dict(entry)
        if "path" not in entry:
            raise ConfigError(f"{where}: table {name!r} names no path")
        try:
            tables[name] = Table(name, str(entry["path"]), root, entry.get("aliases"))
        except ConfigError as err:
            raise ConfigError(f"{where}: {err}") from None
    columns = list(spec["columns"])
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    for i, row in enumerate(spec["rows"], 1):
        unknown = set(row) - set(columns) - {"table", "where"}
        if unknown:
            raise ConfigError(f"{where}, row {i}: no column {sorted(unknown)[0]!r} (columns: {', '.join(columns)})")
        cells = []
        for column in columns:
            cell = row.get(column, "")
            if isinstance(cell, dict):
                if set(cell) - {"text", "typed"} or "text" not in cell:
                    raise ConfigError(f"{where}, row {i}, {column}: a cell is text, or {{text: ..., typed: true}}")
                cell = cell["text"]
            try:
                common = tuple(row.get("where", spec.get("where")) or ())
                cells.append(" ".join(fill(str(cell), tables, row.get("table", spec.get("table")), common).split()))
            except ConfigError as err:
                raise ConfigError(f"{where}, row {i}, {column}: {err}") from None
        lines.append("|" + "".join(f" {cell} |" if cell else " |" for cell in cells))
    return "\n".join(lines) + "\n"


def rewrite(page: str, marker: str, table: str) -> str:
    """The page with the text between its markers replaced by `table`."""
    begin, end = f"<!-- claims: {marker} -->", "<!-- /claims -->"
    start = page.find(begin)
    stop = page.find(end, start + 1) if start >= 0 else -1
    if start < 0 or stop < 0:
        raise ConfigError(f"the page has no {begin} ... {end}")
    return page[:start + len(begin)] + "\n" + table + page[stop:]


def pages(root: Path = ROOT) -> dict[Path, tuple[str, str]]:
    """{page: (its text now, its text with every claims table written)} for every spec."""
    out: dict[Path, tuple[str, str]] = {}
    files = sorted((root / CLAIMS).glob("*.yaml"))
    if not files:
        raise ConfigError(f"no claims specs under {root / CLAIMS}")
    for file in files:
        where = str(file.relative_to(root))
        try:
            spec = yaml.safe_load(file.read_text())
        except yaml.YAMLError as err:
            raise ConfigError(f"{where}: not YAML: {' '.join(str(err).split())}") from None
        if not isinstance(spec, dict):
            raise ConfigError(f"{where}: a claims spec is a mapping")
        table = render(spec, root, where)
        page = root / spec["page"]
        if not page.exists():
            raise ConfigError(f"{where}: no page {spec['page']}")
        now, new = out.get(page, (page.read_text(),) * 2)
        try:
            out[page] = (now, rewrite(new, str(spec["marker"]), table))
        except ConfigError as err:
            raise ConfigError(f"{where}: {spec['page']}: {err}") from None
    return out


def sync(check: bool = False, root: Path = ROOT) -> list[str]:
    """The pages whose claims tables differ from what their specs write; each rewritten unless `check`."""
    changed = []
    for page, (now, new) in pages(root).items():
        if now != new:
            changed.append(str(page.relative_to(root)))
            if not check:
                page.write_text(new)
    return changed


def record_run(run_dir: Path, root: Path = ROOT, name: str | None = None) -> Path:
    """A finished run as the one-row table docs/results/runs/EXPERIMENT[_SCALE]/results.csv: its config
    (config.KEY), its summary (lists and mappings as JSON; per_task's figures also as per_task.TASK.KEY) and
    per-stage figures as lists (stage.KEY; stage.start_val_loss: each stage's first validation loss).
    `name` (`--as`) names the table instead: two runs of one scale with other `--set` overrides."""
    import pandas as pd

    from internalize import config as configs
    from internalize.sweep.table import flatten, stage_columns, summary_columns

    run_dir = Path(run_dir)
    if not (run_dir / "summary.json").exists() or not (run_dir / "config.yaml").exists():
        raise ConfigError(f"{run_dir} is no finished run (it lacks summary.json or config.yaml)")
    summary = json.loads((run_dir / "summary.json").read_text())
    config = configs.load(str(run_dir / "config.yaml")).model_dump(mode="json")
    row = {"run_id": run_dir.name, "status": "done", "error": None}
    row.update({f"config.{k}": v for k, v in flatten(config).items() if not isinstance(v, (list, dict))})
    stages = summary.get("per_stage") or []
    row.update(summary_columns(summary))
    row.update(stage_columns(stages))
    for key in dict.fromkeys(k for stage in stages for k in stage):
        row[f"stage.{key}"] = json.dumps([stage.get(key) for stage in stages])
    if (run_dir / "metrics.jsonl").exists():  # each stage's first logged validation loss: before it trains
        first: dict = {}
        for record in map(json.loads, filter(str.strip, (run_dir / "metrics.jsonl").read_text().splitlines())):
            if "stage" in record and "val_loss" in record:
                first.setdefault(record["stage"], record["val_loss"])
        row["stage.start_val_loss"] = json.dumps([first[k] for k in sorted(first)])
    if name is None:
        name = str(summary.get("experiment") or config.get("experiment"))
        if config.get("scale") not in (None, "default"):
            name += f"_{config['scale']}"
    elif not re.fullmatch(r"[A-Za-z0-9_.-]+", name) or name.strip(".") == "":
        raise ConfigError(f"--as {name!r}: a table's name is letters, digits, '_', '-' and '.'")
    out = root / RESULTS / "runs" / name / "results.csv"
    out.parent.mkdir(parents=True, exist_ok=True)
    pd.DataFrame([row]).to_csv(out, index=False)
    return out
