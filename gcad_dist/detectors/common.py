"""Shared helpers of the reference detectors: sparse adjacency, neighbour means, degrees."""

from __future__ import annotations

from typing import Any

import numpy as np
import scipy.sparse as sp


def adjacency(data: Any) -> sp.csr_matrix:
    """0/1 CSR adjacency ``A[dst, src]`` of ``data.edge_index`` (messages src -> dst; duplicates count once)."""
    n = int(data.num_nodes)
    ei = data.edge_index.detach().cpu().numpy()
    a = sp.csr_matrix((np.ones(ei.shape[1], dtype=np.float64), (ei[1], ei[0])), shape=(n, n))
    a.sum_duplicates()
    a.data[:] = 1.0
    return a


def neighbour_mean(data: Any, x: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(mean of the neighbours' features [N, F], degree [N]); isolated nodes get a zero mean."""
    a = adjacency(data)
    x = data.x.detach().cpu().numpy().astype(np.float64) if x is None else x
    deg = np.asarray(a.sum(axis=1)).ravel()
    mean = np.asarray(a @ x) / np.maximum(deg, 1.0)[:, None]
    return mean, deg


def features(data: Any) -> np.ndarray:
    """Node features as float64 NumPy [N, F]."""
    return data.x.detach().cpu().numpy().astype(np.float64)
