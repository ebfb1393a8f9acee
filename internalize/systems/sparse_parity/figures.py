"""The sparse_parity system's own figures."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from internalize.plots import plt


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
