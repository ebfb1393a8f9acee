"""The strategies system's own figures."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from internalize import plots
from internalize.plots import plt


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


def factorisation(s: dict, labels: list[str], folder: Path) -> None:
    """A factorisation run's figures from its summary: trajectories, the posterior means' PCA by task and
    strategy (`labels`: the first test examples'), and steering against the data's shares."""
    plots.trajectories(s["trajectory"], ["fidelity", "alignment", "kl"], folder / "trajectory.png",
                       f"{s['objective']}: over training (alignment chance {s['alignment_chance']:.2f})")
    snapshots = {p["step"]: p["pca"] for p in s["trajectory"] if "pca" in p}
    if snapshots:
        pca_snapshots(snapshots, labels, folder / "posterior_pca.png",
                      f"{s['objective']}: posterior means (PCA) by task and strategy")
    bars = {f"{n}\n{st}": {"steered": np.nan if v is None else v["share"], "chance": np.nan if v is None else v["chance"]}
            for n, row in s["steering"].items() for st, v in row.items()}
    plots.grouped_bars(bars, folder / "steering.png", "share of traces that strategy's alone",
                       f"{s['objective']}: steering new inputs with one strategy's mean posterior z", ylim=(0, 1.05))
