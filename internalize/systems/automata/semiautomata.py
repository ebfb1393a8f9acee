"""Semiautomata as transition tables (docs/automata.md).

A semiautomaton is a set of states, a set of actions, a table delta(q, a) and a start state:
one representation for every built-in (C_n, S_3, D_n, A_4, flip-flop) and for user tables in
YAML, so every one is checked and sampled the same way.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import yaml


@dataclass(frozen=True)
class Semiautomaton:
    name: str
    states: tuple[str, ...]
    actions: tuple[str, ...]
    table: np.ndarray  # (actions, states) int: table[a, q] = delta(q, a)
    start: int

    def __post_init__(self):
        if self.table.shape != (len(self.actions), len(self.states)):
            raise ValueError(f"{self.name}: the table must be actions x states")
        if self.table.min() < 0 or self.table.max() >= len(self.states):
            raise ValueError(f"{self.name}: the table names a state that does not exist")

    def run(self, actions: torch.Tensor) -> torch.Tensor:
        """(B, T) action indices -> (B, T) the state after each action, from the start state."""
        table = torch.as_tensor(self.table)
        q = torch.full((actions.shape[0],), self.start, dtype=torch.long)
        out = torch.empty_like(actions)
        for t in range(actions.shape[1]):
            q = table[actions[:, t], q]
            out[:, t] = q
        return out


def cyclic(n: int, action_set: str = "increment") -> Semiautomaton:
    """C_n, the modular counter: increment = {stay, +1}; all = every residue."""
    if n < 2:
        raise ValueError(f"task.n must be at least 2 for a cyclic automaton (got {n})")
    steps = [0, 1] if action_set == "increment" else list(range(n))
    if action_set not in ("increment", "all"):
        raise ValueError(f"task.actions must be 'increment' or 'all' (got {action_set!r})")
    table = np.array([[(q + s) % n for q in range(n)] for s in steps])
    names = ("stay", "step") if action_set == "increment" else tuple(f"+{s}" for s in steps)
    return Semiautomaton(f"C{n}", tuple(map(str, range(n))), names, table, 0)


def _group(name: str, elements: list, generators: dict, compose) -> Semiautomaton:
    """States are group elements (identity first); action g maps q to compose(g, q)."""
    index = {e: i for i, e in enumerate(elements)}
    table = np.array([[index[compose(g, q)] for q in elements] for g in generators.values()])
    return Semiautomaton(name, tuple(map(str, elements)), tuple(generators), table, 0)


def _perm(g, q):  # apply q, then g
    return tuple(g[i] for i in q)


def symmetric3() -> Semiautomaton:
    """S_3: the 6 permutations of (0, 1, 2) in lexicographic order; identity, a 3-cycle, a transposition."""
    elements = list(itertools.permutations(range(3)))
    return _group("S3", elements, {"id": (0, 1, 2), "cycle": (1, 2, 0), "swap": (1, 0, 2)}, _perm)


def alternating4() -> Semiautomaton:
    """A_4: the 12 even permutations of 4 points; identity, a 3-cycle, a double transposition."""
    def even(p):
        return sum(p[i] > p[j] for i in range(4) for j in range(i + 1, 4)) % 2 == 0

    elements = [p for p in itertools.permutations(range(4)) if even(p)]
    return _group("A4", elements, {"id": (0, 1, 2, 3), "cycle": (1, 2, 0, 3), "double": (1, 0, 3, 2)}, _perm)


def dihedral(n: int) -> Semiautomaton:
    """D_n: the 2n symmetries of an n-gon as (reflected, rotation); identity, rotate, reflect."""
    if n < 3:
        raise ValueError(f"task.n must be at least 3 for a dihedral automaton (got {n})")

    def compose(g, q):  # (f, r) maps vertex v to (-1)^f v + r; apply q, then g
        return (q[0] + g[0]) % 2, ((-1) ** g[0] * q[1] + g[1]) % n

    elements = [(f, r) for f in range(2) for r in range(n)]
    return _group(f"D{n}", elements, {"id": (0, 0), "rotate": (0, 1), "reflect": (1, 0)}, compose)


def flip_flop() -> Semiautomaton:
    """Two states; read keeps the state, set0 / set1 write it."""
    table = np.array([[0, 1], [0, 0], [1, 1]])
    return Semiautomaton("flip_flop", ("0", "1"), ("read", "set0", "set1"), table, 0)


BUILT_IN = ("cyclic", "symmetric", "dihedral", "alternating", "flip_flop")


def from_yaml(path: Path) -> Semiautomaton:
    """A user table:

        name: three_cycle_with_reset
        states: [a, b, c]
        start: a
        actions:
          step:  {a: b, b: c, c: a}
          reset: {a: a, b: a, c: a}
    """
    path = Path(path)
    try:
        raw = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as err:
        raise ValueError(f"cannot read automaton table {path}: {err.__class__.__name__}") from None
    if not isinstance(raw, dict) or not {"states", "start", "actions"} <= set(raw):
        raise ValueError(f"{path}: an automaton table needs states, start and actions")
    states = [str(s) for s in raw["states"]]
    if len(set(states)) != len(states) or not states:
        raise ValueError(f"{path}: states must be distinct and not empty")
    index = {s: i for i, s in enumerate(states)}
    if str(raw["start"]) not in index:
        raise ValueError(f"{path}: start state {raw['start']!r} is not one of the states")
    if not isinstance(raw["actions"], dict) or not raw["actions"]:
        raise ValueError(f"{path}: actions must map each action to its transitions")
    table = []
    for action, moves in raw["actions"].items():
        moves = {str(k): str(v) for k, v in (moves or {}).items()}
        for source, target in moves.items():
            if source not in index:
                raise ValueError(f"{path}: action {action!r} moves from unknown state {source!r}")
            if target not in index:
                raise ValueError(f"{path}: action {action!r} moves {source!r} to unknown state {target!r}")
        missing = [s for s in states if s not in moves]
        if missing:
            raise ValueError(f"{path}: action {action!r} has no entry for state {missing[0]!r}")
        table.append([index[moves[s]] for s in states])
    name = str(raw.get("name", path.stem))
    start = index[str(raw["start"])]
    return Semiautomaton(name, tuple(states), tuple(map(str, raw["actions"])), np.array(table), start)


def make(automaton: str, n: int = 6, action_set: str = "increment") -> Semiautomaton:
    """A built-in by name, or a YAML table by path."""
    builders = {"cyclic": lambda: cyclic(n, action_set), "symmetric": symmetric3, "dihedral": lambda: dihedral(n),
                "alternating": alternating4, "flip_flop": flip_flop}
    if automaton in builders:
        return builders[automaton]()
    if automaton.endswith((".yaml", ".yml")):
        return from_yaml(Path(automaton))
    raise ValueError(f"unknown automaton {automaton!r}; choose from {', '.join(BUILT_IN)} or give a YAML table")


def action_distribution(count: int, skew: float | None) -> torch.Tensor:
    """Uniform (in distribution), or a skew: mass `skew` on the last action, the rest spread evenly.

    For the counter the last action is +1, so skew is P(increment); for S_3 it is the transposition.
    """
    if skew is None:
        return torch.full((count,), 1.0 / count)
    if not 0 < skew < 1:
        raise ValueError(f"an OOD skew must lie in (0, 1) (got {skew})")
    probs = torch.full((count,), (1 - skew) / (count - 1))
    probs[-1] = skew
    return probs


class AutomatonTask:
    """Action sequences of length T from a distribution; their states are the CoT and the answer."""

    def __init__(self, automaton: Semiautomaton, length: int):
        if length < 2:
            raise ValueError(f"task.length must be at least 2 (got {length})")
        self.automaton = automaton
        self.length = length

    def sample(self, batch: int, generator: torch.Generator, skew: float | None = None):
        """(actions, states), each (B, T) int."""
        probs = action_distribution(len(self.automaton.actions), skew)
        actions = torch.multinomial(probs, batch * self.length, replacement=True, generator=generator)
        actions = actions.view(batch, self.length)
        return actions, self.automaton.run(actions)
