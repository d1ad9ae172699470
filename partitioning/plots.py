"""Plots of the partitioning step: the elbow (inertia against K) used by ``--k auto``."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path


def plot_elbow(
    ks: Sequence[int], inertias: Sequence[float], chosen_k: int, path: str | Path, *, title: str | None = None
) -> Path:
    """Save the inertia curve (log scale) with the chosen K marked, as a PNG at ``path``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    path = Path(path)
    fig, ax = plt.subplots(figsize=(6, 4), dpi=120)
    try:
        ax.plot(list(ks), list(inertias), "o-", color="tab:blue", label="inertia (sample)")
        if chosen_k in ks:
            y = list(inertias)[list(ks).index(chosen_k)]
            ax.plot([chosen_k], [y], "o", ms=12, mfc="none", mec="tab:red", mew=2, label=f"elbow K={chosen_k}")
        ax.axvline(chosen_k, color="tab:red", ls="--", lw=1)
        ax.set_yscale("log")
        ax.set_xlabel("K (number of parts)")
        ax.set_ylabel("K-means inertia (sum of squared distances)")
        ax.set_title(title or "Elbow of the K-means inertia curve (Kneedle on log inertia)")
        ax.grid(True, alpha=0.3)
        ax.legend()
        fig.tight_layout()
        fig.savefig(path, format="png")
    finally:
        plt.close(fig)
    return path
