"""Log-ICoT wired together: the parity tree, the gated model, a curriculum, squared error."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from internalize.config import Config
from internalize.curricula import get_curriculum
from internalize.system import TEST_SEED, VAL_SEED, Stage, System, device_for
from internalize.systems.logicot import figures
from internalize.systems.logicot.metrics import (
    child_attention_mass,
    child_weights,
    representation_spread,
    sign_accuracy,
    squared_error,
    weakest_row,
)
from internalize.systems.logicot.model import GatePlan, LogICoT, gate_plan
from internalize.systems.logicot.parity_tree import ParityTree
from internalize.theory import row_step_optimizer


class LogICoTSystem(System):
    def __init__(self, config: Config):
        self.config = config
        task = config.task
        self.task = ParityTree(task.n, task.k, config.seed, task.pairing)
        self.layout = self.task.layout
        self.device = device_for(config)
        self.model = LogICoT(self.layout.level, config.model.link, config.model.mask).to(self.device)
        self.curriculum = get_curriculum(config.curriculum.name, config.curriculum.per_stage,
                                         config.curriculum.smoothing)
        if self.curriculum.hint or config.curriculum.smoothing:
            raise ValueError(f"curriculum {config.curriculum.name} with smoothing {config.curriculum.smoothing} "
                             "varies per example; the Log-ICoT gates are prescribed per stage")
        self.num_stages = self.curriculum.num_stages(len(self.layout.thinking))
        self.val = self.sample(config.train.val_size, torch.Generator().manual_seed(config.seed + VAL_SEED))
        self.test = self.sample(config.eval.test_size, torch.Generator().manual_seed(config.seed + TEST_SEED))

    # -- stages ------------------------------------------------------------------------------
    def padded(self, removed: np.ndarray) -> np.ndarray:
        """(T,) bool over positions, from a (thinking,) mask of removed thinking tokens."""
        padded = np.zeros(self.layout.length, dtype=bool)
        padded[self.layout.thinking[removed]] = True
        return padded

    def plan(self, padded: np.ndarray, answer_only: bool = False) -> GatePlan:
        model = self.config.model
        plan = gate_plan(self.layout.level, self.layout.children, padded, model.gate, answer_only, model.readout)
        return plan.to(self.device)

    def inputs(self, values: torch.Tensor, plan_padded: np.ndarray) -> torch.Tensor:
        """h^(0): the values with padded thinking tokens and the answer set to 0."""
        h = values.clone()
        hidden = torch.tensor(plan_padded, device=self.device)  # a copy: the caller keeps its mask
        hidden[self.layout.answer] = True
        return h.masked_fill(hidden, 0.0)

    def wiring(self, index: int) -> tuple[np.ndarray, GatePlan, list[int], torch.Tensor, dict]:
        """A stage's padded positions, gate plan, trained layers, supervised targets and info."""
        removed = self.curriculum.removed(index, len(self.layout.thinking))
        padded = self.padded(removed)
        plan = self.plan(padded, self.curriculum.answer_only)
        trained = list(range(1, self.layout.depth + 1)) if self.curriculum.train_all_layers else [plan.frontier]
        # a target counts when its prediction depends on a layer that learns now; the others
        # are read from frozen layers below and would only add a floor to the stage's loss
        supervised = plan.targets & (plan.readout >= min(trained))
        info = dict(padded=int(removed.sum()), layer="all" if self.curriculum.train_all_layers else plan.frontier)
        return padded, plan, trained, supervised, info

    def stage(self, index: int) -> Stage:
        padded, plan, trained, supervised, info = self.wiring(index)

        def loss(values: torch.Tensor) -> torch.Tensor:
            return squared_error(self.model(self.inputs(values, padded), plan), values, supervised)

        @torch.no_grad()
        def validate() -> float:
            return float(loss(self.val))

        params = [self.model.W[layer - 1] for layer in trained]
        return Stage(info=info, params=params, sample=self.sample, loss=loss, validate=validate)

    def sample(self, batch_size: int, generator: torch.Generator) -> torch.Tensor:
        return self.task.sample(batch_size, generator).to(self.device)

    def after_step(self) -> None:
        if self.config.model.quantize:
            self.model.round_weights()

    def optimizer(self, params: list, cfg) -> torch.optim.Optimizer | None:
        return row_step_optimizer(params, self.config.theory)

    # -- evaluation ----------------------------------------------------------------------------
    @torch.no_grad()
    def zero_filled_states(self, values: torch.Tensor) -> list[torch.Tensor]:
        """One forward pass with every thinking token padded: every layer's output."""
        padded = self.padded(np.ones(len(self.layout.thinking), dtype=bool))
        plan = self.plan(padded, answer_only=True)
        return self.model.states(self.inputs(values, padded), plan)

    def zero_filled_accuracy(self, values: torch.Tensor) -> float:
        """The answer's sign after that one pass."""
        return sign_accuracy(self.zero_filled_states(values)[-1][:, -1], values[:, -1])

    @torch.no_grad()
    def explicit_cot_accuracy(self, values: torch.Tensor) -> float | None:
        """Explicit CoT decoding: L sequential passes, each writing the signs of one more level.

        None under `fixed` gates, which never read a node from explicit children above level 1.
        """
        if self.config.model.gate == "fixed":
            return None
        lay = self.layout
        nothing = np.zeros(lay.length, dtype=bool)
        plan = self.plan(nothing)
        h = self.inputs(values, np.ones(lay.length, dtype=bool) & (lay.level > 0))
        for level in range(1, lay.depth + 1):
            pred = self.model(h, plan)  # (B, T)
            here = torch.as_tensor(lay.positions(level))
            h[:, here] = torch.where(pred[:, here] > 0, 1.0, -1.0)
        return sign_accuracy(h[:, -1], values[:, -1])

    def evaluate(self, stage: int) -> dict[str, float]:
        return dict(zero_filled_accuracy=self.zero_filled_accuracy(self.test))

    headline = "zero_filled_accuracy"  # the per-stage figure whose 1.0 counts as solved
    stage_metrics = {"zero_filled_accuracy": 0.5}  # plotted after each stage, against chance

    def figures(self, folder: Path, per_stage: list[dict]) -> None:
        """One attention heatmap per layer: its own level's rows, children boxed."""
        lay = self.layout
        with torch.no_grad():
            for layer in range(1, lay.depth + 1):
                attention = self.model.attention(layer).cpu()
                mass = child_attention_mass(attention, lay.level, lay.children, layer)
                figures.attention_heatmap(attention.numpy(), lay.level, lay.children, layer, mass,
                                        folder / f"attention_layer{layer}.png")

    @staticmethod
    def describe(summary: dict) -> str:
        mass = ", ".join(f"{m:.3f}" for m in summary["child_attention_mass"])
        cot = summary["explicit_cot_accuracy"]
        cot = "n/a" if cot is None else f"{cot:.3f}"
        return (f"zero-filled accuracy {summary['zero_filled_accuracy']:.3f} in one pass; explicit CoT "
                f"({summary['layers']} passes) {cot}; child attention mass per layer [{mass}]")

    @torch.no_grad()
    def summary(self) -> dict:
        lay = self.layout
        layers = range(1, lay.depth + 1)
        attention = {layer: self.model.attention(layer).cpu() for layer in layers}
        mass = [child_attention_mass(attention[layer], lay.level, lay.children, layer) for layer in layers]
        weights = [child_weights(self.model.W[layer - 1].cpu(), self.model.allowed.cpu(), lay.level, lay.children,
                                 layer) for layer in layers]
        states = self.zero_filled_states(self.test)
        return dict(zero_filled_accuracy=sign_accuracy(states[-1][:, -1], self.test[:, -1]),
                    explicit_cot_accuracy=self.explicit_cot_accuracy(self.test),
                    child_attention_mass=mass, lowest_child_attention_mass=min(mass),
                    weakest_row=[weakest_row(attention[layer], lay.level, lay.children, layer) for layer in layers],
                    child_weight=[c for c, _ in weights], other_weight_abs_sum=[o for _, o in weights],
                    representation_spread=representation_spread(states, lay.level),
                    layers=lay.depth, support=list(lay.support))
