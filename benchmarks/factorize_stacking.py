"""Can factorisation runs over one frozen base train faster as one batched model? Three ways to
train N LoRA copies of the same GPT, each on its own batch, measured side by side on one thread:

    python benchmarks/factorize_stacking.py [--runs 6] [--batch 64] [--length 64] [--width 128] [--profile]
                                            [--math-attention]

- one after another: N peft models, one forward and backward each (what N runs do today);
- vmap: the N adapters' state stacked (torch.func.stack_module_state), the base's weights shared,
  one functional_call under torch.func.vmap;
- mixed batch: one peft model holding N adapters, the N batches as one, each row through its own
  adapter (peft's adapter_names), the base's matrix multiplies done once for every row.

Each way's loss and gradients are checked equal to the first's before timing. The step is the
generator's: a forward pass of the LoRA-adapted GPT and the cross-entropy of every next token.
"""
from __future__ import annotations

import argparse
import copy
import math
import time

import torch
import torch.nn.functional as F
from peft import LoraConfig, get_peft_model
from torch.func import functional_call, stack_module_state, vmap

from internalize.models.gpt import GPT, GPTConfig

TARGETS = ["qkv", "proj", "fc_in", "fc_out"]


class Step(torch.nn.Module):
    """One copy's summed next-token loss, as a module functional_call can run with stacked state."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, tokens):
        logits, _ = self.model.features(tokens)
        return F.cross_entropy(logits[:, :-1].transpose(1, 2), tokens[:, 1:])


def math_attention(q, k, v, attn_mask=None, is_causal=False, **_):
    """scaled_dot_product_attention written out: q k^T / sqrt(d), masked, softmax, times v."""
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if is_causal:
        T, S = q.shape[-2], k.shape[-2]
        scores = scores.masked_fill(torch.ones(T, S, dtype=torch.bool).triu(S - T + 1), float("-inf"))
    if attn_mask is not None:
        scores = scores.masked_fill(~attn_mask, float("-inf"))
    return scores.softmax(-1) @ v


def build(runs: int, width: int):
    torch.manual_seed(0)
    base = GPT(GPTConfig(64, 256, width, 4, 4)).requires_grad_(False)
    config = LoraConfig(r=8, lora_alpha=16, target_modules=TARGETS, lora_dropout=0.0, bias="none")
    singles = [get_peft_model(copy.deepcopy(base), copy.deepcopy(config)) for _ in range(runs)]
    for model in singles:  # adapters away from their zero start, so every gradient is non-zero
        for name, p in model.named_parameters():
            if "lora_" in name:
                p.data.normal_(0, 0.02)
    multi = get_peft_model(copy.deepcopy(base), copy.deepcopy(config), adapter_name="run0")
    for i in range(1, runs):
        multi.add_adapter(f"run{i}", copy.deepcopy(config))
    own = dict(multi.named_parameters())
    for i, model in enumerate(singles):
        for name, p in model.named_parameters():
            if "lora_" in name:
                own[name.replace(".default.", f".run{i}.")].data.copy_(p.data)
                own[name.replace(".default.", f".run{i}.")].requires_grad_(True)
    multi.eval()  # peft takes adapter_names in eval mode only; the model has no dropout, so nothing else changes
    return singles, multi


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=6)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--length", type=int, default=64)
    parser.add_argument("--width", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--profile", action="store_true", help="torch.profiler's table of one step of each way")
    parser.add_argument("--math-attention", action="store_true",
                        help="attention as two matrix products and a softmax in every way (vmap batches those; "
                             "it has no batching rule for the CPU flash kernel and loops over the runs)")
    args = parser.parse_args()
    if args.math_attention:
        F.scaled_dot_product_attention = math_attention
    torch.set_num_threads(1)
    singles, multi = build(args.runs, args.width)
    tokens = torch.randint(0, 64, (args.runs, args.batch, args.length), generator=torch.Generator().manual_seed(1))

    def one_after_another():
        for model, rows in zip(singles, tokens):
            model.zero_grad(set_to_none=True)
            Step(model)(rows).backward()
        return [[p.grad for n, p in m.named_parameters() if "lora_" in n] for m in singles]

    step = Step(singles[0])
    learn = [{n: p for n, p in Step(m).named_parameters() if p.requires_grad} for m in singles]
    stacked, _ = stack_module_state([Step(m) for m in singles])
    stacked = {n: stacked[n].detach().requires_grad_(True) for n in learn[0]}
    shared = {n: p for n, p in step.named_parameters() if not p.requires_grad}

    def vmapped():
        for p in stacked.values():
            p.grad = None
        vmap(lambda state, rows: functional_call(step, (state, shared), (rows,)))(stacked, tokens).sum().backward()
        return [[stacked[n].grad[i] for n in learn[0]] for i in range(args.runs)]

    names = [f"run{i}" for i in range(args.runs) for _ in range(args.batch)]
    own = dict(multi.named_parameters())

    def mixed():
        multi.zero_grad(set_to_none=True)
        with multi._enable_peft_forward_hooks(adapter_names=names):
            logits, _ = multi.features(tokens.flatten(0, 1))
        flat = tokens.flatten(0, 1)
        losses = F.cross_entropy(logits[:, :-1].transpose(1, 2), flat[:, 1:], reduction="none").view(args.runs, -1)
        losses.mean(1).sum().backward()
        return [[own[n.replace(".default.", f".run{i}.")].grad for n, _ in singles[i].named_parameters() if "lora_" in n]
                for i in range(args.runs)]

    reference = one_after_another()
    for label, way in (("vmap", vmapped), ("mixed batch", mixed)):
        grads = way()
        worst = max(float((a - b).abs().max()) for ra, rb in zip(reference, grads) for a, b in zip(ra, rb))
        print(f"{label}: gradients within {worst:.1e} of one after another")
    best = {"one after another": float("inf"), "vmap": float("inf"), "mixed batch": float("inf")}
    ways = {"one after another": one_after_another, "vmap": vmapped, "mixed batch": mixed}
    if args.profile:
        from torch.profiler import ProfilerActivity, profile

        for label, way in ways.items():
            with profile(activities=[ProfilerActivity.CPU]) as prof:
                way()
            print(f"== {label}\n" + prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=8))
        return
    for _ in range(args.rounds):  # the ways alternate, so each sees the same machine; best round wins
        for label, way in ways.items():
            started = time.perf_counter()
            way()
            best[label] = min(best[label], time.perf_counter() - started)
    print(f"{args.runs} runs, batch {args.batch} x {args.length}, width {args.width}, depth 4, one thread:")
    for label, seconds in best.items():
        print(f"  {label:18s} {seconds:6.3f} s a step for all runs ({best['one after another'] / seconds:.2f}x)")


if __name__ == "__main__":
    main()
