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
from gcad_dist.model.forest import FOREST_SETTINGS

SETTINGS: dict[str, Any] = FOREST_SETTINGS


def fit_score(data: Any, split: Any, seed: int, threads: int = 1, label_inputs: bool = False, **_: Any) -> np.ndarray:
    """``label_inputs``: two more columns, the neighbours labelled anomalous in the train split
    (:func:`gcad_dist.data.label_inputs.neighbour_label_features`; one hop, so a node's own label never enters)."""
    from gcad_dist.model.forest import fit_forest

    if split is None or getattr(data, "y", None) is None:
        raise UsageError("--models trees: needs labels and a train split")
    x, extra = data.x, 0
    if label_inputs:
        from gcad_dist.data.label_inputs import LABEL_COLUMNS, with_label_inputs

        x, extra = with_label_inputs(data, split.train).x, LABEL_COLUMNS
    try:
        forest = fit_forest(x, data.edge_index, data.y, split.train, seed=seed, threads=threads, passthrough=extra)
    except ValueError:
        raise UsageError("--models trees: the train split holds a single class") from None
    return forest.score(forest(x, data.edge_index)).numpy().astype(np.float64)
