"""Padded batches, sampling, scoring and vector injection of the GPT (internalize/models/gpt.py)."""
import pytest
import torch
from torch import nn

from internalize.models import gpt
from internalize.models.gpt import GPT, GPTConfig

V, W = 20, 32


def model(seed=0, vocab=V, scale=1.0):
    """A small GPT; scale > 1 multiplies every weight matrix, so that an untrained model's nearly
    uniform, repetitive predictions become varied with clear winners (greedy ties would be flaky)."""
    torch.manual_seed(seed)
    m = GPT(GPTConfig(vocab=vocab, max_len=48, width=W, depth=2, heads=4)).eval()
    with torch.no_grad():
        for p in m.parameters():
            if p.dim() > 1:
                p.mul_(scale)
    return m


def prompts(lengths, seed=1):
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(1, V, (n,), generator=g) for n in lengths]


def pad(rows, side="left", value=0):
    """(B, S) tokens and (B, S) bool mask, True at real tokens."""
    S = max(len(r) for r in rows)
    idx = torch.full((len(rows), S), value, dtype=torch.long)
    mask = torch.zeros(len(rows), S, dtype=torch.bool)
    for b, r in enumerate(rows):
        cols = slice(S - len(r), S) if side == "left" else slice(0, len(r))
        idx[b, cols], mask[b, cols] = r, True
    return idx, mask


@pytest.mark.parametrize("side", ["left", "right"])
def test_a_padded_batch_gives_every_row_the_logits_it_gives_alone(side):
    m = model()
    rows = prompts([3, 11, 7, 1])
    idx, mask = pad(rows, side, value=5)
    with torch.no_grad():
        batched, _ = m(idx, attention_mask=mask)  # (B, S, V)
        for b, r in enumerate(rows):
            alone, _ = m(r[None])
            assert torch.allclose(batched[b][mask[b]], alone[0], atol=1e-5)


def test_left_padded_greedy_generation_gives_every_row_what_it_gives_alone():
    m = model(scale=15.0)
    rows = prompts([4, 12, 8])
    idx, mask = pad(rows)
    batched = m.generate(idx, 10, attention_mask=mask)
    for b, r in enumerate(rows):
        assert torch.equal(batched[b], m.generate(r[None], 10)[0])


@pytest.mark.parametrize("padded", [False, True])
def test_cached_decoding_equals_recomputation_at_every_step(padded):
    m = model(scale=15.0)
    seq, mask = pad(prompts([6, 10, 2])) if padded else (torch.stack(prompts([9, 9, 9])), None)
    with torch.no_grad():
        logits, cache = m(seq, attention_mask=mask)
        for _ in range(8):
            full, _ = m(seq, attention_mask=mask)  # no cache: every token recomputed
            assert torch.allclose(logits[:, -1], full[:, -1], atol=1e-5)
            token = logits[:, -1].argmax(-1, keepdim=True)  # (B, 1)
            seq = torch.cat([seq, token], dim=1)
            if padded:
                mask = torch.cat([mask, torch.ones_like(token, dtype=torch.bool)], dim=1)
            logits, cache = m(token, cache, attention_mask=mask)


def test_near_zero_temperature_sampling_equals_greedy():
    m = model(scale=15.0)
    idx, mask = pad(prompts([5, 9, 3]))
    greedy = m.generate(idx, 10, attention_mask=mask)
    cold = m.generate(idx, 10, temperature=1e-4, generator=torch.Generator().manual_seed(0), attention_mask=mask)
    assert torch.equal(cold, greedy)


def test_sampling_repeats_with_the_same_seed_and_differs_with_another():
    m = model()
    idx = torch.stack(prompts([6] * 4))

    def sample(seed):
        return m.generate(idx, 12, temperature=1.0, generator=torch.Generator().manual_seed(seed))

    assert torch.equal(sample(3), sample(3))
    assert not torch.equal(sample(3), sample(4))
    assert not torch.equal(sample(3), m.generate(idx, 12))


