"""A whole new system in one file: the worked example of docs/extending.md.

The task: digits x_1..x_T in [0, m); the chain of thought is the running sums s_t = x_1 + .. + x_t
mod m, and the answer is s_T. The model: an MLP that reads every position at once (removed CoT
tokens are blanks, so the input keeps its width) and predicts every CoT token and the answer.
The curriculum: `halves` hides the first half of the chain, then all of it. The system wires
them for the trainer. Importing this module registers all four; a config names it in `imports`.
"""
from __future__ import annotations

from typing import Literal

import matplotlib
import numpy as np
import torch
import torch.nn.functional as F

from internalize import config as configs
from internalize import registry
from internalize.curricula import Curriculum, CurriculumConfig, register_curriculum
from internalize.system import Stage, System

matplotlib.use("Agg")


# -- the task: a seeded sampler that knows its intermediate values -----------------------------
class RunningSum:
    def __init__(self, length: int, modulus: int):
        self.length, self.modulus = length, modulus

    def sample(self, batch: int, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        """Digits (B, T) and running sums (B, T): the chain of thought is sums[:, :-1]."""
        digits = torch.randint(0, self.modulus, (batch, self.length), generator=generator)
        return digits, digits.cumsum(dim=1) % self.modulus


class RunningSumTask(configs.Strict):
    name: Literal["running_sum"] = "running_sum"
    length: int = 4  # T, the number of digits
    modulus: int = 3  # m


# -- the model: knows shapes, never the task ------------------------------------------------------
class SlotMLP(torch.nn.Module):
    """Every slot (T digits, T - 1 CoT tokens or blanks) one-hot, one hidden layer, logits per output."""

    def __init__(self, slots: int, symbols: int, outputs: int, hidden: int):
        super().__init__()
        self.symbols, self.outputs = symbols, outputs
        self.net = torch.nn.Sequential(torch.nn.Linear(slots * (symbols + 1), hidden), torch.nn.ReLU(),
                                       torch.nn.Linear(hidden, outputs * symbols))

    def forward(self, slots: torch.Tensor) -> torch.Tensor:
        """(B, slots) symbols, -1 for a blank -> (B, outputs, symbols) logits."""
        x = F.one_hot(slots + 1, self.symbols + 1).float().flatten(1)  # (B, slots * (symbols + 1))
        return self.net(x).view(len(slots), self.outputs, self.symbols)


class SlotMLPModel(configs.Strict):
    name: Literal["slot_mlp"] = "slot_mlp"
    hidden: int = 128


# -- the curriculum: which CoT tokens each stage hides -------------------------------------------
class Halves(Curriculum):
    """Stage 0 shows the whole chain, stage 1 hides its first half, stage 2 hides all of it."""

    def num_stages(self, thinking: int) -> int:
        return 3

    def _removed(self, stage: int, thinking: int) -> np.ndarray:
        return np.arange(thinking) < [0, thinking // 2, thinking][stage]


# -- the system: what the trainer, runner and CLI call (internalize/system.py) ------------------
class RunningSumSystem(System):
    headline = "answer_accuracy"
    stage_metrics = {"answer_accuracy": None}  # chance is 1 / m, set per config below

    def __init__(self, config: configs.Config):
        t = config.task
        self.task = RunningSum(t.length, t.modulus)
        self.curriculum = Halves(name="halves")
        self.thinking = t.length - 1
        self.num_stages = self.curriculum.num_stages(self.thinking)
        self.model = SlotMLP(2 * t.length - 1, t.modulus, t.length, config.model.hidden)
        self.stage_metrics = {"answer_accuracy": 1 / t.modulus}
        self.test = self.task.sample(config.eval.test_size, torch.Generator().manual_seed(config.seed + 1))
        self.val = self.task.sample(config.train.val_size, torch.Generator().manual_seed(config.seed + 2))
        self.removed = np.zeros(self.thinking, dtype=bool)

    def slots(self, digits: torch.Tensor, sums: torch.Tensor) -> torch.Tensor:
        cot = sums[:, :-1].masked_fill(torch.as_tensor(self.removed), -1)  # removed tokens are blanks
        return torch.cat([digits, cot], dim=1)

    def loss_of(self, digits: torch.Tensor, sums: torch.Tensor) -> torch.Tensor:
        """Cross-entropy on the CoT tokens still shown (teacher forced) and on the answer."""
        logits = self.model(self.slots(digits, sums))  # (B, T, m)
        wanted = torch.as_tensor(np.append(~self.removed, True))  # (T,)
        return F.cross_entropy(logits[:, wanted].flatten(0, 1), sums[:, wanted].flatten())

    def stage(self, index: int) -> Stage:
        self.removed = self.curriculum.removed(index, self.thinking)
        return Stage(info=dict(removed=int(self.removed.sum())), params=list(self.model.parameters()),
                     sample=self.task.sample, loss=lambda batch: self.loss_of(*batch),
                     validate=lambda: float(self.loss_of(*self.val).detach()))

    @torch.no_grad()
    def evaluate(self, stage: int) -> dict[str, float]:
        """The answer with every CoT token blank: one pass, no chain."""
        digits, sums = self.test
        blank = torch.full_like(sums[:, :-1], -1)
        answer = self.model(torch.cat([digits, blank], dim=1))[:, -1].argmax(-1)
        return dict(answer_accuracy=float((answer == sums[:, -1]).float().mean()))

    def summary(self) -> dict:
        return dict(self.evaluate(self.num_stages - 1), parameters=sum(p.numel() for p in self.model.parameters()))

    @staticmethod
    def describe(summary: dict) -> str:
        return f"answer accuracy in one pass {summary['answer_accuracy']:.3f}"


register_curriculum("halves", lambda per_stage, smoothing: Halves(name="halves"))
registry.register("running_sum", registry.SystemEntry(
    f"{__name__}:RunningSumSystem",
    sections=dict(task=RunningSumTask, model=SlotMLPModel, curriculum=CurriculumConfig)))
