"""The claims tables are written from the committed result rows: the pages are current, every
template function matches its closed form on a hand-made table, and a bad spec is one clear error."""
from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
import yaml
from typer.testing import CliRunner

from internalize import claims
from internalize.cli import app
from internalize.config import ConfigError

ROOT = Path(__file__).resolve().parents[1]


def test_the_committed_claims_tables_are_current():
    """Through the command (`internalize claims --check`), which rewrites every table in memory from
    the committed rows (the slowest check of the docs: done once)."""
    result = CliRunner().invoke(app, ["claims", "--check"])
    assert result.exit_code == 0, f"{result.output}: run `internalize claims`"
    assert "current" in result.output


def test_every_generated_page_has_its_markers_and_the_readme_its_table():
    for file in sorted((ROOT / "docs" / "claims").glob("*.yaml")):
        spec = yaml.safe_load(file.read_text())
        text = (ROOT / spec["page"]).read_text()
        assert text.count(f"<!-- claims: {spec['marker']} -->") == 1, file.name
    readme = (ROOT / "README.md").read_text()
    table = readme.split("<!-- claims: readme -->")[1].split("<!-- /claims -->")[0]
    assert table.startswith("\n| system | claim | verdict | number | command (time) | report |\n|---|")


# A hand-made table: group a holds x = 1, 2, 3 (mean 2, sd 1) in seed order 2, 0, 1 as stored; group
# b one run at x = 0.99349; a pending run with no x; y = 2 n^0.5 over n (a power law with b = 0.5).
ROWS = [
    dict(run_id="a2", status="done", group="a", seed=2, x=3.0, t=180.0, y=4.0, flag=True, lst="[0.3, 0.6]"),
    dict(run_id="a0", status="done", group="a", seed=0, x=1.0, t=60.0, y=8.0, flag=False, lst="[0.1, 0.4]"),
    dict(run_id="a1", status="done", group="a", seed=1, x=2.0, t=120.0, y=16.0, flag=True, lst="[0.2, 0.5]"),
    dict(run_id="b0", status="done", group="b", seed=0, x=0.99349, t=30.0, y=32.0, flag=True, lst="[0.9]"),
    dict(run_id="p0", status="pending", group="b", seed=1, x=None, t=None, y=None, flag=None, lst=None),
]
N = [4, 16, 64, 256, 1024]  # config.task.n of each row; y = 2 sqrt(n)


@pytest.fixture
def root(tmp_path):
    rows = [dict(r, **{"config.task.n": n}) for r, n in zip(ROWS, N)]
    folder = tmp_path / "docs" / "results" / "toy"
    folder.mkdir(parents=True)
    pd.DataFrame(rows).to_csv(folder / "results.csv", index=False)
    pd.DataFrame([dict(run="r", steps=30.0), dict(run="s", steps=10.0)]).to_csv(folder / "other.csv", index=False)
    return tmp_path


@pytest.fixture
def tables(root):
    return {"toy": claims.Table("toy", "toy", root), "other": claims.Table("other", "toy/other.csv", root)}


def value(text, tables):
    return claims.fill(text, tables, "toy")


@pytest.mark.parametrize("template, expected", [
    ("{mean x group=a}", "2"),
    ("{sd x group=a .3f}", "1.000"),                     # the sample sd: sqrt(((1-2)^2 + 0 + (3-2)^2) / 2)
    ("{meansd x group=a .2f}", "2.00 ± 1.00"),
    ("{min x .2f} {max x .1f} {sum x group=a d}", "0.99 3.0 6"),
    ("{value x group=b .3f}", "0.993"),                  # 0.99349 once to .3f: 0.993, never 0.994 via 0.9935
    ("{value x group=b .4g}", "0.9935"),
    ("{range x group=a .1f}", "1.0-3.0"),
    ("{range x group=a seed>=1 seed<2 .1f}", "2.0"),     # one value: no range
    ("{list x group=a d}", "1, 2, 3"),                   # by seed, whatever the stored order
    ("{value x group=a seed=1}", "2"),                   # several filters, text and numeric
    ("{value x group!=a}", "0.99349"),                   # the pending run is left out
    ("{kofn x>=2 group=a}", "2 of 3"),
    ("{kofn flag=true}", "3 of 4"),
    ("{count}", "4"),
    ("{count status=pending}", "1"),                     # a filter naming status lifts the default
    ("{count x<1.5 group=a}", "1"),
    ("{sum t group=a /60 .1f} min", "6.0 min"),          # seconds summed, then in minutes
    ("{range t group=a /60 .0f}", "1-3"),
    ("{mean x group=a *100 .0f}%", "200%"),
    ("{mean task.n group=a ,.0f}", "28"),                # a config key read from config.task.n
    ("{fit y~task.n .3f}", "0.500"),
    ("{list lst[0] group=a .1f}", "0.1, 0.2, 0.3"),
    ("{max lst .1f} {list lst[1:] group=a .1f}", "0.9 0.4, 0.5, 0.6"),
    ("{range x by:group .3f}", "0.993-2.000"),           # group means: a 2, b 0.99349
    ("{ratio t x group=a d}", "60"),                     # mean 120 over mean 2
    ("{ratio steps@other t@toy .3f}", "0.205"),          # 20 (another table) over the mean of t, 97.5
    ("{{literal}} {value steps @other run=r d}", "{literal} 30"),
])
def test_template_functions_against_closed_forms(tables, template, expected):
    assert value(template, tables) == expected


