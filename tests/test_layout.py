"""The package's shape: the core imports no system, a system no other system, and no import cycle
(deferred imports inside functions included); no file past 400 lines; the README's layout names
every package folder; the results index names every committed table."""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "internalize"
SYSTEMS = "internalize.systems"


def module_name(path: Path) -> str:
    parts = (path.relative_to(ROOT) if path.is_relative_to(ROOT) else Path(path.name)).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for p in PACKAGE.rglob("*.py")}


def imports_of(path: Path, known: set[str]) -> set[str]:
    """Every module of the package that `path` imports, at the top or inside a function."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[:len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            for alias in node.names:
                candidate = f"{base}.{alias.name}"
                found.add(candidate if candidate in known else base)
    return {m for m in found if m in known}


def graph() -> dict[str, set[str]]:
    found = modules()
    return {name: imports_of(path, set(found)) for name, path in found.items()}


def system_of(module: str) -> str | None:
    parts = module.split(".")
    return parts[2] if module.startswith(SYSTEMS + ".") else None


def cycle(edges: dict[str, set[str]]) -> list[str] | None:
    """One import cycle as a list of modules, or None."""
    state: dict[str, int] = {}  # 1: on the path, 2: done

    def visit(node: str, path: list[str]) -> list[str] | None:
        state[node] = 1
        for nxt in sorted(edges.get(node, ())):
            if state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt] if nxt in path else [node, nxt]
            if nxt not in state and (found := visit(nxt, path + [nxt])):
                return found
        state[node] = 2
        return None

    for start in sorted(edges):
        if start not in state and (found := visit(start, [start])):
            return found
    return None


def test_the_core_imports_no_system_and_a_system_no_other():
    bad = []
    for module, imported in graph().items():
        mine = system_of(module)
        for target in imported:
            theirs = system_of(target)
            if theirs is not None and theirs != mine:
                bad.append(f"{module} imports {target}")
    assert not bad, "\n".join(sorted(bad))


def test_there_is_no_import_cycle():
    assert cycle(graph()) is None, " -> ".join(cycle(graph()))


def test_the_walk_sees_deferred_imports_and_cycles(tmp_path):
    """The checks above can fail: a function-level import is an edge, and a loop of edges is found."""
    source = tmp_path / "m.py"
    source.write_text("def f():\n    from internalize.systems.logicot import model\n")
    assert imports_of(source, {"internalize.systems.logicot.model"}) == {"internalize.systems.logicot.model"}
    assert cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) is not None
    assert cycle({"a": {"b"}, "b": {"c"}, "c": set()}) is None


def test_every_system_is_one_folder_that_registers_itself():
    folders = sorted(p.name for p in (PACKAGE / "systems").iterdir() if (p / "__init__.py").exists())
    assert folders == ["automata", "logicot", "sparse_parity", "strategies"]
    for folder in folders:
        assert "registry.register(" in (PACKAGE / "systems" / folder / "__init__.py").read_text()


def test_no_file_of_the_package_is_over_400_lines_and_config_py_at_most_250():
    long = {str(p.relative_to(ROOT)): n for p in PACKAGE.rglob("*.py") if (n := len(p.read_text().splitlines())) > 400}
    assert not long, long
    assert len((PACKAGE / "config.py").read_text().splitlines()) <= 250


def test_the_readme_layout_names_every_package_folder():
    readme = (ROOT / "README.md").read_text()
    layout = readme[readme.index("## Layout"):]
    layout = layout[:layout.index("\n## ", 5)] if "\n## " in layout[5:] else layout
    folders = sorted({p.parent.relative_to(PACKAGE).as_posix() for p in PACKAGE.rglob("__init__.py")} - {"."})
    missing = [f for f in folders if f"{f.rpartition('/')[2]}/" not in layout]
    assert not missing, f"README's layout does not name {missing}"


def test_every_committed_table_has_its_row_and_command_in_the_results_index():
    results = ROOT / "docs" / "results"
    rows = [line for line in (results / "README.md").read_text().splitlines() if line.startswith("| [")]
    linked = {line[3:line.index("]")] for line in rows}
    folders = {p.name for p in results.iterdir() if p.is_dir() and p.name != "runs"}
    folders |= {f"runs/{p.name}" for p in (results / "runs").iterdir() if p.is_dir()}
    assert not folders - linked, f"docs/results/README.md has no row for {sorted(folders - linked)}"
    assert all("`" in line.split(" | ")[1] for line in rows), "a row without its command"
