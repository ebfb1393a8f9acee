"""The toolkit's GPT against Hugging Face GPT2LMHeadModel, and one-pass answering against CoT decoding.

    python benchmarks/gpt_speed.py [--width 128 --depth 2 --heads 4 --length 16 --batch 128]

1. Training throughput (tokens per second) of the same-sized decoder, ours and HF GPT-2 (no dropout,
   the same AdamW, the same batches), measured in alternating rounds in one process.
2. Answering throughput (examples per second) of an internalized model (one forward pass over the
   prompt <sep> <ans>) against explicit chain-of-thought decoding (T more tokens, key/value cache).
Needs `pip install transformers`.
"""
from __future__ import annotations

import argparse
import time

import torch

from internalize.models.gpt import GPT, GPTConfig


def hf_gpt2(vocab: int, max_len: int, width: int, depth: int, heads: int):
    from transformers import GPT2Config, GPT2LMHeadModel

    cfg = GPT2Config(vocab_size=vocab, n_positions=max_len, n_embd=width, n_layer=depth, n_head=heads,
                     resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=0, eos_token_id=0)
    return GPT2LMHeadModel(cfg)


def train_rate(step, batches, rounds: int) -> float:
    """Tokens per second over `rounds` steps (after two warm-up steps)."""
    for batch in batches[:2]:
        step(batch)
    started = time.perf_counter()
    for batch in batches[2:2 + rounds]:
        step(batch)
    return rounds * batches[0].numel() / (time.perf_counter() - started)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--width", type=int, default=128)
    parser.add_argument("--depth", type=int, default=2)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--length", type=int, default=16, help="T: actions per example")
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    torch.manual_seed(0)
    vocab, seq = 32, 2 * args.length + 3
    ours = GPT(GPTConfig(vocab, seq, args.width, args.depth, args.heads))
    theirs = hf_gpt2(vocab, seq, args.width, args.depth, args.heads)
    batches = [torch.randint(0, vocab, (args.batch, seq)) for _ in range(args.steps + 2)]

    def stepper(model, hf: bool):
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)

        def step(batch):
            if hf:
                loss = model(batch, labels=batch).loss
            else:
                logits, _ = model(batch[:, :-1])
                loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), batch[:, 1:].flatten())
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
        return step

    step_ours, step_theirs = stepper(ours, False), stepper(theirs, True)
    rates = {"ours": [], "hf": []}
    for _ in range(args.rounds):  # alternate, so both see the same machine state
        rates["ours"].append(train_rate(step_ours, batches, args.steps))
        rates["hf"].append(train_rate(step_theirs, batches, args.steps))
    best = {k: max(v) for k, v in rates.items()}
    print(f"training, width {args.width}, depth {args.depth}, {args.heads} heads, batch {args.batch} x {seq} tokens, "
          f"threads {torch.get_num_threads()} (best of {args.rounds} rounds of {args.steps} steps)")
    print(f"  internalize GPT     {best['ours']:>12,.0f} tokens/s")
    print(f"  HF GPT2LMHeadModel  {best['hf']:>12,.0f} tokens/s")
    print(f"  ratio               {best['ours'] / best['hf']:>12.2f}x")

    ours.eval()
    prompts = torch.randint(0, vocab, (args.batch * 4, args.length + 1))
    with torch.no_grad():
        ours(prompts[:8])
        started = time.perf_counter()
        for _ in range(args.rounds):
            ours(torch.cat([prompts, prompts[:, :1]], dim=1))  # a_1..a_T <sep> <ans>: one pass
        one_pass = args.rounds * len(prompts) / (time.perf_counter() - started)
        started = time.perf_counter()
        for _ in range(args.rounds):
            ours.generate(prompts, args.length + 1)  # q_1..q_{T-1} <ans> q_T, cached
        decoding = args.rounds * len(prompts) / (time.perf_counter() - started)
    print(f"answering, T = {args.length}, batch {len(prompts)}")
    print(f"  one pass (internalized)     {one_pass:>10,.0f} examples/s")
    print(f"  CoT decoding (KV cache)     {decoding:>10,.0f} examples/s")
    print(f"  ratio                       {one_pass / decoding:>10.2f}x")


if __name__ == "__main__":
    main()
