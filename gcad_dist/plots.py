"""PNG plots of supervised training: loss / validation curves, ROC and precision-recall curves."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from sklearn.metrics import average_precision_score, precision_recall_curve, roc_auc_score, roc_curve  # noqa: E402

__all__ = ["plot_training_curves", "plot_roc_pr"]


def plot_training_curves(history: dict[str, list], path: str | Path, title: str = "", best_epoch: int | None = None) -> Path:
    """Training loss (and its parts) per epoch, validation AUROC / AUPRC per evaluation."""
    path = Path(path)
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 4))
    ax1.plot(history["epoch"], history["loss"], label="total")
    for k, v in history.items():
        if k.startswith("loss_") and len(v) == len(history["epoch"]):
            ax1.plot(history["epoch"], v, label=k[5:], alpha=0.7)
    ax1.set_xlabel("epoch")
    ax1.set_ylabel("training loss")
    ax1.legend()
    ax2.plot(history["eval_epoch"], history["val_auroc"], marker=".", label="val AUROC")
    ax2.plot(history["eval_epoch"], history["val_auprc"], marker=".", label="val AUPRC")
    if best_epoch:
        ax2.axvline(best_epoch, color="grey", ls="--", lw=1, label=f"selected (epoch {best_epoch})")
    ax2.set_xlabel("epoch")
    ax2.set_ylabel("validation metric")
    ax2.legend()
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def plot_roc_pr(y: Any, score: Any, path: str | Path, title: str = "test") -> Path:
    """ROC and precision-recall curves of ``score`` against labels ``y`` (1 = anomaly)."""
    y = np.asarray(y).astype(np.int64)
    score = np.asarray(score, dtype=np.float64)
    path = Path(path)
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 4))
    if y.min() != y.max():
        fpr, tpr, _ = roc_curve(y, score)
        prec, rec, _ = precision_recall_curve(y, score)
        ax1.plot(fpr, tpr, label=f"AUROC {roc_auc_score(y, score):.4f}")
        ax2.step(rec, prec, where="post", label=f"AUPRC {average_precision_score(y, score):.4f}")
    ax1.plot([0, 1], [0, 1], color="grey", ls="--", lw=1)
    ax1.set_xlabel("false positive rate")
    ax1.set_ylabel("true positive rate")
    ax1.set_title(f"ROC ({title})")
    ax1.legend(loc="lower right")
    base = y.mean() if y.size else 0.0
    ax2.axhline(base, color="grey", ls="--", lw=1, label=f"base rate {base:.3f}")
    ax2.set_xlabel("recall")
    ax2.set_ylabel("precision")
    ax2.set_title(f"precision-recall ({title})")
    ax2.legend(loc="upper right")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
