import pytest

from internalize.config import ConfigError, load, parse_override


def test_overrides_are_typed_by_yaml():
    assert parse_override("task.n=40") == ("task.n", 40)
    assert parse_override("model.quantize=true") == ("model.quantize", True)
    assert parse_override("train.lr=1e-2") == ("train.lr", 0.01)
    cfg = load("logicot", ["task.n=40", "task.k=8", "seed=7"])
    assert (cfg.task.n, cfg.task.k, cfg.seed) == (40, 8, 7)


def test_scale_then_overrides():
    cfg = load("logicot", ["task.n=20"], scale="smoke")
    assert (cfg.task.n, cfg.task.k, cfg.scale) == (20, 8, "smoke")


def test_theory_mode_resolves_to_one_rounded_step_per_stage():
    cfg = load("logicot_theory")
    assert cfg.theory.enabled and cfg.train.steps_per_stage == 1
    assert cfg.train.advance == "steps" and cfg.model.quantize
    assert cfg.train.batch_size == round(30 ** 2.9)
    assert load("logicot_theory", ["theory.samples=500"]).train.batch_size == 500
    assert load("logicot", ["theory.enabled=true"]).model.quantize  # derived, where nothing contradicts it
    with pytest.raises(ConfigError, match="system automata reads no section 'theory'"):
        load("automata_regimes", ["theory.enabled=true"])


@pytest.mark.parametrize("override, message", [
    ("train.batch_size=64", "theory.enabled fixes train.batch_size=19215; the config sets train.batch_size=64"),
    ("train.advance=threshold", "theory.enabled fixes train.advance=steps"),
    ("train.steps_per_stage=5", "theory.enabled fixes train.steps_per_stage=1"),
    ("train.optimizer=adamw", "theory.enabled steps with its own row step"),
])
def test_a_config_that_conflicts_with_theory_mode_is_refused(override, message):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(")):
        load("logicot_theory", [override])


def test_a_saved_theory_config_loads_back_the_same(tmp_path):
    from internalize.config import to_yaml

    cfg = load("sparse_parity_e2e", ["task.k=6"])
    (tmp_path / "c.yaml").write_text(to_yaml(cfg))
    assert load(str(tmp_path / "c.yaml")) == cfg


def test_a_config_file_path_works_and_a_bad_one_is_refused(tmp_path):
    good = tmp_path / "mine.yaml"
    good.write_text("system: logicot\ntask: {n: 20, k: 4}\n")
    cfg = load(str(good))
    assert cfg.experiment == "mine" and cfg.task.k == 4
    bad = tmp_path / "bad.yaml"
    bad.write_text("system: logicot\ntask: {n: 20, k: 4, colour: red}\n")
    with pytest.raises(ConfigError, match="unknown config key 'task.colour'"):
        load(str(bad))


@pytest.mark.parametrize("text, message", [
    ("task: {n: 20, k: 4}\n", "the config names no system; add 'system: NAME'"),
    ("system: logicat\n", "unknown system 'logicat'; available: .*logicot"),
    ("system: automata\ntask: {name: parity_tree}\n", "system automata cannot train task parity_tree"),
])
def test_the_system_is_named_explicitly_and_checked(tmp_path, text, message):
    path = tmp_path / "mine.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=message):
        load(str(path))


def test_a_system_without_task_or_model_gets_its_defaults(tmp_path):
    path = tmp_path / "mine.yaml"
    path.write_text("system: automata\n")
    cfg = load(str(path))
    assert (cfg.task.name, cfg.model.name) == ("automaton", "gpt")
