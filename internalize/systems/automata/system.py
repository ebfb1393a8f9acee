"""Learning through internalization on semiautomata: the GPT, token curricula, cross-entropy.

Sequences (docs/automata.md); states q_1..q_{T-1} are the chain of thought:

    cot       a_1 .. a_T <sep> [<hint c>] q_1 .. q_{T-1} <ans> q_T
    e2e       a_1 .. a_T <ans> q_T
    bare      a_1 .. a_T <sep> q_T        (model.bare_answer, once no CoT token is left)

A curriculum hides CoT tokens per stage (deleted by default; blanks with model.keep_positions).
The loss is on every token after <sep> that the model must write: the kept states, <ans>, q_T.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from internalize import plots
from internalize.config import Config
from internalize.curricula import E2E, get_curriculum
from internalize.models.gpt import GPT, GPTConfig
from internalize.system import TEST_SEED, VAL_SEED, Stage, System, device_for
from internalize.systems.automata import figures
from internalize.systems.automata.semiautomata import AutomatonTask, make

PAD, SEP, ANS = 0, 1, 2


class AutomataSystem(System):

    def __init__(self, config: Config):
        self.config = config
        t = config.task
        self.device = device_for(config)
        self.automaton = make(t.automaton, t.n, t.actions)
        self.task = AutomatonTask(self.automaton, t.length)
        c = config.curriculum
        self.curriculum = get_curriculum(c.name, c.per_stage, c.smoothing)
        self.thinking = t.length - 1
        self.num_stages = self.curriculum.num_stages(self.thinking)
        self.sep = not isinstance(self.curriculum, E2E)
        self.bare_answer = config.model.bare_answer and self.sep  # e2e keeps its <ans>: nothing precedes it
        actions, states = len(self.automaton.actions), len(self.automaton.states)
        self.act0, self.state0, self.hint0 = 3, 3 + actions, 3 + actions + states
        m = config.model
        vocab = self.hint0 + t.length
        self.model = GPT(GPTConfig(vocab, 2 * t.length + 3, m.width, m.depth, m.heads)).to(self.device)
        # the per-stage figures, against chance; the first is the headline (its 1.0 counts as solved)
        prefixes = list(self.formats(0))
        kinds = ["id_accuracy"] + (["ood_accuracy"] if t.ood else [])
        self.stage_metrics = {f"{p}{k}": 1 / states for p in prefixes for k in kinds}
        self.headline = f"{prefixes[0]}id_accuracy"
        self.val = self.task.sample(config.train.val_size, torch.Generator().manual_seed(config.seed + VAL_SEED))
        gen = torch.Generator().manual_seed(config.seed + TEST_SEED)
        self.tests = {"id": self.task.sample(config.eval.test_size, gen)}
        for skew in t.ood:
            self.tests[f"ood_p{skew:g}"] = self.task.sample(config.eval.test_size, gen, skew)
        self.last_evaluation: dict[str, float] = {}  # the figures of the stage that ended last

    # -- sequences -----------------------------------------------------------------------------
    def encode(self, actions: torch.Tensor, states: torch.Tensor, removed: np.ndarray):
        """Tokens (B, L) and which of them are targets (B, L), for per-example hidden masks (B, T-1)."""
        B, T = actions.shape
        removed = torch.as_tensor(np.ascontiguousarray(removed))
        hint = int(self.curriculum.hint)
        head = T + int(self.sep) + hint
        rows = torch.arange(B)
        kept = ~removed  # (B, T-1)
        tokens = torch.full((B, head + T + 1), PAD, dtype=torch.long)
        target = torch.zeros_like(tokens, dtype=torch.bool)
        tokens[:, :T] = actions + self.act0
        if self.sep:
            tokens[:, T] = SEP
        if hint:
            tokens[:, T + 1] = self.hint0 + kept.sum(dim=1)
        cot = states[:, :-1] + self.state0  # (B, T-1)
        if self.config.model.keep_positions:
            slots = torch.where(kept, cot, torch.full_like(cot, PAD))
            count = torch.full((B,), T - 1)
            wanted = kept
        else:  # delete: the kept tokens move left, in order
            order = torch.argsort(removed.to(torch.int8), dim=1, stable=True)
            count = kept.sum(dim=1)
            wanted = torch.arange(T - 1)[None, :] < count[:, None]
            slots = torch.where(wanted, cot.gather(1, order), torch.full_like(cot, PAD))
        tokens[:, head:head + T - 1] = slots
        target[:, head:head + T - 1] = wanted
        answer = head + count  # (B,) where <ans> goes
        bare = (kept.sum(dim=1) == 0) & self.bare_answer  # no CoT kept: the answer takes <ans>'s place
        last = answer + 1 - bare.long()  # (B,) where q_T goes
        tokens[rows, answer] = ANS
        tokens[rows, last] = states[:, -1] + self.state0  # overwrites <ans> where bare
        target[rows, answer] = target[rows, last] = True
        if self.curriculum.answer_only:
            target[:] = False
            target[rows, last] = True
        length = int(last.max()) + 1
        return tokens[:, :length].to(self.device), target[:, :length].to(self.device)

    def loss_of(self, tokens: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        logits, _ = self.model(tokens[:, :-1])  # (B, L-1, V)
        losses = F.cross_entropy(logits.flatten(0, 1), tokens[:, 1:].flatten(), reduction="none")  # (B*(L-1),)
        weight = target[:, 1:].flatten().float()
        return (losses * weight).sum() / weight.sum()

    # -- stages ----------------------------------------------------------------------------------
    def stage(self, index: int) -> Stage:
        removed = self.curriculum.removed(index, self.thinking)

        def sample(batch_size: int, generator: torch.Generator):
            actions, states = self.task.sample(batch_size, generator)
            masks = self.curriculum.sample_removed(index, self.thinking, batch_size, generator)
            return self.encode(actions, states, masks)

        val = self.encode(*self.val, self.curriculum.sample_removed(
            index, self.thinking, len(self.val[0]), torch.Generator().manual_seed(self.config.seed + VAL_SEED)))

        def loss(batch) -> torch.Tensor:
            return self.loss_of(*batch)

        @torch.no_grad()
        def validate() -> float:
            return float(self.loss_of(*val))

        info = dict(removed=int(removed.sum()))
        return Stage(info=info, params=list(self.model.parameters()), sample=sample, loss=loss, validate=validate)

    # -- evaluation ------------------------------------------------------------------------------
    @torch.no_grad()
    def answer_accuracy(self, actions: torch.Tensor, states: torch.Tensor, removed: np.ndarray) -> float:
        """Greedy decoding from the prompt (CoT, if any, then <ans> and the answer); answer accuracy."""
        B = len(actions)
        tokens, _ = self.encode_alike(actions, states, removed)
        truth = states[:, -1].to(self.device) + self.state0
        if self.curriculum.answer_only:  # <ans> is given, not learned: one token to write
            answer = self.model.generate(tokens[:, :-1], 1)[:, 0]
            return float((answer == truth).float().mean())
        prompt = len(actions[0]) + int(self.sep) + int(self.curriculum.hint)
        generated = self.model.generate(tokens[:, :prompt], tokens.shape[1] - prompt)  # (B, steps)
        if self.bare_answer and removed.all():  # the answer is the first token written
            return float((generated[:, 0] == truth).float().mean())
        is_ans = generated[:, :-1] == ANS  # (B, steps-1)
        first = torch.where(is_ans.any(dim=1), is_ans.float().argmax(dim=1), torch.full((B,), -2))
        answer = generated.gather(1, (first + 1).clamp(min=0)[:, None]).squeeze(1)
        correct = (first >= 0) & (answer == truth)
        return float(correct.float().mean())

    def encode_alike(self, actions: torch.Tensor, states: torch.Tensor, removed: np.ndarray):
        """`encode` with one (T-1,) mask of removed tokens for every example."""
        return self.encode(actions, states, np.broadcast_to(removed, (len(actions), self.thinking)))

    def final_format(self) -> np.ndarray:
        """The removed tokens of the last stage's (first) test format: what figures and probes read."""
        return next(iter(self.formats(self.num_stages - 1).values()))

    def formats(self, index: int) -> dict[str, np.ndarray]:
        """The test formats of a stage: its own; for the mixture, direct answering and full CoT."""
        if self.curriculum.hint:
            return {"direct_": np.ones(self.thinking, dtype=bool), "cot_": np.zeros(self.thinking, dtype=bool)}
        return {"": self.curriculum.removed(index, self.thinking)}

    def evaluate(self, stage: int) -> dict[str, float]:
        out = {}
        self.model.eval()
        for prefix, removed in self.formats(stage).items():
            accs = {name: self.answer_accuracy(*data, removed) for name, data in self.tests.items()}
            out[f"{prefix}id_accuracy"] = accs.pop("id")
            if accs:
                out[f"{prefix}ood_accuracy"] = float(np.mean(list(accs.values())))
            out.update({f"{prefix}{name}_accuracy": value for name, value in accs.items()})
        self.model.train()
        self.last_evaluation = out
        return out

    @torch.no_grad()
    def per_position_accuracy(self) -> list[float]:
        """Teacher-forced accuracy of each target token of the final stage's format, ID test set."""
        actions, states = self.tests["id"]
        tokens, target = self.encode_alike(actions, states, self.final_format())
        logits, _ = self.model(tokens[:, :-1])
        right = (logits.argmax(-1) == tokens[:, 1:]) & target[:, 1:]
        columns = target[:, 1:].any(dim=0)
        return [float(v) for v in (right.sum(0)[columns] / target[:, 1:].sum(0)[columns])]

    def summary(self) -> dict:
        self.model.eval()
        out = dict(automaton=self.automaton.name, states=len(self.automaton.states),
                   per_position_accuracy=self.per_position_accuracy(),
                   **(self.last_evaluation or self.evaluate(self.num_stages - 1)))  # training ends with the last stage's
        if self.curriculum.hint:  # the one-pass answer is the mixture's id/ood figure too, as for the others
            out.update({k.removeprefix("direct_"): v for k, v in out.items() if k.startswith("direct_")})
        out["parameters"] = sum(p.numel() for p in self.model.parameters())
        return out

    @torch.no_grad()
    def attention(self, examples: int = 256) -> tuple[dict[int, np.ndarray], list[str]]:
        """Mean attention pattern of each layer (over heads and ID test examples) in the final format."""
        actions, states = (x[:examples] for x in self.tests["id"])
        removed = self.final_format()
        tokens, _ = self.encode_alike(actions, states, removed)
        names = {layer: f"blocks.{layer}.attn.hook_pattern" for layer in range(self.config.model.depth)}
        self.model.eval()
        _, cache = self.model.run_with_cache(tokens[:, :-1], list(names.values()))
        patterns = {layer: cache[name].mean(dim=(0, 1)).cpu().numpy() for layer, name in names.items()}
        T = self.task.length
        labels = [f"a{i + 1}" for i in range(T)] + ["sep"] * self.sep + ["hint"] * self.curriculum.hint
        if self.config.model.keep_positions:
            labels += ["·" if gone else f"q{j + 1}" for j, gone in enumerate(removed)]
        else:
            labels += [f"q{j + 1}" for j in np.flatnonzero(~removed)]
        return patterns, (labels + ["ans"])[:tokens.shape[1] - 1]

    def figures(self, folder: Path, per_stage: list[dict]) -> None:
        """Answer accuracy, in and out of distribution, against how many CoT tokens are hidden; and
        where each layer looks in the final format (at most four layers: first, last, two between)."""
        patterns, labels = self.attention()
        depth = len(patterns)
        shown = sorted({round(i * (depth - 1) / 3) for i in range(4)}) if depth > 4 else range(depth)
        removed = int(self.final_format().sum())
        figures.attention_patterns({layer: patterns[layer] for layer in shown}, labels, folder / "attention.png",
                                 title=f"{self.automaton.name}, {self.curriculum.name}, {removed} CoT tokens "
                                       "removed: mean attention over heads and test examples")
        for prefix in self.formats(self.num_stages - 1):
            keys = [k for k in per_stage[0] if k.startswith(prefix) and k.endswith("_accuracy")
                    and k not in (f"{prefix}ood_accuracy",)]
            plots.accuracy_against(per_stage, "removed", keys, folder / f"{prefix}accuracy_vs_removed.png",
                                   chance=1 / len(self.automaton.states),
                                   title=f"{self.automaton.name}, T = {self.task.length}: "
                                         f"{self.curriculum.name} internalization")

    @staticmethod
    def describe(summary: dict) -> str:
        parts = [f"{k.replace('_accuracy', '')} {v:.3f}" for k, v in summary.items()
                 if k.endswith("_accuracy") and isinstance(v, float)]
        return f"{summary['automaton']}: " + ", ".join(parts)

    @staticmethod
    def table_columns(records: list[dict], config) -> dict:
        return relearn_columns(records, config.eval.relearn_loss)


def relearn_columns(records: list[dict], threshold: float) -> dict:
    """How long the removal stages took to recover, from a run's metrics.jsonl records.

    For every finished stage after the first: the steps from its start until its validation loss is
    first at or under `threshold` (at the evaluation resolution). steps_to_relearn sums them; a stage
    that never gets there counts all its steps and is counted in stages_not_relearned.
    """
    ends = [r for r in records if r.get("event") == "stage_end"]
    if len(ends) < 2:
        return {}
    losses: dict[int, list[dict]] = {}  # stage -> its logged evaluations, in order
    for r in records:
        if "step" in r and r.get("val_loss") is not None:
            losses.setdefault(r["stage"], []).append(r)
    total, missed, first = 0, 0, ends[0]["steps"]  # first: the global step at which a stage starts
    for end in ends[1:]:
        hit = next((r["step"] - first for r in losses.get(end["stage"], []) if r["val_loss"] <= threshold), None)
        total += end["steps"] if hit is None else hit
        missed += hit is None
        first += end["steps"]
    return {"steps_to_relearn": total, "stages_not_relearned": missed}
