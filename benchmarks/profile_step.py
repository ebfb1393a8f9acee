"""Where the time of a GPT training step or of batched sampling goes: torch.profiler's table.

    python benchmarks/profile_step.py train [--width 128]     # one AdamW step, batch 64 x 64, depth 4
    python benchmarks/profile_step.py sample                  # 48 tokens for 64 prompts, width 128
    python benchmarks/profile_step.py factorize [--compile] [--bf16]   # a strategies_factorize step, calibration scale

`factorize` also splits the matrix products' time between the LoRA products (an operand with
the LoRA rank as a dimension) and the base's; `--compile` also times the step with every GPT block under torch.compile against the
eager step, side by side (the compiled blocks' first call, which compiles, is left out); `--bf16`
times the step under bfloat16 autocast (train.precision=bf16) against fp32, side by side.

One thread, the shapes of `internalize bench`'s training and sampling lines; the figures quoted in
benchmarks/README.md come from these tables.
"""
from __future__ import annotations

import argparse

import torch
from torch.profiler import ProfilerActivity, profile

from internalize.bench.factorize import factorize_step
from internalize.bench.gpt import batch_of, models, stepper
from internalize.bench.timing import side_by_side
from internalize.models.gpt import GPT, GPTConfig


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("what", choices=["train", "sample", "factorize"])
    parser.add_argument("--width", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--compile", action="store_true", help="factorize: time compiled blocks against eager")
    parser.add_argument("--bf16", action="store_true", help="factorize: time the step under bf16 autocast against fp32")
    args = parser.parse_args()
    torch.set_num_threads(1)
    rank = None
    if args.what == "factorize":
        work, config = factorize_step(quick=False)
        rank = config.model.lora_rank
        if args.compile:
            compiled, _ = factorize_step(quick=False, prepare=compile_blocks)
            eager_s, compiled_s = side_by_side(work, compiled, repeats=args.repeats, rounds=3)
            print(f"a step: eager {eager_s:.3f} s, blocks compiled {compiled_s:.3f} s ({eager_s / compiled_s:.2f}x)")
        if args.bf16:
            bf16, _ = factorize_step(quick=False, bf16=True)
            fp32_s, bf16_s = side_by_side(work, bf16, repeats=args.repeats, rounds=3)
            print(f"a step: fp32 {fp32_s:.3f} s, bf16 autocast {bf16_s:.3f} s ({fp32_s / bf16_s:.2f}x)")
    elif args.what == "train":
        model, _ = models(args.width, 64)
        work = stepper(model, batch_of(64, 64), hf=False)
    else:
        torch.manual_seed(0)
        model = GPT(GPTConfig(64, 72, args.width, 4, 4)).eval()
        prompts = torch.randint(1, 64, (64, 24), generator=torch.Generator().manual_seed(2))

        def work():
            model.generate(prompts, 48, temperature=1.0, generator=torch.Generator().manual_seed(3))
    for _ in range(3):
        work()
    with profile(activities=[ProfilerActivity.CPU], record_shapes=rank is not None) as prof:
        for _ in range(args.repeats):
            work()
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=15))
    if rank is not None:
        print(products_split(prof, rank, args.repeats))


def products_split(prof, rank: int, repeats: int) -> str:
    """Milliseconds a step, and the share of the step, of the LoRA products against the base's."""
    events = prof.key_averages(group_by_input_shape=True)
    total = sum(e.self_cpu_time_total for e in events)
    split = {"LoRA products": 0.0, "base products": 0.0}
    for e in events:
        if e.key in ("aten::mm", "aten::addmm"):
            lora = any(rank in shape for shape in e.input_shapes if shape)
            split["LoRA products" if lora else "base products"] += e.self_cpu_time_total
    return "; ".join(f"{k}: {v / 1e3 / repeats:.1f} ms a step ({v / total:.2f})" for k, v in split.items())


def compile_blocks(system) -> None:
    """torch.compile every transformer block of the system's networks (the LoRA layers inside them too)."""
    for module in system.model.modules():
        if type(module).__name__ == "Block":
            module.compile(dynamic=True)


if __name__ == "__main__":
    main()
