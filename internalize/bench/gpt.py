"""Training speed of the toolkit's GPT: against Hugging Face GPT-2 of the same size, and as a share
of this machine's fp32 matrix-multiply peak (model FLOP utilisation)."""
from __future__ import annotations

import torch
import torch.nn.functional as F

from internalize.bench.timing import Line, installed, side_by_side, threads
from internalize.models.gpt import GPT, GPTConfig

VOCAB, DEPTH, HEADS = 64, 4, 4
BATCH, LENGTH = 64, 64  # tokens a step: 64 x 64, the setting


def stepper(model: torch.nn.Module, batch: torch.Tensor, hf: bool):
    """One AdamW training step of `model` on `batch` (B, L + 1) (next-token loss), as a closure.
    Both read L tokens a row: the GPT batch[:, :-1], Hugging Face's model batch[:, :-1] too (it
    shifts its labels inside)."""
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    hf_batch = batch[:, :-1].contiguous()

    def step():
        if hf:
            loss = model(hf_batch, labels=hf_batch).loss
        else:
            logits, _ = model(batch[:, :-1])
            loss = F.cross_entropy(logits.flatten(0, 1), batch[:, 1:].flatten())
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    return step


def models(width: int, length: int):
    from internalize.models.gpt2 import to_gpt2

    torch.manual_seed(0)
    ours = GPT(GPTConfig(VOCAB, length, width, DEPTH, HEADS)).train()
    return ours, to_gpt2(ours).train()


def batch_of(batch: int, length: int) -> torch.Tensor:
    return torch.randint(0, VOCAB, (batch, length + 1), generator=torch.Generator().manual_seed(1))


def training(quick: bool) -> list[Line]:
    if not installed("transformers"):
        return [Line(f"training_w{w}", "GPT training tokens/s against GPT2LMHeadModel", skipped="needs transformers")
                for w in (128, 256)]
    lines = []
    # both models run the same kernels (benchmarks/README.md), so the goal is to lose nothing to them
    for width, goal in ((128, 1.0), (256, 1.0)):
        batch, length = (16, 32) if quick else (BATCH, LENGTH)
        ours, theirs = models(width, length)
        tokens = batch_of(batch, length)
        with threads(1):
            a, b = side_by_side(stepper(ours, tokens, False), stepper(theirs, tokens, True),
                                repeats=3 if quick else 10, rounds=2 if quick else 4)
        n = batch * length
        lines.append(Line(f"training_w{width}", f"GPT training tokens/s against GPT2LMHeadModel, width {width}, "
                          f"depth {DEPTH}, batch {batch} x {length}, one thread", ratio=b / a, goal=goal,
                          ours=n / a, theirs=n / b, unit="tokens/s",
                          note="both bound by matrix multiplies: see the utilisation line"))
    return lines


def train_flops(cfg: GPTConfig, batch: int, length: int) -> float:
    """FLOPs of one training step, counted the usual way: 6 per weight of every matrix multiply
    per token (forward 2, backward 4; the blocks' linear layers and the tied head), plus 12 x
    depth x length x width per token for attention scores and their mix (full square, not halved
    for causality). Embedding lookups, norms, activations and the optimizer are not counted."""
    d = cfg.width
    matmul_weights = cfg.depth * 12 * d * d + d * cfg.vocab
    per_token = 6 * matmul_weights + 12 * cfg.depth * length * d
    return per_token * batch * length


def square_product(quick: bool):
    """A square fp32 matrix product and its FLOPs: what this machine's matmul peak is measured on."""
    n = 512 if quick else 1024
    a, b = torch.randn(n, n), torch.randn(n, n)
    return (lambda: a @ b), 2 * n ** 3


def utilisation(quick: bool) -> list[Line]:
    width = 256
    batch, length = (16, 32) if quick else (BATCH, LENGTH)
    torch.manual_seed(0)
    ours = GPT(GPTConfig(VOCAB, length, width, DEPTH, HEADS)).train()
    tokens = batch_of(batch, length)
    flops = train_flops(ours.cfg, batch, length)
    product, product_flops = square_product(quick)
    hf_share = None
    with threads(1):  # the peak is measured in the same rounds as the steps, so both see the same machine
        a, p = side_by_side(stepper(ours, tokens, False), product, repeats=3 if quick else 10, rounds=2 if quick else 4)
        if installed("transformers"):
            from internalize.models.gpt2 import to_gpt2

            b, p2 = side_by_side(stepper(to_gpt2(ours).train(), tokens, True), product, repeats=3 if quick else 10,
                                 rounds=2 if quick else 4)
            p, hf_share = min(p, p2), flops / b
    peak = product_flops / p
    note = f"HF GPT-2 on the same step: {hf_share / peak:.0%}" if hf_share else ""
    return [Line("utilisation_w256", f"model FLOP utilisation of GPT training, width {width}, depth {DEPTH}, batch "
                 f"{batch} x {length}, one thread: achieved FLOP/s over the fp32 matmul peak", ratio=flops / a / peak,
                 goal=0.85, ours=flops / a, theirs=peak, unit="FLOP/s", note=note)]
