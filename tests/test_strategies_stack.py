"""Factorisation runs over one base, stacked (their objectives differ), train exactly as each alone,
and continue after a kill, stacked or alone."""
import json
import shutil

import pandas as pd
import pytest
import torch

from internalize import config as configs
from internalize.config import ConfigError
from internalize.runner import execute, execute_stacked, train_stacked
from internalize.runs import TIMINGS, Run, read_metrics
from tests.conftest import without_timings

pytest.importorskip("peft")


def untimed(value):
    """Nested dicts and lists without their wall-clock figures."""
    if isinstance(value, dict):
        return {k: untimed(v) for k, v in value.items() if k not in TIMINGS}
    if isinstance(value, list):
        return [untimed(v) for v in value]
    return value


@pytest.mark.slow
def test_stacked_objectives_write_each_runs_own_metrics_summary_generations_and_checkpoints(tmp_path, monkeypatch):
    # responses sampled from the base (shared by the stack), micro-batches, two objectives that both
    # read the base's surprisal (computed once for both) with different weights and c
    overrides = ["data.response_source=base", "train.micro_batch=16", "objective.beta=0.1", "eval.test_size=18",
                 "eval.pairs=12", "eval.snapshot_size=12"]
    objectives = ["model_directed", "token_inverse"]
    group = [configs.load("strategies_factorize", [*overrides, f"objective.name={o}"], "smoke") for o in objectives]
    with torch.random.fork_rng():
        torch.set_num_threads(1)  # bitwise: the runs' own products, in the same order as alone
        execute_stacked(group, [tmp_path / "stack" / o for o in objectives])
        for config, o in zip(group, objectives):
            execute(config, tmp_path / "alone" / o, show=False)
    for o in objectives:
        stacked, alone = tmp_path / "stack" / o, tmp_path / "alone" / o
        # every logged step: the losses, their parts, each run's own gradient norm (clipped alone)
        assert untimed(read_metrics(stacked)) == untimed(read_metrics(alone))
        assert "train_grad_norm" in read_metrics(stacked)[1]
        mine, theirs = (without_timings(json.loads((p / "summary.json").read_text())) for p in (stacked, alone))
        assert untimed(mine) == untimed(theirs)
        pd.testing.assert_frame_equal(pd.read_parquet(stacked / "generations.parquet"),
                                      pd.read_parquet(alone / "generations.parquet"))
    # the objectives trained apart: the comparison is between real, different runs
    first, second = (json.loads((tmp_path / "stack" / o / "summary.json").read_text()) for o in objectives[:2])
    assert first["c"] != second["c"] and first["kl"] != second["kl"]

    # killed after its first checkpoint (written as each run's own), the stack continues from it; and a
    # run of it continues alone from the same checkpoint: both end as the uninterrupted runs
    paths = [tmp_path / "killed" / o for o in objectives]
    written, save = [], Run.checkpoint

    def die_after(count):
        def checkpoint(self, state, tensors, **kw):
            if len(written) == count:
                raise Killed
            save(self, state, tensors, **kw)
            written.append(state["step"])
        return checkpoint

    with torch.random.fork_rng():
        torch.set_num_threads(1)
        with monkeypatch.context() as patch:
            patch.setattr(Run, "checkpoint", die_after(len(objectives)))
            with pytest.raises(Killed):
                execute_stacked(group, paths)
        assert written == [4, 4] and not (paths[0] / "summary.json").exists()
        # killed again, this time between the two runs' next checkpoints (the first run wrote its
        # step 8, the second did not): the stack goes back to the step both hold, not to step 0
        between = tmp_path / "between"
        shutil.copytree(tmp_path / "killed", between)
        written.clear()
        with monkeypatch.context() as patch:
            patch.setattr(Run, "checkpoint", die_after(1))
            with pytest.raises(Killed):
                execute_stacked(group, [between / o for o in objectives])
        assert written == [8]
        logged_between, log = [], Run.log
        with monkeypatch.context() as patch:
            patch.setattr(Run, "log", lambda self, record: (logged_between.append(record.get("step")), log(self, record)))
            execute_stacked(group, [between / o for o in objectives])
        assert min(step for step in logged_between if step is not None) > 4  # from step 4: step 4 not logged again
        for o in objectives:
            assert untimed(read_metrics(between / o)) == untimed(read_metrics(tmp_path / "alone" / o))
        shutil.copytree(paths[1], tmp_path / "alone_from_stack")
        logged = []
        with monkeypatch.context() as patch:
            patch.setattr(Run, "log", lambda self, record: (logged.append(record.get("step")), log(self, record)))
            execute_stacked(group, paths)
            execute(group[1], tmp_path / "alone_from_stack", show=False, resume=True)
    # continued, not started over: nothing before the checkpoint's step was logged again
    assert min(step for step in logged if step is not None) > 4
    for path, o in [*zip(paths, objectives), (tmp_path / "alone_from_stack", objectives[1])]:
        assert untimed(read_metrics(path)) == untimed(read_metrics(tmp_path / "alone" / o))
        mine, theirs = (without_timings(json.loads((p / "summary.json").read_text())) for p in (path, tmp_path / "alone" / o))
        assert untimed(mine) == untimed(theirs)


class Killed(Exception):
    pass


def test_runs_that_differ_beyond_their_objective_do_not_stack():
    group = [configs.load("strategies_factorize", o, "smoke") for o in (["seed=0"], ["seed=1"])]
    with pytest.raises(ConfigError, match="objective alone"):
        train_stacked(group)


def test_a_sweep_stacks_each_seeds_objectives_over_one_response_source():
    from internalize.runner import stack_key
    from internalize.sweep.execute import stacks
    from internalize.sweep.spec import expand, locate, read_spec
    from internalize.systems.strategies.stacked import StackedFactorize

    spec = read_spec(locate("strategies_base_samples_calibration"))  # 6 objectives x 2 sources x 3 seeds
    jobs = [dict(id=t["id"], overrides=t["overrides"], path=t["id"], experiment=spec.experiment, scale=spec.scale,
                 threads=1, config=configs.load(spec.experiment, t["overrides"], spec.scale)) for t in expand(spec)]
    groups = stacks(jobs, lambda job: stack_key(job["config"], StackedFactorize.varies))
    assert len(groups) == 6
    by_id = {job["id"]: job["config"] for job in jobs}
    for group in groups:
        members = [by_id[i] for i in group["ids"]]
        assert len({(c.seed, c.data.response_source) for c in members}) == 1
        assert sorted(c.objective.name for c in members) == sorted(
            ["model_directed", "elbo", "beta_elbo", "token_weighting", "global_scale", "token_inverse"])
    # with more workers than stacks, the largest stacks are halved until every worker has one
    halves = stacks(jobs, lambda job: stack_key(job["config"], StackedFactorize.varies), workers=8)
    assert len(halves) == 8 and sorted(i for h in halves for i in h["ids"]) == sorted(by_id)
    for part in halves:
        assert len({(by_id[i].seed, by_id[i].data.response_source) for i in part["ids"]}) == 1
    assert len(stacks(jobs[:1], lambda job: "one", workers=4)) == 1  # a single run is not split further
