import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from internalize.config import ConfigError
from internalize.sweep import (
    TIMING_COLUMNS,
    available,
    collect,
    expand,
    read_spec,
    stage_columns,
)
from internalize.sweep.report import (
    group_label,
    group_styles,
    power_fit,
    spread,
    stage_table,
    write_report,
)
from internalize.systems.automata.system import relearn_columns

SMALL = """experiment: logicot
scale: smoke
grid:
  task.k: [4, 8]
seeds: [0, 1, 2, 3]
report:
  figures:
    - {x: task.k, y: samples_to_full_accuracy, logx: true, logy: true, fit: power}
"""


def write(tmp_path, text, name="sweep.yaml"):
    path = tmp_path / name
    path.write_text(text)
    return path


def comparable(root):
    table = pd.read_parquet(root / "results.parquet")
    table = table.drop(columns=[c for c in table.columns if c in TIMING_COLUMNS])
    return table.sort_values("run_id").reset_index(drop=True)


def test_expand_is_grid_times_seeds_and_refuses_a_bad_sweep(tmp_path):
    tasks = expand(read_spec(write(tmp_path, SMALL)))
    assert len(tasks) == 8
    assert tasks[0]["id"] == "task.k=4__seed=0" and tasks[-1]["id"] == "task.k=8__seed=3"
    assert "task.k=8" in tasks[-1]["overrides"] and "seed=3" in tasks[-1]["overrides"]
    with pytest.raises(ConfigError, match="task.k must be a power of two"):
        expand(read_spec(write(tmp_path, SMALL.replace("[4, 8]", "[4, 12]"))))
    with pytest.raises(ConfigError, match="unknown config key 'task.kk'"):
        expand(read_spec(write(tmp_path, SMALL.replace("task.k:", "task.kk:"))))
    with pytest.raises(ConfigError, match="unknown config key 'seedz'"):
        read_spec(write(tmp_path, SMALL + "seedz: [1]\n"))
    with pytest.raises(ConfigError, match="report.figures.0: 'task.kk' is not a key of the sweep"):
        expand(read_spec(write(tmp_path, SMALL.replace("{x: task.k,", "{x: task.kk,"))))
    grouped = SMALL.replace("fit: power}", "group: model.width}")
    with pytest.raises(ConfigError, match="'model.width' is not a key"):
        expand(read_spec(write(tmp_path, grouped)))


def test_a_sweep_takes_another_sweeps_report_by_name_and_refuses_a_chain(tmp_path):
    mine = read_spec(write(tmp_path, SMALL))
    shared = SMALL.split("report:")[0] + "report: " + str(tmp_path / "sweep.yaml") + "\n"
    theirs = read_spec(write(tmp_path, shared, "other.yaml"))
    assert theirs.report == mine.report and theirs.report.figures[0].fit == "power"
    chained = shared.replace(str(tmp_path / "sweep.yaml"), str(tmp_path / "other.yaml"))
    with pytest.raises(ConfigError, match="names a sweep whose report is another name"):
        read_spec(write(tmp_path, chained, "third.yaml"))
    write(tmp_path, "report: [unclosed\n", "broken.yaml")
    with pytest.raises(ConfigError, match="broken.yaml is not valid YAML"):
        read_spec(write(tmp_path, shared.replace("sweep.yaml", "broken.yaml"), "fifth.yaml"))
    with pytest.raises(ConfigError, match="no sweep file nowhere"):
        read_spec(write(tmp_path, SMALL.split("report:")[0] + "report: nowhere\n", "fourth.yaml"))
    # the bundled headline sweeps share one block
    headline = read_spec("strategies_mixture").report
    assert "alignment_lift" in headline.metrics
    assert all(read_spec(name).report == headline for name in
               ("strategies_mixture_addition", "strategies_polished", "strategies_ft_hw2_polished",
                "strategies_choices_polished"))


def test_a_mapping_or_list_value_names_its_run_plainly():
    tasks = expand(read_spec("strategies_grid_formats"))
    assert [t["id"] for t in tasks] == ["task.formats=grid_path:default__seed=0", "task.formats=grid_path:choices__seed=0"]
    ids = [t["id"] for name in available() for t in expand(read_spec(name))]
    assert not [i for i in ids if any(c in i for c in " '\"{}[]/")]  # nothing a shell must quote, one directory each
    assert "model.hf_path=models%gpt2_char_w96__model.adapt=full__seed=0" in ids


@pytest.mark.parametrize("name", available())
def test_every_shipped_sweep_reads_and_expands(name):
    spec = read_spec(name)
    tasks = expand(spec)  # every run's config validates against its experiment
    assert len(tasks) == len(spec.seeds) * max(1, len(spec.cases)) * int(np.prod([len(v) for v in spec.grid.values()]))


def test_cases_go_together_and_cross_the_grid(tmp_path):
    text = SMALL.replace("grid:", "cases:\n  - {curriculum.name: log_icot}\n"
                                  "  - {curriculum.name: e2e, train.max_steps_per_stage: 30}\ngrid:")
    tasks = expand(read_spec(write(tmp_path, text)))
    assert len(tasks) == 2 * 2 * 4
    e2e = [t for t in tasks if t["point"]["curriculum.name"] == "e2e"]
    assert len(e2e) == 8 and all("train.max_steps_per_stage=30" in t["overrides"] for t in e2e)
    plain = [t for t in tasks if t["point"]["curriculum.name"] == "log_icot"]
    assert not any(o.startswith("train.max_steps_per_stage") for t in plain for o in t["overrides"])
    assert plain[0]["id"] == "curriculum.name=log_icot__task.k=4__seed=0"
    assert e2e[0]["id"] == "curriculum.name=e2e__train.max_steps_per_stage=30__task.k=4__seed=0"


