"""The semiautomata system's config sections: the automaton task and its GPT."""
from __future__ import annotations

from typing import Literal

from pydantic import model_validator

from internalize.config import EvalConfig, Strict
from internalize.models.gpt import GPTSection
from internalize.systems.automata.semiautomata import action_distribution, make


class AutomatonConfig(Strict):
    name: Literal["automaton"] = "automaton"
    automaton: str = "cyclic"  # cyclic, symmetric, dihedral, alternating, flip_flop, or a YAML table's path
    n: int = 6  # the order of a cyclic or dihedral automaton
    actions: Literal["increment", "all"] = "increment"  # the cyclic automaton's action set
    length: int = 16  # T, the number of actions: the paper's runs use 16
    ood: list[float] = [0.1, 0.9]  # skewed test distributions: mass on the last action

    @model_validator(mode="after")
    def _table(self):
        automaton = make(self.automaton, self.n, self.actions)  # a bad table is refused here, on load
        if self.length < 2:
            raise ValueError(f"task.length must be at least 2 (got {self.length})")
        for skew in self.ood:
            action_distribution(len(automaton.actions), skew)
        return self


class AutomataGPTConfig(GPTSection):
    keep_positions: bool = False  # removed CoT tokens keep their positions as blanks instead of being deleted
    # with every CoT token removed, the answer follows <sep> directly (no <ans>): the one-pass answer
    # is then written where each removal stage wrote its first state. Off: the paper's format, <ans> kept
    bare_answer: bool = False


class AutomataEvalConfig(EvalConfig):
    # a sweep's results table counts, as steps_to_relearn, each removal stage's steps until its
    # validation loss is back at or under this (docs/sweeps.md)
    relearn_loss: float = 0.1
