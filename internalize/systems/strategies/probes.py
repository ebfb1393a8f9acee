"""Linear probes: does a model's residual stream say which strategy wrote the trace it reads?

Hidden states. The model reads each framed example teacher forced (right-padded tokens; the
padding after a row's last token cannot change its earlier positions under causal attention).
`trace_states` keeps, at every *trace position* (a token of the trace, i.e. inside the response
and before `</y>`), the embedding (`hook_embed`, row 0 when the model has it) and every block's
residual stream (`blocks.{l}.hook_resid_post`, rows 1..depth). Trace position i of a trace of T
tokens falls in bin (i * bins) // T of `bins` equal parts of the trace (every bin is non-empty
when T >= bins). The state at trace token i has read the input and trace tokens 0..i.

Probe. Per (group, layer, bin): a multinomial logistic regression on the states, standardised
with the training half's mean and deviation, weights from zero, fitted full batch by L-BFGS
(strong Wolfe line search, at most MAX_ITER iterations) on weighted cross-entropy plus L2 * |W|^2;
a group's probes (every layer and bin) are fitted together, as one sum of independent losses
(one vectorised run instead of layers x bins small ones).
Each example weighs 1 in a bin whatever its number of positions there (each position weighs
1 / that number), so that long traces do not dominate and the chance level is an example share.

Split. By example, never by position: per group, a seeded permutation puts the first half of the
examples (rounded up) in training, the rest held out; accuracy is the weighted share of held-out
positions whose argmax is the label, i.e. the mean over held-out examples of the share of their
positions decoded right. Chance is the majority-class share of the held-out examples (an upper
bound of what predicting the training majority scores). A cell is None when its training half has
fewer than two classes or either half fewer than MIN_EXAMPLES examples in that bin (tiny data).

Reading it. The trace formats differ between strategies, so the tokens read so far can give the
strategy away by themselves: the embedding row (the current token and its position alone) is the
baseline for what a layer adds, and an untrained model of the same shape already decodes some
tasks far above chance through its random mixing of earlier tokens (measured: about 0.7 mean over
tasks at their best layer against chance 0.48 for a fresh width-128, depth-4 model on 600 test
examples). A trained model's claim to carry the strategy is its margin over those two.

Labels are whatever the caller passes; the strategies experiment passes the strategy column and
leaves out the examples whose trace two strategies write alike (their label is undecidable from
the trace, so they could only add noise that no probe can remove).
"""
from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

BINS = 8
L2 = 1e-2
MAX_ITER = 100
MIN_EXAMPLES = 2  # per half and bin; below it a cell is None


def layer_names(model: torch.nn.Module) -> list[str]:
    """`hook_embed` (when present), then every block's residual stream after the block."""
    if hasattr(model, "probe_layers"):  # a Hugging Face model: its hidden states under the GPT's names
        return model.probe_layers()
    names = dict(model.named_modules())
    blocks = [f"blocks.{i}.hook_resid_post" for i in range(len(names)) if f"blocks.{i}.hook_resid_post" in names]
    return (["hook_embed"] if "hook_embed" in names else []) + blocks


