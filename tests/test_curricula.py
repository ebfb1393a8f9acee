import pytest
import torch

from internalize.curricula import get_curriculum


def removed_counts(name, thinking):
    c = get_curriculum(name)
    return [int(c.removed(s, thinking).sum()) for s in range(c.num_stages(thinking))]


def test_log_icot_hides_whole_levels():
    # k = 16: 14 thinking tokens; levels of 8, 4, 2 nodes
    assert removed_counts("log_icot", 14) == [0, 8, 12, 14]
    assert removed_counts("log_icot", 6) == [0, 4, 6]  # k = 8
    assert removed_counts("log_icot", 30) == [0, 16, 24, 28, 30]  # k = 32
    assert removed_counts("log_icot", 0) == [0]  # k = 2: no thinking token, one stage


def test_stepwise_hides_one_more_token_per_stage():
    assert removed_counts("stepwise", 14) == list(range(15))  # k - 1 = 15 stages


def test_full_cot_and_e2e_are_single_stage():
    assert removed_counts("full_cot", 14) == [0]
    assert removed_counts("e2e", 14) == [14]
    assert get_curriculum("e2e").answer_only and get_curriculum("e2e").train_all_layers
    assert not get_curriculum("log_icot").answer_only


@pytest.mark.parametrize("name", ["log_icot", "stepwise", "left", "full_cot", "e2e"])
def test_hidden_tokens_are_always_a_prefix_that_only_grows(name):
    c = get_curriculum(name)
    masks = [c.removed(s, 14) for s in range(c.num_stages(14))]
    for mask in masks:
        count = int(mask.sum())
        assert mask[:count].all() and not mask[count:].any()
    for before, after in zip(masks, masks[1:]):
        assert (after | before).tolist() == after.tolist()


def test_log_icot_refuses_a_token_count_that_is_no_tree():
    with pytest.raises(ValueError, match="power of two"):
        get_curriculum("log_icot").num_stages(5)
    with pytest.raises(ValueError, match="no stage 4"):
        get_curriculum("log_icot").removed(4, 14)
    with pytest.raises(ValueError, match="unknown curriculum"):
        get_curriculum("sideways")


def test_right_removes_the_tokens_nearest_the_answer_first():
    c = get_curriculum("right", per_stage=2)
    assert c.num_stages(5) == 4  # 0, 2, 4, 5 removed
    assert c.removed(1, 5).tolist() == [False, False, False, True, True]
    assert c.removed(3, 5).all()


def test_left_per_stage_and_the_last_stage_hides_everything():
    c = get_curriculum("left", per_stage=4)
    assert [int(c.removed(s, 15).sum()) for s in range(c.num_stages(15))] == [0, 4, 8, 12, 15]


def test_inductive_doubles_the_stride():
    c = get_curriculum("inductive")
    kept = lambda s: (1 + torch.nonzero(torch.as_tensor(~c.removed(s, 15))).squeeze(1)).tolist()  # noqa: E731
    assert c.num_stages(15) == 5
    assert kept(0) == list(range(1, 16))
    assert kept(1) == [2, 4, 6, 8, 10, 12, 14]
    assert kept(2) == [4, 8, 12] and kept(3) == [8] and kept(4) == []


def test_smoothing_removes_extra_tokens_with_geometric_odds():
    c = get_curriculum("left", smoothing=1.0)
    masks = c.sample_removed(2, 15, 4000, torch.Generator().manual_seed(0))
    extra = masks.sum(axis=1) - 2
    assert extra.min() == 0 and (masks[:, :2]).all()
    # P(o) proportional to exp(-o): P(0) = 1 - 1/e = 0.632
    assert abs((extra == 0).mean() - (1 - 1 / 2.718281828)) < 0.03
    assert (get_curriculum("left").sample_removed(2, 15, 8, torch.Generator().manual_seed(0)).sum(axis=1) == 2).all()
    assert not c.sample_removed(0, 15, 500, torch.Generator().manual_seed(0)).any()  # the CoT stage stays whole


def test_mixture_draws_every_length_per_example():
    c = get_curriculum("mixture")
    masks = c.sample_removed(0, 7, 4000, torch.Generator().manual_seed(0))
    counts = masks.sum(axis=1)
    assert set(counts.tolist()) == set(range(8)) and c.hint and c.num_stages(7) == 1
    for mask in masks[:50]:
        count = int(mask.sum())
        assert mask[:count].all() and not mask[count:].any()
