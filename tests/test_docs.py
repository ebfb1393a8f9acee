"""The docs stay true: the config reference is current, every quoted command names a real
experiment or sweep with real keys, and every link stays inside the repository."""
from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
import yaml

from internalize import config as configs
from internalize import sweep as sweeps
from internalize.cli import app
from internalize.reference import config_reference

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "docs" / "results"
PAGES = sorted([ROOT / "README.md", ROOT / "benchmarks" / "README.md", *(ROOT / "docs").glob("*.md"),
                RESULTS / "README.md"])
PAGES = [p for p in PAGES if p.exists()]
COMMANDS = {c.name or c.callback.__name__.replace("_", "-") for c in app.registered_commands}


def test_the_committed_config_reference_is_current():
    committed = (ROOT / "docs" / "config.md").read_text()
    assert committed == config_reference(), "docs/config.md is stale: run `internalize reference --out docs/config.md`"


def test_the_config_reference_names_every_key():
    text = config_reference()
    for key in ("task.pairing", "task.automaton", "model.bare_answer", "theory.row_step", "log.tensorboard"):
        assert f"| `{key}` |" in text
    assert "| `train.batch_size` | `1024` | int |" in text  # the default and type come from the model
    assert "| `curriculum.name` | `log_icot` | `log_icot`, `stepwise`" in text


def snippets(text: str) -> list[str]:
    """Inline code spans (which may wrap lines) and code-block lines: where commands are quoted."""
    spans = [" ".join(s.split()) for s in re.findall(r"`([^`]+)`", re.sub(r"```.*?```", "", text, flags=re.S))]
    blocks = [line.strip() for block in re.findall(r"```[^\n]*\n(.*?)```", text, flags=re.S)
              for line in block.splitlines()]
    indented = [line.strip() for line in text.splitlines() if line.startswith("    ") and "internalize " in line]
    return spans + blocks + indented


def quoted_commands(text: str) -> list[list[str]]:
    """Each `internalize SUBCOMMAND ...` quoted in a page, as argument lists; usage synopses
    (with [optional] parts or ... ) are left out."""
    out = []
    for snippet in snippets(text):
        for match in re.finditer(r"(?:^|\s|\.venv/bin/)internalize ([a-z][\w-]*(?: [^#;|&]*)?)", snippet):
            line = match.group(1).strip()
            if "[" in line or "..." in line:
                continue
            try:
                out.append(shlex.split(line))
            except ValueError:
                out.append(line.split())
    return out


def placeholder(token: str) -> bool:
    return token.isupper() or bool(re.fullmatch(r"[A-Z_]+(=.*)?", token))


def parse_sets(args: list[str]) -> tuple[list[str], list[str]]:
    """(positional arguments, --set values) of a command line."""
    positional, sets, skip = [], [], False
    for i, arg in enumerate(args):
        if skip:
            skip = False
            continue
        if arg == "--set":
            sets.append(args[i + 1] if i + 1 < len(args) else "")
            skip = True
        elif arg in ("--out", "--resume", "--scale", "--executor", "--address", "--workers", "--threads"):
            skip = True
        elif not arg.startswith("-"):
            positional.append(arg)
    return positional, sets


def known_key(config: configs.Config, key: str) -> bool:
    node = config.model_dump()
    for part in key.split("."):
        if not isinstance(node, dict) or part not in node:
            return False
        node = node[part]
    return True


