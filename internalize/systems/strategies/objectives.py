"""The factorisation's objectives: each one's response term over the token losses, and the KL weight."""
from __future__ import annotations

import torch

# -- strategies_factorize: the response term of each objective --------------------------------
# name -> (token weights: "sum" | "surprisal" | "inverse" | "uniform", divide by c, beta fixed at 1)
LATENT_OBJECTIVES = {
    "elbo": ("sum", False, True),
    "beta_elbo": ("sum", False, False),
    "model_directed": ("surprisal", True, False),
    "token_weighting": ("surprisal", False, False),
    "global_scale": ("uniform", True, False),
    "token_inverse": ("inverse", True, False),
}


def token_weights(name: str, surprisal: torch.Tensor, response: torch.Tensor, alpha: float,
                  gamma: float) -> torch.Tensor:
    """a_t of objective `name` (B, T), 0 off the response. surprisal: (B, T) the frozen base's
    -log p(y_t | x, y_<t); response: (B, T) bool.

    sum: 1 per token (the ELBO's summed log-likelihood). surprisal: alpha / T_y + (1 - alpha) * w_t
    with w_t proportional to surprisal ** gamma, normalised over each response (a_t sums to 1).
    inverse: the same with surprisal ** -gamma (weight on the tokens the base finds easy).
    uniform: 1 / T_y (alpha = 1).
    """
    kind = LATENT_OBJECTIVES[name][0]
    mask = response.float()
    if kind == "sum":
        return mask
    length = mask.sum(-1, keepdim=True).clamp(min=1)  # (B, 1)
    if kind == "uniform":
        return mask / length
    power = gamma if kind == "surprisal" else -gamma
    w = surprisal.detach().clamp(min=1e-6) ** power * mask  # (B, T)
    w = w / w.sum(-1, keepdim=True).clamp(min=1e-12)
    return alpha * mask / length + (1 - alpha) * w


def response_term(name: str, nll: torch.Tensor, surprisal: torch.Tensor, response: torch.Tensor, alpha: float,
                  gamma: float, c: float) -> torch.Tensor:
    """(B,) the objective's response term: sum_t a_t * nll_t, divided by c where the objective
    normalises (c: the same sum with nll = surprisal, averaged over the validation split, so the
    term is 1 on average there when the generator is the base)."""
    weighted = (token_weights(name, surprisal, response, alpha, gamma) * nll).sum(-1)
    return weighted / c if LATENT_OBJECTIVES[name][1] else weighted


def kl_weight(name: str, beta: float, warmup: float, step: int, total: int) -> float:
    """beta at global step `step` of `total`: 1 for elbo; otherwise beta, risen linearly from 0 over
    the first warmup * total steps."""
    if LATENT_OBJECTIVES[name][2]:
        return 1.0
    ramp = warmup * total
    return beta if ramp <= 0 else beta * min(1.0, step / ramp)
