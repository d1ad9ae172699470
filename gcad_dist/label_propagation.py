"""Score smoothing with the training labels over the graph: the "Smooth" step of Correct and Smooth (Huang et al.,
"Combining Label Propagation and Simple Models Out-performs Graph Neural Networks", ICLR 2021) on an anomaly score.

A fitted detector's scores become ranks in (0, 1]; the labelled training nodes' ranks are replaced by their labels
(``clamp="both"``: an anomaly 1, a normal node 0; ``clamp="anomalies"``: anomalies only, normal nodes keep their
ranks); then a personalised-PageRank propagation over the in-neighbours' mean,

    G <- (1 - alpha) G0 + alpha * mean over in-neighbours of G      (``iterations`` times, from G = G0),

so that a node's score also carries its neighbourhood's, known labels included. A node without in-edges keeps its
own G0. Reads no label outside ``train``. Not part of any default: session 97 measured it on ``gcad_dist.train``'s
final scores (``bench.score_smoothing``) and every setting cost validation AUPRC (a = 0.1 up to -0.06, a = 0.5 up to
-0.47 on a generated graph, -0.22 on inj_cora; BENCHMARKS.md). Kept so that the bench reproduces those figures.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

CLAMPS = ("none", "anomalies", "both")


def ranks(scores: Any) -> np.ndarray:
    """Average ranks of ``scores`` scaled to (0, 1] (ties share their mean rank)."""
    from scipy.stats import rankdata

    s = np.asarray(scores, dtype=np.float64)
    if s.ndim != 1 or s.size == 0:
        raise ValueError(f"scores: a non-empty 1-D array needed, got shape {s.shape}")
    return rankdata(s) / s.size


def smooth_scores(scores: Any, edge_index: Any, y: Any, train: Any, alpha: float, clamp: str = "both",
                  iterations: int = 10) -> np.ndarray:
    """``scores`` (one per node) smoothed over the graph ``edge_index`` ([2, E], messages from row 0 to row 1) with
    the labels ``y`` of the nodes in ``train`` (bool mask; labels elsewhere are never read). Returns float64 [N]."""
    if not 0.0 <= alpha < 1.0:
        raise ValueError(f"alpha must be in [0, 1), got {alpha}")
    if clamp not in CLAMPS:
        raise ValueError(f"clamp must be one of {CLAMPS}, got {clamp!r}")
    g0 = ranks(scores)
    n = g0.size
    train, y = np.asarray(train, dtype=bool), np.asarray(y)
    if train.shape != (n,) or y.shape != (n,):
        raise ValueError(f"train and y: a mask and labels of {n} nodes needed, got shapes {train.shape}, {y.shape}")
    yt = y[train]
    idx = np.flatnonzero(train)
    if clamp == "both":
        g0[idx[yt == 1]], g0[idx[yt == 0]] = 1.0, 0.0
    elif clamp == "anomalies":
        g0[idx[yt == 1]] = 1.0
    if alpha == 0.0 or iterations <= 0:
        return g0
    ei = torch.as_tensor(np.asarray(edge_index), dtype=torch.long)
    src, dst = ei[0], ei[1]
    deg = torch.bincount(dst, minlength=n).to(torch.float64)
    lonely = deg == 0
    base = torch.as_tensor(g0)
    g = base.clone()
    for _ in range(int(iterations)):
        mean = torch.zeros(n, dtype=torch.float64).index_add_(0, dst, g[src]) / deg.clamp(min=1)
        mean = torch.where(lonely, g, mean)  # no in-neighbours: the node's own value
        g = (1.0 - alpha) * base + alpha * mean
    return g.numpy()
