import json

import pandas as pd
import pytest
import torch

from internalize import config as configs
from tests.conftest import read_summary, without_timings

EXPERIMENTS = sorted(configs.available())


def test_list_names_every_experiment(cli):
    result = cli("list")
    assert result.exit_code == 0
    for name in ["logicot", "logicot_stepwise", "logicot_e2e", "logicot_no_gates", "logicot_theory"]:
        assert name in result.output


@pytest.mark.slow
@pytest.mark.parametrize("name", EXPERIMENTS)
def test_smoke_run_of_every_config(cli, tmp_path, name):
    out = tmp_path / name
    result = cli("run", name, "--smoke", "--quiet", "--out", out)
    assert result.exit_code == 0, result.output
    summary = read_summary(out)
    for key in ("stages", "samples_seen", "train_seconds", "per_stage"):
        assert key in summary
    assert len(summary["per_stage"]) == summary["stages"]
    figures = {p.name for p in (out / "figures").iterdir()}
    assert "val_loss.png" in figures
    assert (out / "checkpoints" / "last.safetensors").exists()
    assert "scale: smoke" in (out / "config.yaml").read_text()
    if summary["task"] == "parity_tree":
        assert {"zero_filled_accuracy", "child_attention_mass"} <= set(summary)
        assert len(summary["child_attention_mass"]) == summary["layers"] == 3
        assert {"val_loss", "zero_filled_accuracy"} <= set(summary["per_stage"][0])
        assert {"zero_filled_accuracy.png", "attention_layer1.png", "attention_layer3.png"} <= figures
    elif summary["system"] == "strategies_base":
        assert {"fidelity", "fidelity_greedy", "share_tv", "response_loss", "strategy_entropy", "probes"} <= set(summary)
        assert set(summary["per_task"]) == set(summary["tasks"]) and len(summary["tasks"]) == 6
        for name, row in summary["per_task"].items():  # every test example counted once, by its input's length
            lengths = row["by_input_length"]
            examples = sum(v["examples"] for v in lengths.values())
            assert row["fidelity"] == pytest.approx(sum(v["fidelity"] * v["examples"] for v in lengths.values()) / examples)
            # the unfaithful greedy samples shown are unfaithful, and there are as many as the greedy share says
            from internalize.systems.strategies.benchmark import TASKS, validate

            failures = row["greedy_failures"]
            assert len(failures) == min(5, round((1 - row["fidelity_greedy"]) * examples))
            assert not any(f["trace"] is not None and validate(name, f["input"], f["trace"]).valid for f in failures)
            # every unfaithful sampled trace is placed once: under the strategy it follows, at a segment
            placed = sum(n for counts in row["departures"].values() for n in counts.values())
            assert placed == round((1 - row["fidelity"]) * examples)
            assert set(row["departures"]) <= {*TASKS[name].strategies, "none"}
            # task.fresh draws strategies uniformly: the training shares, and the TV against them
            k = len(TASKS[name].strategies)
            assert row["train_strategy_shares"] == dict.fromkeys(TASKS[name].strategies, 1 / k)
            if row["strategy_shares"] is not None:
                off = 0.5 * sum(abs(v - 1 / k) for v in row["strategy_shares"].values())
                assert row["share_tv_train"] == pytest.approx(off)
        assert sum(v["examples"] for row in summary["per_task"].values()
                   for v in row["by_input_length"].values()) == summary["test_examples"]
        assert {"fidelity.png", "strategy_shares.png", "probes.png"} <= figures
    elif summary["system"] == "strategies_factorize":
        assert {"fidelity", "fidelity_greedy", "alignment", "alignment_strict", "alignment_chance", "kl", "c",
                "trajectory", "steering"} <= set(summary)
        assert [p["step"] for p in summary["trajectory"]] == [0, 4, 8]  # eval.snapshots = 2 of 8 steps, the end
        assert all(len(p["pca"]) == min(240, summary["test_examples"]) for p in summary["trajectory"][:2])
        assert summary["trajectory"][-1]["alignment"] == summary["alignment"]
        assert {"trajectory.png", "posterior_pca.png", "steering.png"} <= figures
    elif summary["task"] == "sparse_parity":
        assert {"direct_accuracy", "direct_row_is_support", "support"} <= set(summary)
        assert {"direct_accuracy.png", "attention_scores.png"} <= figures
    else:  # the mixture evaluates two formats, direct_ and cot_; the others their stage's own
        prefixes = ["direct_", "cot_"] if summary["experiment"] == "automata_mixture" else [""]
        for p in prefixes:
            assert {f"{p}id_accuracy", f"{p}ood_accuracy"} <= set(summary)
            assert {f"{p}id_accuracy.png", f"{p}accuracy_vs_removed.png"} <= figures
        assert "per_position_accuracy" in summary and "attention.png" in figures


