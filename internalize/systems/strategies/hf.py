"""A Hugging Face causal LM and its own tokenizer behind the toolkit GPT's and the character
tokenizer's interfaces: the base of either latent-strategies system.

`load_tokenizer(folder)` reads the model's tokenizer (AutoTokenizer, from the local folder, never
the hub) and adds the benchmark's frame tokens (<bos>, <x>, ..., <eos>, <pad>) as special tokens,
so each is one token and the text between them is tokenized by the model's own merges. Text goes
in and comes out: `decode` writes the frame tokens back as they are and the rest with the
tokenizer's decoder, so a tokenizer whose merges join digits serves (the validators read the
decoded text). `HFCausalLM.load` reads the model (`save_pretrained` safetensors, in fp32 or bf16)
and grows its embeddings when the frame tokens are new to its vocabulary. `forward` takes what the
GPT's does (a key/value cache, padding masks with positions counted over real tokens, an injected
vector at a slot), so the GPT's `generate` serves it unchanged; `features` gives the logits and the
last hidden states; `run_with_cache` every block's residual stream for the strategy probes.
Adapting it to the benchmark (LoRA and the frame tokens' rows, or every weight) and reading an
adapted run back are in `internalize.systems.strategies.adapt`. Needs the `strategies` extra
(transformers, peft).
"""
from __future__ import annotations

import contextlib
import inspect
import warnings
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from internalize.models.gpt import GPT, Inject, add_at
from internalize.systems.strategies.benchmark.tokenizer import SPECIALS, Vocabulary

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json")


def quiet() -> None:
    """transformers' info lines and progress bars off: a run's own progress is what it shows."""
    from transformers.utils import logging

    logging.set_verbosity_error()
    logging.disable_progress_bar()


