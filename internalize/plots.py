"""Figures a reader looks at: loss over steps, attention per layer, accuracy per stage."""
from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402


def loss_curve(metrics: list[dict], path: Path, title: str = "") -> None:
    """Validation loss over steps (log scale), stage boundaries as dashed lines."""
    steps = [r for r in metrics if "val_loss" in r and "event" not in r]
    ends = [r for r in metrics if r.get("event") == "stage_end"]
    fig, ax = plt.subplots(figsize=(7, 3.6))
    ax.plot([r["step"] for r in steps], [max(r["val_loss"], 1e-8) for r in steps], lw=1.6, color="C0")
    ax.set_yscale("log")
    start = 0
    for i, r in enumerate(ends):
        if i:
            ax.axvline(start, ls="--", lw=0.8, color="0.5")
        if len(ends) <= 8 or i % 2 == 0:  # label every stage, or every other one when crowded
            label = f"stage {i + 1}" if len(ends) <= 6 else f"{i + 1}"
            ax.text(start + r["steps"] / 2, 1.0, label, transform=ax.get_xaxis_transform(),
                    ha="center", va="bottom", fontsize=8, color="0.35")
        start += r["steps"]
    ax.set_xlabel("training step")
    ax.set_ylabel("validation loss (stage targets)")
    ax.set_title(title or "validation loss; dashed lines: stage boundaries", fontsize=10, pad=14)
    ax.grid(alpha=0.3, which="both", lw=0.4)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def attention_heatmap(attention: np.ndarray, level: np.ndarray, children: np.ndarray, layer: int, mass: float,
                      path: Path) -> None:
    """Layer `layer`'s attention rows for its own level over the keys they may see; children boxed."""
    rows = np.flatnonzero(level == layer)
    keys = np.flatnonzero(level < layer)
    block = attention[np.ix_(rows, keys)]  # (width, keys)
    fig, ax = plt.subplots(figsize=(min(12, 2 + 0.12 * len(keys)), 1.2 + 0.35 * len(rows)))
    im = ax.imshow(block, aspect="auto", cmap="viridis", vmin=0, vmax=max(0.5, float(block.max())),
                   interpolation="nearest")
    col = {k: i for i, k in enumerate(keys)}
    for r, m in enumerate(rows):
        for c in children[m]:
            ax.add_patch(plt.Rectangle((col[c] - 0.5, r - 0.5), 1, 1, fill=False, ec="red", lw=1.2))
    ax.set_yticks(range(len(rows)), [str(m + 1) for m in rows], fontsize=7)
    step = max(1, len(keys) // 20)
    ax.set_xticks(range(0, len(keys), step), [str(k + 1) for k in keys[::step]], fontsize=7)
    ax.set_xlabel("key position (1-based); red boxes: the two children")
    ax.set_ylabel("query")
    ax.set_title(f"layer {layer}: level-{layer} nodes, mean mass on children {mass:.3f}", fontsize=10)
    fig.colorbar(im, ax=ax, fraction=0.03, pad=0.02)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


TITLES = {"zero_filled_accuracy": "one forward pass, every thinking token padded"}


def stage_accuracy(per_stage: list[dict], path: Path, key: str = "zero_filled_accuracy",
                   chance: float | None = 0.5) -> None:
    """An accuracy after each stage, against chance; e.g. zero-filled (one pass, all padded)."""
    stages = [r["stage"] for r in per_stage]
    acc = [r[key] for r in per_stage]
    fig, ax = plt.subplots(figsize=(max(4, 0.35 * len(stages) + 2), 3.2))
    ax.bar(stages, acc, color=["C2" if a >= 0.99 else "C0" for a in acc])
    if chance is not None:
        ax.axhline(chance, ls="--", lw=0.8, color="0.4")
        ax.text(stages[-1] + 0.45, chance, "chance", va="bottom", ha="right", fontsize=8, color="0.4")
    ax.set_ylim(0, 1.05)
    ax.set_xticks(stages)
    ax.set_xlabel("after stage")
    ax.set_ylabel(key.replace("_", " "))
    ax.set_title(TITLES.get(key, key.replace("_", " ") + " after each stage"), fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def accuracy_against(per_stage: list[dict], x: str, keys: list[str], path: Path, chance: float | None = None,
                     title: str = "") -> None:
    """Several accuracies (one line each) against a per-stage quantity, e.g. CoT tokens removed."""
    xs = [r[x] for r in per_stage]
    fig, ax = plt.subplots(figsize=(6.5, 3.8))
    for i, key in enumerate(keys):
        style = dict(lw=2.2, color="black") if key.endswith("id_accuracy") else dict(lw=1.4, color=f"C{i}")
        label = key.replace("_accuracy", "").replace("id", "in distribution").replace("ood_p", "OOD, skew ")
        ax.plot(xs, [r[key] for r in per_stage], marker="o", ms=3.5, label=label.replace("_", " "), **style)
    if chance is not None:
        ax.axhline(chance, ls="--", lw=0.8, color="0.4")
        ax.text(xs[-1], chance, "chance ", va="bottom", ha="right", fontsize=8, color="0.4")
    ax.set_ylim(-0.02, 1.05)
    ax.set_xlabel(f"{x} (chain-of-thought tokens)" if x == "removed" else x)
    ax.set_ylabel("answer accuracy")
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3, lw=0.4)
    ax.legend(fontsize=8, loc="best")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def score_matrix(scores: np.ndarray, d: int, support: tuple[int, ...], path: Path, title: str = "") -> None:
    """Position-only attention scores: a row per output slot, a column per input position.

    Columns to the right of the dashed line are chain tokens; the support's bits are marked
    with triangles; positions a slot may not see are left blank.
    """
    slots, columns = scores.shape
    shown = np.where(np.arange(columns)[None, :] < d + np.arange(slots)[:, None], scores, np.nan)
    fig, ax = plt.subplots(figsize=(min(14, 2.5 + 0.16 * columns), 1.6 + 0.32 * slots))
    top = max(1.0, float(np.nanmax(np.abs(shown))))
    image = ax.imshow(shown, cmap="Blues", vmin=0, vmax=top, aspect="auto", interpolation="nearest")
    ax.axvline(d - 0.5, ls="--", lw=0.8, color="0.4")
    ax.scatter(list(support), [-0.9] * len(support), marker="v", s=22, color="C3", clip_on=False,
               label="support bits")
    if columns <= 40:
        for (row, col), value in np.ndenumerate(shown):
            if not np.isnan(value) and value != 0:
                ax.text(col, row, f"{value:g}", ha="center", va="center", fontsize=7,
                        color="white" if value > top / 2 else "black")
    ax.set_yticks(range(slots), [f"slot {j + 1}" for j in range(slots)], fontsize=8)
    ax.set_xlabel(f"input position (bits 0..{d - 1}, then chain tokens)")
    ax.set_ylim(slots - 0.5, -1.4)
    ax.set_title(title, fontsize=10)
    fig.colorbar(image, ax=ax, fraction=0.03, pad=0.01, label="score")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def attention_patterns(patterns: dict[int, np.ndarray], labels: list[str], path: Path, title: str = "") -> None:
    """Mean attention (over heads and examples) of some layers: a panel per layer, queries down, keys across."""
    layers = sorted(patterns)
    size = len(labels)
    fig, axes = plt.subplots(1, len(layers), figsize=(0.9 + 0.2 * size * len(layers), 0.9 + 0.2 * size), squeeze=False,
                             layout="constrained")
    for ax, layer in zip(axes[0], layers):
        shown = np.where(np.tril(np.ones((size, size), dtype=bool)), patterns[layer], np.nan)
        ax.imshow(shown, cmap="Blues", vmin=0, vmax=1, interpolation="nearest")
        ax.set_xticks(range(size), labels, rotation=90, fontsize=6)
        ax.set_yticks(range(size), labels, fontsize=6)
        ax.set_title(f"layer {layer + 1}", fontsize=9)
        ax.set_xlabel("key", fontsize=8)
    axes[0][0].set_ylabel("query", fontsize=8)
    fig.suptitle(title, fontsize=10)
    fig.savefig(path, dpi=120)
    plt.close(fig)


def grouped_bars(groups: dict[str, dict[str, float]], path: Path, ylabel: str, title: str = "",
                 ylim: tuple[float, float] | None = None) -> None:
    """One cluster of bars per group (a task, a strategy), one bar per series inside it."""
    series = list(dict.fromkeys(k for bars in groups.values() for k in bars))
    width = 0.8 / len(series)
    fig, ax = plt.subplots(figsize=(max(5, min(18, 0.55 * len(groups) * len(series) + 1.5)), 3.6))
    xs = np.arange(len(groups))
    for i, name in enumerate(series):
        ax.bar(xs + (i - (len(series) - 1) / 2) * width, [bars.get(name, np.nan) for bars in groups.values()],
               width, label=name, color=f"C{i}")
    ax.set_xticks(xs)
    ax.set_xticklabels(list(groups), fontsize=7 if len(groups) > 8 else 9)
    if ylim:
        ax.set_ylim(*ylim)
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=10)
    ax.grid(axis="y", alpha=0.3, lw=0.4)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def probe_heatmaps(accuracy: dict[str, list[list[float | None]]], chance: dict[str, float | None], path: Path,
                   title: str = "") -> None:
    """A panel per group (task): held-out probe accuracy per layer (rows, 0 = embeddings) and bin of
    the relative trace position (columns); chance in the panel's title; None cells left blank."""
    groups = list(accuracy)
    cols = min(3, len(groups))
    rows = -(-len(groups) // cols)
    layers = max((len(g) for g in accuracy.values()), default=1)
    bins = max((len(r) for g in accuracy.values() for r in g), default=1)
    fig, axes = plt.subplots(rows, cols, figsize=(1.2 + cols * (0.9 + 0.38 * bins), 0.9 + rows * (0.9 + 0.38 * layers)),
                             squeeze=False, layout="constrained")
    image = None
    for ax, group in zip(axes.flat, groups):
        grid = np.array([[np.nan if v is None else v for v in row] for row in accuracy[group]], dtype=float)
        image = ax.imshow(grid.reshape(len(accuracy[group]), -1), cmap="viridis", vmin=0, vmax=1, aspect="auto",
                          origin="lower", interpolation="nearest")
        for (r, c), v in np.ndenumerate(grid):
            if not np.isnan(v):
                ax.text(c, r, f"{v:.2f}".removeprefix("0"), ha="center", va="center", fontsize=6,
                        color="black" if v > 0.6 else "white")
        c = chance.get(group)
        ax.set_title(f"{group} (chance {'n/a' if c is None else f'{c:.2f}'})", fontsize=8)
        ax.set_xticks(range(grid.shape[1]), [f"{i / max(1, grid.shape[1]):.2g}" for i in range(grid.shape[1])],
                      fontsize=6)
        ax.set_yticks(range(grid.shape[0]), ["emb"] + [str(i) for i in range(1, grid.shape[0])], fontsize=6)
        ax.set_xlabel("relative trace position (bin start)", fontsize=7)
        ax.set_ylabel("layer", fontsize=7)
    for ax in axes.flat[len(groups):]:
        ax.axis("off")
    if image is not None:
        fig.colorbar(image, ax=axes, fraction=0.03, pad=0.02, label="held-out accuracy")
    fig.suptitle(title, fontsize=10)
    fig.savefig(path, dpi=120)
    plt.close(fig)


def trajectories(points: list[dict], keys: list[str], path: Path, title: str = "") -> None:
    """Each key's value against the training step, one panel per key (None values skipped)."""
    fig, axes = plt.subplots(1, len(keys), figsize=(3.2 * len(keys), 2.9), squeeze=False, layout="constrained")
    for i, (ax, key) in enumerate(zip(axes[0], keys)):
        xs = [p["step"] for p in points if p.get(key) is not None]
        ax.plot(xs, [p[key] for p in points if p.get(key) is not None], "o-", color=f"C{i}", ms=4)
        ax.set_xlabel("step")
        ax.set_title(key, fontsize=9)
        ax.grid(alpha=0.3, lw=0.4)
    fig.suptitle(title, fontsize=10)
    fig.savefig(path, dpi=120)
    plt.close(fig)


def pca_snapshots(snapshots: dict[int, list[list[float]]], labels: list[str], path: Path, title: str = "") -> None:
    """A scatter panel per training step: 2-D points coloured by label (one legend for all)."""
    kinds = sorted(set(labels))
    colours = {k: plt.get_cmap("tab20")(i % 20) for i, k in enumerate(kinds)}
    fig, axes = plt.subplots(1, len(snapshots), figsize=(2.8 * len(snapshots) + 2.6, 3.0), squeeze=False,
                             layout="constrained")
    for ax, (step, xy) in zip(axes[0], sorted(snapshots.items())):
        xy = np.asarray(xy, dtype=float)
        for kind in kinds:
            rows = [i for i, label in enumerate(labels[:len(xy)]) if label == kind]
            ax.scatter(xy[rows, 0], xy[rows, 1], s=7, color=colours[kind], label=kind)
        ax.set_title(f"step {step}", fontsize=9)
        ax.set_xticks([])
        ax.set_yticks([])
    axes[0][-1].legend(fontsize=6, loc="center left", bbox_to_anchor=(1.02, 0.5), markerscale=1.5)
    fig.suptitle(title, fontsize=10)
    fig.savefig(path, dpi=120)
    plt.close(fig)
