"""The L-layer gated scalar transformer of Log-ICoT (docs/logicot.md).

Every position carries one scalar. Layer l mixes the scalars with a softmax attention whose
logits are a trainable position-by-position block W^(l) (zero at init), passes the mix through a
fixed link phi, and a prescribed gate decides which positions take the new value:

    A^(l) = softmax over allowed keys of W^(l)        (T, T), row m = query m
    u^(l) = phi(h^(l-1) @ A^(l).T)                    (B, T)
    h^(l) = where(g^(l), u^(l), h^(l-1))

The model knows positions and levels only; which positions are padded and supervised in a stage
comes in as a GatePlan, derived from the tree by `gate_plan`.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np
import torch
from torch import nn


def cos_link(t: torch.Tensor) -> torch.Tensor:
    return -torch.cos(math.pi * t)


def quadratic_link(t: torch.Tensor) -> torch.Tensor:
    """Kim & Suzuki's piecewise quadratic: the same fixed points as -cos(pi t)."""
    low = -4 * t**2 - 8 * t - 3
    mid = 4 * t**2 - 1
    high = -4 * t**2 + 8 * t - 3
    return torch.where(t < -0.5, low, torch.where(t < 0.5, mid, high))


LINKS = {"cos": cos_link, "quadratic": quadratic_link}
MASKS = ("lower_levels", "previous_level")
GATES = ("frontier", "fixed", "none")
READOUTS = ("per_node", "frontier")


def allowed_keys(level: np.ndarray, mask: str) -> torch.Tensor:
    """(T, T) bool: which keys each query may attend to.

    A level-l node sees every position below level l (`lower_levels`) or level l-1 only
    (`previous_level`; the inputs for level 1). Input rows are never computed; they are given
    their own position so that their softmax is defined.
    """
    if mask not in MASKS:
        raise ValueError(f"model.mask must be one of {MASKS} (got {mask!r})")
    lvl = torch.as_tensor(level)
    query, key = lvl[:, None], lvl[None, :]  # (T, 1), (1, T)
    allowed = key < query if mask == "lower_levels" else key == query - 1
    inputs = torch.nonzero(lvl == 0).squeeze(1)
    allowed[inputs] = False
    allowed[inputs, inputs] = True
    return allowed


@dataclass(frozen=True)
class GatePlan:
    """One stage's wiring: what each layer writes, what is supervised and where it is read."""

    write: torch.Tensor  # (L, T) bool, g^(l) for l = 1..L
    targets: torch.Tensor  # (T,) bool, the supervised positions
    readout: torch.Tensor  # (T,) int, the 1-based layer whose link output u is read there; 0 elsewhere
    frontier: int  # 1-based layer that learns this stage: 1 + the deepest padded node

    def to(self, device: torch.device) -> "GatePlan":
        return replace(self, write=self.write.to(device), targets=self.targets.to(device),
                       readout=self.readout.to(device))


def compute_depth(children: np.ndarray, padded: np.ndarray) -> np.ndarray:
    """(T,) how many layers it takes to compute each node from what is explicit.

    Inputs and explicit nodes: 0. A padded node: 1 + the deeper of its children. Children
    always precede their parent in the sequence, so one pass in order suffices.
    """
    depth = np.zeros(len(children), dtype=np.int64)
    for m in np.flatnonzero(padded):
        depth[m] = 1 + depth[children[m]].max()
    return depth


