import itertools

import numpy as np
import pytest
import torch

from internalize.config import ConfigError, load, validate
from internalize.registry import build
from internalize.runner import execute
from internalize.systems.sparse_parity.model import LinearAttention
from internalize.systems.sparse_parity.task import SparseParity


def all_inputs(d):
    return torch.tensor(list(itertools.product([0.0, 1.0], repeat=d)))


def test_chain_is_prefix_parity_over_the_support_in_order():
    for order in ("sorted", "random"):
        task = SparseParity(12, 5, seed=3, order=order)
        assert len(set(task.support)) == 5 and all(0 <= s < 12 for s in task.support)
        bits, chain = task.sample(64, torch.Generator().manual_seed(0))
        running = torch.zeros(64)
        for j, s in enumerate(task.support):
            running = (running + bits[:, s]) % 2
            assert torch.equal(chain[:, j], running)
    assert list(SparseParity(12, 5, seed=3).support) == sorted(SparseParity(12, 5, seed=3).support)


def test_hand_set_integer_scores_compute_every_prefix_parity_exactly():
    d, k = 10, 4
    task = SparseParity(d, k, seed=1)
    model = LinearAttention(d, k)
    model.chain_start()  # slot j > 1 copies the previous chain token
    with torch.no_grad():
        for j, s in enumerate(task.support):
            model.A[j, s] = 1.0
    bits = all_inputs(d)  # all 1,024 inputs
    chain = task.chain(bits)
    out = model(torch.cat([bits, chain[:, :-1]], dim=1))  # full CoT, teacher forced
    assert torch.allclose(out, chain, atol=1e-6)
    direct = LinearAttention(d, 1)
    with torch.no_grad():
        direct.A[0, list(task.support)] = 1.0
    assert torch.allclose(direct(bits)[:, 0], chain[:, -1], atol=1e-6)  # one pass: y
    with torch.no_grad():
        direct.A[0, task.support[0]] = 3.0  # odd weights keep the parity; an even one would drop the bit
    assert torch.allclose(direct(bits)[:, 0], chain[:, -1], atol=1e-6)
    with torch.no_grad():
        direct.A[0, task.support[0]] = 2.0
    assert not torch.allclose(direct(bits)[:, 0], chain[:, -1], atol=1e-3)


def test_rounding_clamps_at_zero_then_rounds_to_nearest_halves_to_even():
    model = LinearAttention(4, 1)
    values = torch.tensor([[-0.7, 0.49, 0.51, 2.5]])
    with torch.no_grad():
        model.A.copy_(values)
    model.project(nonnegative=True)
    assert model.A.tolist() == [[0.0, 0.0, 1.0, 2.0]]
    with torch.no_grad():
        model.A.copy_(values)
    model.project(nonnegative=False)
    assert model.A.tolist() == [[-1.0, 0.0, 1.0, 2.0]]
    with torch.no_grad():
        model.A.copy_(values)
    model.project(nonnegative=True, integer=False)  # model.quantize=false: clamping alone
    assert torch.allclose(model.A, torch.tensor([[0.0, 0.49, 0.51, 2.5]]))


def test_slots_see_only_earlier_positions():
    model = LinearAttention(5, 3)
    with torch.no_grad():
        model.A.fill_(1.0)
    scores = model.scores(3)
    assert scores.shape == (3, 7)
    assert scores.sum(dim=1).tolist() == [5.0, 6.0, 7.0]  # slot j reads the bits and j - 1 chain tokens


def run(tmp_path, name, *overrides):
    config = load(name, ["task.d=16", "task.k=4", "train.val_size=256", "eval.test_size=1024", *overrides])
    return execute(config, tmp_path / name, show=False)


@pytest.mark.slow
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_internalization_ends_with_the_support_as_the_answer_row(tmp_path, seed):
    summary = run(tmp_path, "sparse_parity_internalize", f"seed={seed}")
    stages = summary["per_stage"]
    assert len(stages) == 4 and summary["samples_seen"] == 4 * 20_000
    assert stages[0]["min_position_accuracy"] == 1.0  # full CoT: every prefix parity
    assert all(s["frontier_accuracy"] == 1.0 for s in stages)  # each stage adds the next support bit
    assert all(abs(s["direct_accuracy"] - 0.5) < 0.1 for s in stages[:-1])
    assert summary["direct_accuracy"] == 1.0
    assert summary["direct_row_is_support"] and summary["direct_row_support"] == summary["support"]


@pytest.mark.slow
def test_end_to_end_from_the_same_start_and_budget_stays_at_chance(tmp_path):
    summary = run(tmp_path, "sparse_parity_e2e")
    assert summary["samples_seen"] == 4 * 20_000 and summary["steps"] == 4
    assert abs(summary["direct_accuracy"] - 0.5) < 0.06
    assert not summary["direct_row_is_support"]


@pytest.mark.slow
def test_without_rounding_the_row_is_not_integer(tmp_path, monkeypatch):
    import internalize.registry

    systems, build_system = [], internalize.registry.build
    keep = lambda config: systems.append(build_system(config)) or systems[-1]  # noqa: E731
    monkeypatch.setattr(internalize.registry, "build", keep)
    summary = run(tmp_path, "sparse_parity_internalize", "model.quantize=false")
    row = torch.tensor(systems[0].direct_row())  # the answer slot's scores over the bits, as trained
    assert row.shape == (16,) and torch.isfinite(row).all() and (row >= 0).all()  # clamped, not rounded
    assert (row - row.round()).abs().max() > 0.1  # some score lies well between two integers
    assert not summary["direct_row_is_support"]
    assert summary["direct_row_support"] == [i for i, w in enumerate(row.tolist()) if w != 0]


@pytest.mark.parametrize("override,message", [
    ("task.k=65", "task.k must not exceed task.d"),
    ("task.k=1", "task.k must be at least 2"),
    ("curriculum.smoothing=4", "varies the sequence length"),
])
def test_bad_sparse_parity_configs_are_refused(override, message):
    with pytest.raises((ConfigError, ValueError), match=message):
        build(load("sparse_parity_internalize", [override]))


def test_sparse_parity_needs_the_linear_attention_model():
    with pytest.raises(ValueError, match="system sparse_parity cannot train model gpt; use model.name=linear_attention"):
        validate(dict(experiment="x", system="sparse_parity", model=dict(name="gpt")))
    config = validate(dict(experiment="x", system="sparse_parity"))
    assert (config.task.name, config.model.name) == ("sparse_parity", "linear_attention")


def test_e2e_gets_the_internalization_budget():
    assert load("sparse_parity_e2e", ["task.k=6"]).train.first_stage_steps == 6
    assert load("sparse_parity_e2e", ["task.k=6", "train.first_stage_steps=2"]).train.first_stage_steps == 2
    assert np.isclose(load("sparse_parity_internalize").theory.row_step, 0.75)
