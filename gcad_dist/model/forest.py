"""A random forest on ``[x, mean of the neighbours' x, degree, their neighbours' mean]`` as a torch module (GADBench's
RF-Graph).

GADBench (Tang et al., NeurIPS 2023) finds random forests on neighbour-aggregated features the strongest fully
supervised detectors on real fraud graphs. :func:`fit_forest` fits scikit-learn's ``RandomForestClassifier`` with
GADBench's defaults (100 trees, gini, ``max_features="sqrt"``, the anomalies weighted by #normal / #anomalous
training nodes) on the training nodes; :class:`ForestScorer` holds the fitted trees as tensors and scores any graph
the way ``predict_proba`` would, so that a checkpoint of ``gcad_dist.train`` can keep the forest beside GCCAD's
candidates (:class:`~gcad_dist.model.candidate_ensemble.CandidateEnsemble`) and score new graphs without pickle.

The forest reads two hops of neighbour means (:data:`FOREST_HOPS`), as GADBench's RF-Graph reads two parameter-free
mean layers; the boosted trees (:mod:`gcad_dist.model.boosted_trees`) read one. Since session 85 (BENCHMARKS.md): two
rules, each written before its graphs; the first, with both trees at two hops, failed (inj_cora -0.041 validation
AUROC); the second, with the forest alone at two hops, passed on graphs made after it.

The features are computed by :func:`graph_features`, in float64 and then cast to float32 as scikit-learn casts its
input, and each tree is walked level by level for all nodes at once (a gather per level, no loop over nodes).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

__all__ = ["FOREST_HOPS", "FOREST_SETTINGS", "LOCAL_COLUMNS", "ForestScorer", "feature_columns", "fit_forest",
           "fit_sklearn_forest", "graph_features", "mean_leaf_value",
           "register_trees", "register_walk_buffers"]

#: hops of neighbour means the forest reads (:func:`graph_features`' ``hops``); checkpoints written before session 85
#: hold forests of one hop, which still score as they were fitted
FOREST_HOPS = 2
#: GADBench's RF-Graph defaults (the ``trees`` reference detector and ``gcad_dist.train``'s forest alike); ``inputs``
#: names the columns of :func:`graph_features` at :data:`FOREST_HOPS` (a key of ``gcad_dist.quality``'s stored runs)
FOREST_SETTINGS: dict[str, Any] = {"model": "RandomForestClassifier", "n_estimators": 100, "criterion": "gini",
                                   "max_features": "sqrt", "class_weight": "neg/pos on train",
                                   "inputs": "|".join(["x", "mean_nbr_x", "degree"]
                                                      + [f"mean_nbr{k}_x" for k in range(2, FOREST_HOPS + 1)])}
#: the local-inconsistency columns :func:`graph_features` appends with ``local=True`` (label-free, one pass over the
#: links each): neighbour cosine and the local kNN distance, as the ``nbr-cosine`` and ``local-knn`` detectors score
LOCAL_COLUMNS = ("neighbour cosine", "local kNN distance")
# (node, tree) pairs walked at once: on a CPU small enough that a block's features stay in cache (2^18 pairs walked
# 1.4x faster than 2^22 on a 200k-node graph, BENCHMARKS.md session 62); on a GPU large, for fewer kernel launches
_BLOCK_CPU = 1 << 18
_BLOCK_GPU = 1 << 22


def graph_features(x: Tensor, edge_index: Tensor, in_features: int | None = None,
                   passthrough: int = 0, hops: int = 1, local: bool = False) -> Tensor:
    """``[x, mean of the neighbours' x, degree]`` per node (float32 [N, :func:`feature_columns`]), over the first
    ``in_features`` columns of ``x`` (default: all but the last ``passthrough``), then the last ``passthrough`` columns
    as they are, then with ``local`` the :data:`LOCAL_COLUMNS` of those ``in_features`` columns (``1 - cos(x_i, mean
    of the neighbours' x)`` and the distance to the 2nd most alike neighbour:
    :func:`gcad_dist.detectors.neighbor_cosine.neighbour_cosine`, :func:`gcad_dist.detectors.local_knn.local_knn_of`),
    then for ``hops`` > 1 the mean of the previous hop's means over the neighbours, hop 2 to ``hops``
    ([N, F] each; appended last, so that the one-hop columns are a prefix of every wider layout).
    Messages run ``src -> dst`` (``edge_index[0] -> edge_index[1]``); a repeated link counts once; a node without
    neighbours gets a zero mean and degree 0."""
    from types import SimpleNamespace

    from gcad_dist.detectors.common import adjacency

    if hops < 1:
        raise ValueError(f"hops must be at least 1, got {hops}")
    n = x.shape[0]
    f = x.shape[1] - passthrough if in_features is None else in_features
    xf = x[:, :f].detach().to("cpu", torch.float64)
    a = adjacency(SimpleNamespace(edge_index=edge_index, num_nodes=n))  # 0/1 CSR A[dst, src], a repeat counted once
    deg_np = np.asarray(a.sum(axis=1)).ravel()
    per = np.maximum(deg_np, 1.0)[:, None]
    mean_np = np.asarray(a @ xf.numpy()) / per  # sparse product
    deg = torch.from_numpy(deg_np)
    cols = [xf, torch.from_numpy(mean_np), deg[:, None]]
    if passthrough:
        cols.append(x[:, x.shape[1] - passthrough:].detach().to("cpu", torch.float64))
    if local:
        from gcad_dist.detectors.local_knn import local_knn_of
        from gcad_dist.detectors.neighbor_cosine import neighbour_cosine

        xn = xf.numpy()
        cols.append(torch.from_numpy(np.stack([neighbour_cosine(xn, mean_np), local_knn_of(xn, a)], axis=1)))
    for _ in range(hops - 1):
        mean_np = np.asarray(a @ mean_np) / per
        cols.append(torch.from_numpy(mean_np))
    return torch.cat(cols, dim=1).to(torch.float32)


def feature_columns(in_features: int, passthrough: int = 0, hops: int = 1, local: bool = False) -> int:
    """The number of :func:`graph_features` columns for these settings."""
    return (1 + hops) * in_features + 1 + passthrough + (len(LOCAL_COLUMNS) if local else 0)


def register_trees(trees: nn.Module, feature: Tensor, threshold: Tensor, left: Tensor, right: Tensor, roots: Tensor,
                   **values: Tensor) -> None:
    """Register on ``trees`` the buffers of its trees' nodes, all trees in one flat array: ``feature`` and
    ``threshold`` of each split, ``left`` and ``right`` (a leaf its own child), each tree's ``roots``, and the
    per-node float64 ``values`` named by their keywords (a leaf's vote share, contribution or path length); then
    :func:`register_walk_buffers`. Raise ``ValueError`` unless every array has one entry per node and there is a
    tree."""
    arrays = (feature, threshold, left, right, *values.values())
    sizes = {t.shape[0] for t in arrays}
    if len(sizes) != 1 or roots.numel() < 1:
        raise ValueError(f"one entry per tree node in every array and at least one tree needed, got lengths "
                         f"{sorted(sizes)} and {roots.numel()} roots")
    for name, t in (("feature", feature), ("left", left), ("right", right), ("roots", roots)):
        trees.register_buffer(name, t.to(torch.int64))
    trees.register_buffer("threshold", threshold.to(torch.float64))
    for name, t in values.items():
        trees.register_buffer(name, t.to(torch.float64))
    register_walk_buffers(trees)


def register_walk_buffers(trees: nn.Module) -> None:
    """Register on ``trees`` (a module with the buffers ``threshold``, ``left`` and ``right`` of its trees' nodes,
    all trees in one flat array, a leaf its own child) what :func:`mean_leaf_value` walks with, derived and not saved:
    which nodes are leaves; the children as one table (the right child first: a step reads ``[2 t + (x <= thr)]``, so
    a NaN goes right, as in scikit-learn); each threshold as the largest float32 at or below it, against which a
    float32 feature compares exactly as against the float64 threshold (scikit-learn's rule)."""
    left, right, threshold = trees.left, trees.right, trees.threshold
    trees.register_buffer("child", torch.stack([right, left], 1).reshape(-1), persistent=False)
    trees.register_buffer("is_leaf", left == torch.arange(left.numel(), device=left.device), persistent=False)
    thr = threshold.cpu().numpy()
    t32 = thr.astype(np.float32)
    up = t32.astype(np.float64) > thr
    t32[up] = np.nextafter(t32[up], np.float32(-np.inf))
    trees.register_buffer("threshold32", torch.from_numpy(t32).to(threshold.device), persistent=False)


def mean_leaf_value(trees: nn.Module, feats: Tensor, values: Tensor) -> Tensor:
    """The mean over ``trees``' trees of ``values`` (one per tree node, float64) at the leaf each row of ``feats``
    [N, D] reaches (float64 [N], on the trees' device). ``trees`` holds ``roots``, ``feature`` (a split's column of
    ``feats``) and :func:`register_walk_buffers`' buffers.

    Each (row, tree) pair walks down its tree one level a round and leaves the walk at its leaf, so the work is the
    sum of the paths' lengths, not the deepest tree's depth times the pairs; rows go in blocks, every tree at once."""
    dev = trees.threshold32.device
    feats = feats.to(dev, torch.float32)
    n, n_trees = feats.shape[0], trees.roots.numel()
    out = torch.empty(n, dtype=torch.float64, device=dev)
    block = max(1, (_BLOCK_GPU if dev.type == "cuda" else _BLOCK_CPU) // max(n_trees, 1))
    for lo in range(0, n, block):  # blocks of rows, every tree at once
        xb = feats[lo:lo + block]
        b, d = xb.shape
        flat = xb.reshape(-1)
        # the (row, tree) pairs still walking: where each is in its tree, its row's offset, its place
        at = trees.roots.repeat(b)
        base = torch.arange(b, device=dev).repeat_interleave(n_trees) * d
        place = torch.arange(b * n_trees, device=dev)
        final = at.clone()
        while at.numel():  # one level a round; a leaf is its own child, so a pair at a leaf may step in place
            at = trees.child[2 * at + (flat[base + trees.feature[at]] <= trees.threshold32[at])]
            walking = ~trees.is_leaf[at]
            if int(walking.sum()) < 0.7 * at.numel():  # drop the pairs at their leaves (work ~ the paths' lengths)
                done = ~walking
                final[place[done]] = at[done]
                at, base, place = at[walking], base[walking], place[walking]
        out[lo:lo + b] = values[final].view(b, n_trees).mean(dim=1)
    return out


class ForestScorer(nn.Module):
    """A fitted random forest scoring nodes by the mean over its trees of the anomaly class's leaf frequency.

    Each (node, tree) pair walks down its tree one level a round, and leaves the walk at its leaf, so the work is
    the sum of the paths' lengths, not the deepest tree's depth times the pairs.

    Buffers hold the trees' nodes, all trees in one flat array: ``feature`` and ``threshold`` of each split (a
    node goes left iff ``feature value <= threshold``, as in scikit-learn), ``left`` and ``right`` child indices
    (a leaf points to itself), ``proba`` (the leaf's anomaly share) and each tree's ``roots``.
    ``forward(x, edge_index, ...)`` returns the score of every node [N]; :meth:`score` is the identity, so the
    module is scored like GCCAD's models (``model.score(model(x, edge_index))``).
    """

    def __init__(self, feature: Tensor, threshold: Tensor, left: Tensor, right: Tensor, proba: Tensor,
                 roots: Tensor, depth: int, in_features: int, passthrough: int = 0, hops: int = 1,
                 local: bool = False) -> None:
        super().__init__()
        register_trees(self, feature, threshold, left, right, roots, proba=proba)
        self.depth = int(depth)
        self.in_features = int(in_features)
        self.passthrough = int(passthrough)
        self.hops = int(hops)
        self.local = bool(local)

    @classmethod
    def from_sklearn(cls, forest: Any, in_features: int, passthrough: int = 0, hops: int = 1,
                     local: bool = False) -> "ForestScorer":
        """The trees of a fitted binary ``RandomForestClassifier`` (classes 0 and 1), fitted on :func:`graph_features`
        with these settings."""
        classes = [int(c) for c in forest.classes_]
        if classes != [0, 1]:
            raise ValueError(f"a forest of classes 0 and 1 needed, got {classes}")
        parts: dict[str, list[np.ndarray]] = {k: [] for k in ("feature", "threshold", "left", "right", "proba")}
        roots, offset, depth = [], 0, 0
        for est in forest.estimators_:
            t = est.tree_
            k = t.node_count
            leaf = t.children_left < 0
            own = np.arange(k) + offset
            parts["feature"].append(np.where(leaf, 0, t.feature))
            parts["threshold"].append(np.where(leaf, 0.0, t.threshold))
            parts["left"].append(np.where(leaf, own, t.children_left + offset))
            parts["right"].append(np.where(leaf, own, t.children_right + offset))
            v = t.value[:, 0, :].astype(np.float64)
            parts["proba"].append(v[:, 1] / np.maximum(v.sum(axis=1), 1e-300))
            roots.append(offset)
            offset += k
            depth = max(depth, int(t.max_depth))
        arrays = {k: torch.from_numpy(np.concatenate(v)) for k, v in parts.items()}
        return cls(**arrays, roots=torch.tensor(roots), depth=depth, in_features=in_features, passthrough=passthrough,
                   hops=hops, local=local)

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> "ForestScorer":
        """The module whose ``state_dict()`` is ``state`` (its buffers are the trees; a state without ``hops``, written
        before session 85, is a one-hop forest; one without ``local``, written before session 89, reads no
        :data:`LOCAL_COLUMNS`)."""
        need = {"feature", "threshold", "left", "right", "proba", "roots", "_extra_state"}
        if not need <= set(state):
            raise ValueError(f"not a forest's state (missing {', '.join(sorted(need - set(state)))})")
        extra = state["_extra_state"]
        return cls(*(state[k] for k in ("feature", "threshold", "left", "right", "proba", "roots")),
                   depth=int(extra["depth"]), in_features=int(extra["in_features"]),
                   passthrough=int(extra.get("passthrough", 0)), hops=int(extra.get("hops", 1)),
                   local=bool(extra.get("local", False)))

    def forward(self, x: Tensor, edge_index: Tensor, *args: Any, **kwargs: Any) -> Tensor:
        feats = graph_features(x, edge_index, self.in_features, self.passthrough, self.hops, self.local)
        return mean_leaf_value(self, feats, self.proba).to(device=x.device, dtype=torch.float32)

    def score(self, out: Tensor) -> Tensor:
        """The forward output itself (the anomaly class's probability) [N]."""
        return out

    def extra_repr(self) -> str:
        return (f"trees={self.roots.numel()}, nodes={self.feature.numel()}, depth={self.depth}, "
                f"in_features={self.in_features}, passthrough={self.passthrough}, hops={self.hops}"
                + (", local=True" if self.local else ""))

    def get_extra_state(self) -> dict[str, int]:
        state = {"depth": self.depth, "in_features": self.in_features, "passthrough": self.passthrough,
                 "hops": self.hops}
        return {**state, "local": 1} if self.local else state  # without local columns: the state as before

    def set_extra_state(self, state: dict[str, int]) -> None:
        self.depth, self.in_features, self.passthrough = (int(state["depth"]), int(state["in_features"]),
                                                          int(state.get("passthrough", 0)))
        self.hops = int(state.get("hops", 1))  # absent: a forest of one hop (written before session 85)
        self.local = bool(state.get("local", False))  # absent: no local columns (written before session 89)


def fit_sklearn_forest(x: Tensor, edge_index: Tensor, y: Any, train: Any, seed: int, threads: int = 1,
                       in_features: int | None = None, passthrough: int = 0, feats: np.ndarray | None = None,
                       hops: int = FOREST_HOPS, local: bool = False) -> Any:
    """Fit RF-Graph (:data:`FOREST_SETTINGS`) on the ``train`` nodes' :func:`graph_features` of ``hops`` hops (or the
    given ``feats``, which must have that layout) and labels ``y`` (anomalies weighted by #normal / #anomalous; nodes
    of unknown label, ``y < 0``, left out): scikit-learn's ``RandomForestClassifier``. Raise ``ValueError`` if the
    training nodes hold a single class."""
    from sklearn.ensemble import RandomForestClassifier

    if feats is None:
        feats = graph_features(x, edge_index, in_features, passthrough, hops, local).numpy()
    f = x.shape[1] - passthrough if in_features is None else in_features
    if feats.shape[1] != feature_columns(f, passthrough, hops, local):
        raise ValueError(f"feats has {feats.shape[1]} columns, {feature_columns(f, passthrough, hops, local)} "
                         f"expected ({f} features, {passthrough} passed through, {hops} hops, local={local})")
    y_all = torch.as_tensor(y).cpu().numpy().astype(np.int64)
    tr = torch.as_tensor(train).cpu().numpy().astype(bool) & (y_all >= 0)
    yt = y_all[tr]
    n_pos = int((yt == 1).sum())
    if n_pos == 0 or n_pos == yt.size:
        raise ValueError("the training nodes hold a single class: a forest needs anomalies and normal nodes")
    weight = np.where(yt == 1, (yt.size - n_pos) / n_pos, 1.0)
    forest = RandomForestClassifier(n_estimators=FOREST_SETTINGS["n_estimators"], criterion=FOREST_SETTINGS["criterion"],
                                    max_features=FOREST_SETTINGS["max_features"], random_state=seed,
                                    n_jobs=max(1, threads))
    return forest.fit(feats[tr], yt, sample_weight=weight)


def fit_forest(x: Tensor, edge_index: Tensor, y: Any, train: Any, seed: int, threads: int = 1,
               in_features: int | None = None, passthrough: int = 0, feats: np.ndarray | None = None,
               hops: int = FOREST_HOPS, local: bool = False) -> ForestScorer:
    """:func:`fit_sklearn_forest`'s forest as a :class:`ForestScorer`."""
    forest = fit_sklearn_forest(x, edge_index, y, train, seed, threads, in_features, passthrough, feats, hops, local)
    f = x.shape[1] - passthrough if in_features is None else in_features
    return ForestScorer.from_sklearn(forest, f, passthrough, hops, local)