def check_command(args: list[str]) -> None:
    assert args[0] in COMMANDS, f"no command `internalize {args[0]}`"
    positional, sets = parse_sets(args[1:])
    if args[0] == "run" and positional and positional[0].endswith((".yaml", ".yml")):
        file = ROOT / positional[0]  # a user's own experiment file (its imports may need PYTHONPATH)
        assert file.exists(), f"no file {positional[0]}"
        assert "system" in yaml.safe_load(file.read_text()), f"{positional[0]} names no system"
    elif args[0] == "run" and positional and not placeholder(positional[0]):
        name = positional[0]
        assert name in configs.available(), f"no experiment {name!r}"
        values = [s.split("=", 1) for s in sets]
        base = configs.load(name)
        for key, *_ in values:
            assert known_key(base, key), f"`--set {key}=...` is not a config key of {name}"
        if not any(placeholder(v[1]) if len(v) > 1 else True for v in values):
            configs.load(name, sets)  # the whole line validates as written
    if args[0] == "sweep" and positional and not placeholder(positional[0]):
        name = positional[0]
        assert name in sweeps.available() or (ROOT / name).exists(), f"no sweep {name!r}"
        sweeps.expand(sweeps.read_spec(name))


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_quoted_command_runs_as_written(page):
    commands = quoted_commands(page.read_text())
    problems = []
    for args in commands:
        try:
            check_command(args)
        except (AssertionError, configs.ConfigError) as err:
            problems.append(f"internalize {' '.join(args)}: {err}")
    assert not problems, "\n".join(problems)


def test_the_command_check_can_fail():
    text = ("Run `internalize run logicot --set task.n=40` or `internalize run logicot --set task.colour=red`,\n"
            "`internalize sweep no_such_sweep`, `internalize run no_such_experiment` and\n"
            "`internalize run logicot --set\ntask.k=12`.\n\n    internalize run NAME [--set key=value ...]\n")
    commands = quoted_commands(text)
    assert len(commands) == 5  # the synopsis is left out; the wrapped span is one command
    outcomes = []
    for args in commands:
        try:
            check_command(args)
            outcomes.append(True)
        except (AssertionError, configs.ConfigError):
            outcomes.append(False)
    assert outcomes == [True, False, False, False, False]


def links(text: str) -> list[str]:
    return re.findall(r"\]\(([^)\s]+)\)", text) + re.findall(r"(?:src|href)=\"([^\"]+)\"", text)


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_links_stay_inside_the_repository_and_resolve(page):
    text = page.read_text()
    assert "../shared" not in text and "specs/" not in text, "a page points at the specs, which a clone does not have"
    for target in links(text):
        assert not re.match(r"[a-z]+://", target), f"{target} leaves the repository"
        file = (page.parent / target.split("#")[0]).resolve()
        assert file.is_relative_to(ROOT) and file.exists(), f"{page.name}: {target} does not exist"


def test_every_experiment_and_sweep_is_documented():
    """Every bundled sweep (but the test and benchmark ones) is quoted, and every experiment is quoted
    as a run or through a quoted sweep of it."""
    text = " ".join("\n".join(p.read_text() for p in PAGES).split())
    shown = set()
    for name in sweeps.available():
        if name.startswith(("smoke", "bench")):
            continue
        assert f"internalize sweep {name}" in text, f"no page shows `internalize sweep {name}`"
        shown.add(sweeps.read_spec(name).experiment)
    for name in configs.available():
        assert f"internalize run {name}" in text or name in shown, f"no page shows `internalize run {name}`"


def test_every_committed_table_names_the_command_that_reproduces_it():
    """docs/results/README.md has a row for every folder of committed rows (a sweep's, a single
    run's under runs/), linking it, with one command that parses as written; a folder named after a
    bundled sweep is reproduced by that sweep."""
    rows = {}
    for line in (RESULTS / "README.md").read_text().splitlines():
        match = re.match(r"\| \[([\w/]+)\]\(([^)]+)\) \| `(internalize [^`]+)` \|", line)
        if match:
            rows[match.group(1)] = (match.group(2), match.group(3))
    folders = {str(p.parent.relative_to(RESULTS)) for p in RESULTS.rglob("*.csv") if "figures" not in p.parts}
    assert folders - set(rows) == set(), "tables without a command in docs/results/README.md"
    assert set(rows) - folders == set(), "rows of docs/results/README.md without a committed table"
    for name, (link, command) in rows.items():
        assert (RESULTS / link).exists(), f"{name}: {link} does not exist"
        check_command(shlex.split(command)[1:])
        if name in sweeps.available():
            assert command == f"internalize sweep {name}", f"{name} is a sweep's table: {command}"
