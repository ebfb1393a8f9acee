"""The standard transformer of the toolkit: a GPT-2-style decoder with named activations.

Pre-LayerNorm blocks, learned absolute positions, a GELU MLP of 4x the width (`mlp.fc_in`,
`mlp.act`, `mlp.fc_out`, named so LoRA can target them), tied input and output embeddings.
Every activation a probe or a plot wants passes through a named HookPoint (`hook_embed` is the
(B, T, width) input to the first block, token + position embedding + any injected vector;
`blocks.{l}.attn.hook_pattern` is (B, heads, query, key); `blocks.{l}.hook_resid_post` is
(B, T, width)); `run_with_cache` returns them.

Batches of prompts of different lengths: pass `attention_mask` (B, S) over every key, cached and
new, True at real tokens. Any layout works in `forward` and `token_logprobs` (`generate` needs
left padding): padded keys are never attended to, and positions count only the real tokens
before each one, so every row gets, at its real tokens, the logits it gets alone. `generate`
decodes greedily or by sampling with a key/value cache; `token_logprobs` scores sequences;
`inject` adds a vector to each row's embedding at one slot, or from it on. Without a mask, positions or
injection, every call computes exactly what it did before these existed.
"""
from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass
from typing import Literal, NamedTuple, Optional

import torch
import torch.nn.functional as F
from pydantic import model_validator
from torch import nn

from internalize.config import Strict


class Inject(NamedTuple):
    """Vectors added to the embeddings: each row's at its slot, or (onward) at its slot and every
    position after it. A plain (slots, vectors) tuple means one slot."""
    slots: torch.Tensor  # (B,) long
    vectors: torch.Tensor  # (B, width)
    onward: bool = False