@pytest.mark.slow
def test_smoke_log_icot_solves_parity_in_one_pass(cli, tmp_path):
    assert cli("run", "logicot", "--smoke", "--quiet", "--out", tmp_path / "r").exit_code == 0
    summary = read_summary(tmp_path / "r")
    assert summary["stages"] == 3
    before, last = summary["per_stage"][:-1], summary["per_stage"][-1]
    assert all(abs(s["zero_filled_accuracy"] - 0.5) < 0.1 for s in before)  # chance until the last level
    assert last["zero_filled_accuracy"] == summary["zero_filled_accuracy"] == 1.0
    assert summary["explicit_cot_accuracy"] == 1.0
    assert min(summary["child_attention_mass"]) >= 0.9


@pytest.mark.slow
@pytest.mark.parametrize("name", ["logicot", "automata_regimes", "sparse_parity_internalize", "strategies_base",
                                  "strategies_factorize"])
def test_same_config_and_seed_give_the_same_summary(cli, tmp_path, name):
    for run in ("a", "b", "c"):
        seed = 5 if run == "c" else 4
        assert cli("run", name, "--smoke", "--quiet", "--set", f"seed={seed}", "--out", tmp_path / run).exit_code == 0
    a, b, c = (without_timings(read_summary(tmp_path / run)) for run in ("a", "b", "c"))
    assert a == b
    assert a["per_stage"] != c["per_stage"]  # another seed: other data, another run
    if name == "strategies_factorize":  # every generation of the final evaluation repeats too
        import pandas as pd

        tables = [pd.read_parquet(tmp_path / run / "generations.parquet") for run in ("a", "b")]
        assert len(tables[0]) > 0 and tables[0].equals(tables[1])


@pytest.mark.parametrize("args,message", [
    (["logicot", "--set", "task.k=12"], "task.k must be a power of two"),
    (["logicot", "--set", "task.k=64"], "must not exceed task.n"),
    (["logicot", "--set", "task.k=1"], "at least 2"),
    (["logicot", "--set", "task.nn=3"], "unknown config key 'task.nn'"),
    (["logicot", "--set", "train.lr"], "key=value"),
    (["logicot", "--set", "model.gate=sometimes"], "model.gate"),
    (["logicot", "--scale", "huge"], "no scale 'huge'"),
    (["parity_forever"], "unknown experiment 'parity_forever'"),
    (["logicot", "--set", "system=logicat"], "unknown system 'logicat'"),
    (["strategies_base", "--smoke", "--set", "task.data=no/such/dir"], "task.data: no data directory no/such/dir"),
    (["strategies_base", "--smoke", "--set", "task.tasks=[list_sum, juggling]"], "unknown task 'juggling'"),
    (["strategies_base", "--smoke", "--set", "task.formats={linear_equation: rows}"],
     "linear_equation has no trace format 'rows'"),
    (["strategies_base", "--smoke", "--set", "task.formats={juggling: columns}"], "unknown task 'juggling'"),
    (["strategies_factorize", "--smoke", "--set", "objective.name=magic"], "objective.name: Input should be 'elbo'"),
    (["strategies_factorize", "--smoke", "--set", "objective.alpha=2"], "alpha and beta_warmup must lie in [0, 1]"),
    (["strategies_factorize", "--smoke", "--set", "data.response_source=web"], "data.response_source"),
    pytest.param(["logicot", "--set", "device=cuda"], "CUDA is not available",
                 marks=pytest.mark.skipif(torch.cuda.is_available(), reason="CUDA is here")),
])
def test_bad_input_is_one_clear_line_and_exit_2_and_leaves_no_run(cli, tmp_path, args, message):
    out = tmp_path / "run"
    result = cli("run", *args, "--out", out)
    assert result.exit_code == 2
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:") and message in lines[0], result.output
    assert not out.exists()