def test_a_bad_sweep_writes_nothing(cli, tmp_path):
    out = tmp_path / "out"
    result = cli("sweep", write(tmp_path, SMALL.replace("[4, 8]", "[4, 12]")), "--out", out)
    assert result.exit_code == 2 and "power of two" in result.output
    assert not out.exists()


@pytest.mark.slow
def test_local_and_ray_sweeps_of_8_runs_give_identical_tables(cli, tmp_path):
    pytest.importorskip("ray")
    file = write(tmp_path, SMALL)
    local, ray = tmp_path / "local", tmp_path / "ray"
    result = cli("sweep", file, "--out", local, "--workers", 2, "--quiet")
    assert result.exit_code == 0, result.output
    result = cli("sweep", file, "--out", ray, "--executor", "ray", "--workers", 2, "--quiet")
    assert result.exit_code == 0, result.output
    a, b = comparable(local), comparable(ray)
    assert len(a) == 8 and (a["status"] == "done").all()
    pd.testing.assert_frame_equal(a, b)
    assert (a["zero_filled_accuracy"] == 1.0).all()
    report = (local / "report.md").read_text()
    assert "8 of 8 runs finished" in report and "samples_to_full_accuracy ~ task.k^b" in report
    assert (local / "figures" / "samples_to_full_accuracy_vs_task_k.png").exists()
    assert (local / "results.csv").exists()


@pytest.mark.slow
def test_a_failing_run_is_recorded_and_the_others_finish(cli, tmp_path):
    plain = SMALL.split("report:")[0]  # its figure is of task.k, which this sweep does not vary
    file = write(tmp_path, plain.replace("task.k: [4, 8]", "train.lr: [0.1, .inf]").replace("[0, 1, 2, 3]", "[0, 1]"))
    out = tmp_path / "out"
    result = cli("sweep", file, "--out", out, "--workers", 2)  # not a terminal: one line per finished run
    assert result.exit_code == 1 and "2 failed" in result.output
    lines = sorted(line.split(" (")[0].split(" ", 2)[2] for line in result.output.splitlines() if line.startswith("run "))
    assert lines == ["done: train.lr=0.1__seed=0", "done: train.lr=0.1__seed=1",
                     "failed: train.lr=inf__seed=0", "failed: train.lr=inf__seed=1"], result.output
    table = pd.read_parquet(out / "results.parquet")
    failed = table[table["status"] == "failed"]
    assert sorted(failed["run_id"]) == ["train.lr=inf__seed=0", "train.lr=inf__seed=1"]
    assert failed["error"].str.contains("non-finite loss").all()
    assert (table[table["train.lr"] == 0.1]["status"] == "done").all()
    assert "## Failed runs" in (out / "report.md").read_text()
    again = cli("sweep", file, "--out", out, "--workers", 2, "--quiet")  # failed runs are retried, finished ones kept
    assert again.exit_code == 1 and "2 run now, 2 already finished, 2 failed" in again.output


