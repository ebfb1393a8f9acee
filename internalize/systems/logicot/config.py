"""Log-ICoT's config sections: the parity-tree task and the gated model."""
from __future__ import annotations

from typing import Literal, Optional

from pydantic import model_validator

from internalize.config import Strict
from internalize.systems.logicot.parity_tree import check_sizes


class ParityTreeConfig(Strict):
    name: Literal["parity_tree"] = "parity_tree"
    n: int = 30  # input bits
    k: int = 16  # bits in the hidden parity, a power of two (L = log2 k layers and stages)
    # sorted: the support's leaves in index order, paired in order (a fixed tree, as in the paper's
    # figure); random: a random pairing of the support
    pairing: Literal["sorted", "random"] = "sorted"

    @model_validator(mode="after")
    def _sizes(self):
        check_sizes(self.n, self.k)
        return self


class LogICoTConfig(Strict):
    name: Literal["logicot"] = "logicot"
    link: Literal["cos", "quadratic"] = "cos"  # phi: -cos(pi t), or Kim & Suzuki's quadratic
    mask: Literal["lower_levels", "previous_level"] = "lower_levels"  # which levels a layer may attend to
    # frontier: in stage t, layers below t write only the padded nodes of their compute depth and layer t
    # the rest, so each stage trains one layer on top of frozen ones (the paper's gates); fixed: layer l
    # writes level l in every stage; none: every layer overwrites every node (the ablation that fails)
    gate: Literal["frontier", "fixed", "none"] = "frontier"
    # where a target is read: just above its padded children (per_node), or all at the frontier
    readout: Literal["per_node", "frontier"] = "per_node"
    quantize: bool = False  # round W to integers after every update


def theory_budget(config) -> tuple[int, Optional[int]]:
    """The theory regime's samples per stage (Theorem 1: n^(2+eps)) and e2e steps (None: the default)."""
    return round(config.task.n ** (2 + config.theory.eps)), None
