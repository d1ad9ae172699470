"""Neighbour-cosine score: ``1 - cos(x_i, mean of i's neighbours' x)`` (label-free, no training).

The feature-space analogue of GCCAD's score ``1 - cos(h_i, q)`` with the node's own neighbourhood as
its context. Features are z-scored over all nodes first (``features="standard"`` in the registry), so
the cosine compares deviations from the global mean. Isolated nodes have no context: cosine 0,
score 1. The seed is unused (deterministic).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from gcad_dist.detectors.common import features, neighbour_mean

SETTINGS: dict[str, Any] = {"aggregate": "mean", "eps": 1e-12}


def fit_score(data: Any, split: Any, seed: int, **_: Any) -> np.ndarray:
    x = features(data)
    mean, _deg = neighbour_mean(data, x)
    return neighbour_cosine(x, mean)


def neighbour_cosine(x: np.ndarray, mean: np.ndarray) -> np.ndarray:
    """``1 - cos(x_i, mean_i)`` per row of ``x`` [N, F] and its neighbours' mean ``mean`` [N, F]; a zero row on either
    side (an isolated node's mean) has cosine 0, score 1. float64 [N]."""
    num = np.einsum("ij,ij->i", x, mean)
    den = np.linalg.norm(x, axis=1) * np.linalg.norm(mean, axis=1)
    cos = np.where(den > SETTINGS["eps"], num / np.maximum(den, SETTINGS["eps"]), 0.0)
    return 1.0 - cos