@pytest.mark.slow
def test_a_killed_sweep_restarts_where_it_stopped(tmp_path):
    slow = SMALL.replace("scale: smoke", "scale: smoke\nset: {train.advance: steps, train.steps_per_stage: 150, "
                                            "train.eval_every: 1, train.checkpoint_every: 10}")
    file, out = write(tmp_path, slow), tmp_path / "out"
    command = [sys.executable, "-m", "internalize.cli", "sweep", str(file), "--out", str(out), "--workers", "2",
               "--quiet"]
    proc = subprocess.Popen(command, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    finished = lambda: sorted(p.parent.name for p in (out / "runs").glob("*/summary.json"))  # noqa: E731
    deadline = time.time() + 240
    while len(finished()) < 3 and proc.poll() is None and time.time() < deadline:
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    before = {name: (out / "runs" / name / "summary.json").stat().st_mtime_ns for name in finished()}
    assert 3 <= len(before) < 8, before
    result = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr
    assert f"{8 - len(before)} run now, {len(before)} already finished" in result.stdout
    for name, mtime in before.items():  # finished runs were not run again
        assert (out / "runs" / name / "summary.json").stat().st_mtime_ns == mtime
    table = pd.read_parquet(out / "results.parquet")
    assert len(table) == 8 and (table["status"] == "done").all()


def test_report_helpers():
    x = np.array([16.0, 32, 64, 128])
    b, se, a = power_fit(x, 3 * x**1.5)
    assert abs(b - 1.5) < 1e-9 and se < 1e-9 and abs(np.exp(a) - 3) < 1e-9
    assert spread([1.0, 3.0]) == "2 ± 1.4"
    assert spread([2000.0, float("nan")]) == "2,000 ± 0 (1/2)"
    assert spread([float("nan")]) == "never"


def test_report_refuses_a_directory_that_is_no_sweep(cli, tmp_path):
    result = cli("report", tmp_path)
    assert result.exit_code == 2 and "not a sweep directory" in result.output


def test_stage_columns_take_the_last_loss_and_the_lowest_accuracy():
    stages = [dict(stage=1, val_loss=0.5, id_accuracy=1.0, note="x"),
              dict(stage=2, val_loss=0.2, id_accuracy=0.4, note="y"),
              dict(stage=3, val_loss=0.1, id_accuracy=0.9, note="z")]
    assert stage_columns(stages) == {"final_val_loss": 0.1, "lowest_id_accuracy": 0.4}
    stages[1]["id_accuracy"] = None  # not reported in every stage: no column
    assert stage_columns(stages) == {"final_val_loss": 0.1}
    assert stage_columns([]) == {}


def test_relearn_columns_count_steps_from_each_stage_start_until_the_loss_recovers():
    def logged(stage, steps, losses):
        return [{"step": s, "stage": stage, "val_loss": v} for s, v in zip(steps, losses)]

    def end(stage):
        return [{"event": "stage_end", "stage": stage, "steps": 100}]

    records = (logged(1, [0, 50, 100], [3.0, 0.5, 0.01]) + end(1)
               + logged(2, [125, 150, 175, 200], [0.9, 0.08, 0.2, 0.05]) + end(2)
               + logged(3, [225, 250, 275, 300], [0.9, 0.5, 0.3, 0.2]) + end(3)
               + logged(4, [325], [0.01]))  # unfinished: not counted
    # stage 2 recovers 50 steps in (at 150); stage 3 never does and counts its 100 steps; stage 1 is not a removal
    assert relearn_columns(records, 0.1) == {"steps_to_relearn": 150, "stages_not_relearned": 1}
    assert relearn_columns(records, 0.95) == {"steps_to_relearn": 50, "stages_not_relearned": 0}
    assert relearn_columns(records[:4], 0.1) == {}  # the first stage alone: nothing removed yet


STAGED = """experiment: automata_direction
grid:
  curriculum.name: [left, right]
seeds: [0, 1]
report:
  metrics: [id_accuracy, lowest_id_accuracy]
  figures:
    - {x: curriculum.name, y: id_accuracy}
    - {x: removed, y: id_accuracy, group: curriculum.name, per_stage: true}
    - {x: removed, y: id_accuracy, per_stage: true, only: {curriculum.name: right}}
    - {x: removed, y: id_accuracy, per_stage: true, only: {curriculum.name: inductive}}
"""


def fake_run(root, run_id: str, stages: list[dict]) -> None:
    """A finished run's directory as a sweep leaves it: a summary whose per-stage records are `stages`."""
    (root / "runs" / run_id).mkdir(parents=True)
    (root / "runs" / run_id / "summary.json").write_text(
        json.dumps(dict(id_accuracy=stages[-1]["id_accuracy"], per_stage=stages)))


def test_per_stage_figures_read_every_run_and_filter(tmp_path):
    spec = read_spec(write(tmp_path, STAGED))
    (tmp_path / "sweep.yaml").write_text(STAGED)
    tasks = expand(spec)
    for t in tasks:  # hand-made runs: left holds on, right falls
        drop = 0.0 if t["point"]["curriculum.name"] == "left" else 0.3
        fake_run(tmp_path, t["id"], [dict(stage=i + 1, removed=i, steps=1, val_loss=0.1, id_accuracy=1.0 - drop * i)
                                     for i in range(3)])
    table = collect(tmp_path, spec, tasks)
    assert sorted(table["lowest_id_accuracy"].round(6)) == [0.4, 0.4, 1.0, 1.0]
    stages = stage_table(tmp_path, table, ["curriculum.name"])
    assert len(stages) == 4 * 3 and set(stages.columns) >= {"curriculum.name", "seed", "removed", "id_accuracy"}
    assert stages[stages["curriculum.name"] == "right"].groupby("removed")["id_accuracy"].mean().round(6).tolist() \
        == [1.0, 0.7, 0.4]
    report = write_report(tmp_path).read_text()
    figures = {p.name for p in (tmp_path / "figures").iterdir()}
    assert figures == {"id_accuracy_vs_curriculum_name.png", "id_accuracy_vs_removed_by_curriculum_name.png",
                       "id_accuracy_vs_removed_right.png"}
    assert "no run has {'curriculum.name': 'inductive'}" in report


def test_a_figure_groups_by_several_keys_and_leaves_out_the_ones_a_case_lacks(tmp_path):
    text = STAGED.replace("grid:\n  curriculum.name: [left, right]", "cases:\n  - {curriculum.name: left}\n"
                          "  - {curriculum.name: right}\n  - {curriculum.name: right, train.steps_per_stage: 7}")
    text = text.replace("group: curriculum.name,", "group: [curriculum.name, train.steps_per_stage],")
    spec = read_spec(write(tmp_path, text))
    (tmp_path / "sweep.yaml").write_text(text)
    tasks = expand(spec)
    for t in tasks:
        fake_run(tmp_path, t["id"], [dict(stage=i + 1, removed=i, steps=1, val_loss=0.1, id_accuracy=1.0)
                                     for i in range(3)])
    collect(tmp_path, spec, tasks)
    report = write_report(tmp_path).read_text()
    assert "| left | - | 2 |" in report and "| right | 7 | 2 |" in report  # as in the sweep file, not 7.0 / nan
    assert (tmp_path / "figures" / "id_accuracy_vs_removed_by_curriculum_name_and_train_steps_per_stage.png").exists()
    keys = spec.report.figures[1].group_keys
    assert keys == ["curriculum.name", "train.steps_per_stage"]
    assert group_label(keys, ("right", 7.0)) == "curriculum.name = right, train.steps_per_stage = 7"
    assert group_label(keys, ("right", float("nan"))) == "curriculum.name = right"
    assert group_label(["curriculum.name"], "left") == "curriculum.name = left"


def test_figure_lines_take_their_colour_from_the_first_key_and_their_style_from_the_rest():
    names = [(o, w) for o in ("elbo", "model_directed", "global_scale") for w in (0.0, 1.0)]
    styles = group_styles(names, ["objective.name", "objective.beta_warmup"])
    colours = {n: s[0] for n, s in zip(names, styles)}
    lines = {n: s[1:] for n, s in zip(names, styles)}
    assert colours[("elbo", 0.0)] == colours[("elbo", 1.0)] != colours[("model_directed", 0.0)]
    assert len(set(colours.values())) == 3 and len(set(lines.values())) == 2
    assert lines[("elbo", 1.0)] == lines[("global_scale", 1.0)] != lines[("global_scale", 0.0)]
    # one key, or too many combinations of the rest to draw apart: a colour each
    assert len({s[0] for s in group_styles(["a", "b", "c"], ["objective.name"])}) == 3
    many = [("a", w) for w in range(6)]
    assert len({s[0] for s in group_styles(many, ["objective.name", "seed"])}) == 6


WORKER_SCRIPT = """
import os, sys, time
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from internalize.sweep import watch_parent

def work(path):
    open(path, "w").write(str(os.getpid()))
    time.sleep(60)

if __name__ == "__main__":
    with ProcessPoolExecutor(1, mp_context=get_context("spawn"), initializer=watch_parent,
                             initargs=(os.getpid(),)) as pool:
        pool.submit(work, sys.argv[1]).result()
"""


@pytest.mark.slow
def test_a_pool_worker_exits_when_its_sweep_process_is_killed(tmp_path):
    script, pid_file = tmp_path / "sweeper.py", tmp_path / "worker.pid"
    script.write_text(WORKER_SCRIPT)
    sweeper = subprocess.Popen([sys.executable, str(script), str(pid_file)])
    deadline = time.time() + 60
    while not (pid_file.exists() and pid_file.read_text()) and time.time() < deadline:
        time.sleep(0.1)
    worker = int(pid_file.read_text())
    os.kill(worker, 0)  # alive while its parent is
    sweeper.kill()
    sweeper.wait()
    deadline = time.time() + 20
    while time.time() < deadline:
        try:
            os.kill(worker, 0)
        except ProcessLookupError:
            return
        time.sleep(0.2)
    os.kill(worker, signal.SIGKILL)
    raise AssertionError("the worker kept running after its sweep process was killed")


def test_a_report_of_a_sweep_still_running_reads_the_runs_finished_so_far(tmp_path):
    spec = read_spec(write(tmp_path, STAGED))
    (tmp_path / "sweep.yaml").write_text(STAGED)
    tasks = expand(spec)
    for t in tasks[:3]:  # three of four finished; no results table yet (the sweep writes it at its end)
        fake_run(tmp_path, t["id"], [dict(stage=1, removed=0, steps=1, val_loss=0.1, id_accuracy=0.5)])
    (tmp_path / "runs" / tasks[3]["id"]).mkdir()  # started, not finished
    report = write_report(tmp_path).read_text()
    assert report.startswith(f"# Sweep {tmp_path.name} (experiment automata_direction)")
    assert "3 of 4 runs finished, 0 failed, 1 not run" in report
    assert "| left | 2 | 0.5 ± 0 |" in report and "| right | 1 | 0.5 ± 0 |" in report


def with_figure(tmp_path, figure: str):
    """The STAGED sweep with this one report figure, written as a sweep directory: (text, spec, runs)."""
    text = STAGED.split("  figures:")[0] + f"  figures:\n    - {figure}\n"
    spec = read_spec(write(tmp_path, text))
    (tmp_path / "sweep.yaml").write_text(text)
    return text, spec, expand(spec)


def test_a_scatter_figure_sets_two_summary_figures_against_each_other(tmp_path):
    text, spec, tasks = with_figure(tmp_path, "{x: lowest_id_accuracy, y: id_accuracy, scatter: true, "
                                              "group: curriculum.name}")
    for t in tasks:
        fake_run(tmp_path, t["id"], [dict(stage=i + 1, removed=i, steps=1, val_loss=0.1, id_accuracy=1.0 - 0.1 * i)
                                     for i in range(3)])
    collect(tmp_path, spec, tasks)
    write_report(tmp_path)
    assert (tmp_path / "figures" / "id_accuracy_vs_lowest_id_accuracy_by_curriculum_name.png").stat().st_size > 1000
    # without scatter, an x that is not a key of the sweep is refused as a typo
    with pytest.raises(ConfigError, match="'lowest_id_accuracy' is not a key of the sweep"):
        expand(read_spec(write(tmp_path, text.replace(", scatter: true", ""))))


def test_a_per_stage_figure_can_read_another_list_of_records(tmp_path):
    _, spec, tasks = with_figure(tmp_path, "{x: step, y: alignment, per_stage: true, records: trajectory, "
                                           "group: curriculum.name}")
    for t in tasks:
        fake_run(tmp_path, t["id"], [dict(stage=1, removed=0, steps=1, val_loss=0.1, id_accuracy=1.0)])
        path = tmp_path / "runs" / t["id"] / "summary.json"
        summary = json.loads(path.read_text())
        summary["trajectory"] = [dict(step=s, alignment=0.3 + 0.1 * s) for s in range(4)]
        path.write_text(json.dumps(summary))
    table = collect(tmp_path, spec, tasks)
    points = stage_table(tmp_path, table, ["curriculum.name"], "trajectory")
    assert len(points) == 4 * 4 and points.groupby("step")["alignment"].mean().round(6).tolist() == [0.3, 0.4, 0.5, 0.6]
    write_report(tmp_path)
    assert (tmp_path / "figures" / "alignment_vs_step_by_curriculum_name.png").stat().st_size > 1000


def test_runs_start_seed_by_seed(tmp_path, monkeypatch):
    import internalize.sweep as sweep

    started = []

    def record(jobs, workers, on_done, on_tick=None):
        started.extend(j["id"] for j in jobs)
        for j in jobs:
            on_done(dict(id=j["id"], status="failed", error="not run"))

    monkeypatch.setattr(sweep.execute, "run_local", record)
    file = write(tmp_path, SMALL)
    (tmp_path / "out" / "runs" / "task.k=4__seed=0").mkdir(parents=True)  # a finished run is skipped
    (tmp_path / "out" / "runs" / "task.k=4__seed=0" / "summary.json").write_text("{}")
    sweep.run_sweep(file, workers=1, out=tmp_path / "out", show=False)
    assert started == ["task.k=8__seed=0", "task.k=4__seed=1", "task.k=8__seed=1", "task.k=4__seed=2",
                       "task.k=8__seed=2", "task.k=4__seed=3", "task.k=8__seed=3"]


def test_seeds_runs_only_those_seeds_and_refuses_one_the_sweep_lacks(cli, tmp_path, monkeypatch):
    import internalize.sweep as sweep

    started = []

    def record(jobs, workers, on_done, on_tick=None):  # each run "finishes" with an empty summary
        started.extend(j["id"] for j in jobs)
        for j in jobs:
            Path(j["path"]).mkdir(parents=True)
            (Path(j["path"]) / "summary.json").write_text("{}")
            on_done(dict(id=j["id"], status="done", seconds=0.0))

    monkeypatch.setattr(sweep.execute, "run_local", record)
    file = write(tmp_path, SMALL)
    result = sweep.run_sweep(file, workers=1, out=tmp_path / "out", show=False, seeds=[2, 0])
    assert started == ["task.k=4__seed=0", "task.k=8__seed=0", "task.k=4__seed=2", "task.k=8__seed=2"]
    assert result["total"] == 8 and len(result["table"]) == 8  # the other seeds' rows stay, pending
    assert (result["ran"], result["skipped"], result["left"]) == (4, 0, 4)
    assert sorted(result["table"][result["table"]["status"] == "pending"]["seed"]) == [1, 1, 3, 3]
    out = cli("sweep", file, "--out", tmp_path / "out2", "--seeds", "1,5", "--quiet")
    assert out.exit_code == 2 and "--seeds 5: not among the sweep's seeds (0, 1, 2, 3)" in out.output
    assert not (tmp_path / "out2").exists()
    out = cli("sweep", file, "--out", tmp_path / "out2", "--seeds", "one", "--quiet")
    assert out.exit_code == 2 and "give seeds as integers" in out.output


def test_a_sweep_finishes_from_a_kept_table(cli, tmp_path, monkeypatch):
    import internalize.sweep as sweep

    started = []

    def fake(jobs, workers, on_done, on_tick=None):  # each run writes a summary holding its seed
        for j in jobs:
            started.append(j["id"])
            Path(j["path"]).mkdir(parents=True, exist_ok=True)
            (Path(j["path"]) / "summary.json").write_text(json.dumps({"score": 10 + int(j["id"][-1])}))
            on_done(dict(id=j["id"], status="done", seconds=0.0))

    monkeypatch.setattr(sweep.execute, "run_local", fake)
    file = write(tmp_path, SMALL.split("report:")[0])
    kept = pd.DataFrame([dict(run_id="task.k=4__seed=0", status="done", score=0.25, **{"task.k": 4, "seed": 0}),
                         dict(run_id="task.k=8__seed=1", status="done", score=0.75, **{"task.k": 8, "seed": 1}),
                         dict(run_id="task.k=8__seed=2", status="failed", score=None, **{"task.k": 8, "seed": 2}),
                         dict(run_id="task.k=16__seed=0", status="done", score=0.5, **{"task.k": 16, "seed": 0})])
    kept.to_csv(tmp_path / "kept.csv", index=False)
    out = tmp_path / "out"
    (out / "runs" / "task.k=8__seed=1").mkdir(parents=True)  # a finished directory wins over its imported row
    (out / "runs" / "task.k=8__seed=1" / "summary.json").write_text(json.dumps({"score": 11}))
    result = sweep.run_sweep(file, workers=1, out=out, show=False, done_from=tmp_path / "kept.csv")
    # the imported finished row is not run; the failed one and the one of another sweep count for nothing
    assert sorted(started) == sorted(t["id"] for t in expand(read_spec(file))
                                     if t["id"] not in ("task.k=4__seed=0", "task.k=8__seed=1"))
    assert result["imported"] == 1 and result["ran"] == 6
    table = pd.read_parquet(out / "results.parquet").set_index("run_id")
    assert len(table) == 8 and (table["status"] == "done").all()
    assert table.loc["task.k=4__seed=0", "score"] == 0.25 and table.loc["task.k=8__seed=1", "score"] == 11
    assert table.loc["task.k=8__seed=2", "score"] == 12
    started.clear()
    again = sweep.run_sweep(file, workers=1, out=out, show=False)  # the import stays with the sweep directory
    assert started == [] and again["imported"] == 1
    assert cli("report", out).exit_code == 0 and "8 of 8 runs finished" in (out / "report.md").read_text()
    (tmp_path / "other.csv").write_text("a,b\n1,2\n")
    for bad, says in ((tmp_path / "missing.csv", "no results table"), (file, "cannot read results table"),
                      (tmp_path / "other.csv", "no sweep results table")):
        result = cli("sweep", file, "--out", out, "--done-from", bad)
        assert result.exit_code == 2 and says in result.output and len(result.output.strip().splitlines()) == 1


def test_a_kept_row_configured_otherwise_is_refused(cli, tmp_path, monkeypatch):
    import internalize.sweep as sweep
    from internalize import config as configs

    monkeypatch.setattr(sweep.execute, "run_local", lambda jobs, workers, on_done, on_tick=None: None)
    file = write(tmp_path, SMALL.split("report:")[0])
    here = configs.load("logicot", ["task.k=4"], "smoke").model_dump(mode="json")

    def row(**config):  # a kept row with the config columns a results table holds
        return dict(run_id="task.k=4__seed=0", status="done", score=0.25,
                    **{f"config.{k}": str(v) for k, v in config.items()})

    same = row(**{"task.k": 4, "train.lr": here["train"]["lr"], "train.batch_size": here["train"]["batch_size"],
                  "description": "written by older code", "model.retired_key": 7})
    pd.DataFrame([same]).to_csv(tmp_path / "same.csv", index=False)
    result = sweep.run_sweep(file, workers=1, out=tmp_path / "a", show=False, done_from=tmp_path / "same.csv")
    assert result["imported"] == 1
    other = row(**{"task.k": 4, "train.lr": here["train"]["lr"] * 2})
    pd.DataFrame([other]).to_csv(tmp_path / "other.csv", index=False)
    result = cli("sweep", file, "--out", tmp_path / "b", "--done-from", tmp_path / "other.csv")
    assert result.exit_code == 2 and "task.k=4__seed=0 was configured otherwise: train.lr" in result.output
    assert not (tmp_path / "b" / "imported.csv").exists()
    # a table that joined older rows to newer ones leaves the older rows' cells blank under keys they
    # lacked: a blank where a number must be is not a value, a blank where a name may be absent is
    older = {**same, "config.train.warmup_steps": None, "config.task.k": 4}
    pd.DataFrame([older, {**same, "run_id": "task.k=8__seed=0", "config.task.k": 8}]).to_csv(
        tmp_path / "older.csv", index=False)
    result = sweep.run_sweep(file, workers=1, out=tmp_path / "c", show=False, done_from=tmp_path / "older.csv")
    assert result["imported"] == 2
    unnamed = {**same, "config.curriculum.name": None}
    pd.DataFrame([unnamed, {**same, "run_id": "task.k=8__seed=0", "config.task.k": 8,
                            "config.curriculum.name": "log_icot"}]).to_csv(tmp_path / "unnamed.csv", index=False)
    result = cli("sweep", file, "--out", tmp_path / "d", "--done-from", tmp_path / "unnamed.csv")
    assert result.exit_code == 2 and "configured otherwise: curriculum.name (nan there, log_icot here)" in result.output


def test_a_row_of_another_sweep_stands_for_the_run_configured_as_it_was(tmp_path, monkeypatch):
    import internalize.sweep as sweep
    from internalize import config as configs
    from internalize.sweep.table import flatten

    monkeypatch.setattr(sweep.execute, "run_local", lambda jobs, workers, on_done, on_tick=None: None)
    file = write(tmp_path, SMALL.split("report:")[0])

    def row(run_id, *overrides, score):  # a row of a sweep over other keys, with all its config columns
        config = flatten(configs.load("logicot", list(overrides), "smoke").model_dump(mode="json"))
        return dict(run_id=run_id, status="done", score=score, **{f"config.{k}": v for k, v in config.items()})

    kept = pd.DataFrame([row("lr=other__seed=1", "task.k=8", "seed=1", "train.lr=0.5", score=0.9),
                         row("lr=default__seed=1", "task.k=8", "seed=1", score=0.5),
                         row("k=4__seed=9", "task.k=4", "seed=9", score=0.7)])
    kept.to_csv(tmp_path / "kept.csv", index=False)
    out = tmp_path / "out"
    result = sweep.run_sweep(file, workers=1, out=out, show=False, done_from=tmp_path / "kept.csv")
    table = pd.read_parquet(out / "results.parquet").set_index("run_id")
    assert result["imported"] == 1 and table.loc["task.k=8__seed=1", "score"] == 0.5
    assert table.loc["task.k=8__seed=1", "task.k"] == 8 and table.loc["task.k=8__seed=1", "seed"] == 1
    assert (table.drop(index="task.k=8__seed=1")["status"] == "pending").all()


@pytest.mark.slow
def test_stacked_seeds_write_the_runs_each_seed_writes_alone(cli, tmp_path, monkeypatch):
    import internalize.sweep as sweep
    from internalize.registry import build
    from internalize.runner import saved_config
    from internalize.runs import read_metrics, start_from

    monkeypatch.setattr(sweep.execute, "TICK", 0.01)  # a line on the runs in progress at every look
    monkeypatch.setattr(sweep.execute, "PLAIN_EVERY", 0.0)
    file = write(tmp_path, SMALL)
    alone, stacked = tmp_path / "alone", tmp_path / "stacked"
    assert cli("sweep", file, "--out", alone, "--workers", 2, "--threads", 1, "--quiet").exit_code == 0
    shutil.copytree(alone, stacked)
    # four runs again, stacked: three seeds of one point, one of the other (the rest already finished)
    rerun = ["task.k=4__seed=1", "task.k=4__seed=2", "task.k=4__seed=3", "task.k=8__seed=0"]
    for run in rerun:
        shutil.rmtree(stacked / "runs" / run)
    result = cli("sweep", file, "--out", stacked, "--workers", 2, "--threads", 1, "--stack-seeds")
    assert result.exit_code == 0 and "4 run now, 4 already finished" in result.output, result.output
    # a log file hears where the stacks stand while they train: the three seeds of k=4 as one job
    assert re.search(r"0/4 runs finished; training at .*step [\d,]+ \(3 runs\)", result.output), result.output
    # one thread each: the stacked products round as the seeds' own, so the tables are equal outright
    pd.testing.assert_frame_equal(comparable(alone), comparable(stacked))
    steps = set()
    for run in rerun:
        theirs, mine = read_metrics(alone / "runs" / run), read_metrics(stacked / "runs" / run)
        drop = lambda records: [{k: v for k, v in r.items() if k not in TIMING_COLUMNS} for r in records]
        assert drop(mine) == drop(theirs)
        steps.add(json.loads((stacked / "runs" / run / "summary.json").read_text())["steps"])
        assert (stacked / "runs" / run / "figures" / "val_loss.png").exists()
    assert len(steps) > 1  # the seeds stopped at different steps: the split leaves each its own records
    # each run's checkpoint holds its final weights: a later run can start from them
    path = stacked / "runs" / rerun[1]
    system = build(saved_config(path))
    start_from(system.model, path)
    summary = json.loads((path / "summary.json").read_text())
    assert system.summary()["child_attention_mass"] == summary["child_attention_mass"]


def test_progress_reads_each_jobs_last_logged_step(tmp_path):
    from internalize.sweep.execute import latest_step, progress

    def log(name, *records, tail=""):
        (tmp_path / name).mkdir()
        (tmp_path / name / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records) + tail)
        return str(tmp_path / name)

    one = log("one", {"step": 0, "val_loss": 2.0}, {"step": 100, "train_loss": 1.0}, {"event": "note"},
              tail='{"step": 2')  # a line half written, and a record without a step
    slow, fast = log("slow", {"step": 40}), log("fast", {"step": 60})
    assert latest_step(tmp_path / "one") == 100 and latest_step(tmp_path / "none") is None
    jobs = [dict(id="a", path=one), dict(stack=True, ids=["s", "f", "n"], paths=[slow, fast, str(tmp_path / "n")]),
            dict(id="b", path=str(tmp_path / "not_started"))]
    assert progress(jobs) == "training at step 100, step 40 (3 runs)"
    assert progress(jobs[2:]) == ""