@pytest.mark.parametrize("template, message", [
    ("{mean x @nosuch}", "unknown table 'nosuch'"),
    ("{mean nosuch}", "has no column 'nosuch'"),
    ("{mean x group=c}", "no row of 'toy' where group=c"),
    ("{mean x group=a seed=7}", "where group=a seed=7"),
    ("{median x}", "unknown function 'median'"),
    ("{mean x status=pending}", "x is empty in 1 of the 1 matched rows"),
    ("{value x group=a}", "value needs one row"),
    ("{mean x seed=zero}", "is a number column"),
    ("{mean x group<a}", "is a text column"),
    ("{mean x .3q}", "'.3q' is no table, filter, scale or format"),
    ("{mean x", "unbalanced braces"),
    ("{list x[0]}", "picks elements of a list"),
])
def test_a_bad_template_is_one_clear_error(tables, template, message):
    with pytest.raises(ConfigError) as err:
        value(template, tables)
    assert message in str(err.value) and "\n" not in str(err.value)


def write_spec(root, cell, page_text="intro\n<!-- claims: toy -->\nold\n<!-- /claims -->\nafter\n"):
    (root / "docs" / "claims").mkdir(parents=True, exist_ok=True)
    (root / "page.md").write_text(page_text)
    tables = {"toy": "toy", "gone": "nosuch"} if "@gone" in cell else {"toy": "toy"}
    rows = [{"claim": "x is about 2", "number": cell}, {"claim": "typed", "number": {"text": "7", "typed": True}}]
    spec = {"page": "page.md", "marker": "toy", "tables": tables, "table": "toy", "columns": ["claim", "number"],
            "rows": rows}
    (root / "docs" / "claims" / "toy.yaml").write_text(yaml.safe_dump(spec, allow_unicode=True))


def test_only_the_text_between_the_markers_is_rewritten(root):
    write_spec(root, "{meansd x group=a .1f} ({kofn x>=2 group=a})")
    assert claims.sync(check=True, root=root) == ["page.md"]
    assert claims.sync(root=root) == ["page.md"]
    assert (root / "page.md").read_text() == (
        "intro\n<!-- claims: toy -->\n| claim | number |\n|---|---|\n| x is about 2 | 2.0 ± 1.0 (2 of 3) |\n"
        "| typed | 7 |\n<!-- /claims -->\nafter\n")
    assert claims.sync(check=True, root=root) == []


@pytest.mark.parametrize("cell, message", [
    ("{mean x @gone}", "docs/claims/toy.yaml: table 'gone': no file docs/results/nosuch/results.csv"),
    ("{mean nosuch}", "docs/claims/toy.yaml, row 1, number: {mean nosuch}: table 'toy' has no column 'nosuch'"),
    ("{mean x group=c}", "docs/claims/toy.yaml, row 1, number: {mean x group=c}: no row of 'toy' where group=c"),
])
def test_a_bad_spec_names_the_spec_the_row_and_the_cell(root, cell, message):
    write_spec(root, cell)
    with pytest.raises(ConfigError) as err:
        claims.sync(check=True, root=root)
    assert str(err.value) == message


