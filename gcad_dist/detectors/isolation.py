"""IsolationForest on the node features (label-free; scikit-learn's published defaults)."""

from __future__ import annotations

from typing import Any

import numpy as np

from gcad_dist.detectors.common import features

# Liu et al. (ICDM 2008) / scikit-learn defaults: 100 trees of 256-sample subsamples, all features.
SETTINGS: dict[str, Any] = {"n_estimators": 100, "max_samples": "auto", "max_features": 1.0, "bootstrap": False}


def fit_score(data: Any, split: Any, seed: int, threads: int = 1, **_: Any) -> np.ndarray:
    """Fit on every node's features; score = the negated ``score_samples`` (higher = more anomalous)."""
    from sklearn.ensemble import IsolationForest

    from gcad_dist.feature_view import isolation_scores

    x = features(data)
    forest = IsolationForest(**SETTINGS, random_state=seed, n_jobs=max(1, threads)).fit(x)
    return isolation_scores(forest, x, threads)
