"""What the trainer offers any system: named loss parts, parameter groups, gradient clipping,
warm-ups over the stage and the run, a global-step hook, and the system's own checkpointed state."""
import math

import pytest
import torch

from internalize.config import TrainConfig
from internalize.system import Stage, System
from internalize.train import train
from tests.conftest import Memory


class Linear(System):
    """Two scalars a, b under loss slope * (a + b) (a constant gradient), over `stages` stages;
    its own state counts the steps it has seen and sums a schedule of them."""

    def __init__(self, stages=1, groups=None, slope=1.0, grow=False):
        self.model = torch.nn.Module()
        self.model.a, self.model.b = torch.nn.Parameter(torch.zeros(())), torch.nn.Parameter(torch.zeros(()))
        self.num_stages, self.groups, self.slope, self.grow = stages, groups, slope, grow  # grow: slope x stage
        self.seen, self.trace, self.total = [], [], 0.0

    def stage(self, index):
        params = self.groups(self.model) if self.groups else [self.model.a, self.model.b]

        slope = self.slope * (index + 1) if self.grow else self.slope

        def loss(batch):
            value = slope * (self.model.a + self.model.b)
            return value, {"a_part": slope * self.model.a, "weight": 0.5}

        return Stage(info={}, params=params, sample=lambda size, gen: torch.rand((), generator=gen), loss=loss,
                     validate=lambda: 1.0)

    def on_step(self, step):
        self.seen.append(step)
        self.total += step * 0.5

    def after_step(self):
        self.trace.append((float(self.model.a.detach()), float(self.model.b.detach())))

    def evaluate(self, stage):
        return {}

    def state(self):
        return {"total": self.total}

    def load_state(self, state):
        self.total = state["total"]


def run(system, memory=None, **cfg):
    settings = dict(lr=0.1, advance="steps", steps_per_stage=5, eval_every=1, batch_size=1, checkpoint_every=0)
    return train(system, TrainConfig(**{**settings, **cfg}), torch.Generator().manual_seed(0), memory or Memory(),
                 show_progress=False)


def test_named_loss_parts_are_logged_beside_the_loss():
    memory = Memory()
    run(Linear(), memory)
    steps = [r for r in memory.records if "train_loss" in r]
    assert len(steps) == 5 and all(r["train_weight"] == 0.5 for r in steps)
    assert all(r["train_a_part"] == pytest.approx(0.5 * r["train_loss"]) for r in steps)  # a = b throughout


def test_a_parameter_group_keeps_its_own_learning_rate():
    system = Linear(groups=lambda m: [{"params": [m.a]}, {"params": [m.b], "lr": 0.01}])
    run(system)
    a, b = system.trace[-1]
    assert a == pytest.approx(-0.5, rel=1e-4) and b == pytest.approx(-0.05, rel=1e-4)  # Adam: lr per step


def test_warm_ups_over_the_stage_and_the_run_scale_each_step():
    system = Linear(stages=2)
    run(system, warmup_steps=2, run_warmup_steps=8)
    moves = [round(-(after[0] - before[0]), 6) for before, after in zip([(0.0, 0.0)] + system.trace, system.trace)]
    stage = [0.5, 1, 1, 1, 1]
    expected = [0.1 * s * min(1, (i + 1) / 8) for i, s in enumerate(stage + stage)]
    assert moves == pytest.approx(expected, abs=1e-5)


def test_gradient_clipping_logs_the_norm_and_bounds_the_step():
    memory = Memory()
    seen = []
    system = Linear(slope=30.0)
    system.after_step = lambda: seen.append(float(system.model.a.grad.norm() ** 2 + system.model.b.grad.norm() ** 2))
    run(system, memory, grad_clip=0.5)
    norms = [r["train_grad_norm"] for r in memory.records if "train_grad_norm" in r]
    assert norms == pytest.approx([30 * 2 ** 0.5] * 5)  # the norm before clipping
    assert max(seen) == pytest.approx(0.25, rel=1e-4)  # after: squared norm 0.5^2


def test_clip_groups_are_each_clipped_to_their_own_norm_and_logged_apart():
    """Runs trained as one (a stack) clip each run's gradient alone: a global clip would scale both
    groups by the larger norm."""
    import dataclasses

    class TwoRuns(Linear):
        def stage(self, index):
            stage = super().stage(index)
            m = self.model
            return dataclasses.replace(stage, loss=lambda batch: 3.0 * m.a + 40.0 * m.b, clip_groups=[[m.a], [m.b]])

    memory, seen = Memory(), []
    system = TwoRuns()
    system.after_step = lambda: seen.append((float(system.model.a.grad), float(system.model.b.grad)))
    run(system, memory, grad_clip=5.0)
    steps = [r for r in memory.records if "train_loss" in r]
    assert [r["train_0/grad_norm"] for r in steps] == pytest.approx([3.0] * 5)
    assert [r["train_1/grad_norm"] for r in steps] == pytest.approx([40.0] * 5)
    assert "train_grad_norm" not in steps[0]
    assert [g for pair in seen for g in pair] == pytest.approx([3.0, 5.0] * 5)  # the first under its bound untouched, the second clipped alone


def test_the_system_sees_every_global_step_across_stages():
    system = Linear(stages=3)
    run(system)
    assert system.seen == list(range(15))


def test_the_systems_state_is_checkpointed_and_restored_on_resume():
    memory = Memory()
    whole = Linear(stages=2)
    run(whole, memory, checkpoint_every=3)
    state, tensors = memory.checkpoints[0]  # taken at global step 3, mid stage 1
    assert state["step"] == 3 and state["system"] == {"total": 0.5 * (0 + 1 + 2)}
    resumed = Linear(stages=2)
    train(resumed, TrainConfig(lr=0.1, advance="steps", steps_per_stage=5, eval_every=1, batch_size=1,
                               checkpoint_every=3), torch.Generator().manual_seed(0), Memory(), show_progress=False,
          resume=(state, tensors))
    assert resumed.total == whole.total == 0.5 * sum(range(10))
    assert resumed.trace[-1] == whole.trace[-1]


