"""The standard transformer of the toolkit: a GPT-2-style decoder with named activations.

Pre-LayerNorm blocks, learned absolute positions, a GELU MLP of 4x the width, tied input and
output embeddings. Every activation a probe or a plot wants passes through a named HookPoint
(`blocks.{l}.attn.hook_pattern` is (B, heads, query, key); `blocks.{l}.hook_resid_post` is
(B, T, width)); `run_with_cache` returns them. Greedy decoding uses a key/value cache.
"""
from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass
from typing import Optional

import torch
import torch.nn.functional as F
from torch import nn

Cache = list[tuple[torch.Tensor, torch.Tensor]]  # per block: keys, values, each (B, heads, S, head width)


@dataclass(frozen=True)
class GPTConfig:
    vocab: int
    max_len: int
    width: int = 128
    depth: int = 2
    heads: int = 4

    def __post_init__(self):
        if self.width % self.heads:
            raise ValueError(f"model.width ({self.width}) must be a multiple of model.heads ({self.heads})")


class HookPoint(nn.Module):
    """An identity that names an activation; forward hooks on it read it."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x


class Attention(nn.Module):
    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.heads = cfg.heads
        self.qkv = nn.Linear(cfg.width, 3 * cfg.width)
        self.proj = nn.Linear(cfg.width, cfg.width)
        self.hook_pattern = HookPoint()

    def forward(self, x: torch.Tensor, past: Optional[tuple] = None):
        B, T, C = x.shape
        q, k, v = self.qkv(x).split(C, dim=2)
        q, k, v = (t.view(B, T, self.heads, C // self.heads).transpose(1, 2) for t in (q, k, v))  # (B, nh, T, hs)
        if past is not None:
            k, v = torch.cat([past[0], k], dim=2), torch.cat([past[1], v], dim=2)  # (B, nh, S, hs)
        S = k.shape[2]
        if self.hook_pattern._forward_hooks:  # someone reads the pattern: compute it explicitly
            causal = torch.ones(T, S, dtype=torch.bool, device=x.device).tril(S - T)  # query i sees keys <= S-T+i
            scores = q @ k.transpose(-2, -1) / math.sqrt(C // self.heads)  # (B, nh, T, S)
            pattern = self.hook_pattern(scores.masked_fill(~causal, float("-inf")).softmax(dim=-1))
            y = pattern @ v  # (B, nh, T, hs)
        elif T == S or T == 1:  # no cache (plain causal), or one new token that sees everything
            y = F.scaled_dot_product_attention(q, k, v, is_causal=T > 1)  # (B, nh, T, hs)
        else:
            causal = torch.ones(T, S, dtype=torch.bool, device=x.device).tril(S - T)
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=causal)
        return self.proj(y.transpose(1, 2).reshape(B, T, C)), (k, v)


class Block(nn.Module):
    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(cfg.width), nn.LayerNorm(cfg.width)
        self.attn = Attention(cfg)
        self.mlp = nn.Sequential(nn.Linear(cfg.width, 4 * cfg.width), nn.GELU(), nn.Linear(4 * cfg.width, cfg.width))
        self.hook_resid_pre, self.hook_resid_mid, self.hook_resid_post = HookPoint(), HookPoint(), HookPoint()

    def forward(self, x: torch.Tensor, past: Optional[tuple] = None):
        x = self.hook_resid_pre(x)
        a, kv = self.attn(self.ln1(x), past)
        x = self.hook_resid_mid(x + a)
        x = self.hook_resid_post(x + self.mlp(self.ln2(x)))
        return x, kv


class GPT(nn.Module):
    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.cfg = cfg
        self.tok = nn.Embedding(cfg.vocab, cfg.width)
        self.pos = nn.Embedding(cfg.max_len, cfg.width)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.depth))
        self.ln_f = nn.LayerNorm(cfg.width)
        self.head = nn.Linear(cfg.width, cfg.vocab, bias=False)
        self.head.weight = self.tok.weight  # tied
        self.apply(self._init)

    @staticmethod
    def _init(module: nn.Module) -> None:
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, std=0.02)
        if isinstance(module, nn.Linear) and module.bias is not None:
            nn.init.zeros_(module.bias)

    def forward(self, idx: torch.Tensor, cache: Optional[Cache] = None):
        """idx: (B, T) tokens following the cached ones. Returns logits (B, T, vocab) and the new cache."""
        B, T = idx.shape
        offset = cache[0][0].shape[2] if cache else 0
        if offset + T > self.cfg.max_len:
            raise ValueError(f"a sequence of {offset + T} tokens exceeds the model's max_len {self.cfg.max_len}")
        x = self.tok(idx) + self.pos(torch.arange(offset, offset + T, device=idx.device))  # (B, T, C)
        new_cache = []
        for i, block in enumerate(self.blocks):
            x, kv = block(x, cache[i] if cache else None)
            new_cache.append(kv)
        return self.head(self.ln_f(x)), new_cache

    def run_with_cache(self, idx: torch.Tensor, names: Optional[list[str]] = None):
        """Logits and a dict of the named activations (every HookPoint when names is None)."""
        store: dict[str, torch.Tensor] = {}
        points = {n: m for n, m in self.named_modules() if isinstance(m, HookPoint) and (names is None or n in names)}
        with contextlib.ExitStack() as stack:
            for name, point in points.items():
                handle = point.register_forward_hook(lambda mod, inp, out, name=name: store.__setitem__(name, out))
                stack.callback(handle.remove)
            logits, _ = self(idx)
        return logits, store

    @torch.no_grad()
    def generate(self, prompt: torch.Tensor, steps: int) -> torch.Tensor:
        """Greedy decoding with a key/value cache: (B, P) prompt -> (B, steps) new tokens."""
        logits, cache = self(prompt)
        out = []
        for _ in range(steps):
            token = logits[:, -1].argmax(dim=-1, keepdim=True)  # (B, 1)
            out.append(token)
            if len(out) < steps:
                logits, cache = self(token, cache)
        return torch.cat(out, dim=1)
