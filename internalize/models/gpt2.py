"""The toolkit GPT as a Hugging Face GPT-2: the same network, for side-by-side comparisons (bench)."""
from __future__ import annotations

from torch import nn

from internalize.models.gpt import GPT


def to_gpt2(gpt: GPT) -> nn.Module:
    """The same network as a Hugging Face GPT2LMHeadModel (exact GELU, no dropout), weights copied:
    it gives the GPT's logits. Used to compare the two side by side on the same weights."""
    from transformers import GPT2Config, GPT2LMHeadModel

    c = gpt.cfg
    config = GPT2Config(vocab_size=c.vocab, n_positions=c.max_len, n_embd=c.width, n_layer=c.depth, n_head=c.heads,
                        activation_function="gelu", resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
                        layer_norm_epsilon=gpt.ln_f.eps, bos_token_id=None, eos_token_id=None, pad_token_id=0)
    hf = GPT2LMHeadModel(config)
    conv = lambda linear: linear.weight.T  # noqa: E731  (GPT-2's Conv1D keeps (in, out))
    state = {"transformer.wte.weight": gpt.tok.weight, "transformer.wpe.weight": gpt.pos.weight,
             "transformer.ln_f.weight": gpt.ln_f.weight, "transformer.ln_f.bias": gpt.ln_f.bias}
    for i, block in enumerate(gpt.blocks):
        pairs = {"ln_1": block.ln1, "ln_2": block.ln2, "attn.c_attn": block.attn.qkv, "attn.c_proj": block.attn.proj,
                 "mlp.c_fc": block.mlp.fc_in, "mlp.c_proj": block.mlp.fc_out}
        for name, module in pairs.items():
            linear = isinstance(module, nn.Linear)
            state[f"transformer.h.{i}.{name}.weight"] = conv(module) if linear else module.weight
            state[f"transformer.h.{i}.{name}.bias"] = module.bias
    missing, unexpected = hf.load_state_dict({k: v.detach().clone() for k, v in state.items()}, strict=False)
    if unexpected or [k for k in missing if k != "lm_head.weight" and not k.endswith("attn.bias")
                      and not k.endswith("masked_bias")]:
        raise ValueError(f"GPT-2 layout changed: missing {missing}, unexpected {unexpected}")
    hf.tie_weights()
    return hf.eval()
