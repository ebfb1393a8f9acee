import torch

from internalize.models.gpt import GPT, GPTConfig


def model(seed=0, **kw):
    torch.manual_seed(seed)
    return GPT(GPTConfig(vocab=20, max_len=48, width=32, depth=2, heads=4, **kw)).eval()


def test_kv_cache_decoding_equals_full_recomputation():
    m = model()
    prompt = torch.randint(0, 20, (5, 11), generator=torch.Generator().manual_seed(1))
    generated = m.generate(prompt, 12)
    seq = prompt
    with torch.no_grad():
        for _ in range(12):
            logits, _ = m(seq)
            seq = torch.cat([seq, logits[:, -1].argmax(-1, keepdim=True)], dim=1)
    assert torch.equal(generated, seq[:, 11:])


def test_hooks_expose_attention_and_residuals_without_changing_the_output():
    m = model()
    x = torch.randint(0, 20, (2, 9), generator=torch.Generator().manual_seed(2))
    plain, _ = m(x)
    logits, store = m.run_with_cache(x)
    assert torch.allclose(plain, logits, atol=1e-5)
    pattern = store["blocks.1.attn.hook_pattern"]
    assert pattern.shape == (2, 4, 9, 9)
    assert torch.allclose(pattern.sum(-1), torch.ones(2, 4, 9), atol=1e-5)
    assert (pattern.triu(1) == 0).all()  # causal
    assert store["blocks.0.hook_resid_post"].shape == (2, 9, 32)
    assert not any(p._forward_hooks for p in m.modules())  # hooks are removed afterwards


def test_the_future_never_changes_the_past():
    m = model()
    x = torch.randint(0, 20, (1, 10), generator=torch.Generator().manual_seed(3))
    y = x.clone()
    y[0, 7:] = (y[0, 7:] + 1) % 20
    with torch.no_grad():
        assert torch.allclose(m(x)[0][:, :7], m(y)[0][:, :7], atol=1e-6)


def test_embeddings_are_tied_and_too_long_inputs_are_refused():
    m = model()
    assert m.head.weight is m.tok.weight
    try:
        m(torch.zeros(1, 49, dtype=torch.long))
    except ValueError as err:
        assert "max_len" in str(err)
    else:
        raise AssertionError("a 49-token input was accepted by a 48-position model")