def experiment_of_each_system() -> dict[str, str]:
    """One bundled experiment per system (the first, by name)."""
    found = {}
    for name in configs.available():
        found.setdefault(configs.load(name).system, name)
    return found


def test_a_key_of_a_section_the_system_does_not_read_is_one_line_and_exit_2(cli, tmp_path):
    """Every system against every section another system reads and it does not: one error line, exit
    2, no run directory (e.g. `run logicot --set objective.name=elbo`, `run strategies_base --set
    curriculum.name=stepwise`)."""
    from internalize import registry

    every = {s: set(configs.sections(s)) for s in registry.names()}
    experiments = experiment_of_each_system()
    assert set(experiments) == set(every)  # each system has a bundled experiment
    checked = 0
    for system, experiment in experiments.items():
        for section in sorted(set().union(*every.values()) - every[system]):
            key = {"objective": "name=elbo", "curriculum": "name=stepwise"}.get(section, "x=1")
            out = tmp_path / f"{system}-{section}"
            result = cli("run", experiment, "--smoke", "--set", f"{section}.{key}", "--out", out)
            lines = [line for line in result.output.splitlines() if line.strip()]
            assert result.exit_code == 2 and len(lines) == 1, result.output
            assert f"system {system} reads no section '{section}'" in lines[0]
            assert not out.exists()
            checked += 1
    assert checked >= 10  # objective, data, theory, curriculum: each refused somewhere


def test_an_existing_run_is_never_overwritten(cli, tmp_path):
    out = tmp_path / "run"
    out.mkdir()
    (out / "summary.json").write_text("precious")
    result = cli("run", "logicot", "--smoke", "--out", out)
    assert result.exit_code == 2 and "already exists" in result.output
    assert (out / "summary.json").read_text() == "precious"
    assert sorted(p.name for p in out.iterdir()) == ["summary.json"]


@pytest.mark.slow
def test_tensorboard_logging_writes_event_files(cli, tmp_path):
    pytest.importorskip("tensorboard")
    out = tmp_path / "run"
    assert cli("run", "logicot", "--smoke", "--quiet", "--set", "log.tensorboard=true", "--out", out).exit_code == 0
    events = list((out / "tensorboard").glob("events.out.tfevents.*"))
    assert events and events[0].stat().st_size > 100


def test_an_unwritable_run_directory_is_one_clear_line(cli, tmp_path):
    blocker = tmp_path / "a_file"
    blocker.write_text("not a folder")
    result = cli("run", "logicot", "--smoke", "--out", blocker / "run")
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert result.exit_code == 2 and len(lines) == 1 and "cannot write run directory" in lines[0], result.output


@pytest.mark.slow
def test_a_full_disk_mid_run_is_one_clear_line(cli, tmp_path, monkeypatch):
    import errno

    from internalize.runs import Run

    def full(self, state, tensors):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(Run, "checkpoint", full)
    result = cli("run", "logicot", "--smoke", "--set", "train.checkpoint_every=1", "--out", tmp_path / "run")
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert result.exit_code == 1 and len(lines) == 1 and "No space left on device" in lines[0], result.output


@pytest.mark.slow
def test_a_corrupt_or_incomplete_data_directory_is_one_clear_line(cli, tmp_path):
    data = tmp_path / "data"
    assert cli("data", "strategies", "--out", data, "--per-task", 20).exit_code == 0
    (data / "test.parquet").unlink()
    (data / "validation.parquet").write_bytes(b"PAR1 not really")
    for broken, message in (("validation.parquet", "cannot read"), ("test.parquet", "is missing")):
        result = cli("run", "strategies_base", "--smoke", "--set", f"task.data={data}", "--out", tmp_path / broken)
        lines = [line for line in result.output.splitlines() if line.strip()]
        assert result.exit_code == 2 and len(lines) == 1 and message in lines[0], result.output
        assert not (tmp_path / broken).exists()
        (data / "validation.parquet").unlink(missing_ok=True)
    assert cli("data", "strategies", "--out", tmp_path / "good", "--per-task", 20).exit_code == 0
    result = cli("run", "strategies_base", "--smoke", "--quiet", "--set", f"task.data={tmp_path / 'good'}",
                 "--out", tmp_path / "run")
    assert result.exit_code == 0, result.output


