import numpy as np
import pytest
import torch

from internalize.systems.logicot.parity_tree import ParityTree, check_sizes


def test_layout_n30_k16_matches_the_spec():
    lay = ParityTree(30, 16, seed=0).layout
    one_based = lambda level: (lay.positions(level) + 1).tolist()  # noqa: E731
    assert one_based(1) == list(range(31, 39))
    assert one_based(2) == list(range(39, 43))
    assert one_based(3) == [43, 44]
    assert one_based(4) == [45]
    assert lay.length == 45 and lay.depth == 4 and lay.answer == 44
    assert (lay.thinking + 1).tolist() == list(range(31, 45))


def test_leaves_are_sorted_support_paired_in_order():
    lay = ParityTree(30, 16, seed=3).layout
    assert list(lay.support) == sorted(lay.support) and len(set(lay.support)) == 16
    leaf_pairs = lay.children[lay.positions(1)]
    assert leaf_pairs.ravel().tolist() == list(lay.support)
    assert lay.children[lay.positions(2)].ravel().tolist() == lay.positions(1).tolist()


def test_random_pairing_permutes_the_same_support():
    a = ParityTree(30, 16, seed=3).layout
    b = ParityTree(30, 16, seed=3, pairing="random").layout
    assert sorted(b.support) == list(a.support) and list(b.support) != list(a.support)


@pytest.mark.parametrize("n,k", [(30, 16), (40, 8), (9, 2), (64, 32)])
def test_every_node_is_the_product_of_its_children_and_the_root_is_the_parity(n, k):
    task = ParityTree(n, k, seed=1)
    lay = task.layout
    values = task.sample(512, torch.Generator().manual_seed(0))
    assert set(values.unique().tolist()) == {-1.0, 1.0}
    nodes = np.flatnonzero(lay.level > 0)
    kids = lay.children[nodes]
    assert torch.equal(values[:, nodes], values[:, kids[:, 0]] * values[:, kids[:, 1]])
    parity = values[:, list(lay.support)].prod(dim=1)
    assert torch.equal(values[:, -1], parity)
    assert 0.4 < (parity > 0).float().mean() < 0.6


def test_same_seed_same_secret_different_seed_different_secret():
    assert ParityTree(30, 16, 5).layout.support == ParityTree(30, 16, 5).layout.support
    assert ParityTree(30, 16, 5).layout.support != ParityTree(30, 16, 6).layout.support


@pytest.mark.parametrize("n,k,message", [(30, 12, "power of two"), (8, 16, "must not exceed"),
                                         (30, 1, "at least 2"), (30, 0, "at least 2")])
def test_bad_sizes_are_refused(n, k, message):
    with pytest.raises(ValueError, match=message):
        check_sizes(n, k)