def test_time_left_schedules_the_pending_jobs_on_the_workers_as_they_free():
    from internalize.sweep.execute import time_left

    assert time_left([], [30.0], 3, 2) is None  # nothing finished: no estimate
    # jobs of 100 s: the running ones end at 70 and 10; the three pending at 110, 170 and 210
    assert time_left([80.0, 120.0], [30.0, 90.0], 3, 2) == 210.0
    assert time_left([100.0], [150.0], 0, 2) == 0.0  # running past the mean: it ends now
    assert time_left([100.0], [], 4, 1) == 400.0
    # Ray reports every queued job as in progress: past the workers, they wait their turn
    assert time_left([100.0], [50.0, 0.0, 0.0], 0, 1) == 250.0


def test_stacking_runs_of_a_system_without_a_stacked_class_is_one_error_line(cli, tmp_path):
    file = write(tmp_path, "experiment: automata_direction\nscale: smoke\nseeds: [0, 1]\n")
    result = cli("sweep", file, "--out", tmp_path / "out", "--stack", "--quiet")
    assert result.exit_code == 2 and "cannot train runs stacked" in result.output
    assert len(result.output.strip().splitlines()) == 1


def fake_sweep_with(tmp_path, report_keys: str, extra) -> tuple:
    """A staged sweep of fake finished runs, each summary given extra(task) as well: (spec, tasks)."""
    text = STAGED.replace("  metrics: [id_accuracy, lowest_id_accuracy]\n", f"  metrics: [id_accuracy]\n{report_keys}")
    spec = read_spec(write(tmp_path, text))
    (tmp_path / "sweep.yaml").write_text(text)
    tasks = expand(spec)
    for t in tasks:
        fake_run(tmp_path, t["id"], [dict(stage=1, removed=0, steps=1, val_loss=0.1, id_accuracy=1.0)])
        path = tmp_path / "runs" / t["id"] / "summary.json"
        path.write_text(json.dumps({**json.loads(path.read_text()), **extra(t)}))
    return spec, tasks


