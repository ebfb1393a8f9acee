import pytest
import torch

from internalize.config import TrainConfig, load
from internalize.system import System
from internalize.theory import RowStep
from internalize.system import Stage
from internalize.train import NonFiniteLoss, train
from tests.conftest import Memory


class Quadratic(System):
    """Two stages, each pulling one scalar parameter to a target: loss (w - target)^2."""

    def __init__(self, poison=False):
        self.model = torch.nn.Module()
        self.model.w = torch.nn.ParameterList(torch.nn.Parameter(torch.zeros(())) for _ in range(2))
        self.w = self.model.w
        self.num_stages = 2
        self.poison = poison

    def stage(self, index):
        w = self.w[index]

        def loss(batch):
            value = (w - 1.0) ** 2
            return value * float("nan") if self.poison else value

        return Stage(info=dict(layer=index + 1), params=[w], sample=self.sample, loss=loss,
                     validate=lambda: float((w.detach() - 1.0) ** 2))

    def sample(self, batch_size, generator):
        return None

    def after_step(self):
        pass

    def evaluate(self, stage):
        return dict(distance=float(sum((w.detach() - 1).abs() for w in self.w)))


def test_threshold_advance_stops_each_stage_early_and_only_trains_its_parameters():
    system, memory = Quadratic(), Memory()
    cfg = TrainConfig(lr=0.1, threshold=1e-3, max_steps_per_stage=500, eval_every=1, batch_size=4)
    out = train(system, cfg, torch.Generator().manual_seed(0), memory, show_progress=False)
    first, second = out["per_stage"]
    assert first["val_loss"] < 1e-3 and second["val_loss"] < 1e-3
    assert 1 < first["steps"] < 500 and first["distance"] > 0.9  # after stage 1, w2 untouched
    assert out["samples_seen"] == 4 * (first["steps"] + second["steps"])
    assert [state["stage"] for state, _ in memory.checkpoints] == [1, 2]
    # the first record of each stage is its loss before training: 1.0 for (0 - 1)^2
    starts = [r for r in memory.records if "train_loss" not in r and "event" not in r]
    assert [r["val_loss"] for r in starts] == [1.0, 1.0]


def test_steps_advance_runs_exactly_the_budget():
    cfg = TrainConfig(advance="steps", steps_per_stage=7, eval_every=3)
    out = train(Quadratic(), cfg, torch.Generator().manual_seed(0), Memory(), show_progress=False)
    assert [s["steps"] for s in out["per_stage"]] == [7, 7]


def test_the_first_stage_can_run_its_budget_while_the_others_stop_at_the_threshold():
    cfg = TrainConfig(lr=0.1, threshold=1e-3, max_steps_per_stage=500, eval_every=1, first_stage_steps=300)
    plain = train(Quadratic(), cfg, torch.Generator().manual_seed(0), Memory(), show_progress=False)["per_stage"]
    assert plain[0]["steps"] < 300  # first_stage_steps only caps a threshold stage
    cfg = cfg.model_copy(update=dict(first_stage_advance="steps"))
    split = train(Quadratic(), cfg, torch.Generator().manual_seed(0), Memory(), show_progress=False)["per_stage"]
    assert split[0]["steps"] == 300 and split[1]["steps"] == plain[1]["steps"] < 500


def test_warmup_raises_each_stages_learning_rate_linearly(monkeypatch):
    rates, original = [], torch.optim.Adam.step

    def step(self, *args, **kwargs):
        rates.append(self.param_groups[0]["lr"])
        return original(self, *args, **kwargs)

    monkeypatch.setattr(torch.optim.Adam, "step", step)
    cfg = TrainConfig(advance="steps", steps_per_stage=6, lr=0.01, warmup_steps=4, eval_every=100)
    train(Quadratic(), cfg, torch.Generator().manual_seed(0), Memory(), show_progress=False)
    assert rates == pytest.approx([0.0025, 0.005, 0.0075, 0.01, 0.01, 0.01] * 2)
    with pytest.raises(ValueError, match="train.warmup_steps must be 0 or more"):
        load("automata_regimes", ["train.warmup_steps=-1"])


def test_non_finite_loss_stops_the_run():
    with pytest.raises(NonFiniteLoss, match="stage 1, step 1"):
        train(Quadratic(poison=True), TrainConfig(), torch.Generator().manual_seed(0), Memory(), show_progress=False)


