"""Can factorisation runs over one frozen base train faster as one batched model? Three ways to train
N LoRA copies of the same GPT, each on its own batch (the generator's pass of a factorisation step:
a forward pass of the LoRA-adapted GPT and the cross-entropy of every next token, and its backward):

- one after another: N peft models, one forward and backward each (what N runs do today);
- vmap: the N adapters' state stacked (torch.func.stack_module_state), the base's weights shared,
  one functional_call under torch.func.vmap;
- mixed batch: one peft model holding N adapters, the N batches as one, each row through its own
  adapter (peft's adapter_names), the base's matrix multiplies done once for every row.

`benchmarks/factorize_stacking.py` measures them at any size (and profiles them), each way's gradients
checked against the first's. (What `internalize sweep --stack` does instead, one after another in one
process with the base's work shared, is the bench line `factorize_stacked`: internalize/bench/factorize.py.)
"""
from __future__ import annotations

import copy
import math

import torch
import torch.nn.functional as F


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


def build(runs: int, width: int, depth: int = 4):
    """N single-adapter peft copies of one GPT (adapters away from their zero start, so every gradient
    is non-zero) and one peft model holding the same N adapters."""
    from peft import LoraConfig, get_peft_model

    from internalize.models.gpt import GPT, GPTConfig

    torch.manual_seed(0)
    base = GPT(GPTConfig(64, 256, width, depth, 4)).requires_grad_(False)
    config = LoraConfig(r=8, lora_alpha=16, target_modules=TARGETS, lora_dropout=0.0, bias="none")
    singles = [get_peft_model(copy.deepcopy(base), copy.deepcopy(config)) for _ in range(runs)]
    for model in singles:
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


def ways(runs: int, batch: int, length: int, width: int) -> dict:
    """The three ways' steps over the same N batches, each returning every copy's LoRA gradients."""
    from torch.func import functional_call, stack_module_state, vmap

    singles, multi = build(runs, width)
    tokens = torch.randint(0, 64, (runs, batch, length), generator=torch.Generator().manual_seed(1))

    def one_after_another():
        for model, rows in zip(singles, tokens):
            model.zero_grad(set_to_none=True)
            Step(model)(rows).backward()
        return [[p.grad for n, p in m.named_parameters() if "lora_" in n] for m in singles]

    step = Step(singles[0])
    learn = [n for n, p in step.named_parameters() if p.requires_grad]
    stacked, _ = stack_module_state([Step(m) for m in singles])
    stacked = {n: stacked[n].detach().requires_grad_(True) for n in learn}
    shared = {n: p for n, p in step.named_parameters() if not p.requires_grad}

    def vmapped():
        for p in stacked.values():
            p.grad = None
        vmap(lambda state, rows: functional_call(step, (state, shared), (rows,)))(stacked, tokens).sum().backward()
        return [[stacked[n].grad[i] for n in learn] for i in range(runs)]

    names = [f"run{i}" for i in range(runs) for _ in range(batch)]
    own = dict(multi.named_parameters())

    def mixed():
        multi.zero_grad(set_to_none=True)
        with multi._enable_peft_forward_hooks(adapter_names=names):
            logits, _ = multi.features(tokens.flatten(0, 1))
        flat = tokens.flatten(0, 1)
        losses = F.cross_entropy(logits[:, :-1].transpose(1, 2), flat[:, 1:], reduction="none").view(runs, -1)
        losses.mean(1).sum().backward()
        return [[own[n.replace(".default.", f".run{i}.")].grad for n, _ in singles[i].named_parameters() if "lora_" in n]
                for i in range(runs)]

    return {"one after another": one_after_another, "vmap": vmapped, "mixed batch": mixed}


def worst_gradient_gap(steps: dict) -> dict:
    """Each way's largest gradient difference from the first way's."""
    first, *others = steps
    reference = steps[first]()
    return {label: max(float((a - b).abs().max()) for ra, rb in zip(reference, steps[label]()) for a, b in zip(ra, rb))
            for label in others}
