"""The logicot system's own figures."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from internalize.plots import plt


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
