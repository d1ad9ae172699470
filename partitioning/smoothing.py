"""Graph-smoothed features for clustering (``python -m partitioning.build --cluster-hops H``).

K-means on the raw features puts a node in the part its *own* features fit. Two things follow on real
graphs: most edges cross parts (the corrupt subgraphs keep a fifth of them or less), and a contextual
anomaly, a node whose features belong to another community than its neighbours', lands in the part of its
features, where its context looks like it. Clustering on features averaged over the node's neighbourhood
instead,

    x_c = (x + A x + A^2 x + ... + A^H x) / (H + 1),   A = D^-1 Adj (mean over the in-neighbours),

keeps linked nodes together (more edges inside parts) and puts a node with foreign features in its
neighbours' part, where its own features stand out against the part's context. Only the partition uses
``x_c``: the store keeps the (normalised) features ``x`` themselves. ``H = 0`` is the paper's K-means on
the features. Label-free; one sparse product per hop (scipy), float32, no loop over nodes or edges.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

__all__ = ["smooth_features"]


def smooth_features(x: np.ndarray, indptr: np.ndarray, indices: np.ndarray, hops: int) -> np.ndarray:
    """``(x + A x + ... + A^hops x) / (hops + 1)`` with A the row-normalised adjacency of the CSR graph
    (``indptr``/``indices``: row i lists the neighbours of node i); a node without neighbours keeps its own
    features in every term. ``hops = 0`` returns ``x`` itself. float32 [N, F]."""
    if hops < 0:
        raise ValueError(f"hops must be >= 0, got {hops}")
    x = np.asarray(x)
    if hops == 0:
        return x
    n = x.shape[0]
    indptr = np.asarray(indptr, dtype=np.int64)
    deg = np.diff(indptr)
    vals = np.repeat(1.0 / np.maximum(deg, 1), deg).astype(np.float32)
    a = sp.csr_matrix((vals, np.asarray(indices, dtype=np.int64), indptr), shape=(n, n))
    isolated = deg == 0
    cur = np.ascontiguousarray(x, dtype=np.float32)
    acc = cur.copy()
    for _ in range(hops):  # one sparse product per hop
        nxt = np.asarray(a @ cur, dtype=np.float32)
        if isolated.any():
            nxt[isolated] = cur[isolated]
        acc += nxt
        cur = nxt
    acc /= hops + 1
    return acc
