"""The provable one-layer model on sparse parity: linear attention, squared error, token deletion.

Sequences are d bits, then the chain tokens still shown, then the answer (docs/sparse_parity.md):

    full CoT      b_1 .. b_d  c_1 .. c_{k-1}  y
    after r left removals     b_1 .. b_d  c_{r+1} .. c_{k-1}  y        (deleted, later tokens shift left)
    e2e / direct  b_1 .. b_d  y

Every output is teacher forced and scored by squared error. The training algorithm (the
method's own; theory.enabled sets it up):
- start: slot j > 1 has score 1 on the chain token before it, everything else 0 (chain_start);
- each stage takes one step: the loss on one fresh batch of N samples is taken at the nudged
  point A + (model.nudge / d) * U(0, 1) (the nudge is drawn in `sample`, from the training
  generator), and each row of A moves by row_step * (-grad) / max|grad of that row| (internalize.theory.RowStep;
  the method's s / max(s) whenever the largest move is upward, as it is when the step finds its bit);
- then every score is clamped at 0 and rounded to the nearest integer (after_step).
The end-to-end route takes k such steps from the same start with y as the only target.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from internalize.config import Config
from internalize.curricula import get_curriculum
from internalize.system import TEST_SEED, VAL_SEED, Stage, System, device_for
from internalize.systems.sparse_parity import figures
from internalize.systems.sparse_parity.model import LinearAttention
from internalize.systems.sparse_parity.task import SparseParity
from internalize.theory import row_step_optimizer


class SparseParitySystem(System):
    headline = "direct_accuracy"  # the answer in one pass from the bits alone
    stage_metrics = {"direct_accuracy": 0.5, "frontier_accuracy": 0.5}

    def __init__(self, config: Config):
        self.config = config
        t = config.task
        self.task = SparseParity(t.d, t.k, config.seed, t.order)
        self.device = device_for(config)
        c = config.curriculum
        self.curriculum = get_curriculum(c.name, c.per_stage, c.smoothing)
        if self.curriculum.hint or c.smoothing:
            raise ValueError(f"curriculum {c.name} with smoothing {c.smoothing} varies the sequence length per "
                             "example; sparse parity deletes the same chain tokens from every example")
        self.thinking = t.k - 1  # c_1 .. c_{k-1}; c_k is the answer
        self.num_stages = self.curriculum.num_stages(self.thinking)
        self.model = LinearAttention(t.d, t.k).to(self.device)
        self.model.chain_start()
        self.nudge = config.model.nudge / t.d
        self.val = self.task.sample(config.train.val_size, torch.Generator().manual_seed(config.seed + VAL_SEED))
        self.test = self.task.sample(config.eval.test_size, torch.Generator().manual_seed(config.seed + TEST_SEED))

    def encode(self, bits: torch.Tensor, chain: torch.Tensor, removed: np.ndarray):
        """Teacher-forced inputs (B, d + m - 1) and targets (B, m): the kept chain tokens, then y."""
        kept = list(np.flatnonzero(~removed))
        targets = torch.cat([chain[:, kept], chain[:, -1:]], dim=1)
        return torch.cat([bits, targets[:, :-1]], dim=1).to(self.device), targets.to(self.device)

    # -- stages ----------------------------------------------------------------------------------
    def stage(self, index: int) -> Stage:
        removed = self.curriculum.removed(index, self.thinking)

        def sample(batch_size: int, generator: torch.Generator):
            tokens, targets = self.encode(*self.task.sample(batch_size, generator), removed)
            nudge = self.nudge * torch.rand(self.model.A.shape, generator=generator) if self.nudge else None
            return tokens, targets, nudge

        def loss(batch) -> torch.Tensor:
            tokens, targets, nudge = batch
            nudge = None if nudge is None else nudge.to(self.device)
            return ((self.model(tokens, nudge) - targets) ** 2).mean()

        val = self.encode(*self.val, removed)

        @torch.no_grad()
        def validate() -> float:
            return float(((self.model(val[0]) - val[1]) ** 2).mean())

        return Stage(info=dict(removed=int(removed.sum())), params=[self.model.A], sample=sample, loss=loss,
                     validate=validate)

    def after_step(self) -> None:
        self.model.project(self.config.model.nonnegative, self.config.model.quantize)

    def optimizer(self, params: list, cfg) -> torch.optim.Optimizer | None:
        return row_step_optimizer(params, self.config.theory)

    # -- evaluation ------------------------------------------------------------------------------
    @torch.no_grad()
    def position_accuracy(self, removed: np.ndarray) -> list[float]:
        """Teacher-forced accuracy of every output of a format on the test set (the answer last)."""
        tokens, targets = self.encode(*self.test, removed)
        return [float(a) for a in ((self.model(tokens) > 0.5).float() == targets).float().mean(dim=0)]

    @torch.no_grad()
    def answer_accuracy(self, removed: np.ndarray) -> float:
        """Free running: each shown chain token is the model's own rounded output; then the answer."""
        bits, chain = self.test
        tokens = bits.to(self.device)
        for _ in range(int((~removed).sum()) + 1):
            written = (self.model(tokens)[:, -1:] > 0.5).float()
            tokens = torch.cat([tokens, written], dim=1)
        return float((tokens[:, -1] == chain[:, -1].to(self.device)).float().mean())

    def evaluate(self, stage: int) -> dict[str, float]:
        removed = self.curriculum.removed(stage, self.thinking)
        positions = self.position_accuracy(removed)
        return dict(frontier_accuracy=positions[0], min_position_accuracy=min(positions),
                    answer_accuracy=self.answer_accuracy(removed),
                    direct_accuracy=self.answer_accuracy(np.ones(self.thinking, dtype=bool)))

    @torch.no_grad()
    def direct_row(self) -> list[float]:
        """The answer slot's scores over the bits when no chain is shown."""
        return [float(w) for w in self.model.A[0, :self.task.d].cpu()]

    def summary(self) -> dict:
        row = self.direct_row()
        indicator = [1.0 if i in self.task.support else 0.0 for i in range(self.task.d)]
        direct = self.answer_accuracy(np.ones(self.thinking, dtype=bool))
        return dict(support=list(self.task.support), direct_accuracy=direct, solved=float(direct == 1.0),
                    direct_row_support=[i for i, w in enumerate(row) if w != 0],
                    direct_row_is_support=row == indicator,
                    position_accuracy=self.position_accuracy(self.curriculum.removed(self.num_stages - 1, self.thinking)))

    def figures(self, folder: Path, per_stage: list[dict]) -> None:
        """The scores of the slots the final format uses (after full removal: the answer's row alone)."""
        used = int((~self.curriculum.removed(self.num_stages - 1, self.thinking)).sum()) + 1
        scores = self.model.A[:used, :self.task.d + used - 1].detach().cpu().numpy()
        figures.score_matrix(scores, self.task.d, self.task.support, folder / "attention_scores.png",
                           title=f"attention scores after {self.curriculum.name} (d = {self.task.d}, "
                                 f"k = {self.task.k}); support bits marked")

    @staticmethod
    def describe(summary: dict) -> str:
        return (f"direct (one-pass) accuracy {summary['direct_accuracy']:.3f}; answer row = indicator of the "
                f"support {summary['support']}: {summary['direct_row_is_support']}")