def test_a_per_task_table_averages_each_task_over_seeds(tmp_path):
    def per_task(t):
        left = t["point"]["curriculum.name"] == "left"
        return {"per_task": {"sorting": dict(fidelity=0.9 + 0.02 * t["seed"], alignment=0.5 if left else 0.7),
                             "addition": dict(fidelity=0.6, alignment=None)}}

    spec, tasks = fake_sweep_with(tmp_path, "  per_task: [fidelity, alignment]\n", per_task)
    table = collect(tmp_path, spec, tasks)
    # the stored table keeps the mapping as JSON, so a report from results.csv alone reads it back
    assert json.loads(pd.read_csv(tmp_path / "results.csv")["per_task"][0])["addition"]["fidelity"] == 0.6
    report = write_report(tmp_path, table).read_text()
    assert "## Per task" in report and "| curriculum.name | task | runs | fidelity | alignment |" in report
    assert "| left | sorting | 2 | 0.91 ± 0.014 | 0.5 ± 0 |" in report
    assert "| right | sorting | 2 | 0.91 ± 0.014 | 0.7 ± 0 |" in report
    assert "| left | addition | 2 | 0.6 ± 0 | never |" in report


def test_a_mapping_reads_back_from_json_and_from_older_tables():
    from internalize.sweep.report import as_mapping

    assert as_mapping('{"a": {"f": 1.0}}') == {"a": {"f": 1.0}}
    assert as_mapping("{'a': {'f': 1.0, 'g': None}}") == {"a": {"f": 1.0, "g": None}}
    assert as_mapping(float("nan")) == {} and as_mapping({"a": 1}) == {"a": 1}


