"""A Hugging Face causal LM adapted to the benchmark (strategies_base with model.hf_path), and an
adapted run read back as the factorisation's frozen base.

model.adapt = lora: peft LoRA on every linear layer of the blocks (model.lora_rank, model.lora_alpha)
and the frame tokens' rows of the embeddings (peft's trainable_token_indices; the LM head's rows as
well where it is not tied to the embeddings, so the model can learn to write </y> and <eos>), all
else frozen. full: every weight trains (what a model trained from scratch needs). A finished run
writes RUN/hf: the tokenizer (JSON) and either the adapter (adapter_config.json,
adapter_model.safetensors) or the whole model (config.json, model.safetensors), nothing pickled.
"""
from __future__ import annotations

from pathlib import Path

from torch import nn

from internalize.systems.strategies.hf import (
    HFCausalLM,
    HFTokenizer,
    load_tokenizer,
    peft_quietly,
)

FOLDER = "hf"  # the run directory's Hugging Face folder


def module_name(root: nn.Module, module: nn.Module) -> str:
    return next(name for name, m in root.named_modules() if m is module)


def adapted(model: HFCausalLM, tokenizer: HFTokenizer, how: str, rank: int, alpha: float) -> HFCausalLM:
    """`model` made trainable on the benchmark: LoRA and the frame tokens' rows, or every weight."""
    if how == "full":
        return model.requires_grad_(True)
    from peft import LoraConfig, get_peft_model

    lm = model.lm
    rows = sorted(tokenizer.ids.values())
    embeddings, head = lm.get_input_embeddings(), lm.get_output_embeddings()
    tokens = {module_name(lm, embeddings): rows}
    if head is not None and head.weight is not embeddings.weight:  # an untied head: its rows learn too
        tokens[module_name(lm, head)] = rows
    config = LoraConfig(r=rank, lora_alpha=alpha, target_modules=model.lora_targets(), lora_dropout=0.0,
                        bias="none", fan_in_fan_out=model.conv1d, trainable_token_indices=tokens)
    with peft_quietly():
        model.lm = get_peft_model(lm, config)
    return model


def save(model: HFCausalLM, tokenizer: HFTokenizer, folder: Path) -> None:
    """The adapted model's Hugging Face folder: the adapter (LoRA) or the whole model (full), and the tokenizer."""
    from peft import PeftModel

    folder.mkdir(parents=True, exist_ok=True)
    if isinstance(model.lm, PeftModel):  # grown embeddings are saved whole, with the adapter
        model.lm.save_pretrained(str(folder), save_embedding_layers=model.grown)
    else:
        model.lm.save_pretrained(str(folder))
    tokenizer.save(folder)


def adapted_base(run: Path, config, tokenizer: HFTokenizer, dtype: str, longest: int) -> HFCausalLM:
    """A finished HF strategies_base run (its config `config`, its tokenizer) as a plain causal LM, the
    adapter merged into the model it adapted."""
    folder = run / FOLDER
    if config.model.adapt == "full":
        return HFCausalLM.load(folder, tokenizer, dtype, "model.base", longest)
    from peft import PeftModel

    model = HFCausalLM.load(config.model.hf_path, tokenizer, dtype, "model.base", longest)
    with peft_quietly():
        model.lm = PeftModel.from_pretrained(model.lm, str(folder)).merge_and_unload()
    return model


def run_tokenizer(run: Path) -> HFTokenizer:
    """The tokenizer an HF strategies_base run saved in its hf/ folder."""
    folder = run / FOLDER
    if not folder.is_dir():
        raise ValueError(f"model.base: {run} holds no {FOLDER}/ folder (a Hugging Face base writes it when it finishes)")
    return load_tokenizer(folder, "model.base")