@pytest.mark.slow
def test_data_written_in_one_trace_format_is_refused_in_another(cli, tmp_path):
    data = tmp_path / "columns"
    written = cli("data", "strategies", "--out", data, "--per-task", 20, "--format", "linear_equation=columns")
    assert written.exit_code == 0, written.output
    traces = pd.read_parquet(data / "train.parquet").query("task == 'linear_equation' and strategy == 'subtract_first'")
    assert traces["trace"].str.contains("b0|b1|c0|c1").all()  # the columns format was written
    result = cli("run", "strategies_base", "--smoke", "--set", f"task.data={data}", "--out", tmp_path / "run")
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert result.exit_code == 2 and len(lines) == 1 and "not valid in trace format 'default'" in lines[0], result.output
    result = cli("run", "strategies_base", "--smoke", "--quiet", "--set", f"task.data={data}",
                 "--set", "task.formats={linear_equation: columns}", "--out", tmp_path / "run")
    assert result.exit_code == 0, result.output
    bad = cli("data", "strategies", "--out", tmp_path / "bad", "--per-task", 20, "--format", "linear_equation")
    assert bad.exit_code == 2 and "TASK=FORMAT" in bad.output


@pytest.mark.slow
@pytest.mark.parametrize("name", ["logicot", "automata_regimes", "strategies_factorize"])  # one stage, then several
def test_evaluating_a_finished_run_again_gives_its_summary(cli, tmp_path, name):
    out = tmp_path / "run"
    assert cli("run", name, "--smoke", "--quiet", "--out", out).exit_code == 0
    result = cli("evaluate", out)
    assert result.exit_code == 0 and "evaluation.json" in result.output, result.output
    summary, again = read_summary(out), json.loads((out / "evaluation.json").read_text())
    assert again.pop("overrides") == []
    timings = {"evaluation_seconds"}
    assert {k: v for k, v in again.items() if k not in timings} == {
        k: v for k, v in summary.items() if k in again and k not in timings}
    assert {"experiment", "seed"} <= set(again) and "per_stage" not in again  # training figures stay in summary.json
    if name == "strategies_factorize":  # its generations again, beside the run's own
        import pandas as pd

        assert pd.read_parquet(out / "evaluation" / "generations.parquet").equals(pd.read_parquet(out / "generations.parquet"))
    else:
        assert not (out / "evaluation").exists()


@pytest.mark.slow
def test_evaluate_can_change_eval_settings_alone(cli, tmp_path):
    out = tmp_path / "run"
    assert cli("run", "strategies_base", "--smoke", "--quiet", "--set", "task.per_task=200", "--out", out).exit_code == 0
    assert read_summary(out)["test_examples"] == 48  # of the 120 test inputs
    assert cli("evaluate", out, "--set", "eval.test_size=120").exit_code == 0
    again = json.loads((out / "evaluation.json").read_text())
    assert again["test_examples"] == 120 and again["overrides"] == ["eval.test_size=120"]
    result = cli("evaluate", out, "--set", "model.width=64")
    assert result.exit_code == 2 and "eval.* settings only" in result.output


def test_evaluate_refuses_what_is_no_finished_run(cli, tmp_path):
    unfinished = tmp_path / "unfinished"  # a run stopped before its summary
    unfinished.mkdir()
    (unfinished / "config.yaml").write_text("experiment: logicot\n")
    for folder, message in ((tmp_path / "nothing", "not a run directory"), (unfinished, "has not finished")):
        result = cli("evaluate", folder)
        assert result.exit_code == 2 and message in result.output and len(result.output.strip().splitlines()) == 1