def test_a_report_of_a_damaged_results_table_is_one_line(cli, tmp_path):
    root = tmp_path / "sweep"
    root.mkdir()
    write(root, "experiment: logicot\nscale: smoke\ncases: [{}]\nseeds: [0]\n")
    (root / "results.parquet").write_bytes(b"not a parquet file")  # no runs/ to rebuild it from
    result = cli("report", root)
    assert result.exit_code == 2 and "cannot read results table" in result.output
    assert "Traceback" not in result.output


def test_a_run_the_sweep_rests_on_is_trained_first_and_once(cli, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # `before` paths, like model.base, read from where the sweep runs
    file = write(tmp_path, """experiment: strategies_base
scale: smoke
before:
  - {experiment: strategies_base, scale: smoke, out: runs/base, set: {train.steps_per_stage: 6}}
set: {model.init: runs/base}
grid:
  train.lr: [1.0e-3, 3.0e-4]
report: {metrics: [fidelity]}
""")
    result = cli("sweep", file, "--out", "out")
    assert result.exit_code == 0, result.output
    assert "stage 1/1  step 6/6" in result.output  # the base's own progress (hours, at full scale)
    base = json.loads(Path("runs/base/summary.json").read_text())
    assert base["steps"] == 6
    table = pd.read_parquet("out/results.parquet")
    assert sorted(table["status"]) == ["done", "done"]
    stamp = Path("runs/base/summary.json").stat().st_mtime_ns
    shutil.rmtree("out/runs/train.lr=0.0003__seed=0")
    again = cli("sweep", file, "--out", "out", "--quiet")
    assert again.exit_code == 0 and "1 run now, 1 already finished" in again.output, again.output
    assert Path("runs/base/summary.json").stat().st_mtime_ns == stamp  # finished: not trained again
    # a sweep file edited since its runs ran: the finished base, or a finished run, is refused, not reused
    edited = write(tmp_path, file.read_text().replace("steps_per_stage: 6", "steps_per_stage: 7"), "edited.yaml")
    result = cli("sweep", edited, "--out", "out", "--quiet")
    assert result.exit_code == 2 and "runs/base was configured otherwise" in result.output, result.output
    assert "train.steps_per_stage (6 there, 7 here)" in result.output
    edited = write(tmp_path, file.read_text().replace("model.init: runs/base", "model.init: runs/base, "
                                                      "train.weight_decay: 0.5"), "edited.yaml")
    result = cli("sweep", edited, "--out", "out", "--quiet")
    assert result.exit_code == 2 and "configured otherwise: train.weight_decay (0.01 there, 0.5 here)" in result.output
    failing = write(tmp_path, file.read_text().replace("train.steps_per_stage: 6", "train.lr: .inf")
                    .replace("runs/base", "runs/bad"), "failing.yaml")
    result = cli("sweep", failing, "--out", "out2", "--quiet")
    assert result.exit_code == 2 and "the run before the sweep" in result.output and "non-finite" in result.output
    assert not list(Path("out2/runs").iterdir())  # none of the sweep's own runs started


def test_a_report_groups_runs_by_a_mapping_value(cli, tmp_path):
    file = write(tmp_path, """experiment: strategies_base
scale: smoke
set: {task.tasks: [grid_path], train.steps_per_stage: 2}
cases:
  - {task.formats: {grid_path: default}}
  - {task.formats: {grid_path: choices}}
report: {metrics: [fidelity], per_task: [fidelity]}
""")
    result = cli("sweep", file, "--out", tmp_path / "out", "--quiet")
    assert result.exit_code == 0, result.output
    report = (tmp_path / "out" / "report.md").read_text()
    assert "| grid_path:default | 1 |" in report and "| grid_path:choices | 1 |" in report


def test_a_cells_table_averages_each_task_and_cell_over_seeds(tmp_path):
    spec, tasks = fake_sweep_with(tmp_path, "  cells: [steering]\n", lambda t: {"steering": {"sorting": {
        "bubble": dict(share=0.8 + 0.1 * t["seed"], chance=0.3, inputs=40), "merge": None}}})
    report = write_report(tmp_path, collect(tmp_path, spec, tasks)).read_text()
    assert "## Steering" in report and "| curriculum.name | task | cell | runs | share | chance | inputs |" in report
    assert "| left | sorting | bubble | 2 | 0.85 ± 0.071 | 0.3 ± 0 | 40 ± 0 |" in report
    assert "merge" not in report  # a cell without figures (no input to steer) has no row


def test_a_summary_becomes_columns_each_task_figure_its_own():
    from internalize.sweep.table import summary_columns

    summary = {"fidelity": 0.9, "steering": [1, 2], "per_stage": [{"a": 1}],
               "per_task": {"grid_path": {"alignment_lift": 0.58, "shares": {"up": 0.5}}, "sorting": {"kl": 2.0}}}
    row = summary_columns(summary)
    assert row["fidelity"] == 0.9 and json.loads(row["steering"]) == [1, 2] and "per_stage" not in row
    assert row["per_task.grid_path.alignment_lift"] == 0.58 and row["per_task.sorting.kl"] == 2.0
    assert "per_task.grid_path.shares" not in row and json.loads(row["per_task"])["sorting"] == {"kl": 2.0}
