"""The signature view: the label-free score's top nodes generalised by what their features share.

The label-free recipe contrasts each node with its context, and its score ranks some anomalies high and misses others
of the same kind: on reddit and books the contrast's top nodes turn out to be described, linearly, by their own
features, their neighbours' mean features and their degree (a classifier that never saw a node tells the node's
pseudo label at AUROC 0.92-0.96), while on inj_cora, tolokers and the generated graphs it cannot (0.50-0.79). Where
it can, the top nodes share a signature, and the other nodes that carry it are likely anomalies too: a self-training
step, no label read (BENCHMARKS.md, session 60):

* pseudo labels: the top :data:`TOP_SHARE` of the score = 1, the other nodes = 0;
* an L2 logistic regression (C = :data:`C`) on ``[z(x), mean of the neighbours' z(x), log(1 + degree)]`` (z over all
  nodes, the raw features), cross-fitted over :data:`FOLDS` folds: each node is scored by a model that never saw it
  (at most :data:`MAX_FIT_ROWS` nodes fit each fold's model, so a graph of millions costs what 50,000 nodes do);
* ``fit`` = the AUROC of those out-of-fold predictions against the pseudo labels;
* where ``fit >= FIT``, the score is the sum of both scores' ranks (each over ``N``); otherwise the score unchanged.

Folds and row samples have a fixed seed: a checkpoint scores a graph the same way twice. The model is linear and
its predictions are two matrix products over the nodes, in blocks.
"""

from __future__ import annotations

import logging
import math
from typing import Any

import numpy as np

log = logging.getLogger(__name__)

#: the share of the score's top nodes taken as pseudo anomalies
TOP_SHARE = 0.05
#: fewer pseudo anomalies than this (graphs under 200 nodes): too few to learn from, the view stays off
MIN_TOP = 10
#: cross-fitting folds
FOLDS = 5
#: inverse L2 strength of the logistic regression (scikit-learn's C)
C = 0.1
#: the out-of-fold AUROC against the pseudo labels from which the view joins (session 60: 0.917-0.957 on the design
#: graphs where it helped, at most 0.792 on the others)
FIT = 0.85
#: nodes that fit one fold's model at most (a uniform sample of the other folds, fixed seed)
MAX_FIT_ROWS = 50_000
#: the folds' and samples' seed
SEED = 0
#: rows per block of the features and the predictions
BLOCK_ROWS = 65_536


def _csr_in(edge_index: Any, n: int) -> Any:
    """The in-link adjacency as a SciPy CSR matrix [N, N]: row i holds the sources of the links into i, a repeated link
    counted as often as it appears (as the model's neighbour mean counts it), in float32 so that ``A @ z`` stays
    float32. :func:`gcad_dist.detectors.common.adjacency` is the 0/1, float64 one of the reference detectors."""
    import scipy.sparse as sp

    ei = np.asarray(edge_index.cpu() if hasattr(edge_index, "cpu") else edge_index).reshape(2, -1)
    ones = np.ones(ei.shape[1], dtype=np.float32)
    return sp.csr_matrix((ones, (ei[1], ei[0])), shape=(n, n))


