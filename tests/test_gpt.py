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


def strict(function):
    """`function` refusing a generator on another device than its tensors, as it is refused on a GPU
    (on the CPU alone nothing else would catch a CPU generator driving a GPU model's sampling)."""
    def checked(*args, generator=None, **kwargs):
        device = kwargs.get("device") or (args[0].device if torch.is_tensor(args[0]) else torch.device("cpu"))
        if generator is not None and generator.device != torch.device(device):
            raise RuntimeError(f"a generator on {generator.device} reached {function.__name__} on {device}")
        return function(*args, generator=generator, **kwargs)
    return checked


def test_a_generator_on_another_device_than_the_model_still_samples(monkeypatch):
    from internalize.systems.strategies.latent import draw

    monkeypatch.setattr(torch, "multinomial", strict(torch.multinomial))
    monkeypatch.setattr(torch, "randn", strict(torch.randn))
    m = model().to("meta")  # a device the CPU generator is not on
    prompt = torch.zeros(3, 5, dtype=torch.long, device="meta")
    out = m.generate(prompt, 4, temperature=1.0, generator=torch.Generator().manual_seed(0))
    assert out.shape == (3, 4) and out.device.type == "meta"
    z = draw((torch.zeros(2, 4, device="meta"), torch.zeros(2, 4, device="meta")), torch.Generator().manual_seed(0))
    assert z.device.type == "meta"
    from internalize.models.gpt import (
        draw_tokens,  # on one device: torch.multinomial's own stream, unchanged
    )

    probs = torch.rand(6, 20, generator=torch.Generator().manual_seed(1)).softmax(-1)
    assert torch.equal(draw_tokens(probs, torch.Generator().manual_seed(3)),
                       torch.multinomial(probs, 1, generator=torch.Generator().manual_seed(3)))


def test_tokens_drawn_by_uniforms_follow_the_probabilities():
    from internalize.models.gpt import inverse_cdf

    probs = torch.tensor([[0.0, 0.2, 0.0, 0.5, 0.3]]).expand(20000, -1) * 3  # unnormalised, zeros among them
    u = torch.rand(20000, 1, generator=torch.Generator().manual_seed(0))
    counts = torch.bincount(inverse_cdf(probs, u)[:, 0], minlength=5).double() / 20000
    assert counts[0] == 0 and counts[2] == 0
    assert torch.allclose(counts, torch.tensor([0.0, 0.2, 0.0, 0.5, 0.3], dtype=torch.double), atol=0.015)
    edges = inverse_cdf(probs[:3], torch.tensor([[0.0], [0.2 - 1e-9], [1 - 1e-12]]))[:, 0].tolist()
    assert edges == [1, 1, 4]
