"""A Hugging Face causal LM behind the toolkit GPT's interface, for the factorisation's base.

`HFCausalLM.load(folder)` reads a model saved with `save_pretrained` from a local directory (the
hub is never asked). It reads the benchmark's character-level token ids directly, so its
vocabulary must hold them (a model trained on this benchmark; a pretrained model with its own
tokenizer is not supported yet). `forward` takes what the GPT's does (a key/value cache,
padding masks with positions counted over real tokens, an injected vector at a slot), so the
GPT's `generate` serves it unchanged; `features` gives the logits and the last hidden states.
Needs the `strategies` extra (transformers, peft).
"""
from __future__ import annotations

import inspect
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from internalize.models.gpt import GPT, Inject, add_at


@dataclass(frozen=True)
class HFShape:
    vocab: int
    max_len: int
    width: int


class HFCausalLM(nn.Module):
    def __init__(self, lm: nn.Module, vocab: int):
        """vocab: the tokenizer's size; logits are cut to it (a larger vocabulary's extra rows are never
        sampled)."""
        super().__init__()
        self.lm = lm
        config = lm.config
        longest = getattr(config, "n_positions", None) or getattr(config, "max_position_embeddings", None) or 2048
        self.cfg = HFShape(vocab, int(longest), config.hidden_size)
        # transformers 5 names the key/value cache `cache`; earlier versions `past_key_values`
        self._cache_arg = "cache" if "cache" in inspect.signature(lm.forward).parameters else "past_key_values"

    @classmethod
    def load(cls, folder: str | Path, vocab: int) -> "HFCausalLM":
        from transformers import AutoModelForCausalLM

        folder = Path(folder)
        if not (folder / "config.json").is_file():
            raise ValueError(f"model.hf_path: {folder} holds no Hugging Face model (no config.json)")
        lm = AutoModelForCausalLM.from_pretrained(str(folder), local_files_only=True)
        if lm.config.vocab_size < vocab:
            raise ValueError(f"model.hf_path: the model's vocabulary ({lm.config.vocab_size}) is smaller than "
                             f"the benchmark's tokenizer ({vocab})")
        return cls(lm.float().eval(), vocab)

    def lora_targets(self) -> list[str]:
        """Names of every linear layer of the blocks (nn.Linear or GPT-2's Conv1D), not the LM head."""
        names = set()
        for name, module in self.lm.named_modules():
            if name and not name.endswith("lm_head") and type(module).__name__ in ("Linear", "Conv1D"):
                names.add(name.rsplit(".", 1)[-1])
        return sorted(names)

    def _call(self, idx: torch.Tensor, cache, attention_mask, positions, inject: Inject | None, hidden: bool):
        B, T = idx.shape
        offset = cache.get_seq_length() if cache is not None else 0
        if attention_mask is None:
            attention_mask = torch.ones(B, offset + T, dtype=torch.bool, device=idx.device)
        if positions is None:
            positions = (attention_mask.long().cumsum(dim=1) - 1).clamp(min=0)[:, offset:]
        embeds = add_at(self.lm.get_input_embeddings()(idx), inject, offset)
        return self.lm(inputs_embeds=embeds, attention_mask=attention_mask.long(), position_ids=positions,
                       use_cache=True, output_hidden_states=hidden, **{self._cache_arg: cache})

    def forward(self, idx: torch.Tensor, cache=None, attention_mask: torch.Tensor | None = None,
                positions: torch.Tensor | None = None, inject: Inject | None = None):
        out = self._call(idx, cache, attention_mask, positions, inject, hidden=False)
        return out.logits[..., :self.cfg.vocab], getattr(out, self._cache_arg)

    def features(self, idx: torch.Tensor, attention_mask: torch.Tensor | None = None,
                 inject: Inject | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        out = self._call(idx, None, attention_mask, None, inject, hidden=True)
        return out.logits[..., :self.cfg.vocab], out.hidden_states[-1]

    generate = GPT.generate

    def new_cache(self, batch: int, length: int) -> None:
        return None  # Hugging Face's model grows its own cache