@pytest.mark.parametrize("temperature", [1.0, 0.5])
def test_sampled_token_frequencies_match_the_softmax_probabilities(temperature):
    m = model(vocab=6, scale=15.0)
    prompt = torch.tensor([[1, 4, 2]])
    with torch.no_grad():
        probs = (m(prompt)[0][0, -1] / temperature).softmax(-1)  # (V,)
    assert probs.max() > 3 * probs.min()  # far from uniform, so a wrong sampler is caught
    n = 6000
    tokens = m.generate(prompt.expand(n, -1), 1, temperature=temperature, generator=torch.Generator().manual_seed(7))
    counts = torch.bincount(tokens[:, 0], minlength=6).double()
    expected = n * probs.double()
    chi2 = ((counts - expected) ** 2 / expected).sum()
    assert chi2 < 20.5  # the 99.9% quantile of chi-square with 5 degrees of freedom


def test_token_logprobs_gather_the_log_softmax_and_sum_to_the_sequence_likelihood():
    m = model()
    idx = torch.stack(prompts([10, 10]))
    with torch.no_grad():
        logp = m.token_logprobs(idx)  # (B, T-1)
        full = m(idx)[0].log_softmax(-1)[:, :-1].gather(-1, idx[:, 1:, None])[..., 0]
        chain = sum(m(idx[:, :t + 1])[0][:, -1].log_softmax(-1).gather(-1, idx[:, t + 1:t + 2])[:, 0]
                    for t in range(idx.shape[1] - 1))  # one forward per prefix: p(x_2..x_T | x_1)
    assert logp.shape == (2, 9)
    assert torch.allclose(logp, full, atol=1e-5)
    assert torch.allclose(logp.sum(-1), chain, atol=1e-4)


def test_token_logprobs_of_a_padded_batch_score_every_row_as_alone():
    m = model()
    rows = prompts([4, 9, 6])
    idx, mask = pad(rows)
    with torch.no_grad():
        batched = m.token_logprobs(idx, attention_mask=mask)
        for b, r in enumerate(rows):
            alone = m.token_logprobs(r[None])[0]
            assert torch.allclose(batched[b, -len(alone):], alone, atol=1e-5)
            assert (batched[b, :-len(alone)] == 0).all()


def test_an_injected_vector_changes_the_output_only_from_its_slot_on():
    m = model()
    idx = torch.stack(prompts([10, 10]))
    slots = torch.tensor([4, 7])
    vectors = torch.randn(2, W, generator=torch.Generator().manual_seed(5))
    with torch.no_grad():
        plain, _ = m(idx)
        pushed, store = m.run_with_cache(idx, ["hook_embed"], inject=(slots, vectors))
        _, plain_store = m.run_with_cache(idx, ["hook_embed"])
        for b, s in enumerate(slots.tolist()):
            assert torch.allclose(pushed[b, :s], plain[b, :s], atol=1e-6)
            assert (pushed[b, s:] - plain[b, s:]).abs().amax(-1).min() > 1e-4  # every later position moves
        added = store["hook_embed"] - plain_store["hook_embed"]  # (B, T, W)
        assert torch.allclose(added[[0, 1], slots], vectors, atol=1e-6)
        added[[0, 1], slots] = 0
        assert (added == 0).all()
        assert torch.equal(m(idx, inject=(slots, torch.zeros(2, W)))[0], plain)
        assert torch.equal(m(idx, inject=(torch.tensor([-1, -1]), vectors))[0], plain)


def test_an_onward_injection_adds_its_vector_at_the_slot_and_every_later_position():
    m = model()
    idx = torch.stack(prompts([10, 10]))
    slots = torch.tensor([4, 7])
    vectors = torch.randn(2, W, generator=torch.Generator().manual_seed(5))
    with torch.no_grad():
        _, plain = m.run_with_cache(idx, ["hook_embed"])
        _, pushed = m.run_with_cache(idx, ["hook_embed"], inject=gpt.Inject(slots, vectors, onward=True))
    added = pushed["hook_embed"] - plain["hook_embed"]  # (B, T, W)
    for b, s in enumerate(slots.tolist()):
        assert (added[b, :s] == 0).all()
        assert torch.allclose(added[b, s:], vectors[b].expand(10 - s, W), atol=1e-6)