@contextlib.contextmanager
def peft_quietly():
    """peft's wrapping of a transformers model, without transformers' deprecation notice that it triggers
    (`is_gradient_checkpointing`): nothing a user of this toolkit can act on."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*", category=FutureWarning)
        yield


def first_line(err: BaseException) -> str:
    text = str(err).strip()
    return text.splitlines()[0] if text else type(err).__name__


class HFTokenizer(Vocabulary):
    """A Hugging Face tokenizer with the frame tokens added, behind the character tokenizer's interface
    (len, pad_id, id, encode, decode)."""

    def __init__(self, tokenizer):
        # keep the tokenizer's own extra special tokens (transformers 5 names the switch replace_extra_...)
        keep = next(k for k in ("replace_extra_special_tokens", "replace_additional_special_tokens")
                    if k in inspect.signature(tokenizer.add_special_tokens).parameters)
        tokenizer.add_special_tokens({"additional_special_tokens": list(SPECIALS)}, **{keep: False})
        self.tokenizer = tokenizer
        self.ids = {token: tokenizer.convert_tokens_to_ids(token) for token in SPECIALS}
        self.names = {i: token for token, i in self.ids.items()}
        for token, i in self.ids.items():
            if self.encode(token) != [i]:
                raise ValueError(f"the tokenizer does not keep the frame token {token} as one token")

    def __len__(self) -> int:
        return len(self.tokenizer)

    def encode(self, text: str) -> list[int]:
        return self.tokenizer.encode(text, add_special_tokens=False)

    def decode(self, ids) -> str:
        """The text of these ids: each frame token as itself, each run of other tokens by the tokenizer's
        decoder (no spaces added between tokens, none cleaned up)."""
        out, run = [], []
        for i in map(int, ids):
            if i in self.names:
                if run:
                    out.append(self.tokenizer.decode(run, skip_special_tokens=False, clean_up_tokenization_spaces=False))
                    run = []
                out.append(self.names[i])
            else:
                run.append(i)
        if run:
            out.append(self.tokenizer.decode(run, skip_special_tokens=False, clean_up_tokenization_spaces=False))
        return "".join(out)

    def save(self, folder: Path) -> None:
        self.tokenizer.save_pretrained(str(folder))


def model_folder(folder: str | Path, key: str = "model.hf_path") -> Path:
    """`folder`, refused (ValueError, one line) when it holds no Hugging Face model."""
    folder = Path(folder)
    if not (folder / "config.json").is_file():
        raise ValueError(f"{key}: {folder} holds no Hugging Face model (no config.json)")
    return folder


def load_tokenizer(folder: str | Path, key: str = "model.hf_path") -> HFTokenizer:
    """The tokenizer saved in `folder`, with the frame tokens; ValueError (one line) when there is none."""
    from transformers import AutoTokenizer

    # without its files AutoTokenizer may build an empty tokenizer of the model's type: refuse that first
    if not any((Path(folder) / name).is_file() for name in TOKENIZER_FILES):
        raise ValueError(f"{key}: {folder} holds no tokenizer (none of {', '.join(TOKENIZER_FILES)})")
    quiet()
    try:
        tokenizer = AutoTokenizer.from_pretrained(str(folder), local_files_only=True)
    except (OSError, ValueError, TypeError, KeyError) as err:
        raise ValueError(f"{key}: {folder} holds no tokenizer that AutoTokenizer reads "
                         f"({first_line(err).rstrip(': ')})") from None
    if isinstance(tokenizer, bool) or not hasattr(tokenizer, "add_special_tokens"):
        raise ValueError(f"{key}: {folder} holds no tokenizer that AutoTokenizer reads")
    return HFTokenizer(tokenizer)


@dataclass(frozen=True)
class HFShape:
    vocab: int
    max_len: int
    width: int


def read_model(folder: str | Path, dtype: str = "fp32", key: str = "model.hf_path"):
    """AutoModelForCausalLM from a local folder, in `dtype`; ValueError (one line) when it holds none."""
    from transformers import AutoModelForCausalLM

    folder = model_folder(folder, key)
    quiet()
    try:
        return AutoModelForCausalLM.from_pretrained(str(folder), local_files_only=True, dtype=DTYPES[dtype])
    except (OSError, ValueError, KeyError) as err:
        raise ValueError(f"{key}: cannot load a causal LM from {folder} ({first_line(err)})") from None


class HFCausalLM(nn.Module):
    def __init__(self, lm: nn.Module, vocab: int):
        """vocab: the tokenizer's size; logits are cut to it (a larger vocabulary's extra rows are never
        sampled)."""
        super().__init__()
        self.lm = lm
        config = lm.config
        longest = getattr(config, "n_positions", None) or getattr(config, "max_position_embeddings", None) or 2048
        self.cfg = HFShape(vocab, int(longest), config.hidden_size)
        self.grown = False  # whether the embeddings were grown for the frame tokens
        # transformers 5 names the key/value cache `cache`; earlier versions `past_key_values`
        self._cache_arg = "cache" if "cache" in inspect.signature(lm.forward).parameters else "past_key_values"

    @classmethod
    def load(cls, folder: str | Path, tokenizer: HFTokenizer, dtype: str = "fp32", key: str = "model.hf_path",
             longest: int | None = None) -> "HFCausalLM":
        """The model in `folder` for `tokenizer`, its embeddings grown to hold the frame tokens where its
        vocabulary lacks them; with `longest`, a model with fewer positions than longest + 8 is refused."""
        lm = read_model(folder, dtype, key)
        grown = lm.config.vocab_size < len(tokenizer)
        if grown:  # the new rows drawn from the old ones' mean and covariance, the same on every load
            with torch.random.fork_rng():
                torch.manual_seed(0)
                lm.resize_token_embeddings(len(tokenizer))
        model = cls(lm.eval(), len(tokenizer))
        model.grown = grown
        if longest is not None and model.cfg.max_len < longest + 8:
            raise ValueError(f"{key}: the model's {model.cfg.max_len} positions are fewer than the benchmark's "
                             f"longest sequence and 8 ({longest + 8})")
        return model

    @property
    def conv1d(self) -> bool:
        """Whether its linear layers are GPT-2's Conv1D (weights stored transposed: LoRA's fan_in_fan_out)."""
        return any(type(m).__name__ == "Conv1D" for m in self.lm.modules())

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
        embeds = self.lm.get_input_embeddings()(idx)
        if inject is not None:
            inject = Inject(inject[0], inject[1].to(embeds.dtype), *inject[2:])
        embeds = add_at(embeds, inject, offset)
        return self.lm(inputs_embeds=embeds, attention_mask=attention_mask.long(), position_ids=positions,
                       use_cache=True, output_hidden_states=hidden, **{self._cache_arg: cache})

    def forward(self, idx: torch.Tensor, cache=None, attention_mask: torch.Tensor | None = None,
                positions: torch.Tensor | None = None, inject: Inject | None = None):
        """Logits in fp32 (whatever the weights' dtype), cut to the tokenizer, and the cache."""
        out = self._call(idx, cache, attention_mask, positions, inject, hidden=False)
        return out.logits[..., :self.cfg.vocab].float(), getattr(out, self._cache_arg)

    def features(self, idx: torch.Tensor, attention_mask: torch.Tensor | None = None,
                 inject: Inject | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        out = self._call(idx, None, attention_mask, None, inject, hidden=True)
        return out.logits[..., :self.cfg.vocab].float(), out.hidden_states[-1].float()

    def run_with_cache(self, idx: torch.Tensor, names: list[str] | None = None):
        """(logits, {name: (B, T, width)}): `hook_embed` (the embeddings) and `blocks.{i}.hook_resid_post`
        (the hidden state after block i), as the GPT names its hook points."""
        out = self._call(idx, None, None, None, None, hidden=True)
        states = out.hidden_states
        found = {"hook_embed": states[0], **{f"blocks.{i}.hook_resid_post": s for i, s in enumerate(states[1:])}}
        return out.logits[..., :self.cfg.vocab].float(), {n: found[n].float() for n in (names or found)}

    def probe_layers(self) -> list[str]:
        return ["hook_embed"] + [f"blocks.{i}.hook_resid_post" for i in range(self.lm.config.num_hidden_layers)]

    generate = GPT.generate

    def new_cache(self, batch: int, length: int) -> None:
        return None  # Hugging Face's model grows its own cache
