import numpy as np
import pytest
import torch

from internalize.systems.logicot.model import LINKS, LogICoT, allowed_keys, gate_plan
from internalize.systems.logicot.parity_tree import ParityTree


def hand_set(lay, link="cos", mask="lower_levels", weight=12.0, every_layer=False):
    """Children weight 12, others 0, in each node's own layer (or in every layer)."""
    model = LogICoT(lay.level, link, mask)
    with torch.no_grad():
        for m in np.flatnonzero(lay.level > 0):
            for layer in range(1, lay.depth + 1) if every_layer else [lay.level[m]]:
                model.W[layer - 1][m, lay.children[m]] = weight
    return model


def zero_filled(values, lay):
    h = values.clone()
    h[:, lay.n:] = 0.0
    padded = np.zeros(lay.length, dtype=bool)
    padded[lay.thinking] = True
    return h, padded


@pytest.mark.parametrize("link", sorted(LINKS))
@pytest.mark.parametrize("mask", ["lower_levels", "previous_level"])
@pytest.mark.parametrize("n,k", [(30, 16), (40, 8), (64, 32)])
def test_hand_set_weights_compute_parity_in_one_pass(link, mask, n, k):
    task = ParityTree(n, k, seed=2)
    lay = task.layout
    model = hand_set(lay, link, mask)
    values = task.sample(1024, torch.Generator().manual_seed(1))
    h, padded = zero_filled(values, lay)
    plan = gate_plan(lay.level, lay.children, padded, "frontier", answer_only=True)
    assert plan.readout.tolist() == [0] * (lay.length - 1) + [lay.depth]
    pred = model(h, plan)[:, -1]
    assert torch.equal(torch.sign(pred), values[:, -1])
    assert (pred - values[:, -1]).abs().max() < 1e-3


def test_zero_weights_do_not_compute_parity():
    task = ParityTree(30, 16, seed=2)
    lay = task.layout
    values = task.sample(2048, torch.Generator().manual_seed(1))
    h, padded = zero_filled(values, lay)
    plan = gate_plan(lay.level, lay.children, padded, "frontier", answer_only=True)
    pred = LogICoT(lay.level)(h, plan)[:, -1]
    assert abs(float(((pred > 0) == (values[:, -1] > 0)).float().mean()) - 0.5) < 0.05


@pytest.mark.parametrize("link", sorted(LINKS))
def test_link_turns_the_mean_of_two_signs_into_their_product(link):
    a = torch.tensor([1.0, 1.0, -1.0, -1.0])
    b = torch.tensor([1.0, -1.0, 1.0, -1.0])
    assert torch.allclose(LINKS[link]((a + b) / 2), a * b, atol=1e-6)


def test_masks_let_each_level_see_the_right_keys():
    lay = ParityTree(30, 16, seed=0).layout
    lower = allowed_keys(lay.level, "lower_levels")
    prev = allowed_keys(lay.level, "previous_level")
    root = lay.answer
    assert lower[root].nonzero().squeeze(1).tolist() == list(range(lay.positions(3)[-1] + 1))
    assert prev[root].nonzero().squeeze(1).tolist() == lay.positions(3).tolist()
    first = lay.positions(1)[0]
    assert lower[first].nonzero().squeeze(1).tolist() == list(range(30))
    assert torch.equal(prev[first], lower[first])


def padded_levels(lay, levels):
    return np.isin(lay.level, levels) & (np.arange(lay.length) < lay.answer)


def test_frontier_gate_in_log_icot_stage_3():
    lay = ParityTree(30, 16, seed=0).layout
    padded = padded_levels(lay, [1, 2])
    plan = gate_plan(lay.level, lay.children, padded, "frontier", answer_only=False)
    assert plan.frontier == 3
    # the level-3 nodes are read just above their padded children; the root above explicit ones
    assert plan.readout[lay.positions(3)].tolist() == [3, 3] and plan.readout[-1] == 1
    assert not plan.readout[~plan.targets].any()
    every = gate_plan(lay.level, lay.children, padded, "frontier", answer_only=False, readout="frontier")
    assert every.readout[every.targets].tolist() == [3, 3, 3]
    # layers 1 and 2 write exactly the padded nodes of their own level; layers 3, 4 write nothing
    assert np.flatnonzero(plan.write[0]).tolist() == lay.positions(1).tolist()
    assert np.flatnonzero(plan.write[1]).tolist() == lay.positions(2).tolist()
    assert not plan.write[2:].any()
    # every still-explicit node and the answer is supervised; nothing padded, no input
    assert np.flatnonzero(plan.targets).tolist() == list(range(lay.positions(3)[0], lay.length))