def test_row_step_moves_each_rows_largest_entry_by_the_step_size():
    w = torch.nn.Parameter(torch.zeros(2, 3))
    w.grad = torch.tensor([[-2.0, -1.0, 0.5], [0.0, 0.0, 0.0]])
    RowStep([w], size=9.0).step()
    assert torch.allclose(w.detach(), torch.tensor([[9.0, 4.5, -2.25], [0.0, 0.0, 0.0]]))


def test_progress_prints_plain_lines_where_no_bar_can_draw(capsys):
    cfg = TrainConfig(advance="steps", steps_per_stage=6, eval_every=3)
    memory = Memory()
    train(Quadratic(), cfg, torch.Generator().manual_seed(0), memory, show_progress=True)
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("stage")]
    assert [line.split("  ")[:2] for line in lines] == [[f"stage {s}/2", f"step {n}/6"] for s in (1, 2) for n in (3, 6)]
    logged = [f"val {r['val_loss']:.4f}" for r in memory.records if "train_loss" in r]  # the same evaluations
    assert [line.split("  ")[2] for line in lines] == logged and logged[0] != logged[1]
    assert all(line.split("  ")[3].endswith("s") for line in lines)
    left = [line.split("  ")[4] for line in lines]  # the stage's steps to go at its pace so far
    assert all(x.endswith("s left in the stage") and not x.startswith("at most") for x in left)
    assert left[1] == left[3] == "0m00s left in the stage"
    train(Quadratic(), cfg, torch.Generator().manual_seed(0), Memory(), show_progress=False)
    assert capsys.readouterr().out == ""


def test_a_stage_that_may_end_on_a_threshold_says_its_time_left_is_at_most(capsys):
    cfg = TrainConfig(advance="threshold", threshold=-1.0, max_steps_per_stage=4, eval_every=2)  # never met
    train(Quadratic(), cfg, torch.Generator().manual_seed(0), Memory(), show_progress=True)
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("stage")]
    assert len(lines) == 4 and all(line.split("  ")[4].startswith("at most ") for line in lines)


def test_the_time_left_is_the_stages_pace_over_every_step_since_it_began(capsys, monkeypatch):
    clock = [0.0]  # a step takes one second exactly, a checkpoint none
    monkeypatch.setattr("internalize.train.time.perf_counter", lambda: clock[0])
    system = Quadratic()
    system.after_step = lambda: clock.__setitem__(0, clock[0] + 1.0)
    cfg = TrainConfig(advance="steps", steps_per_stage=8, eval_every=2, checkpoint_every=1)
    train(system, cfg, torch.Generator().manual_seed(0), Memory(), show_progress=True)
    lines = [line.split("  ") for line in capsys.readouterr().out.splitlines() if line.startswith("stage")]
    assert [line[3:] for line in lines[:4]] == [[f"0m{n:02d}s", f"0m{8 - n:02d}s left in the stage"] for n in (2, 4, 6, 8)]
    assert [line[3:] for line in lines[4:]] == [[f"0m{n:02d}s", f"0m{16 - n:02d}s left in the stage"]
                                                for n in (10, 12, 14, 16)]  # stage 2: its own steps, the run's time


def test_clock_reads_minutes_and_seconds_then_hours_and_minutes():
    from internalize.train import clock

    assert [clock(s) for s in (0, 125.9, 3599, 3600, 7805)] == ["0m00s", "2m05s", "59m59s", "1h00m", "2h10m"]


def test_each_stage_ends_with_a_line_of_its_evaluation(capsys):
    cfg = TrainConfig(advance="steps", steps_per_stage=4, eval_every=2)
    system = Quadratic()
    train(system, cfg, torch.Generator().manual_seed(0), Memory(), show_progress=True)
    ends = [line for line in capsys.readouterr().out.splitlines() if line.startswith("end of stage")]
    assert [line.split("  ")[0] for line in ends] == [f"end of stage {i}/{system.num_stages}" for i in
                                                      range(1, system.num_stages + 1)]
    final = float(ends[-1].split("  ")[1].removeprefix("distance "))
    assert abs(final - system.evaluate(system.num_stages - 1)["distance"]) < 1e-4
    train(Quadratic(), cfg, torch.Generator().manual_seed(0), Memory(), show_progress=False)
    assert capsys.readouterr().out == ""
