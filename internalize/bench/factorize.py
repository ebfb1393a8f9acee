"""The factorisation's training step against this machine's matrix-multiply peak: how much of the
CPU a step of strategies_factorize uses (its FLOPs counted by torch's FlopCounterMode as executed:
the posterior's and the generator's passes and their backward, the frozen base's reference pass)."""
from __future__ import annotations

import torch
from torch.utils.flop_counter import FlopCounterMode

from internalize.bench.gpt import square_product
from internalize.bench.timing import Line, installed, side_by_side, threads


def factorize_step(quick: bool, prepare=None):
    """One optimisation step of strategies_factorize on one fixed batch (the calibration scale's sizes;
    smoke's with `quick`), over an untrained base (its weights change what a step costs in no way),
    and the config it was built from. prepare(system), if given, runs on the built system first."""
    from internalize import config as configs
    from internalize.registry import build
    from internalize.train import make_optimizer, split_loss

    overrides = ["model.base_steps=1", "task.per_task=600" if not quick else "task.per_task=40"]
    config = configs.load("strategies_factorize", overrides, "smoke" if quick else "calibration")
    with torch.random.fork_rng():
        torch.manual_seed(0)
        system = build(config)
    if prepare is not None:
        prepare(system)
    stage = system.stage(0)
    batch = stage.sample(config.train.batch_size, torch.Generator().manual_seed(0))
    optimizer = make_optimizer(system, stage.params, config.train)

    def step():
        optimizer.zero_grad(set_to_none=True)
        loss, _ = split_loss(stage.loss(batch))
        loss.backward()
        optimizer.step()

    return step, config


def utilisation(quick: bool) -> list[Line]:
    if not installed("peft"):  # the factorisation's LoRA copies are peft's
        return [Line("factorize_utilisation", "a strategies_factorize training step", goal=0.6, skipped="needs peft")]
    with threads(1):
        step, config = factorize_step(quick)
        step()  # the first call allocates; count the second
        with FlopCounterMode(display=False) as counter:
            step()
        flops = counter.get_total_flops()
        product, product_flops = square_product(quick)
        a, p = side_by_side(step, product, repeats=2 if quick else 5, rounds=2 if quick else 4)
    peak = product_flops / p
    m = config.model
    return [Line("factorize_utilisation", f"achieved FLOP/s of a strategies_factorize training step "
                 f"({'smoke' if quick else 'calibration'} scale: width {m.width}, depth {m.depth}, batch "
                 f"{config.train.batch_size}) over the fp32 matmul peak, one thread", ratio=flops / a / peak,
                 goal=0.6, ours=flops / a, theirs=peak, unit="FLOP/s",
                 note=f"{flops / 1e9:.1f} GFLOP in {a:.3f} s a step")]