def test_frontier_gate_in_a_stepwise_stage_with_a_half_padded_level():
    lay = ParityTree(30, 16, seed=0).layout
    padded = np.zeros(lay.length, dtype=bool)
    padded[lay.thinking[:10]] = True  # all of level 1, two nodes of level 2
    plan = gate_plan(lay.level, lay.children, padded, "frontier", answer_only=False)
    assert plan.frontier == 3
    assert np.flatnonzero(plan.write[0]).tolist() == lay.positions(1).tolist()
    assert np.flatnonzero(plan.write[1]).tolist() == lay.positions(2)[:2].tolist()
    assert not plan.write[2:].any()
    assert np.flatnonzero(plan.targets).tolist() == list(range(lay.thinking[10], lay.length))
    # level-2 nodes 2, 3 have padded children; level-3 node 0 too (depth 2); the rest explicit ones
    assert plan.readout[plan.targets].tolist() == [2, 2, 3, 1, 1]


def test_frontier_output_is_not_written_back_and_higher_layers_are_idle():
    task = ParityTree(30, 16, seed=0)
    lay = task.layout
    model = hand_set(lay, every_layer=True)
    values = task.sample(64, torch.Generator().manual_seed(0))
    padded = padded_levels(lay, [1])
    plan = gate_plan(lay.level, lay.children, padded, "frontier", answer_only=False, readout="frontier")
    h = values.masked_fill(torch.as_tensor(padded), 0.0)
    before = model(h, plan)
    with torch.no_grad():
        model.W[2].normal_()  # layers above the frontier (2) must not matter
        model.W[3].normal_()
    assert torch.equal(model(h, plan), before)
    # the frontier reads explicit (teacher-forced) level-2 values: flipping one flips its parent
    corrupt = h.clone()
    corrupt[:, lay.positions(2)[0]] *= -1
    after = torch.sign(model(corrupt, plan)[:, lay.positions(3)])
    assert torch.equal(after[:, 0], -torch.sign(before[:, lay.positions(3)[0]]))
    assert torch.equal(after[:, 1], torch.sign(before[:, lay.positions(3)[1]]))


def test_fixed_and_no_gates():
    lay = ParityTree(30, 16, seed=0).layout
    padded = padded_levels(lay, [1])
    fixed = gate_plan(lay.level, lay.children, padded, "fixed", answer_only=False)
    for layer in range(1, 5):
        assert np.flatnonzero(fixed.write[layer - 1]).tolist() == lay.positions(layer).tolist()
    assert np.flatnonzero(fixed.targets).tolist() == lay.positions(2).tolist()
    none = gate_plan(lay.level, lay.children, padded, "none", answer_only=False)
    assert none.readout[none.targets].unique().tolist() == [4] and none.frontier == 2
    assert (none.write == torch.as_tensor(lay.level > 0)).all()


def test_inputs_and_answer_can_never_be_padded():
    lay = ParityTree(30, 16, seed=0).layout
    bad = np.zeros(lay.length, dtype=bool)
    bad[lay.answer] = True
    with pytest.raises(ValueError, match="only thinking tokens"):
        gate_plan(lay.level, lay.children, bad, "frontier", answer_only=False)


def test_rounding_makes_weights_integers():
    lay = ParityTree(12, 4, seed=0).layout
    model = LogICoT(lay.level)
    with torch.no_grad():
        model.W[0].fill_(2.6)
    model.round_weights()
    assert torch.equal(model.W[0], torch.full_like(model.W[0], 3.0))


def test_child_weights_and_spread_of_a_hand_set_model():
    from internalize.systems.logicot.metrics import child_weights, representation_spread

    task = ParityTree(30, 16, seed=0)
    lay = task.layout
    model = hand_set(lay)
    for layer in range(1, 5):
        assert child_weights(model.W[layer - 1], model.allowed, lay.level, lay.children, layer) == (12.0, 0.0)
    values = task.sample(512, torch.Generator().manual_seed(0))
    h, padded = zero_filled(values, lay)
    plan = gate_plan(lay.level, lay.children, padded, "frontier", answer_only=True)
    assert min(representation_spread(model.states(h, plan), lay.level)) > 0.95
    collapsed = LogICoT(lay.level).states(h, plan)  # zero weights: every node the same function of the mean
    assert max(representation_spread(collapsed, lay.level)) < 0.5


def test_the_weakest_row_names_the_node_whose_attention_strays():
    from internalize.systems.logicot.metrics import child_attention_mass, weakest_row
    from internalize.systems.logicot.parity_tree import build_layout

    lay = build_layout(8, 4, (1, 3, 4, 6))  # level 1: positions 8, 9 (children 1,3 and 4,6); root 10
    attention = torch.zeros(lay.length, lay.length)
    attention[8, [1, 3]] = 0.5  # on its children
    attention[9, 4], attention[9, 6], attention[9, 0] = 0.1, 0.1, 0.8  # astray, on input 0
    found = weakest_row(attention, lay.level, lay.children, 1)
    assert found == dict(row=9, child_mass=pytest.approx(0.2), top_key=0, top_key_level=0,
                         top_weight=pytest.approx(0.8), top_is_child=False)
    assert child_attention_mass(attention, lay.level, lay.children, 1) == pytest.approx(0.6)
