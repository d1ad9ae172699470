"""Supervised tree ensembles on ``[x, mean of neighbours' x, degree]`` (GADBench's strongest family).

GADBench (Tang et al., NeurIPS 2023) finds random forests and gradient-boosted trees on
neighbour-aggregated features (RF-Graph, XGB-Graph) the strongest fully supervised detectors. This is
RF-Graph with GADBench's defaults: ``RandomForestClassifier(n_estimators=100, criterion="gini",
max_features="sqrt")`` with the positive class weighted by #normal / #anomalous training nodes, fitted on
the train split only. As in GADBench's default setting the validation split is not used for fitting
(only reported); GADBench uses it solely for its separate random hyper-parameter search. The
aggregation is the mean over the neighbours, the degree and, since session 85, the mean of those means over the
neighbours (GADBench's two parameter-free mean layers; :data:`gcad_dist.model.forest.FOREST_HOPS`). Score: predicted
probability of the anomaly class.

:func:`fit_score_boosted` is the family's other member, XGB-Graph's analogue (the ``boosted-trees`` detector):
scikit-learn's ``HistGradientBoostingClassifier`` with the library's defaults on the same features and training nodes
(:mod:`gcad_dist.model.boosted_trees`), at one hop. Score: the model's log-odds of the anomaly class.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from gcad_dist.cli import UsageError
from gcad_dist.model.boosted_trees import BOOSTED_SETTINGS as _BOOSTED
from gcad_dist.model.forest import FOREST_SETTINGS

SETTINGS: dict[str, Any] = FOREST_SETTINGS
BOOSTED_SETTINGS: dict[str, Any] = _BOOSTED


def fit_score(data: Any, split: Any, seed: int, threads: int = 1, label_inputs: bool = False, **_: Any) -> np.ndarray:
    """RF-Graph's scores. ``label_inputs``: two more columns, the neighbours labelled anomalous in the train split
    (:func:`gcad_dist.data.label_inputs.neighbour_label_features`; one hop, so a node's own label never enters)."""
    from gcad_dist.model.forest import fit_forest

    return _fit_score("trees", fit_forest, data, split, seed, threads, label_inputs)


def fit_score_boosted(data: Any, split: Any, seed: int, threads: int = 1, label_inputs: bool = False,
                      **_: Any) -> np.ndarray:
    """The boosted trees' scores (log-odds); ``label_inputs`` as :func:`fit_score`'s."""
    from gcad_dist.model.boosted_trees import fit_boosted_trees

    return _fit_score("boosted-trees", fit_boosted_trees, data, split, seed, threads, label_inputs)


def _fit_score(name: str, fit: Any, data: Any, split: Any, seed: int, threads: int, label_inputs: bool) -> np.ndarray:
    if split is None or getattr(data, "y", None) is None:
        raise UsageError(f"--models {name}: needs labels and a train split")
    x, extra = data.x, 0
    if label_inputs:
        from gcad_dist.data.label_inputs import LABEL_COLUMNS, with_label_inputs

        x, extra = with_label_inputs(data, split.train).x, LABEL_COLUMNS
    try:
        model = fit(x, data.edge_index, data.y, split.train, seed=seed, threads=threads, passthrough=extra)
    except ValueError:
        raise UsageError(f"--models {name}: the train split holds a single class") from None
    return model.score(model(x, data.edge_index)).numpy().astype(np.float64)
