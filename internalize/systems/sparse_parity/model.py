"""One layer of position-only linear attention and a fixed link (docs/sparse_parity.md).

The sequence is d input bits followed by the outputs (the chain-of-thought tokens still shown,
then the answer). Output slot j reads every position before it, with scores that depend on
positions alone and no softmax, then a fixed map turns the weighted sum into a bit:

    z_j = sum_{i < d + j} A[j, i] x_i,      out_j = phi(z_j) = (1 - cos(pi z_j)) / 2

With integer weights, out_j is the parity of the attended bits, exactly. The scores A are the
only parameters. Slots are positions: when a chain token is deleted the later tokens shift
left and slot j's row is asked for what used to come one slot later.
"""
from __future__ import annotations

import math

import torch
from torch import nn


def parity_link(z: torch.Tensor) -> torch.Tensor:
    """(1 - cos(pi z)) / 2: 0 at even integers, 1 at odd ones."""
    return (1 - torch.cos(math.pi * z)) / 2


class LinearAttention(nn.Module):
    def __init__(self, d: int, outputs: int):
        super().__init__()
        self.d, self.outputs = d, outputs
        self.A = nn.Parameter(torch.zeros(outputs, d + outputs - 1))
        slot = torch.arange(outputs)[:, None]
        column = torch.arange(d + outputs - 1)[None, :]
        self.register_buffer("allowed", column < d + slot, persistent=False)  # (outputs, columns)

    @torch.no_grad()
    def chain_start(self) -> None:
        """The integer start: every slot but the first copies the token just before it."""
        self.A.zero_()
        slots = torch.arange(1, self.outputs)
        self.A[slots, self.d + slots - 1] = 1.0

    def scores(self, m: int, nudge: torch.Tensor | None = None) -> torch.Tensor:
        """(m, d + m - 1): the rows of the first m slots, masked to the positions before each."""
        a = self.A[:m, :self.d + m - 1]
        if nudge is not None:
            a = a + nudge[:m, :self.d + m - 1]
        return a * self.allowed[:m, :self.d + m - 1]

    def forward(self, tokens: torch.Tensor, nudge: torch.Tensor | None = None) -> torch.Tensor:
        """tokens (B, d + m - 1): bits then the m - 1 shown chain tokens -> (B, m) outputs in [0, 1]."""
        m = tokens.shape[1] - self.d + 1
        if not 1 <= m <= self.outputs:
            raise ValueError(f"expected between {self.d} and {self.d + self.outputs - 1} tokens, got {tokens.shape[1]}")
        return parity_link(tokens @ self.scores(m, nudge).T)

    @torch.no_grad()
    def project(self, nonnegative: bool = True, integer: bool = True) -> None:
        """Clamp at 0 (when asked), then round every weight to the nearest integer (halves to even; when asked)."""
        if nonnegative:
            self.A.clamp_(min=0.0)
        if integer:
            self.A.round_()