def node_inputs(x_raw: np.ndarray, edge_index: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(z(x) [N, F], the in-neighbours' mean of z(x) [N, F] (zero without a neighbour), log(1 + in-degree) [N]),
    float32; z over all nodes (a constant column stays 0)."""
    x = np.asarray(x_raw, dtype=np.float32)
    mean = x.mean(0, dtype=np.float64)
    scale = np.where((std := x.std(0, dtype=np.float64)) > 0, std, 1.0)
    z = np.empty(x.shape, dtype=np.float32)
    for lo in range(0, x.shape[0], BLOCK_ROWS):  # blocks: no float64 copy of the whole matrix (5M x 64: 2.6 GB)
        z[lo:lo + BLOCK_ROWS] = (x[lo:lo + BLOCK_ROWS] - mean) / scale
    a = _csr_in(edge_index, x.shape[0])
    deg = np.asarray(a.sum(axis=1), dtype=np.float32).ravel()
    nbr = np.asarray(a @ z, dtype=np.float32) / np.maximum(deg, 1.0)[:, None]
    return z, nbr, np.log1p(deg)


def folds_of(pseudo: np.ndarray, folds: int = FOLDS, seed: int = SEED) -> np.ndarray:
    """A fold in ``0 .. folds - 1`` for each node, stratified by ``pseudo`` (each class dealt round the folds in a
    seeded random order); int64 [N]."""
    rng = np.random.default_rng(seed)
    fold = np.empty(pseudo.shape[0], dtype=np.int64)
    for cls in (0, 1):
        idx = np.flatnonzero(pseudo == cls)
        fold[rng.permutation(idx)] = np.arange(idx.size) % folds
    return fold


def out_of_fold(z: np.ndarray, nbr: np.ndarray, logdeg: np.ndarray, pseudo: np.ndarray,
                max_rows: int = MAX_FIT_ROWS, seed: int = SEED) -> np.ndarray:
    """Each node's predicted log-odds of its pseudo label from a logistic regression fitted on the other folds
    (:func:`folds_of`; at most ``max_rows`` of them, sampled with ``seed``); float64 [N]."""
    from sklearn.linear_model import LogisticRegression

    rng = np.random.default_rng(seed + 1)
    fold = folds_of(pseudo, seed=seed)
    out = np.empty(pseudo.shape[0], dtype=np.float64)
    f = z.shape[1]
    for k in range(FOLDS):
        rows = np.flatnonzero(fold != k)
        if rows.size > max_rows:
            rows = np.sort(rng.choice(rows, max_rows, replace=False))
        inputs = np.concatenate([z[rows], nbr[rows], logdeg[rows, None]], axis=1)
        model = LogisticRegression(C=C, max_iter=300).fit(inputs, pseudo[rows])
        w, b = model.coef_[0].astype(np.float32), float(model.intercept_[0])
        held = np.flatnonzero(fold == k)
        for lo in range(0, held.size, BLOCK_ROWS):
            r = held[lo:lo + BLOCK_ROWS]
            out[r] = z[r] @ w[:f] + nbr[r] @ w[f:2 * f] + logdeg[r] * w[-1] + b
    return out


def pseudo_labels(scores: np.ndarray) -> np.ndarray:
    """1 for the top :data:`TOP_SHARE` of ``scores`` (at least one node; ties broken by position), else 0; int64."""
    n = int(scores.shape[0])
    k = max(1, math.ceil(TOP_SHARE * n))
    pseudo = np.zeros(n, dtype=np.int64)
    pseudo[np.argsort(-np.asarray(scores, dtype=np.float64), kind="stable")[:k]] = 1
    return pseudo


def apply_signature_view(scores: np.ndarray, x_raw: np.ndarray, edge_index: Any,
                         always: bool = False) -> tuple[np.ndarray, dict[str, Any]]:
    """The score with the signature view: ``scores`` [N] plus the ranks of the cross-fitted classifier of their top
    nodes (both ranks over N) when the classifier tells those nodes at AUROC >= :data:`FIT` (or ``always``); else
    ``scores`` unchanged. Also the record of the choice (``used``, ``fit``, ``top_nodes``, ``threshold``, ``always``)
    for logs and metrics files. ``x_raw`` [N, F]: the raw features; ``edge_index`` [2, E]: the graph's links."""
    from scipy.stats import rankdata

    from gcad_dist.metrics import auroc

    n = int(scores.shape[0])
    if x_raw.shape[0] != n:
        raise ValueError(f"signature view: {x_raw.shape[0]} feature rows for {n} scores")
    pseudo = pseudo_labels(scores)
    k = int(pseudo.sum())
    info: dict[str, Any] = {"used": False, "fit": None, "top_nodes": k, "threshold": FIT, "always": always}
    if k < MIN_TOP or n - k < FOLDS:
        return np.asarray(scores, dtype=np.float32), info
    oof = out_of_fold(*node_inputs(x_raw, edge_index), pseudo)
    fit = auroc(pseudo, oof)
    info["fit"] = None if math.isnan(fit) else round(fit, 4)
    info["used"] = bool(always or fit >= FIT)
    if not info["used"]:
        return np.asarray(scores, dtype=np.float32), info
    combined = rankdata(np.asarray(scores, dtype=np.float64)) / n + rankdata(oof) / n
    return combined.astype(np.float32), info


def signature_view_phrase(info: dict[str, Any]) -> str:
    """The signature view's choice in words (:func:`apply_signature_view`'s record)."""
    fit = info.get("fit")
    if fit is None:
        return (f"signature view off: the top {100 * TOP_SHARE:g}% of the scores are {info['top_nodes']} node(s), "
                f"fewer than {MIN_TOP} to learn from; the score as it is")
    head = (f"a cross-fitted linear classifier of the score's top {100 * TOP_SHARE:g}% ({info['top_nodes']} nodes) "
            f"on the nodes' features, their neighbours' mean and degree tells them at AUROC {fit:.3f}")
    if info.get("always"):
        return head + " (--signature-view always): its rank is added to the score's"
    if info["used"]:
        return head + f"; >= {FIT:g}: they share a signature, so its rank is added to the score's"
    return head + f"; < {FIT:g}: no shared signature, the score as it is"