@torch.no_grad()
def trace_states(model: torch.nn.Module, tokens: torch.Tensor, trace: torch.Tensor, batch: int = 128,
                 names: list[str] | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """tokens, trace: (N, L) right-padded tokens and the mask of trace positions (on the model's device).

    Returns states (layers, P, width) float32 on the CPU, and for each of the P trace positions its
    row (P,), its index inside its trace (P,) and that trace's length (P,), all long.
    """
    names = names or layer_names(model)
    lengths = trace.sum(1)  # (N,)
    states, rows, index = [], [], []
    for lo in range(0, len(tokens), batch):
        t, m = tokens[lo:lo + batch], trace[lo:lo + batch]
        width = int(m.nonzero()[:, 1].max()) + 1 if m.any() else 1  # no column after the last trace token
        _, cache = model.run_with_cache(t[:, :width], names)
        mask = m[:, :width]  # (b, width)
        states.append(torch.stack([cache[n][mask] for n in names]).float().cpu())  # (layers, p, width)
        where = mask.nonzero()  # (p, 2), row-major: positions of one row in order
        rows.append(where[:, 0].cpu() + lo)
        index.append((mask.long().cumsum(1) - 1)[mask].cpu())  # (p,) index inside the trace
    rows_, index_ = torch.cat(rows), torch.cat(index)
    return torch.cat(states, dim=1), rows_, index_, lengths.cpu()[rows_]


def fit_probe(x: torch.Tensor, y: torch.Tensor, weight: torch.Tensor, classes: int, l2: float = L2,
              max_iter: int = MAX_ITER) -> tuple[torch.Tensor, torch.Tensor]:
    """One problem, x (n, d), y (n,) in [0, classes), weight (n,) summing to 1 -> W (d, classes),
    b (classes,); or k stacked problems, x (k, n, d), y and weight (n,) or (k, n) -> W (k, d, classes),
    b (k, classes). A padded sample has weight 0.

    The k problems are independent: one L-BFGS on the sum of their losses heads for each one's
    optimum (the sum is strictly convex in W), in one vectorised run instead of k."""
    single = x.dim() == 2
    x = x[None] if single else x  # (k, n, d)
    k, n, _ = x.shape
    W = torch.zeros(k, x.shape[2], classes, requires_grad=True)
    b = torch.zeros(k, 1, classes, requires_grad=True)
    opt = torch.optim.LBFGS([W, b], lr=1.0, max_iter=max_iter, line_search_fn="strong_wolfe",
                            tolerance_grad=1e-6, tolerance_change=1e-9)
    targets, weights = y.expand(k, n).reshape(-1), weight.expand(k, n).reshape(-1)  # (k * n,)

    def closure():
        opt.zero_grad()
        logits = (x @ W + b).reshape(k * n, classes)  # (k * n, classes)
        loss = (F.cross_entropy(logits, targets, reduction="none") * weights).sum() + l2 * (W ** 2).sum()
        loss.backward()
        return loss

    with torch.enable_grad():
        opt.step(closure)
    W, b = W.detach(), b.detach()[:, 0]
    return (W[0], b[0]) if single else (W, b)


def _example_weights(rows: torch.Tensor) -> torch.Tensor:
    """(n,) positions' rows -> weights: 1 / (positions of that row), over the number of rows."""
    _, inverse, counts = torch.unique(rows, return_inverse=True, return_counts=True)
    return 1.0 / counts[inverse].double() / len(counts)  # (n,) float64: accuracies sum exactly


def probe_grid(states: torch.Tensor, rows: torch.Tensor, bins_of: torch.Tensor, labels: torch.Tensor,
               train: torch.Tensor, bins: int = BINS, l2: float = L2,
               max_iter: int = MAX_ITER) -> tuple[list[list[float | None]], float | None]:
    """One group's probes. states (layers, P, d); rows (P,) example of each position; bins_of (P,)
    its bin; labels (N,) long per example; train (N,) bool, the training half.

    Returns the held-out accuracy per [layer][bin] (None where undecidable) and the chance level.
    """
    classes = int(labels.max()) + 1 if len(labels) else 0
    held = labels[~train]
    chance = float(torch.bincount(held).max()) / len(held) if len(held) else None
    grid: list[list[float | None]] = [[None] * bins for _ in range(states.shape[0])]
    layers, width = states.shape[0], states.shape[2]
    fits = []  # (bin, positions to fit, positions to score) of every decidable bin
    for b in range(bins):
        fit_at = ((bins_of == b) & train[rows]).nonzero()[:, 0]  # (n,)
        test_at = ((bins_of == b) & ~train[rows]).nonzero()[:, 0]  # (m,)
        fit_rows, test_rows = rows[fit_at].unique(), rows[test_at].unique()
        if len(fit_rows) >= MIN_EXAMPLES and len(test_rows) >= MIN_EXAMPLES and len(labels[fit_rows].unique()) >= 2:
            fits.append((b, fit_at, test_at))
    if not fits:
        return grid, chance
    # every (bin, layer) probe in one vectorised fit: bins padded to the longest with weight-0 samples
    longest = max(len(f) for _, f, _ in fits)
    x = torch.zeros(len(fits), layers, longest, width)  # (bins, layers, n, d)
    y = torch.zeros(len(fits), 1, longest, dtype=torch.long)
    w = torch.zeros(len(fits), 1, longest)
    norms = []
    for i, (_, fit_at, _) in enumerate(fits):
        x_fit = states[:, fit_at]  # (layers, n, d)
        mean, std = x_fit.mean(1, keepdim=True), x_fit.std(1, correction=0, keepdim=True) + 1e-5
        norms.append((mean, std))
        x[i, :, :len(fit_at)] = (x_fit - mean) / std
        y[i, 0, :len(fit_at)] = labels[rows[fit_at]]
        w[i, 0, :len(fit_at)] = _example_weights(rows[fit_at]).float()
    W, bias = fit_probe(x.flatten(0, 1), y.expand(-1, layers, -1).flatten(0, 1), w.expand(-1, layers, -1).flatten(0, 1),
                        classes, l2, max_iter)
    W, bias = W.view(len(fits), layers, width, classes), bias.view(len(fits), layers, 1, classes)
    for i, (b, _, test_at) in enumerate(fits):
        mean, std = norms[i]
        hit = (((states[:, test_at] - mean) / std) @ W[i] + bias[i]).argmax(2) == labels[rows[test_at]]  # (layers, m)
        for layer, share in enumerate((hit.double() * _example_weights(rows[test_at])).sum(1).tolist()):
            grid[layer][b] = share
    return grid, chance


def _mean(values) -> float | None:
    values = [v for v in values if v is not None]
    return float(np.mean(values)) if values else None


def strategy_probes(model: torch.nn.Module, tokens: torch.Tensor, trace: torch.Tensor, labels: list[str],
                    groups: list[str], order: list[str] | None = None, bins: int = BINS, seed: int = 0,
                    l2: float = L2, max_iter: int = MAX_ITER) -> dict:
    """Probes per group (task), layer and bin of the relative trace position, for a summary.json.

    tokens, trace: (N, L) on the model's device; labels, groups: N strings; order: the groups in
    the order to report them (default: as they first appear; a group without examples is left out).
    Each group's split is seeded by `seed` and the group's place in `order`. Returns
    {"bins", "layers" (row 0 the embeddings when the model has them), "examples": {group: n},
     "chance": {group: c}, "accuracy": {group: [[acc or None per bin] per layer]},
     "layer_mean": {group: [mean over bins per layer]}, "best_layer": {group: row},
     "best_layer_mean": {group: its mean}, "mean_accuracy" and "mean_chance" (means over the groups with a best layer)}.
    """
    names = layer_names(model)
    states, rows, index, length = trace_states(model, tokens, trace, names=names)
    bins_of = (index * bins) // length.clamp(min=1)  # (P,)
    out = dict(bins=bins, layers=len(names), examples={}, chance={}, accuracy={}, layer_mean={}, best_layer={},
               best_layer_mean={})
    present = set(groups)
    for g, group in enumerate(order or list(dict.fromkeys(groups))):
        if group not in present:
            continue
        members = torch.tensor([i for i, x in enumerate(groups) if x == group])  # (n,) rows of this group
        values = sorted({labels[i] for i in members.tolist()})
        local = torch.full((len(groups),), -1, dtype=torch.long)  # row -> index inside the group
        local[members] = torch.arange(len(members))
        ys = torch.tensor([values.index(labels[i]) for i in members.tolist()])
        order = torch.randperm(len(members), generator=torch.Generator().manual_seed(seed * 1009 + g))
        train = torch.zeros(len(members), dtype=torch.bool)
        train[order[:(len(members) + 1) // 2]] = True
        at = local[rows] >= 0  # (P,) positions of this group
        grid, chance = probe_grid(states[:, at], local[rows[at]], bins_of[at], ys, train, bins, l2, max_iter)
        means = [_mean(row) for row in grid]
        best = max((i for i, m in enumerate(means) if m is not None), key=lambda i: means[i], default=None)
        out["examples"][group] = len(members)
        out["chance"][group] = chance
        out["accuracy"][group] = grid
        out["layer_mean"][group] = means
        out["best_layer"][group] = best
        out["best_layer_mean"][group] = None if best is None else means[best]
    out["mean_accuracy"] = _mean(out["best_layer_mean"].values())
    out["mean_chance"] = _mean(out["chance"][g] for g, m in out["best_layer_mean"].items() if m is not None)
    return out
