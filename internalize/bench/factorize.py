"""The factorisation's training step against this machine's matrix-multiply peak: how much of the
CPU a step of strategies_factorize uses (its FLOPs counted by torch's FlopCounterMode as executed:
the posterior's and the generator's passes and their backward, the frozen base's reference pass), and
the six objectives' runs trained as one stack against one after another."""
from __future__ import annotations

from typing import Callable

import torch
from torch.utils.flop_counter import FlopCounterMode

from internalize.bench.gpt import square_product
from internalize.bench.timing import Line, installed, side_by_side, threads


def factorize_step(quick: bool, prepare=None, bf16: bool = False):
    """One optimisation step of strategies_factorize on one fixed batch (the calibration scale's sizes;
    smoke's with `quick`), over an untrained base (its weights change what a step costs in no way),
    and the config it was built from. prepare(system), if given, runs on the built system first; bf16
    computes the loss under bfloat16 autocast, as the trainer does with train.precision=bf16."""
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
        with torch.autocast("cpu", torch.bfloat16, enabled=bf16):
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


def training_steps(systems: list, batch_size: int) -> Callable[[], None]:
    """One training step of each system in turn, as the trainer takes it (a batch drawn, with the base's
    responses where the response source says; the loss, its backward and the optimizer's step), on
    the same batch at every call."""
    from internalize.train import make_optimizer, split_loss

    steps = []
    for system in systems:
        stage = system.stage(0)
        optimizer = make_optimizer(system, stage.params, system.config.train)
        steps.append((stage, optimizer))

    def run():
        for stage, optimizer in steps:
            optimizer.zero_grad(set_to_none=True)
            loss, _ = split_loss(stage.loss(stage.sample(batch_size, torch.Generator().manual_seed(0))))
            loss.backward()
            optimizer.step()
    return run


OBJECTIVES = ("elbo", "beta_elbo", "model_directed", "token_weighting", "global_scale", "token_inverse")  # figure 3's


def stacked(quick: bool) -> list[Line]:
    """The six objectives' runs over one base, one seed: stacked (internalize sweep --stack) against one
    after another, a training step each, on base-sampled responses and on the benchmark's."""
    if not installed("peft"):
        return [Line("factorize_stacked", "six objectives' runs stacked", goal=3.0, skipped="needs peft")]
    from internalize import config as configs
    from internalize.registry import build, stacked_class

    scale = "smoke" if quick else "calibration"
    objectives = OBJECTIVES[:3] if quick else OBJECTIVES  # --quick: three runs a stack, for the tests' time
    seconds = {}
    with threads(1), torch.random.fork_rng():
        for source in ("base", "benchmark"):
            group = [configs.load("strategies_factorize", ["model.base_steps=1", f"task.per_task={40 if quick else 600}",
                                                           f"objective.name={o}", f"data.response_source={source}"],
                                  scale) for o in objectives]
            torch.manual_seed(0)
            together = training_steps([stacked_class(group[0].system)(group)], group[0].train.batch_size)
            alone = []
            for config in group:
                torch.manual_seed(0)
                alone.append(build(config))
            seconds[source] = side_by_side(training_steps(alone, group[0].train.batch_size), together,
                                           repeats=1, rounds=2 if quick else 3)
    (alone, together), (bench_alone, bench_together) = seconds["base"], seconds["benchmark"]
    config = group[0]
    return [Line("factorize_stacked", f"{len(objectives)} objectives' runs over one base and seed ({scale} scale: width "
                 f"{config.model.width}, depth {config.model.depth}, batch {config.train.batch_size}), "
                 "responses sampled from the base: a training step of each, stacked against one after another, "
                 "one thread", ratio=alone / together, goal=3.0, ours=together, theirs=alone, unit="s",
                 note=f"on the benchmark's responses {bench_alone / bench_together:.2f}x",
                 extra={"benchmark_ratio": bench_alone / bench_together})]