def test_a_page_without_its_markers_is_an_error(root):
    write_spec(root, "{mean x}", page_text="no markers here\n")
    with pytest.raises(ConfigError, match="page.md: the page has no <!-- claims: toy -->"):
        claims.sync(root=root)


def test_a_recorded_run_is_a_one_row_table(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.yaml").write_text((ROOT / "internalize" / "configs" / "logicot.yaml").read_text())
    stages = [{"stage": 1, "steps": 4, "zero_filled_accuracy": 0.5},
              {"stage": 2, "steps": 6, "zero_filled_accuracy": 1.0}]
    summary = {"experiment": "logicot", "seed": 0, "zero_filled_accuracy": 1.0, "child_attention_mass": [0.9, 0.95],
               "per_stage": stages, "per_task": {"a": {"fidelity": 0.25, "shares": {"x": 1.0}}, "b": {"fidelity": 0.75}}}
    (run / "summary.json").write_text(json.dumps(summary))
    (run / "metrics.jsonl").write_text("\n".join(json.dumps(r) for r in [
        {"step": 0, "stage": 1, "val_loss": 1.5}, {"step": 2, "stage": 1, "val_loss": 1.0},
        {"step": 4, "stage": 2, "val_loss": 1.25}]) + "\n")
    out = claims.record_run(run, root=tmp_path)
    assert out == tmp_path / "docs" / "results" / "runs" / "logicot" / "results.csv"
    table = {"run": claims.Table("run", "runs/logicot", tmp_path)}
    text = "{list stage.zero_filled_accuracy .1f}; {list stage.start_val_loss .2f}; {range child_attention_mass .2f}"
    assert claims.fill(text + "; {value task.n d}", table, "run") == "0.5, 1.0; 1.50, 1.25; 0.90-0.95; 30"
    assert claims.fill("{value per_task.a.fidelity .2f}, {value per_task.b.fidelity .2f}", table, "run") == "0.25, 0.75"
    assert claims.fill("{range per_task.*.fidelity .2f}, {mean per_task.*.fidelity .2f}", table, "run") == "0.25-0.75, 0.50"
    with pytest.raises(ConfigError, match="no column like"):
        claims.fill("{range per_task.*.nothing}", table, "run")
    with pytest.raises(ConfigError, match="is no finished run"):
        claims.record_run(tmp_path / "nothing", root=tmp_path)
    # a run at a named scale is its own table: `internalize run logicot --scale smoke` is not the default run
    (run / "config.yaml").write_text((run / "config.yaml").read_text() + "scale: smoke\n")
    out = claims.record_run(run, root=tmp_path)
    assert out == tmp_path / "docs" / "results" / "runs" / "logicot_smoke" / "results.csv"
    # a run of that scale with overrides of its own is named apart, and keeps the scale's table
    assert claims.record_run(run, root=tmp_path, name="logicot_smoke_lr3") == out.parent.parent / "logicot_smoke_lr3" / "results.csv"
    assert out.exists()
    for bad in ("../logicot", "a/b", "..", ""):
        with pytest.raises(ConfigError, match="a table's name"):
            claims.record_run(run, root=tmp_path, name=bad)


def test_row_filters_apply_to_every_template_of_the_row(root):
    write_spec(root, "{count} runs, {meansd x .1f}")
    spec = yaml.safe_load((root / "docs" / "claims" / "toy.yaml").read_text())
    spec["rows"][0]["where"] = ["group=a"]
    assert "| x is about 2 | 3 runs, 2.0 ± 1.0 |" in claims.render(spec, root)


def test_the_command_names_a_stale_page_and_a_bad_spec_in_one_line(root, monkeypatch):
    real = claims.sync
    monkeypatch.setattr(claims, "sync", lambda check=False: real(check, root=root))
    write_spec(root, "{mean x group=a}")
    result = CliRunner().invoke(app, ["claims", "--check"])
    assert result.exit_code == 1 and "stale claims tables: page.md" in result.output
    assert CliRunner().invoke(app, ["claims"]).exit_code == 0
    assert CliRunner().invoke(app, ["claims", "--check"]).exit_code == 0
    write_spec(root, "{mean x @nosuch}")
    result = CliRunner().invoke(app, ["claims", "--check"])
    assert result.exit_code == 2 and "unknown table 'nosuch'" in result.output
    assert len(result.output.strip().splitlines()) == 1
