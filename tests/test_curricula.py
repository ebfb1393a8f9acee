import pytest

from internalize.curricula import CURRICULA, get_curriculum


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


@pytest.mark.parametrize("name", sorted(CURRICULA))
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