def test_keeping_the_optimizer_carries_adams_moments_into_the_next_stage():
    moves = {}
    for reset in (True, False):
        system = Linear(stages=2, grow=True)
        run(system, reset_optimizer=reset)
        moves[reset] = -(system.trace[5][0] - system.trace[4][0])  # the first step of stage 2
    w = torch.nn.Parameter(torch.zeros(()))
    adam = torch.optim.Adam([w], lr=0.1)
    for grad in [1.0] * 5 + [2.0]:  # one Adam through both stages
        before = float(w.detach())
        w.grad = torch.tensor(grad)
        adam.step()
    assert moves[True] == pytest.approx(0.1, rel=1e-5)  # a fresh Adam's first step is lr
    assert moves[False] == pytest.approx(before - float(w.detach()), rel=1e-5) and moves[False] != pytest.approx(0.1)


def test_cosine_decay_falls_from_lr_to_the_floor_over_each_stage():
    system = Linear(stages=2)
    run(system, lr_decay="cosine", min_lr_ratio=0.2)
    moves = [-(after[0] - before[0]) for before, after in zip([(0.0, 0.0)] + system.trace, system.trace)]
    cosine = [0.2 + 0.8 * 0.5 * (1 + math.cos(math.pi * i / 5)) for i in range(5)]
    assert moves == pytest.approx([0.1 * c for c in cosine + cosine], abs=1e-5)  # Adam: a step of lr each


@pytest.mark.parametrize("precision, dtype", [("fp32", torch.float32), ("bf16", torch.bfloat16)])
def test_precision_bf16_runs_the_loss_under_autocast_and_keeps_fp32_weights(precision, dtype):
    system, seen = Linear(), []
    layer = torch.nn.Linear(2, 1)
    system.model.layer = layer
    original = system.stage

    def stage(index):
        s = original(index)

        def loss(batch):
            out = layer(torch.ones(1, 2))  # a matrix multiply: autocast decides its dtype
            seen.append(out.dtype)
            return s.loss(batch)[0] + out.float().sum(), {}
        return Stage(info={}, params=[*s.params, *layer.parameters()], sample=s.sample, loss=loss,
                     validate=s.validate)

    system.stage = stage
    run(system, precision=precision)
    assert seen and set(seen) == {dtype}
    assert layer.weight.dtype == torch.float32  # the weights the optimizer steps stay fp32


class Phased(Linear):
    """Linear, its stages setting their own budget, learning rate and warm-up (a run in phases)."""

    def __init__(self, phases):
        super().__init__(stages=len(phases))
        self.phases = phases

    def stage(self, index):
        stage = super().stage(index)
        stage.train = self.phases[index]
        return stage


def test_a_stage_sets_its_own_budget_learning_rate_and_warm_up():
    system = Phased([{"steps_per_stage": 3, "lr": 0.5}, {"steps_per_stage": 2, "lr": 0.01, "warmup_steps": 2}])
    result = run(system, steps_per_stage=7, lr=0.1)
    assert [r["steps"] for r in result["per_stage"]] == [3, 2] and result["steps"] == 5
    steps = [a for a, _ in system.trace]  # Adam moves each parameter by about lr a step under a constant gradient
    moves = [steps[0], *(b - a for a, b in zip(steps, steps[1:]))]
    assert moves[:3] == pytest.approx([-0.5] * 3, rel=1e-3)
    assert moves[3:] == pytest.approx([-0.005, -0.01], rel=1e-3)  # the second phase's warm-up, then its lr


@pytest.mark.parametrize("experiment", ["strategies_base", "strategies_factorize"])
def test_micro_batches_accumulate_to_the_whole_batchs_step(experiment):
    from internalize.config import load
    from internalize.registry import build

    def trained(micro):
        torch.manual_seed(0)
        config = load(experiment, scale="smoke", overrides=["train.steps_per_stage=3", "train.eval_every=1",
                                                             "eval.snapshots=0"] if experiment == "strategies_factorize"
                      else ["train.steps_per_stage=3", "train.eval_every=1"])
        system = build(config)
        cfg = config.train.model_copy(update={"micro_batch": micro})
        memory = Memory()
        train(system, cfg, torch.Generator().manual_seed(0), memory, show_progress=False)
        losses = [r["train_loss"] for r in memory.records if "train_loss" in r]
        return losses, [p.detach().clone() for p in system.model.parameters() if p.requires_grad]

    whole, parts = trained(None), trained(5)  # 32 rows in micro-batches of 5, the last of 2
    if experiment == "strategies_base":  # the same loss and step: per response token over the whole batch
        assert whole[0] == pytest.approx(parts[0], rel=1e-5)
        assert all(torch.allclose(a, b, atol=1e-5) for a, b in zip(whole[1], parts[1]))
    else:  # each micro-batch draws its own z; before the first step z reaches nothing (E(z) starts at zero)
        assert whole[0][0] == pytest.approx(parts[0][0], rel=1e-5) and whole[0][1:] != parts[0][1:]
    with pytest.raises(ValueError, match="micro_batch must be at least 1"):
        TrainConfig(micro_batch=0)


def test_a_system_whose_batches_cannot_split_refuses_micro_batches(cli, tmp_path):
    result = cli("run", "logicot", "--smoke", "--set", "train.micro_batch=4", "--out", tmp_path / "x")
    assert result.exit_code == 2 and "cannot split its batches" in result.output, result.output