class KVCache:
    """Keys and values of every block, preallocated for `length` tokens: each forward writes its new
    tokens in place after the `size` held, instead of concatenating a grown copy every step."""

    def __init__(self, depth: int, batch: int, heads: int, length: int, head_width: int, like: torch.Tensor):
        shape = (depth, batch, heads, length, head_width)
        self.keys, self.values = like.new_empty(shape), like.new_empty(shape)
        self.size = 0  # tokens held

    def append(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Write block `layer`'s new keys and values (B, heads, T, hw); all it holds, (B, heads, S, hw)."""
        end = self.size + k.shape[2]
        if end > self.keys.shape[3]:
            raise ValueError(f"the cache holds {self.keys.shape[3]} tokens; {end} asked")
        self.keys[layer, :, :, self.size:end] = k
        self.values[layer, :, :, self.size:end] = v
        return self.keys[layer, :, :, :end], self.values[layer, :, :, :end]


Cache = list[tuple[torch.Tensor, torch.Tensor]] | KVCache  # per block: keys, values, each (B, heads, S, hw)


def add_at(x: torch.Tensor, inject: Inject | None, offset: int) -> torch.Tensor:
    """x (B, T, C), the embeddings of sequence positions offset..offset+T-1, with each row's injected
    vector added at its slot (if that slot is among them), or at every one from its slot on."""
    if inject is None:
        return x
    slots, vectors, onward = Inject(*inject)  # a plain (slots, vectors) pair: one slot
    positions = torch.arange(offset, offset + x.shape[1], device=x.device)
    hit = slots[:, None] <= positions if onward else slots[:, None] == positions  # (B, T)
    return x + hit[..., None] * vectors[:, None, :]


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

    def forward(self, x: torch.Tensor, past: tuple | None = None, mask: torch.Tensor | None = None):
        """mask: (B, 1, T, S) bool, True where a query may see a key; None means plain causal.
        past: this block's cached (keys, values), or (KVCache, block index) to write into in place."""
        B, T, C = x.shape
        q, k, v = self.qkv(x).split(C, dim=2)
        q, k, v = (t.view(B, T, self.heads, C // self.heads).transpose(1, 2) for t in (q, k, v))  # (B, nh, T, hs)
        if past is not None and isinstance(past[0], KVCache):
            k, v = past[0].append(past[1], k, v)  # (B, nh, S, hs) views of the preallocated cache
        elif past is not None:
            k, v = torch.cat([past[0], k], dim=2), torch.cat([past[1], v], dim=2)  # (B, nh, S, hs)
        S = k.shape[2]
        hooked = bool(self.hook_pattern._forward_hooks)  # someone reads the pattern: compute it explicitly
        if mask is None and (hooked or T not in (1, S)):
            mask = torch.ones(T, S, dtype=torch.bool, device=x.device).tril(S - T)  # query i sees keys <= S-T+i
        if hooked:
            scores = q @ k.transpose(-2, -1) / math.sqrt(C // self.heads)  # (B, nh, T, S)
            pattern = self.hook_pattern(scores.masked_fill(~mask, float("-inf")).softmax(dim=-1))
            y = pattern @ v  # (B, nh, T, hs)
        elif mask is None:  # no cache (plain causal), or one new token that sees everything
            y = F.scaled_dot_product_attention(q, k, v, is_causal=T > 1)  # (B, nh, T, hs)
        else:
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)  # (B, nh, T, hs)
        return self.proj(y.transpose(1, 2).reshape(B, T, C)), (k, v)


class MLP(nn.Module):
    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.fc_in = nn.Linear(cfg.width, 4 * cfg.width)
        self.act = nn.GELU()
        self.fc_out = nn.Linear(4 * cfg.width, cfg.width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc_out(self.act(self.fc_in(x)))  # (B, T, C)


class Block(nn.Module):
    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(cfg.width), nn.LayerNorm(cfg.width)
        self.attn = Attention(cfg)
        self.mlp = MLP(cfg)
        self.hook_resid_pre, self.hook_resid_mid, self.hook_resid_post = HookPoint(), HookPoint(), HookPoint()

    def forward(self, x: torch.Tensor, past: tuple | None = None, mask: torch.Tensor | None = None):
        x = self.hook_resid_pre(x)
        a, kv = self.attn(self.ln1(x), past, mask)
        x = self.hook_resid_mid(x + a)
        x = self.hook_resid_post(x + self.mlp(self.ln2(x)))
        return x, kv


class GPT(nn.Module):
    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.cfg = cfg
        self.tok = nn.Embedding(cfg.vocab, cfg.width)
        self.pos = nn.Embedding(cfg.max_len, cfg.width)
        self.hook_embed = HookPoint()
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.depth))
        self.ln_f = nn.LayerNorm(cfg.width)
        self.head = nn.Linear(cfg.width, cfg.vocab, bias=False)
        self.head.weight = self.tok.weight  # tied
        self.apply(self._init)

    def fill_positions(self, tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """A checkpoint's tensors for this GPT where the checkpoint was trained on shorter sequences (a
        continuation in a longer trace format): its positional rows first, then this model's own freshly
        drawn rows for the positions it never saw. Anything else, and a longer table, as it was (keys as a
        snapshot names them, `model.` first)."""
        key = "model.pos.weight"
        old, mine = tensors.get(key), self.pos.weight
        if old is None or old.dim() != 2 or old.shape[1] != mine.shape[1] or old.shape[0] >= mine.shape[0]:
            return tensors
        return {**tensors, key: torch.cat([old.to(mine.dtype), mine.detach()[old.shape[0]:].to(old.device)])}

    @staticmethod
    def _init(module: nn.Module) -> None:
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, std=0.02)
        if isinstance(module, nn.Linear) and module.bias is not None:
            nn.init.zeros_(module.bias)

    def forward(self, idx: torch.Tensor, cache: Cache | None = None, attention_mask: torch.Tensor | None = None,
                positions: torch.Tensor | None = None, inject: Inject | None = None):
        """idx: (B, T) tokens following the cached ones. Returns logits (B, T, vocab) and the new cache.
        The arguments are those of `trunk`."""
        x, new_cache = self.trunk(idx, cache, attention_mask, positions, inject)
        return self.head(self.ln_f(x)), new_cache

    def trunk(self, idx: torch.Tensor, cache: Cache | None = None, attention_mask: torch.Tensor | None = None,
              positions: torch.Tensor | None = None, inject: Inject | None = None):
        """The last block's output (B, T, width), before the final LayerNorm, and the new cache.

        attention_mask: (B, S) bool over all keys (S = cached + T), True at real tokens; padded keys
        are masked (a padded query sees itself only, so its output is finite but meaningless).
        positions: (B, T) position indices; by default offset + arange(T) without a mask, and the
        count of real tokens before each token with one. inject: (slots (B,), vectors (B, width))
        adds vectors[b] to row b's embedding at sequence index slots[b] (counted over cached + new
        tokens, padding included) if that index is among these T tokens; a slot of -1 adds nothing.
        """
        B, T = idx.shape
        preallocated = isinstance(cache, KVCache)
        offset = cache.size if preallocated else cache[0][0].shape[2] if cache else 0
        mask = None
        if attention_mask is not None:
            if attention_mask.shape != (B, offset + T):
                raise ValueError(f"attention_mask is {tuple(attention_mask.shape)}, expected ({B}, {offset + T})")
            keys = attention_mask.bool()[:, None, None, :]  # (B, 1, 1, S)
            query_at = torch.arange(offset, offset + T, device=idx.device)[:, None]  # (T, 1)
            key_at = torch.arange(offset + T, device=idx.device)[None, :]  # (1, S)
            # a query also sees itself, so a padded query's row is never all masked (softmax NaN)
            mask = (keys & (key_at <= query_at)) | (key_at == query_at)  # (B, 1, T, S)
            if positions is None:
                positions = (attention_mask.long().cumsum(dim=1) - 1).clamp(min=0)[:, offset:]  # (B, T); pads at 0
        if positions is None:
            if offset + T > self.cfg.max_len:
                raise ValueError(f"a sequence of {offset + T} tokens exceeds the model's max_len {self.cfg.max_len}")
            positions = torch.arange(offset, offset + T, device=idx.device)  # (T,)
        elif positions.numel() and int(positions.max()) >= self.cfg.max_len:
            raise ValueError(f"position {int(positions.max())} exceeds the model's max_len {self.cfg.max_len}")
        x = self.hook_embed(add_at(self.tok(idx) + self.pos(positions), inject, offset))  # (B, T, C)
        new_cache = []
        for i, block in enumerate(self.blocks):
            x, kv = block(x, (cache, i) if preallocated else cache[i] if cache else None, mask)
            new_cache.append(kv)
        if preallocated:
            cache.size += T
            new_cache = cache
        return x, new_cache

    def new_cache(self, batch: int, length: int) -> KVCache:
        """An empty preallocated cache for `batch` rows of up to `length` tokens (`generate` uses one)."""
        c = self.cfg
        return KVCache(c.depth, batch, c.heads, length, c.width // c.heads, self.tok.weight.new_empty(0))

    def run_with_cache(self, idx: torch.Tensor, names: list[str] | None = None, **forward_kwargs):
        """Logits and a dict of the named activations (every HookPoint when names is None)."""
        store: dict[str, torch.Tensor] = {}
        points = {n: m for n, m in self.named_modules() if isinstance(m, HookPoint) and (names is None or n in names)}
        with contextlib.ExitStack() as stack:
            for name, point in points.items():
                handle = point.register_forward_hook(lambda mod, inp, out, name=name: store.__setitem__(name, out))
                stack.callback(handle.remove)
            logits, _ = self(idx, **forward_kwargs)
        return logits, store

    def features(self, idx: torch.Tensor, attention_mask: torch.Tensor | None = None,
                 inject: Inject | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """Logits (B, T, vocab) and the final hidden states (B, T, width), after the last LayerNorm."""
        hidden = self.ln_f(self.trunk(idx, attention_mask=attention_mask, inject=inject)[0])
        return self.head(hidden), hidden

    def token_logprobs(self, idx: torch.Tensor, attention_mask: torch.Tensor | None = None,
                       inject: Inject | None = None) -> torch.Tensor:
        """(B, T) tokens -> (B, T-1): entry t is log p(idx[:, t+1] | idx[:, :t+1]).

        Entries whose token or whose preceding token is padding are 0, so `.sum(-1)` is the
        log-likelihood of each row's real tokens after its first. Keeps the graph for training.
        """
        logits, _ = self(idx, attention_mask=attention_mask, inject=inject)  # (B, T, V)
        logp = -F.cross_entropy(logits[:, :-1].transpose(1, 2), idx[:, 1:], reduction="none")  # (B, T-1)
        if attention_mask is not None:
            real = attention_mask.bool()
            logp = logp.masked_fill(~(real[:, 1:] & real[:, :-1]), 0.0)
        return logp

    @torch.no_grad()
    def generate(self, prompt: torch.Tensor, steps: int, temperature: float = 0.0,
                 generator: torch.Generator | None = None, stop_token: int | None = None,
                 attention_mask: torch.Tensor | None = None, inject: Inject | None = None) -> torch.Tensor:
        """(B, P) prompt -> (B, steps_taken) new tokens, decoded with a key/value cache.

        temperature 0 is greedy; above 0, tokens are drawn from softmax(logits / temperature) with
        `generator`. attention_mask (B, P) marks real prompt tokens (pad on the left, so every
        row's last column is its latest token). With stop_token, a row that has emitted it emits
        it again from then on, and decoding ends once every row has: steps_taken <= steps.
        inject is as in forward, its slots counted over prompt columns then generated tokens.
        """
        if temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {temperature}")
        if attention_mask is not None and not attention_mask[:, -1].all():
            raise ValueError("generate needs left padding: every row's last prompt column must be a real token")
        cache = self.new_cache(prompt.shape[0], prompt.shape[1] + steps)
        logits, cache = self(prompt, cache, attention_mask=attention_mask, inject=inject)
        done = torch.zeros(prompt.shape[0], dtype=torch.bool, device=prompt.device)  # (B,)
        out = []
        for _ in range(steps):
            if temperature == 0:
                token = logits[:, -1].argmax(dim=-1, keepdim=True)  # (B, 1)
            else:
                probs = (logits[:, -1] / temperature).softmax(dim=-1)  # (B, V)
                token = draw_tokens(probs, generator)  # (B, 1)
            if stop_token is not None:
                token = token.masked_fill(done[:, None], stop_token)
                done = done | (token[:, 0] == stop_token)
            out.append(token)
            if len(out) == steps or (stop_token is not None and bool(done.all())):
                break
            if attention_mask is not None:
                attention_mask = F.pad(attention_mask.bool(), (0, 1), value=True)  # (B, S + 1)
            logits, cache = self(token, cache, attention_mask=attention_mask, inject=inject)
        return torch.cat(out, dim=1) if out else prompt.new_zeros(prompt.shape[0], 0)


def draw_tokens(probs: torch.Tensor, generator: torch.Generator | None) -> torch.Tensor:
    """(B, V) probabilities -> (B, 1) tokens drawn with `generator`, on the probabilities' device.

    A generator on another device (the trainer's, which stays on the CPU so checkpoints hold its state,
    sampling responses on a GPU) cannot drive torch.multinomial there; it draws one uniform a row on
    its own device, and the token is where that uniform falls in the row's cumulative probabilities."""
    if generator is None or generator.device == probs.device:
        return torch.multinomial(probs, 1, generator=generator)
    u = torch.rand(probs.shape[0], 1, generator=generator, device=generator.device).to(probs.device)
    return inverse_cdf(probs, u)


def inverse_cdf(probs: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """(B, V) probabilities (not necessarily normalised), (B, 1) uniforms in [0, 1) -> (B, 1) the first
    token whose cumulative probability exceeds u times the row's total (a zero-probability token never)."""
    cumulative = probs.double().cumsum(-1)
    token = torch.searchsorted(cumulative, u.double() * cumulative[:, -1:], right=True)
    return token.clamp_(max=probs.shape[1] - 1)


class GPTSection(Strict):
    """The `model` section of a system that trains the toolkit GPT."""
    name: Literal["gpt"] = "gpt"
    width: int = 128  # residual stream width
    depth: int = 2  # transformer blocks
    heads: int = 4  # attention heads per block (width must be a multiple)
    # a finished run directory whose trained weights this run starts from (the same model shape, but
    # for positions: a continuation whose sequences are longer keeps fresh rows for the new ones; a
    # continuation with a schedule of its own). None: random initialisation.
    init: Optional[str] = None

    @model_validator(mode="after")
    def _shape(self):
        if min(self.width, self.depth, self.heads) < 1 or self.width % self.heads:
            raise ValueError(f"model.width ({self.width}) must be a positive multiple of model.heads ({self.heads})")
        return self
