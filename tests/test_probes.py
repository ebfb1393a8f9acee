import pytest
import torch

from internalize.models.gpt import GPT, GPTConfig
from internalize.systems.strategies.probes import (
    BINS,
    fit_probe,
    probe_grid,
    strategy_probes,
    trace_states,
)
from tests.conftest import read_summary


def positions(examples: int, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """Each example's trace positions: rows (P,) and bins (P,), traces of 8 to 16 tokens."""
    lengths = torch.randint(8, 17, (examples,), generator=generator)
    rows = torch.repeat_interleave(torch.arange(examples), lengths)  # (P,)
    index = torch.cat([torch.arange(n) for n in lengths.tolist()])  # (P,)
    return rows, (index * BINS) // lengths[rows]


def halves(examples: int, generator: torch.Generator) -> torch.Tensor:
    train = torch.zeros(examples, dtype=torch.bool)
    train[torch.randperm(examples, generator=generator)[:examples // 2]] = True
    return train


def test_the_probe_finds_the_one_layer_that_encodes_the_label():
    gen = torch.Generator().manual_seed(0)
    examples, width, classes = 120, 16, 3
    rows, bins = positions(examples, gen)
    labels = torch.randint(classes, (examples,), generator=gen)
    states = torch.randn(4, len(rows), width, generator=gen)  # (layers, P, width): noise everywhere
    states[2, :, :classes] += 5.0 * torch.nn.functional.one_hot(labels[rows], classes)  # layer 2 only
    grid, chance = probe_grid(states, rows, bins, labels, halves(examples, gen))
    assert 0.3 < chance < 0.5
    assert all(v is not None and v > 0.95 for v in grid[2]), grid[2]
    for layer in (0, 1, 3):
        mean = sum(grid[layer]) / BINS
        assert abs(mean - chance) < 0.12, (layer, grid[layer])


def test_random_labels_stay_at_chance_on_the_held_out_half():
    gen = torch.Generator().manual_seed(1)
    examples, width = 60, 64  # wider than the examples: the training half is fitted perfectly
    rows, bins = positions(examples, gen)
    labels = torch.randint(2, (examples,), generator=gen)
    states = torch.randn(2, len(rows), width, generator=gen)
    train = halves(examples, gen)
    at = train[rows] & (bins == 0)
    x, y = states[0, at], labels[rows[at]]
    W, b = fit_probe((x - x.mean(0)) / x.std(0), y, torch.full((len(y),), 1 / len(y)), 2)
    assert (((x - x.mean(0)) / x.std(0) @ W + b).argmax(1) == y).float().mean() > 0.95  # scored on training: ~1
    grid, chance = probe_grid(states, rows, bins, labels, train)
    cells = [v for row in grid for v in row]
    assert all(v is not None for v in cells)
    assert abs(sum(cells) / len(cells) - chance) < 0.12, (cells, chance)
    assert max(cells) < 0.85


def test_a_bin_with_one_class_or_too_few_examples_is_none():
    gen = torch.Generator().manual_seed(2)
    rows, bins = positions(6, gen)
    states = torch.randn(2, len(rows), 8, generator=gen)
    train = torch.tensor([True, True, True, False, False, False])
    grid, chance = probe_grid(states, rows, bins, torch.tensor([0, 0, 0, 1, 1, 0]), train)  # one class to fit
    assert chance == 2 / 3 and all(v is None for row in grid for v in row)
    grid, _ = probe_grid(states, rows, bins, torch.tensor([0, 1, 0, 1, 1, 0]), torch.tensor([True] * 5 + [False]))
    assert all(v is None for row in grid for v in row)  # one held-out example
    grid, _ = probe_grid(states, rows, bins, torch.tensor([0, 1, 0, 1, 1, 0]), train)
    assert all(v is not None for row in grid for v in row)


def test_trace_states_reads_each_layer_at_the_trace_positions_only():
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab=11, max_len=32, width=16, depth=2, heads=2)).eval()
    tokens = torch.randint(1, 11, (3, 20))
    trace = torch.zeros(3, 20, dtype=torch.bool)
    for r, (lo, hi) in enumerate([(4, 12), (2, 18), (5, 14)]):
        trace[r, lo:hi] = True
        tokens[r, hi + 2:] = 0  # right padding after </y> and <eos>
    states, rows, index, length = trace_states(model, tokens, trace, batch=2)
    assert states.shape == (3, int(trace.sum()), 16)
    assert length.tolist() == [8] * 8 + [16] * 16 + [9] * 9
    assert index.tolist() == list(range(8)) + list(range(16)) + list(range(9))
    _, cache = model.run_with_cache(tokens, ["hook_embed", "blocks.1.hook_resid_post"])
    p = 8 + 5  # row 1, trace index 5: sequence position 2 + 5
    assert rows[p] == 1
    torch.testing.assert_close(states[0, p], cache["hook_embed"][1, 7])
    torch.testing.assert_close(states[2, p], cache["blocks.1.hook_resid_post"][1, 7])


def test_strategy_probes_reports_every_group_in_order():
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab=11, max_len=32, width=16, depth=1, heads=2)).eval()
    n = 24
    tokens = torch.randint(3, 11, (n, 20))
    trace = torch.zeros(n, 20, dtype=torch.bool)
    trace[:, 4:16] = True
    labels = ["a" if i % 2 else "b" for i in range(n)]
    tokens[:, 4:6] = torch.tensor([[1] if s == "a" else [2] for s in labels])  # the first bin says the label
    groups = ["one"] * 12 + ["two"] * 12
    found = strategy_probes(model, tokens, trace, labels, groups, order=["two", "three", "one"], seed=3)
    assert list(found["accuracy"]) == ["two", "one"] and found["layers"] == 2 and found["bins"] == BINS
    assert all(len(grid) == 2 and all(len(row) == BINS for row in grid) for grid in found["accuracy"].values())
    assert found["examples"] == {"two": 12, "one": 12} and found["chance"]["one"] >= 0.5
    assert all(found["accuracy"][g][0][0] == 1.0 for g in ("one", "two"))  # the embedding of the telling token


@pytest.mark.slow
def test_smoke_run_writes_the_probe_heatmap_and_summary(cli, tmp_path):
    out = tmp_path / "run"
    result = cli("run", "strategies_base", "--smoke", "--quiet", "--out", out)
    assert result.exit_code == 0, result.output
    found = read_summary(out)["probes"]
    assert (out / "figures" / "probes.png").stat().st_size > 1000
    tasks = read_summary(out)["tasks"]
    assert list(found["accuracy"]) == [t for t in tasks if found["examples"].get(t)]
    assert found["layers"] == 2 and found["bins"] == BINS  # smoke: depth 1, plus the embeddings
    for task, grid in found["accuracy"].items():
        assert len(grid) == found["layers"] and all(len(row) == found["bins"] for row in grid)
        assert all(v is None or 0 <= v <= 1 for row in grid for v in row)
        assert found["chance"][task] is None or 0 < found["chance"][task] <= 1
    assert set(found["excluded"]) == set(tasks)


def test_the_untrained_control_is_the_runs_own_initial_model():
    from internalize.config import load
    from internalize.registry import build

    config = load("strategies_base", scale="smoke")
    torch.manual_seed(config.seed)  # as the runner does before building
    system = build(config)
    with torch.random.fork_rng():
        torch.manual_seed(config.seed)
        fresh = GPT(system.model.cfg)
    assert all(torch.equal(a, b) for a, b in zip(system.model.state_dict().values(), fresh.state_dict().values()))
