"""The automata system's own figures."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from internalize.plots import plt


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
