"""Supervised tree ensemble on ``[x, mean of neighbours' x, degree]`` (GADBench's strongest family).

GADBench (Tang et al., NeurIPS 2023) finds random forests and gradient-boosted trees on
neighbour-aggregated features (RF-Graph, XGB-Graph) the strongest fully supervised detectors. This is
RF-Graph with GADBench's defaults: ``RandomForestClassifier(n_estimators=100, criterion="gini",
max_features="sqrt")`` with the positive class weighted by #normal / #anomalous training nodes, fitted on
the train split only. As in GADBench's default setting the validation split is not used for fitting
(only reported); GADBench uses it solely for its separate random hyper-parameter search. The
aggregation is one mean over the neighbours plus the degree (instead of GADBench's parameter-free
multi-hop GIN sums). Score: predicted probability of the anomaly class.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from gcad_dist.cli import UsageError
from gcad_dist.detectors.common import features, neighbour_mean

SETTINGS: dict[str, Any] = {"model": "RandomForestClassifier", "n_estimators": 100, "criterion": "gini",
                            "max_features": "sqrt", "class_weight": "neg/pos on train", "inputs": "x|mean_nbr_x|degree"}


def graph_features(data: Any) -> np.ndarray:
    """``[x, mean of the neighbours' x, degree]`` per node (float32 [N, 2F + 1])."""
    x = features(data)
    mean, deg = neighbour_mean(data, x)
    return np.concatenate([x, mean, deg[:, None]], axis=1).astype(np.float32)


def fit_score(data: Any, split: Any, seed: int, threads: int = 1, label_inputs: bool = False, **_: Any) -> np.ndarray:
    """``label_inputs``: two more columns, the neighbours labelled anomalous in the train split
    (:func:`gcad_dist.data.label_inputs.neighbour_label_features`; one hop, so a node's own label never enters)."""
    from sklearn.ensemble import RandomForestClassifier

    if split is None or getattr(data, "y", None) is None:
        raise UsageError("--models trees: needs labels and a train split")
    feats = graph_features(data)
    if label_inputs:
        from gcad_dist.data.label_inputs import LABEL_COLUMNS, with_label_inputs

        feats = np.concatenate([feats, with_label_inputs(data, split.train).x[:, -LABEL_COLUMNS:].cpu().numpy()], axis=1)
    train = split.train.cpu().numpy()
    y = data.y.cpu().numpy().astype(np.int64)[train]
    n_pos = int((y == 1).sum())
    if n_pos == 0 or n_pos == y.size:
        raise UsageError("--models trees: the train split holds a single class")
    weight = np.where(y == 1, (y.size - n_pos) / n_pos, 1.0)
    forest = RandomForestClassifier(n_estimators=SETTINGS["n_estimators"], criterion=SETTINGS["criterion"],
                                    max_features=SETTINGS["max_features"], random_state=seed, n_jobs=max(1, threads))
    forest.fit(feats[train], y, sample_weight=weight)
    return forest.predict_proba(feats)[:, list(forest.classes_).index(1)]
