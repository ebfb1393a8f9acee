"""Where the time of a GPT training step or of batched sampling goes: torch.profiler's table.

    python benchmarks/profile_step.py train [--width 128]     # one AdamW step, batch 64 x 64, depth 4
    python benchmarks/profile_step.py sample                  # 48 tokens for 64 prompts, width 128

One thread, the shapes of `internalize bench`'s training and sampling lines; the figures quoted in
benchmarks/README.md come from these tables.
"""
from __future__ import annotations

import argparse

import torch
from torch.profiler import ProfilerActivity, profile

from internalize.bench.gpt import batch_of, models, stepper
from internalize.models.gpt import GPT, GPTConfig


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("what", choices=["train", "sample"])
    parser.add_argument("--width", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    torch.set_num_threads(1)
    if args.what == "train":
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
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(args.repeats):
            work()
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=15))


if __name__ == "__main__":
    main()
