"""Seeds of Log-ICoT stacked into one model train exactly as each trains alone."""
import pytest
import torch

from internalize import config as configs
from internalize.runner import execute, stacked_summaries
from internalize.systems.logicot.stacked import SeedAdam, StackedLogICoT
from tests.conftest import without_timings


def approx(value):
    """pytest.approx through nested dicts and lists (floats to 1e-5 relative; the rest exactly)."""
    if isinstance(value, dict):
        return {k: approx(v) for k, v in value.items()}
    if isinstance(value, list):
        return [approx(v) for v in value]
    return pytest.approx(value, rel=1e-5) if isinstance(value, float) else value


def comparable(summary: dict) -> dict:
    drop = ("train_seconds", "shared_seconds", "wall_seconds", "setup_seconds", "seconds_to_full_accuracy")
    summary = without_timings(summary)
    summary["per_stage"] = [{k: v for k, v in r.items() if k not in drop} for r in summary["per_stage"]]
    return {k: v for k, v in summary.items() if k not in drop}


@pytest.mark.slow
@pytest.mark.parametrize("overrides", [[], ["train.warmup_steps=5", "task.k=4"]])
def test_stacked_seeds_give_each_seeds_own_summary(tmp_path, overrides):
    config = configs.load("logicot", overrides, "smoke")
    together = stacked_summaries([config.model_copy(update={"seed": s}) for s in [0, 1, 2]])
    for seed, summary in zip([0, 1, 2], together):
        alone = execute(configs.load("logicot", [*overrides, f"seed={seed}"], "smoke"), tmp_path / f"{seed}",
                        show=False)
        # equal; floats to rounding: with several threads a stacked (batched) product may round its
        # last bit differently from the seed's own (bitwise equal on one thread)
        assert comparable(summary) == approx(comparable(alone))
    # the seeds differ from one another (their supports, their data): the test compares real runs
    assert together[0]["support"] != together[1]["support"]


def test_seed_adam_steps_only_the_active_seeds_as_adam_would():
    torch.manual_seed(0)
    stacked = torch.nn.Parameter(torch.randn(3, 4, 4))
    alone = [torch.nn.Parameter(stacked[i].detach().clone()) for i in range(3)]
    active = [True, False, True]
    mine = SeedAdam([stacked], lr=0.1, active=active)
    theirs = [torch.optim.Adam([p], lr=0.1) for p in alone]
    for step in range(4):
        grads = torch.randn(3, 4, 4)
        stacked.grad = grads.clone()
        mine.step()
        for i, (p, opt) in enumerate(zip(alone, theirs)):
            if active[i]:
                p.grad = grads[i].clone()
                opt.step()
    for i in range(3):
        assert torch.equal(stacked[i].detach(), alone[i].detach())


def test_stacking_refuses_what_it_does_not_support():
    with pytest.raises(ValueError, match="Adam"):
        StackedLogICoT([configs.load("logicot", ["model.quantize=true", f"seed={s}"], "smoke") for s in (0, 1)])