@pytest.mark.parametrize("onward", [False, True])
def test_injection_under_cached_padded_generation_equals_recomputation(onward):
    m = model(scale=15.0)
    idx, mask = pad(prompts([5, 8]))
    slots = torch.tensor([6, 10])  # row 0: a prompt token; row 1: the third generated token
    vectors = 5 * torch.randn(2, W, generator=torch.Generator().manual_seed(6))
    inject = gpt.Inject(slots, vectors, onward)
    generated = m.generate(idx, 6, attention_mask=mask, inject=inject)
    seq = idx
    with torch.no_grad():
        for _ in range(6):
            full_mask = torch.cat([mask, torch.ones(2, seq.shape[1] - idx.shape[1], dtype=torch.bool)], dim=1)
            logits, _ = m(seq, attention_mask=full_mask, inject=inject)
            seq = torch.cat([seq, logits[:, -1].argmax(-1, keepdim=True)], dim=1)
    assert torch.equal(generated, seq[:, idx.shape[1]:])
    assert not torch.equal(generated, m.generate(idx, 6, attention_mask=mask))
    if onward:  # from the slot on, every step reads the vector: not the one-slot generation
        assert not torch.equal(generated, m.generate(idx, 6, attention_mask=mask, inject=(slots, vectors)))


@pytest.mark.parametrize("same_prompts", [False, True])
def test_stop_token_ends_rows_and_decoding_once_all_have_stopped(same_prompts):
    m = model(scale=15.0)
    idx = torch.stack(prompts([5] * 3 if not same_prompts else [5]) * (3 if same_prompts else 1))
    free = m.generate(idx, 12)  # (B, 12) without a stop token
    stop = int(free[0, 3])
    stopped = m.generate(idx, 12, stop_token=stop)
    first = [int((row == stop).nonzero()[0]) if (row == stop).any() else None for row in free]
    taken = 12 if None in first else max(first) + 1
    expected = free[:, :taken].clone()
    for b, f in enumerate(first):
        if f is not None:
            expected[b, f:] = stop
    assert torch.equal(stopped, expected)
    if same_prompts:
        assert stopped.shape == (3, first[0] + 1) and first[0] < 11  # ended early


def test_mlp_layers_are_named_and_initialised_as_the_old_sequential_was(monkeypatch):
    fresh = model(seed=3).state_dict()
    assert {"blocks.0.mlp.fc_in.weight", "blocks.1.mlp.fc_out.bias"} <= set(fresh)
    old = lambda cfg: nn.Sequential(nn.Linear(cfg.width, 4 * cfg.width), nn.GELU(), nn.Linear(4 * cfg.width, cfg.width))
    monkeypatch.setattr(gpt, "MLP", old)
    legacy = model(seed=3).state_dict()
    renamed = {k.replace("mlp.0.", "mlp.fc_in.").replace("mlp.2.", "mlp.fc_out."): v for k, v in legacy.items()}
    assert renamed.keys() == fresh.keys()
    assert all(torch.equal(renamed[k], fresh[k]) for k in fresh)


def test_generate_refuses_right_padding_and_negative_temperature():
    m = model()
    idx, mask = pad(prompts([3, 6]), side="right")
    with pytest.raises(ValueError, match="left padding"):
        m.generate(idx, 2, attention_mask=mask)
    with pytest.raises(ValueError, match="temperature"):
        m.generate(idx, 2, temperature=-1.0)


@pytest.mark.parametrize("padded", [False, True])
def test_the_preallocated_cache_gives_the_concatenated_caches_logits(padded):
    m = model(scale=15.0)
    seq, mask = pad(prompts([6, 10, 2])) if padded else (torch.stack(prompts([9, 9, 9])), None)
    with torch.no_grad():
        grown, held = m(seq, attention_mask=mask)  # a list of (keys, values), concatenated each step
        fixed, cache = m(seq, m.new_cache(3, seq.shape[1] + 6), attention_mask=mask)
        for _ in range(6):
            assert torch.equal(grown, fixed) and cache.size == (held[0][0].shape[2])
            token = grown[:, -1].argmax(-1, keepdim=True)
            if padded:
                mask = torch.cat([mask, torch.ones_like(token, dtype=torch.bool)], dim=1)
            grown, held = m(token, held, attention_mask=mask)
            fixed, cache = m(token, cache, attention_mask=mask)
        with pytest.raises(ValueError, match="holds"):
            m(token, cache, attention_mask=None if mask is None else torch.cat([mask, mask[:, -1:]], dim=1))
