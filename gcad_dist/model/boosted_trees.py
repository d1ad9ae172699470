"""Gradient-boosted trees on ``[x, mean of the neighbours' x, degree]`` as a torch module (GADBench's XGB-Graph family).

GADBench (Tang et al., NeurIPS 2023) finds gradient-boosted trees on neighbour-aggregated features (XGB-Graph) the
strongest fully supervised detector on average, ahead of random forests (RF-Graph) on most graphs.
:func:`fit_boosted_trees` fits scikit-learn's ``HistGradientBoostingClassifier`` with the library's defaults (100
iterations of trees of at most 31 leaves, learning rate 0.1; early stopping on a tenth of the training nodes from
10,000 of them) on :func:`~gcad_dist.model.forest.graph_features` of the training nodes, without class weights (the
log loss ranks well as it is; weighted, it scored no better on validation, BENCHMARKS.md session 66). Five other
settings made no better blend with the forest on validation either (``bench.boosted_settings``, session 69). With one
training anomaly early stopping is turned off (its stratified hold-out needs two of each class).
:class:`BoostedTreesScorer` holds the fitted trees as tensors and scores any graph with the model's log-odds
(``decision_function``), walking every tree at once as :class:`~gcad_dist.model.forest.ForestScorer` does: a
checkpoint keeps the trees without pickle.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from gcad_dist.model.forest import graph_features, mean_leaf_value, register_trees

__all__ = ["BOOSTED_SETTINGS", "BoostedTreesScorer", "fit_boosted_trees", "fit_sklearn_boosted_trees"]

#: scikit-learn's defaults, as the ``boosted-trees`` reference detector and the forest view's trees use them
BOOSTED_SETTINGS: dict[str, Any] = {"model": "HistGradientBoostingClassifier", "params": "library defaults",
                                    "class_weight": None, "inputs": "x|mean_nbr_x|degree"}


class BoostedTreesScorer(nn.Module):
    """Fitted gradient-boosted trees scoring nodes by the model's log-odds: its baseline plus the sum over the trees
    of the leaf each node reaches.

    Buffers hold the trees' nodes, all trees in one flat array, as :class:`~gcad_dist.model.forest.ForestScorer`'s:
    ``feature`` and ``threshold`` of each split (left iff ``value <= threshold``, scikit-learn's rule), ``left`` and
    ``right`` (a leaf points to itself), ``value`` (a leaf's contribution, the learning rate applied) and each tree's
    ``roots``. ``forward(x, edge_index, ...)`` returns every node's log-odds [N]; :meth:`score` is the identity.
    A missing feature value goes right (the inputs are finite: the graph loaders reject NaN).
    """

    def __init__(self, feature: Tensor, threshold: Tensor, left: Tensor, right: Tensor, value: Tensor,
                 roots: Tensor, baseline: float, in_features: int, passthrough: int = 0, local: bool = False) -> None:
        super().__init__()
        register_trees(self, feature, threshold, left, right, roots, value=value)
        self.baseline = float(baseline)
        self.in_features = int(in_features)
        self.passthrough = int(passthrough)
        self.local = bool(local)

    @classmethod
    def from_sklearn(cls, model: Any, in_features: int, passthrough: int = 0,
                     local: bool = False) -> "BoostedTreesScorer":
        """The trees of a fitted binary ``HistGradientBoostingClassifier`` (classes 0 and 1, numeric features)."""
        classes = [int(c) for c in model.classes_]
        if classes != [0, 1]:
            raise ValueError(f"boosted trees of classes 0 and 1 needed, got {classes}")
        parts: dict[str, list[np.ndarray]] = {k: [] for k in ("feature", "threshold", "left", "right", "value")}
        roots, offset = [], 0
        for (tree,) in model._predictors:  # one tree an iteration for a binary model
            nodes = tree.nodes
            if np.any(nodes["is_categorical"]):
                raise ValueError("categorical splits are not supported (the graph features are numeric)")
            k = nodes.shape[0]
            leaf = nodes["is_leaf"].astype(bool)
            own = np.arange(k) + offset
            parts["feature"].append(np.where(leaf, 0, nodes["feature_idx"]).astype(np.int64))
            parts["threshold"].append(np.where(leaf, 0.0, nodes["num_threshold"]))
            parts["left"].append(np.where(leaf, own, nodes["left"].astype(np.int64) + offset))
            parts["right"].append(np.where(leaf, own, nodes["right"].astype(np.int64) + offset))
            parts["value"].append(np.where(leaf, nodes["value"], 0.0))
            roots.append(offset)
            offset += k
        arrays = {k: torch.from_numpy(np.concatenate(v)) for k, v in parts.items()}
        baseline = float(np.asarray(model._baseline_prediction, dtype=np.float64).ravel()[0])
        return cls(**arrays, roots=torch.tensor(roots), baseline=baseline, in_features=in_features,
                   passthrough=passthrough, local=local)

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> "BoostedTreesScorer":
        """The module whose ``state_dict()`` is ``state`` (its buffers are the trees; a state without ``local``, written
        before session 89, reads no local columns)."""
        need = {"feature", "threshold", "left", "right", "value", "roots", "_extra_state"}
        if not need <= set(state):
            raise ValueError(f"not boosted trees' state (missing {', '.join(sorted(need - set(state)))})")
        extra = state["_extra_state"]
        return cls(*(state[k] for k in ("feature", "threshold", "left", "right", "value", "roots")),
                   baseline=float(extra["baseline"]), in_features=int(extra["in_features"]),
                   passthrough=int(extra.get("passthrough", 0)), local=bool(extra.get("local", False)))

    def forward(self, x: Tensor, edge_index: Tensor, *args: Any, **kwargs: Any) -> Tensor:
        return self.log_odds(graph_features(x, edge_index, self.in_features, self.passthrough,
                                            local=self.local)).to(
            device=x.device, dtype=torch.float32)

    def log_odds(self, feats: Tensor) -> Tensor:
        """The model's log-odds of :func:`~gcad_dist.model.forest.graph_features` rows ``feats`` (float64 [N])."""
        return self.baseline + self.roots.numel() * mean_leaf_value(self, feats, self.value)

    def score(self, out: Tensor) -> Tensor:
        """The forward output itself (the log-odds of the anomaly class) [N]."""
        return out

    def extra_repr(self) -> str:
        return (f"trees={self.roots.numel()}, nodes={self.feature.numel()}, in_features={self.in_features}, "
                f"passthrough={self.passthrough}" + (", local=True" if self.local else ""))

    def get_extra_state(self) -> dict[str, Any]:
        state = {"baseline": self.baseline, "in_features": self.in_features, "passthrough": self.passthrough}
        return {**state, "local": 1} if self.local else state  # without local columns: the state as before

    def set_extra_state(self, state: dict[str, Any]) -> None:
        self.baseline, self.in_features, self.passthrough = (float(state["baseline"]), int(state["in_features"]),
                                                             int(state.get("passthrough", 0)))
        self.local = bool(state.get("local", False))  # absent: no local columns (written before session 89)


def fit_sklearn_boosted_trees(x: Tensor, edge_index: Tensor, y: Any, train: Any, seed: int, threads: int = 1,
                              in_features: int | None = None, passthrough: int = 0,
                              feats: np.ndarray | None = None, params: dict[str, Any] | None = None,
                              local: bool = False) -> Any:
    """Fit scikit-learn's ``HistGradientBoostingClassifier`` (:data:`BOOSTED_SETTINGS`, ``random_state=seed``) on the
    ``train`` nodes' :func:`~gcad_dist.model.forest.graph_features` (or the given ``feats``) and labels ``y`` (nodes of
    unknown label, ``y < 0``, left out), on ``threads`` OpenMP threads. ``params``: other keyword arguments of the
    classifier (None: the library's defaults, what the forest view fits; ``bench.boosted_settings`` compares
    others). Raise ``ValueError`` if the training nodes hold a single class."""
    from sklearn.ensemble import HistGradientBoostingClassifier
    from threadpoolctl import threadpool_limits

    if feats is None:
        feats = graph_features(x, edge_index, in_features, passthrough, local=local).numpy()
    y_all = torch.as_tensor(y).cpu().numpy().astype(np.int64)
    tr = torch.as_tensor(train).cpu().numpy().astype(bool) & (y_all >= 0)
    yt = y_all[tr]
    n_pos = int((yt == 1).sum())
    if n_pos == 0 or n_pos == yt.size:
        raise ValueError("the training nodes hold a single class: boosted trees need anomalies and normal nodes")
    kw = dict(params or {})
    stop = kw.get("early_stopping", "auto")  # scikit-learn's "auto": on from 10,000 training nodes
    if min(n_pos, yt.size - n_pos) < 2 and (stop is True or (stop == "auto" and yt.size > 10_000)):
        kw["early_stopping"] = False  # its hold-out is stratified: it needs two nodes of each class
    with threadpool_limits(limits=max(1, threads), user_api="openmp"):
        return HistGradientBoostingClassifier(random_state=seed, **kw).fit(feats[tr], yt)


def fit_boosted_trees(x: Tensor, edge_index: Tensor, y: Any, train: Any, seed: int, threads: int = 1,
                      in_features: int | None = None, passthrough: int = 0,
                      feats: np.ndarray | None = None, params: dict[str, Any] | None = None,
                      local: bool = False) -> BoostedTreesScorer:
    """:func:`fit_sklearn_boosted_trees`' model as a :class:`BoostedTreesScorer`."""
    model = fit_sklearn_boosted_trees(x, edge_index, y, train, seed, threads, in_features, passthrough, feats, params,
                                      local)
    f = x.shape[1] - passthrough if in_features is None else in_features
    return BoostedTreesScorer.from_sklearn(model, f, passthrough, local)