def gate_plan(
    level: np.ndarray, children: np.ndarray, padded: np.ndarray, gate: str, answer_only: bool,
    readout: str = "per_node",
) -> GatePlan:
    """Derive the gates of a stage from the tree and the padded positions.

    `frontier` (default): layer c writes the padded nodes of compute depth c, and the frontier
    layer F = 1 + the deepest padded node is the one that learns. Every explicit node and the
    answer is predicted from what is below it (teacher forcing) and never written back:
    readout `per_node` (default) reads each target from the layer just above its padded
    children (layer 1 when they are explicit); readout `frontier` reads every target from F.
    Layers above the deepest readout are idle.
    `fixed`: layer l writes every level-l node in every stage; the loss is on level F, read at F.
    `none`: every layer overwrites every node; every prediction is read from the top layer.
    """
    if gate not in GATES:
        raise ValueError(f"model.gate must be one of {GATES} (got {gate!r})")
    if readout not in READOUTS:
        raise ValueError(f"model.readout must be one of {READOUTS} (got {readout!r})")
    depth = int(level.max())
    padded = np.asarray(padded, dtype=bool)
    if padded[level == 0].any() or padded[-1]:
        raise ValueError("only thinking tokens can be padded, never inputs or the answer")
    cdepth = compute_depth(children, padded)
    frontier = 1 + int(cdepth.max())
    tree = level > 0
    layers = np.arange(1, depth + 1)[:, None]  # (L, 1)
    above_children = 1 + cdepth[np.maximum(children, 0)].max(axis=1)  # (T,)
    if gate == "frontier":
        write = padded[None, :] & (cdepth[None, :] == layers)
        targets = tree & ~padded
        read = above_children if readout == "per_node" else np.full(len(level), frontier)
    elif gate == "fixed":
        write = level[None, :] == layers
        targets, read = level == frontier, np.full(len(level), frontier)
    else:
        write = np.broadcast_to(tree, (depth, len(level)))
        targets, read = tree & ~padded, np.full(len(level), depth)
    if answer_only:
        targets = np.zeros_like(targets)
        targets[-1] = True
    return GatePlan(
        write=torch.as_tensor(np.ascontiguousarray(write)),
        targets=torch.as_tensor(targets),
        readout=torch.as_tensor(np.where(targets, read, 0)),
        frontier=frontier,
    )


class LogICoT(nn.Module):
    def __init__(self, level: np.ndarray, link: str = "cos", mask: str = "lower_levels", seeds: int | None = None):
        """seeds: that many independent models stacked (W^(l) is (seeds, T, T); inputs (seeds, B, T)),
        trained at once; each computes exactly what it computes alone."""
        super().__init__()
        if link not in LINKS:
            raise ValueError(f"model.link must be one of {tuple(LINKS)} (got {link!r})")
        self.depth = int(level.max())
        length = len(level)
        self.link_name, self.link = link, LINKS[link]
        self.register_buffer("allowed", allowed_keys(level, mask), persistent=False)
        shape = (length, length) if seeds is None else (seeds, length, length)
        self.W = nn.ParameterList(nn.Parameter(torch.zeros(shape)) for _ in range(self.depth))

    def attention(self, layer: int) -> torch.Tensor:
        """A^(layer) for a 1-based layer, (T, T) (stacked: (seeds, T, T))."""
        logits = self.W[layer - 1].masked_fill(~self.allowed, float("-inf"))
        return torch.softmax(logits, dim=-1)

    def forward(self, h: torch.Tensor, plan: GatePlan) -> torch.Tensor:
        """h: (B, T) values with padded positions at 0. Returns the predictions, (B, T):
        at each target, u of the layer the plan reads it from; 0 elsewhere."""
        return self.states(h, plan)[-1]

    def states(self, h: torch.Tensor, plan: GatePlan) -> list[torch.Tensor]:
        """What each layer holds, [h^(1), ...], with its read-out predictions in place, (B, T) each;
        the last entry holds every prediction."""
        out, pred = [], torch.zeros_like(h)
        for layer in range(1, int(plan.readout.max()) + 1):
            u = self.link(h @ self.attention(layer).transpose(-2, -1))  # (B, T) (stacked: (seeds, B, T))
            here = plan.readout == layer
            pred = torch.where(here, u, pred)
            h = torch.where(plan.write[layer - 1], u, h)
            out.append(torch.where(here, u, h))
        out[-1] = torch.where(plan.targets, pred, out[-1])
        return out

    @torch.no_grad()
    def round_weights(self) -> None:
        """Integer quantisation: round every entry of every W^(l)."""
        for w in self.W:
            w.round_()
