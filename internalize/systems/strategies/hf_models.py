"""Hugging Face causal LMs built from scratch, with tokenizers of their own built offline (no hub),
saved with save_pretrained into a folder as a user's model would be: GPT-2s with a character-level
tokenizer (one token per character the benchmark writes) or a byte-level BPE whose merges join
digits, and a Qwen2 (untied LM head) with that BPE read through transformers' Qwen2 tokenizer (which,
as Qwen's does, splits digits apart). The tests' tiny models, and the from-scratch GPT-2 set beside
the toolkit's GPT (`python -m internalize.systems.strategies.hf_models --help`)."""
from __future__ import annotations

import random
from pathlib import Path

import torch

from internalize.systems.strategies.benchmark.tokenizer import CHARS


def char_tokenizer(folder: Path):
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {"[UNK]": 0, **{c: i + 1 for i, c in enumerate(CHARS)}}
    tokenizer = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.Split(Regex("."), "isolated")
    tokenizer.decoder = decoders.Fuse()
    fast = PreTrainedTokenizerFast(tokenizer_object=tokenizer, unk_token="[UNK]")
    fast.save_pretrained(folder)
    return fast


def bpe_tokenizer(folder: Path, size: int = 600):
    """Byte-level BPE trained on strings of the benchmark's characters and on runs of digits."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    rng = random.Random(0)
    texts = ["".join(rng.choice(CHARS) for _ in range(rng.randint(3, 12))) for _ in range(3000)]
    texts += ["".join(rng.choice("0123456789") for _ in range(rng.randint(2, 8))) for _ in range(3000)]
    tokenizer.train_from_iterator(texts, trainers.BpeTrainer(vocab_size=size,
                                                             initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                                             show_progress=False))
    fast = PreTrainedTokenizerFast(tokenizer_object=tokenizer)
    fast.save_pretrained(folder)
    return fast


def gpt2(folder: Path, tokenizer: str = "bpe", width: int = 32, layers: int = 2, heads: int = 2,
         positions: int = 128) -> Path:
    """A GPT-2 of these sizes with the BPE or the character-level tokenizer (`tokenizer`: bpe | char),
    its weights drawn from seed 0 by transformers' initialisation, no dropout (as the toolkit's GPT)."""
    from transformers import GPT2Config, GPT2LMHeadModel

    built = (bpe_tokenizer if tokenizer == "bpe" else char_tokenizer)(folder)
    torch.manual_seed(0)
    GPT2LMHeadModel(GPT2Config(vocab_size=len(built), n_positions=positions, n_embd=width, n_layer=layers,
                               n_head=heads, bos_token_id=None, eos_token_id=None, resid_pdrop=0.0,
                               embd_pdrop=0.0, attn_pdrop=0.0)).save_pretrained(folder)
    return folder


def qwen2_bpe(folder: Path, positions: int = 128) -> Path:
    """A tiny Qwen2 (width 32, two layers, an untied head) with the BPE."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    tokenizer = bpe_tokenizer(folder)
    torch.manual_seed(0)
    Qwen2ForCausalLM(Qwen2Config(vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                 num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=positions,
                                 tie_word_embeddings=False, bos_token_id=None, eos_token_id=None)).save_pretrained(folder)
    return folder


def main() -> None:
    import argparse

    parser = argparse.ArgumentParser(description="Write a from-scratch GPT-2 and its tokenizer into a folder "
                                                 "(model.hf_path of strategies_base, with model.adapt=full).")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--tokenizer", choices=("char", "bpe"), default="char")
    parser.add_argument("--width", type=int, default=128)
    parser.add_argument("--depth", type=int, default=4)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--positions", type=int, default=256)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    gpt2(args.out, args.tokenizer, args.width, args.depth, args.heads, args.positions)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
