"""The forest view's trees: a random forest and gradient-boosted trees on the same graph features, blended by rank.

Bagged and boosted trees err differently: the forest averages deep trees grown on bootstrap samples, the boosted
trees fit each residual in turn. The mean of their ranks scored above the forest alone on validation across the graphs
screened, and on graphs made after the rule that adopted it (BENCHMARKS.md, session 66). Each member's rank is read
off its scores' empirical CDF over the training graph (:class:`~gcad_dist.model.rank_blend.EmpiricalCDF`), so a
checkpoint scores new graphs as it scored the one it was fitted on. The features are computed once for both: the
forest reads two hops of neighbour means (:data:`~gcad_dist.model.forest.FOREST_HOPS`, since session 85), the boosted
trees the one-hop columns, a prefix of the forest's.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from gcad_dist.model.boosted_trees import BoostedTreesScorer, fit_boosted_trees
from gcad_dist.model.forest import (FOREST_HOPS, ForestScorer, feature_columns, fit_forest, graph_features,
                                    mean_leaf_value)
from gcad_dist.model.rank_blend import EmpiricalCDF

__all__ = ["TreeBlend", "blend_trees", "fit_scored_tree_blend", "fit_tree_blend", "trees_from_state"]


class TreeBlend(nn.Module):
    """A :class:`~gcad_dist.model.forest.ForestScorer` and a
    :class:`~gcad_dist.model.boosted_trees.BoostedTreesScorer` of the same input columns (the forest may read more
    hops of their neighbour means than the boosted trees' one), scored by the mean of their
    empirical CDFs (``cdfs``: the forest's, then the boosted trees'). ``forward(x, edge_index, ...)`` returns that
    mean [N]; :meth:`score` is the identity."""

    def __init__(self, forest: ForestScorer, boosted: BoostedTreesScorer, cdfs: list[EmpiricalCDF]) -> None:
        super().__init__()
        if (forest.in_features, forest.passthrough, forest.local) != (boosted.in_features, boosted.passthrough,
                                                                       boosted.local):
            raise ValueError("the forest and the boosted trees must read the same input columns")
        if len(cdfs) != 2:
            raise ValueError(f"two CDFs needed (the forest's, the boosted trees'), got {len(cdfs)}")
        self.forest = forest
        self.boosted = boosted
        self.cdfs = nn.ModuleList(cdfs)

    @property
    def in_features(self) -> int:
        return self.forest.in_features

    @property
    def passthrough(self) -> int:
        return self.forest.passthrough

    @property
    def local(self) -> bool:
        return self.forest.local

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> "TreeBlend":
        """The module whose ``state_dict()`` is ``state``."""
        def part(prefix: str) -> dict[str, Any]:
            return {k[len(prefix):]: v for k, v in state.items() if k.startswith(prefix)}

        cdfs = [EmpiricalCDF(c["values"], c["cdf"]) for c in (part(f"cdfs.{i}.") for i in range(2))]
        return cls(ForestScorer.from_state(part("forest.")), BoostedTreesScorer.from_state(part("boosted.")), cdfs)

    def member_scores(self, x: Tensor, edge_index: Tensor) -> tuple[Tensor, Tensor]:
        """(the forest's anomaly probability, the boosted trees' log-odds) of every node, float64 [N] each."""
        feats = graph_features(x, edge_index, self.in_features, self.passthrough, self.forest.hops, self.local)
        return _member_scores(self.forest, self.boosted, feats)

    def forward(self, x: Tensor, edge_index: Tensor, *args: Any, **kwargs: Any) -> Tensor:
        return self.blend(*self.member_scores(x, edge_index)).to(device=x.device)

    def blend(self, forest: Tensor, boosted: Tensor) -> Tensor:
        """The mean of the members' ranks (float32 [N]) from their scores (:meth:`member_scores`)."""
        return ((self.cdfs[0](forest).double() + self.cdfs[1](boosted).double()) / 2).to(torch.float32)

    def score(self, out: Tensor) -> Tensor:
        """The forward output itself (the mean of the two ranks) [N]."""
        return out


def _member_scores(forest: ForestScorer, boosted: BoostedTreesScorer, feats: Tensor) -> tuple[Tensor, Tensor]:
    """Both members' scores of :func:`~gcad_dist.model.forest.graph_features` rows ``feats`` of the forest's hops (the
    boosted trees read the one-hop prefix)."""
    one_hop = feats[:, :feature_columns(boosted.in_features, boosted.passthrough, local=boosted.local)]
    return mean_leaf_value(forest, feats, forest.proba), boosted.log_odds(one_hop)


def blend_trees(forest: ForestScorer, boosted: BoostedTreesScorer, feats: Tensor) -> TreeBlend:
    """The :class:`TreeBlend` of fitted trees, each member's CDF fitted on its scores of ``feats`` (the training
    graph's :func:`~gcad_dist.model.forest.graph_features`, every node)."""
    return _scored_blend(forest, boosted, feats)[0]


def _scored_blend(forest: ForestScorer, boosted: BoostedTreesScorer, feats: Tensor) -> tuple[TreeBlend, Tensor]:
    """:func:`blend_trees` and the blend's scores of the ``feats`` rows (its forward on the training graph)."""
    scores = _member_scores(forest, boosted, feats)
    blend = TreeBlend(forest, boosted, [EmpiricalCDF.fit(s.cpu().numpy()) for s in scores])
    return blend, blend.blend(*scores)


def fit_tree_blend(x: Tensor, edge_index: Tensor, y: Any, train: Any, seed: int, threads: int = 1,
                   in_features: int | None = None, passthrough: int = 0, forest_hops: int = FOREST_HOPS,
                   local: bool = False) -> TreeBlend:
    """Fit RF-Graph (:func:`~gcad_dist.model.forest.fit_forest`, on ``forest_hops`` hops of neighbour means) and the
    boosted trees (:func:`~gcad_dist.model.boosted_trees.fit_boosted_trees`, the library's defaults, one hop) on the
    ``train`` nodes, and their CDFs on every node (:func:`blend_trees`). ``forest_hops=1``: the blend before session
    85. ``local``: both also read the :data:`~gcad_dist.model.forest.LOCAL_COLUMNS` (part of the one-hop prefix).
    Raise ``ValueError`` if the training nodes hold a single class."""
    return fit_scored_tree_blend(x, edge_index, y, train, seed, threads, in_features, passthrough, forest_hops,
                                 local)[0]


def fit_scored_tree_blend(x: Tensor, edge_index: Tensor, y: Any, train: Any, seed: int, threads: int = 1,
                          in_features: int | None = None, passthrough: int = 0, forest_hops: int = FOREST_HOPS,
                          local: bool = False) -> tuple[TreeBlend, Tensor]:
    """:func:`fit_tree_blend` and the blend's scores of every node of the graph it was fitted on (float32 [N], its
    forward's), from the one pass over the graph features that the fit made (the forest view scores the graph it
    fitted on without a second pass: the local kNN distance alone takes about 20 s at 1M nodes)."""
    f = x.shape[1] - passthrough if in_features is None else int(in_features)
    feats = graph_features(x, edge_index, f, passthrough, forest_hops, local)
    rows = feats.numpy()  # one array for both fits (a view of ``feats``): the boosted trees read its one-hop prefix
    forest = fit_forest(x, edge_index, y, train, seed=seed, threads=threads, in_features=f, passthrough=passthrough,
                        feats=rows, hops=forest_hops, local=local)
    boosted = fit_boosted_trees(x, edge_index, y, train, seed, threads, f, passthrough,
                                feats=rows[:, :feature_columns(f, passthrough, local=local)], local=local)
    return _scored_blend(forest, boosted, feats)


def trees_from_state(state: dict[str, Any]) -> nn.Module:
    """The forest view's trees from a checkpoint's state: a :class:`TreeBlend` (since session 66) or a
    :class:`~gcad_dist.model.forest.ForestScorer` alone (checkpoints written before)."""
    if any(k.startswith("boosted.") for k in state):
        return TreeBlend.from_state(state)
    return ForestScorer.from_state(state)
