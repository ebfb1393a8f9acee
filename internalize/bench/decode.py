"""Decoding speed: the GPT's batched key/value-cache sampling against Hugging Face `generate` on
the same weights, and internalized one-pass answering against explicit chain-of-thought decoding."""
from __future__ import annotations

import torch

from internalize.bench.timing import Line, installed, side_by_side, threads
from internalize.models.gpt import GPT, GPTConfig


def sampling(quick: bool) -> list[Line]:
    """Temperature-1 sampling of new tokens for a batch of prompts (the strategies evaluation's
    shape: width 128, depth 4, prompts of 24 tokens, 48 new ones), one thread."""
    if not installed("transformers"):
        return [Line("sampling", "batched KV-cache sampling against transformers generate", skipped="needs transformers")]
    from internalize.models.gpt2 import to_gpt2

    batch, prompt_len, new = (8, 12, 12) if quick else (64, 24, 48)
    torch.manual_seed(0)
    ours = GPT(GPTConfig(64, prompt_len + new, 128, 4, 4)).eval()
    theirs = to_gpt2(ours)
    prompts = torch.randint(1, 64, (batch, prompt_len), generator=torch.Generator().manual_seed(2))
    mask = torch.ones_like(prompts)

    def ours_sample():
        ours.generate(prompts, new, temperature=1.0, generator=torch.Generator().manual_seed(3))

    def theirs_sample():
        with torch.no_grad():
            theirs.generate(prompts, attention_mask=mask, do_sample=True, temperature=1.0, top_k=0, top_p=1.0,
                            max_new_tokens=new, min_new_tokens=new, pad_token_id=0)

    with threads(1):
        a, b = side_by_side(ours_sample, theirs_sample, repeats=1 if quick else 3, rounds=2 if quick else 3)
    n = batch * new
    return [Line("sampling", f"sampling {new} tokens for {batch} prompts of {prompt_len}, width 128, depth 4, "
                 "one thread: the GPT's generate against transformers' generate, same weights", ratio=b / a,
                 goal=2.0, ours=n / a, theirs=n / b, unit="tokens/s")]


def answering(quick: bool) -> list[Line]:
    """A semiautomaton of T = 32 actions (the semiautomata model: width 128, depth 2): an
    internalized model reads a_1..a_T <sep> <ans> in one forward pass; explicit CoT decodes the
    T - 1 states, <ans> and the answer with the key/value cache. Latency (one example) has the
    goal T/2; throughput (512 examples a batch) is compute-bound, where CoT's extra tokens cost at
    most about twice the one pass, and is shown for information."""
    T = 32
    torch.manual_seed(0)
    model = GPT(GPTConfig(16, 2 * T + 4, 128, 2, 4)).eval()
    lines = []
    for batch, goal in ((1, T / 2), (64 if quick else 512, None)):
        prompts = torch.randint(0, 16, (batch, T + 1), generator=torch.Generator().manual_seed(4))
        one = torch.cat([prompts, prompts[:, :1]], dim=1)

        def one_pass():
            with torch.no_grad():
                model(one)

        def cot():
            model.generate(prompts, T + 1)

        with threads(1):
            a, b = side_by_side(one_pass, cot, repeats=(5 if quick else 20) if batch == 1 else 2,
                                rounds=2 if quick else 3)
        lines.append(Line(f"answering_b{batch}", f"one-pass answering against CoT decoding ({T + 1} tokens, KV cache), "
                          f"T = {T}, batch {batch}, one thread", ratio=b / a, goal=goal, ours=batch / a,
                          theirs=batch / b, unit="examples/s"))
    return lines
