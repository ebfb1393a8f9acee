"""docs/extending.md's worked example, run as the guide says: a task, a model, a curriculum and a
system from one user file, registered on import and trained by the one trainer."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

from internalize import config as configs
from internalize import curricula, registry
from internalize.reference import config_reference
from tests.conftest import read_summary

EXAMPLES = Path(__file__).resolve().parents[1] / "docs" / "examples"


@pytest.fixture
def clean_registries():
    """Whatever the example registers is gone afterwards (the config reference must not see it)."""
    registry.names()  # the built-ins registered first, so that what is saved holds them
    saved = dict(registry.SYSTEMS), dict(curricula.CURRICULA)
    sys.path.insert(0, str(EXAMPLES))
    yield
    sys.path.remove(str(EXAMPLES))
    sys.modules.pop("running_sum", None)
    registry.SYSTEMS.clear()
    registry.SYSTEMS.update(saved[0])
    curricula.CURRICULA.clear()
    curricula.CURRICULA.update(saved[1])


@pytest.mark.slow
def test_the_worked_example_trains_through_the_cli(cli, tmp_path, clean_registries):
    before = config_reference()
    out = tmp_path / "run"
    result = cli("run", EXAMPLES / "running_sum.yaml", "--out", out, "--quiet")
    assert result.exit_code == 0, result.output
    summary = read_summary(out)
    assert summary["system"] == "running_sum"
    per_stage = [s["answer_accuracy"] for s in summary["per_stage"]]
    assert len(per_stage) == 3 and per_stage[0] < 0.5  # with the chain shown, the one-pass answer is untrained
    assert summary["answer_accuracy"] >= 0.95  # internalized: chance is 1/3
    assert (out / "figures" / "answer_accuracy.png").exists()
    assert "running_sum" in config_reference() and "running_sum" not in before


def test_the_example_registers_cleanly(clean_registries):
    config = configs.load(str(EXAMPLES / "running_sum.yaml"))
    assert (config.system, config.task.name, config.model.name, config.curriculum.name) == (
        "running_sum", "running_sum", "slot_mlp", "halves")
    with pytest.raises(configs.ConfigError, match="system running_sum cannot train model gpt; use model.name=slot_mlp"):
        configs.load(str(EXAMPLES / "running_sum.yaml"), ["model={name: gpt}"])
    with pytest.raises(configs.ConfigError, match="system running_sum reads no section 'objective'"):
        configs.load(str(EXAMPLES / "running_sum.yaml"), ["objective.name=elbo"])


def test_a_built_in_system_registers_as_the_example_does(clean_registries):
    """A fresh interpreter knows no system until a config names one; then the module its entry point
    names registers it, with the same kind of entry the example's import registers."""
    import subprocess

    code = ("from internalize import registry; assert not registry.SYSTEMS; "
            "entry = registry.get('logicot'); print(sorted(registry.SYSTEMS), sorted(entry.sections))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "['logicot'] ['curriculum', 'model', 'task', 'theory']"
    configs.load(str(EXAMPLES / "running_sum.yaml"))
    mine, built_in = registry.get("running_sum"), registry.get("logicot")
    assert type(mine) is type(built_in) and set(mine.sections) <= set(built_in.sections)


def test_a_missing_import_is_one_error(tmp_path):
    path = tmp_path / "mine.yaml"
    path.write_text("imports: [no_such_module]\nsystem: logicot\n")
    with pytest.raises(configs.ConfigError, match="imports: cannot import 'no_such_module'"):
        configs.load(str(path))
