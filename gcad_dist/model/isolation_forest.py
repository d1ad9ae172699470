"""An isolation forest on a graph's raw features as a torch module: the label-free feature view's forest, kept.

The feature view (:mod:`gcad_dist.feature_view`) scores each node by how few random axis-aligned splits isolate it
(scikit-learn's ``IsolationForest``, Liu et al. ICDM 2008). Where a rule over a few heavy-tailed attributes labels
the anomalies, that label-free forest ranks them far better than GCCAD fitted on a few labels (BENCHMARKS.md, session
64), so ``gcad_dist.finetune`` offers it as one more candidate of its keep rule (session 65). A kept candidate is
written into the checkpoint and scored again by ``gcad_dist.score`` without pickle, so the fitted trees are held here
as tensors, walked as :class:`~gcad_dist.model.forest.ForestScorer` walks its trees
(:func:`~gcad_dist.model.forest.mean_leaf_value`).

The score is scikit-learn's ``-score_samples(x)``: ``2 ** (-E[h(x)] / c(psi))``, where ``h`` is the depth of the
leaf a row reaches plus ``c(n)`` of the training rows left in that leaf, ``c(n)`` the average path length of an
unsuccessful search in a binary tree of ``n`` nodes and ``psi`` the sub-sample size of each tree. In (0, 1]; higher
is more isolated. The module reads the first ``in_features`` columns of its input (the raw features: its own input
block of a :class:`~gcad_dist.model.candidate_ensemble.CandidateEnsemble`) and no link.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from gcad_dist.model.forest import mean_leaf_value, register_trees

__all__ = ["IsolationForestScorer", "average_path_length", "fit_isolation_forest"]


def average_path_length(n: Any) -> np.ndarray:
    """``c(n)``: the average path length of an unsuccessful search in a binary search tree of ``n`` nodes (0 for
    ``n <= 1``, 1 for ``n = 2``, else ``2 (ln(n - 1) + euler_gamma) - 2 (n - 1) / n``), float64, elementwise."""
    n = np.asarray(n, dtype=np.float64)
    out = np.zeros_like(n)
    out[n == 2] = 1.0
    big = n > 2
    out[big] = 2.0 * (np.log(n[big] - 1.0) + np.euler_gamma) - 2.0 * (n[big] - 1.0) / n[big]
    return out


class IsolationForestScorer(nn.Module):
    """A fitted isolation forest scoring rows by ``2 ** (-mean path length / c(max_samples))``.

    Buffers hold the trees' nodes, all trees in one flat array: ``feature`` (a column of the input) and
    ``threshold`` of each split (left iff ``value <= threshold``), ``left`` and ``right`` child indices (a leaf points
    to itself), ``path`` (a leaf's depth plus ``c`` of its training rows: the path length a row reaching it counts)
    and each tree's ``roots``. ``forward(x, ...)`` returns the score of every row [N] (float32); :meth:`score` is the
    identity, so the module is scored like GCCAD's models (``model.score(model(x, edge_index))``).
    """

    #: how ``model.pt`` names such a member of a candidate ensemble (:mod:`gcad_dist.checkpoint`)
    member_kind = "isolation-forest"

    def __init__(self, feature: Tensor, threshold: Tensor, left: Tensor, right: Tensor, path: Tensor, roots: Tensor,
                 max_samples: int, in_features: int) -> None:
        super().__init__()
        if feature.numel() and (int(feature.max()) >= in_features or int(feature.min()) < 0):
            raise ValueError(f"splits read columns {int(feature.min())}..{int(feature.max())}, the input has "
                             f"{in_features}")
        register_trees(self, feature, threshold, left, right, roots, path=path)
        self.max_samples = int(max_samples)
        self.in_features = int(in_features)

    @classmethod
    def from_sklearn(cls, forest: Any, in_features: int) -> "IsolationForestScorer":
        """The trees of a fitted scikit-learn ``IsolationForest`` on ``in_features`` columns."""
        subsample = int(getattr(forest, "_max_features", in_features)) != in_features
        parts: dict[str, list[np.ndarray]] = {k: [] for k in ("feature", "threshold", "left", "right", "path")}
        roots, offset = [], 0
        for est, cols in zip(forest.estimators_, forest.estimators_features_):
            t = est.tree_
            k = t.node_count
            leaf = t.children_left < 0
            own = np.arange(k) + offset
            local = np.where(leaf, 0, t.feature)
            parts["feature"].append(np.asarray(cols)[local] if subsample else local)
            parts["threshold"].append(np.where(leaf, 0.0, t.threshold))
            parts["left"].append(np.where(leaf, own, t.children_left + offset))
            parts["right"].append(np.where(leaf, own, t.children_right + offset))
            parts["path"].append(_node_depths(t.children_left, t.children_right)
                                 + average_path_length(t.n_node_samples))
            roots.append(offset)
            offset += k
        arrays = {k: torch.from_numpy(np.concatenate(v)) for k, v in parts.items()}
        return cls(**arrays, roots=torch.tensor(roots), max_samples=int(forest.max_samples_), in_features=in_features)

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> "IsolationForestScorer":
        """The module whose ``state_dict()`` is ``state`` (its buffers are the trees)."""
        need = {"feature", "threshold", "left", "right", "path", "roots", "_extra_state"}
        if not need <= set(state):
            raise ValueError(f"not an isolation forest's state (missing {', '.join(sorted(need - set(state)))})")
        extra = state["_extra_state"]
        return cls(*(state[k] for k in ("feature", "threshold", "left", "right", "path", "roots")),
                   max_samples=int(extra["max_samples"]), in_features=int(extra["in_features"]))

    def forward(self, x: Tensor, *args: Any, **kwargs: Any) -> Tensor:
        if x.shape[1] < self.in_features:
            raise ValueError(f"the isolation forest reads {self.in_features} columns, the input has {x.shape[1]}")
        mean = mean_leaf_value(self, x[:, :self.in_features].detach(), self.path)
        c = float(average_path_length(self.max_samples))
        score = torch.exp2(-mean / c) if c > 0 else torch.ones_like(mean)  # one training row: every score 1
        return score.to(device=x.device, dtype=torch.float32)

    def score(self, out: Tensor) -> Tensor:
        """The forward output itself (higher = more isolated) [N]."""
        return out

    def extra_repr(self) -> str:
        return (f"trees={self.roots.numel()}, nodes={self.feature.numel()}, max_samples={self.max_samples}, "
                f"in_features={self.in_features}")

    def get_extra_state(self) -> dict[str, int]:
        return {"max_samples": self.max_samples, "in_features": self.in_features}

    def set_extra_state(self, state: dict[str, int]) -> None:
        self.max_samples, self.in_features = int(state["max_samples"]), int(state["in_features"])


def _node_depths(left: np.ndarray, right: np.ndarray) -> np.ndarray:
    """Each node's depth in its tree (the root 0) from scikit-learn's child arrays (-1 at a leaf), one level a round."""
    depth = np.zeros(left.size, dtype=np.float64)
    level, d = np.array([0]), 0
    while level.size:
        depth[level] = d
        kids = np.concatenate([left[level], right[level]])
        level, d = kids[kids >= 0], d + 1
    return depth


def fit_isolation_forest(x: Any, seed: int | None = None, threads: int = 1) -> IsolationForestScorer:
    """The feature view's isolation forest (:data:`gcad_dist.feature_view.FOREST`, seed
    :data:`gcad_dist.feature_view.FOREST_SEED` unless given) fitted on every row of ``x`` [N, F] (float32, as
    scikit-learn casts it), as an :class:`IsolationForestScorer`: it scores ``x`` as
    :func:`gcad_dist.feature_view.forest_scores` does."""
    from gcad_dist.feature_view import FOREST_SEED, fit_sklearn_forest

    xs = np.asarray(x.detach().cpu().numpy() if torch.is_tensor(x) else x, dtype=np.float32)
    if xs.ndim != 2 or xs.shape[0] < 1 or xs.shape[1] < 1:
        raise ValueError(f"an isolation forest needs rows of features, got an array of shape {xs.shape}")
    forest = fit_sklearn_forest(xs, FOREST_SEED if seed is None else seed, threads)
    return IsolationForestScorer.from_sklearn(forest, xs.shape[1])
