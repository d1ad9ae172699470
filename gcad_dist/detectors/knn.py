"""k-nearest-neighbour distance on the node features (label-free; PyOD ``KNN``'s published defaults).

A node's score is its Euclidean distance to its 5th nearest other node in z-scored feature space (Ramaswamy et al.,
SIGMOD 2000; PyOD's ``KNN(n_neighbors=5, method="largest")``, one of ADBench's strongest label-free detectors on tabular
data). It ignores the links: like IsolationForest it finds nodes far from every other node, not nodes unlike their
neighbours. The search is FAISS's exact flat L2 index over every node, or over 100,000 of them drawn with a fixed seed
on larger graphs (:func:`gcad_dist.feature_view.knn_scores`, which the label-free feature view adds where the links
say nothing about the features). The seed is unused (deterministic).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from gcad_dist.detectors.common import features
from gcad_dist.feature_view import KNN_NEIGHBOURS, KNN_REFERENCE

SETTINGS: dict[str, Any] = {"n_neighbors": KNN_NEIGHBOURS, "method": "largest", "metric": "euclidean",
                            "scale": "z-score", "reference_nodes": KNN_REFERENCE}


def fit_score(data: Any, split: Any, seed: int, threads: int = 1, **_: Any) -> np.ndarray:
    """Score every node by its distance to its ``n_neighbors``-th nearest other node in feature space."""
    from gcad_dist.feature_view import knn_scores

    return knn_scores(features(data), SETTINGS["n_neighbors"], SETTINGS["reference_nodes"], threads=threads)
