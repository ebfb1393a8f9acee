"""Figures every system draws: loss over steps, accuracy per stage, grouped bars, trajectories.
A system's own figures are in its folder (figures.py); they draw with the `plt` set up here."""
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
