"""The feature view: an isolation forest on a graph's raw features, added to the label-free score where it
corroborates it.

The label-free recipe contrasts each node with its context (its neighbours, or its two-hop ball): it sees a node
that disagrees with the nodes around it. It hardly sees a node that agrees with its neighbours in all but a few
attributes and is extreme in those (camouflaged fraud: a shared shift in a few columns), which an isolation forest
on the features finds. Added always, the forest costs the graphs where its outliers are normal nodes (tolokers,
inj_cora: AUROC 0.36-0.39 alone, BENCHMARKS.md session 35). So it is added only where it *corroborates* the
contrast, no label read:

* ``c`` = the forest's AUROC for the contrast's most confident nodes (the top :data:`TOP_SHARE` of the scores,
  at least :data:`MIN_TOP` of them) against all other nodes: do the two views agree on what stands out?
* when ``c >= CORROBORATION``, the score is the sum of both scores' robust z-scores
  (:func:`gcad_dist.model.loose_context.robust_z`); otherwise the contrast's score as it is.

Where the forest ranks the contrast's top nodes high, its other outliers (the camouflaged nodes the contrast misses)
are likely anomalies too; where it ranks them at or below chance, its outliers are something else. The threshold
was set on 22 graphs and checked on graphs made after it was fixed (BENCHMARKS.md, session 50).

Since session 52 the view also joins where the graph says nothing about the features
(:func:`feature_assortativity` below :data:`ASSORTATIVITY`): where a column's values at the two ends of an edge are
no more alike than at two random nodes, a node's context is a random sample of the graph, the contrast compares it
with the graph at large, and nothing can corroborate the forest (camouflaged fraud linked at random; books, whose
columns have no correlation across its edges). The forest has a fixed seed, and the edges are sampled with a fixed
seed, so a checkpoint scores a graph the same way twice. Everything here is NumPy over the nodes at once.

Since session 88 that second case adds a different feature-space score: each node's distance to its
:data:`KNN_NEIGHBOURS`-th nearest node in z-scored feature space (:func:`knn_scores`; PyOD's ``KNN`` defaults), not
the forest's. With no context to corroborate it, the view's only evidence is a global outlier score, and the distance
is the stronger one there: +0.072 AUROC / +0.088 AUPRC over six random-linked generated graphs made after the rule,
+0.046 AUROC on books' training and validation nodes (10 of 10 seeds; BENCHMARKS.md, session 88). Where the forest
corroborates the contrast it stays: the distance misses anomalies whose features copy another node's (injected
contextual anomalies), which the forest finds.
"""

from __future__ import annotations

import logging
import math
from typing import Any

import numpy as np

log = logging.getLogger(__name__)

#: Liu et al. (ICDM 2008) / scikit-learn's defaults, as the harness's ``iforest`` detector
FOREST = {"n_estimators": 100, "max_samples": "auto", "max_features": 1.0, "bootstrap": False}
#: the forest's seed (fixed: a checkpoint scores a graph the same way twice)
FOREST_SEED = 0
#: rows of a block of :func:`isolation_scores` (one thread scores one block at a time)
FOREST_ROWS = 65_536
#: the contrast's most confident nodes whose rank under the forest is measured
TOP_SHARE = 0.01
#: fewer top nodes than this (graphs under 1,000 nodes): too few to measure, the view stays off
MIN_TOP = 10
#: the forest's AUROC for the contrast's top nodes from which the two views are fused
CORROBORATION = 0.75
#: the graph's :func:`feature_assortativity` below which the view joins without corroboration (session 52: at most
#: 0.04 on graphs linked at random or whose columns do not follow the links, 0.097 and above on every other graph)
ASSORTATIVITY = 0.06
#: the quantile over the columns that :func:`feature_assortativity` reports (a graph whose links follow a few columns
#: only still says something about the features)
ASSORTATIVITY_QUANTILE = 0.9
#: edges sampled (fixed seed) to measure the assortativity: its noise is about 1 / sqrt(2 x edges)
ASSORTATIVITY_EDGES = 50_000
#: where the links say nothing, the view adds the distance to this nearest node (the node itself left out)
KNN_NEIGHBOURS = 5
#: nodes the distances are measured to: every node up to this many, else this many drawn with :data:`FOREST_SEED`
#: (an exact search costs N x reference distances: 1M nodes against 100k is minutes on one thread)
KNN_REFERENCE = 100_000
#: query rows per FAISS search call
KNN_ROWS = 16_384


def forest_scores(x: np.ndarray, seed: int = FOREST_SEED, threads: int = 1) -> np.ndarray:
    """Isolation forest outlier scores of every row of ``x`` [N, F] (higher = more isolated); float64 [N]."""
    x = np.asarray(x, dtype=np.float32)
    return isolation_scores(fit_sklearn_forest(x, seed, threads), x, threads)


def fit_sklearn_forest(x: np.ndarray, seed: int = FOREST_SEED, threads: int = 1) -> Any:
    """The view's scikit-learn ``IsolationForest`` (:data:`FOREST`, ``seed``) fitted on every row of ``x`` [N, F]."""
    from sklearn.ensemble import IsolationForest

    return IsolationForest(**FOREST, random_state=seed, n_jobs=max(1, threads)).fit(x)


def isolation_scores(forest: Any, x: np.ndarray, threads: int = 1) -> np.ndarray:
    """``-forest.score_samples(x)`` (higher = more isolated) of a fitted scikit-learn ``IsolationForest``, the rows
    scored in blocks of :data:`FOREST_ROWS` on ``threads`` threads. The same numbers as one call: a row's score does
    not depend on the others. scikit-learn's own ``n_jobs`` spreads the trees over threads, which did not scale
    (1M rows, fit and scores: 4.1-5.2 s on one thread, 4.2 s on two); blocks of rows did (scores: 3.7 s -> 1.9 s on
    two threads, session 53)."""
    from concurrent.futures import ThreadPoolExecutor

    n = x.shape[0]
    if threads <= 1 or n <= FOREST_ROWS:
        return -forest.score_samples(x)
    forest.set_params(n_jobs=1)  # each block on one thread: the trees are not spread again inside a block
    with ThreadPoolExecutor(max_workers=threads) as pool:
        parts = pool.map(lambda lo: forest.score_samples(x[lo:lo + FOREST_ROWS]), range(0, n, FOREST_ROWS))
        return -np.concatenate(list(parts))


def knn_scores(x: np.ndarray, k: int = KNN_NEIGHBOURS, reference: int = KNN_REFERENCE, seed: int = FOREST_SEED,
               threads: int = 1) -> np.ndarray:
    """Each row's Euclidean distance to its ``k``-th nearest other row of ``x`` [N, F] after a z-score of every column
    over the rows (float64 [N]; higher = farther from every other node). Up to ``reference`` rows the search is exact
    over all rows; above, over ``reference`` rows drawn with ``seed``. A row is never its own neighbour: where it is
    among the ``k + 1`` nearest it is dropped, else the ``k``-th is kept (an exact duplicate still counts). FAISS's
    exact flat L2 index (on a GPU where faiss-gpu sees one)."""
    import faiss

    from partitioning.features import feature_stats, standardize
    from partitioning.kmeans import gpu_flat_index

    n = x.shape[0]
    if n <= k:
        raise ValueError(f"knn: {n} nodes, need more than k={k}")
    mean, sd = feature_stats(x, threads=threads)
    z = standardize(x, mean, np.where(sd > 0, sd, 1.0), threads=threads)  # float32, C-contiguous
    ref = np.arange(n) if n <= reference else np.sort(np.random.default_rng(seed).choice(n, reference, replace=False))
    faiss.omp_set_num_threads(max(1, int(threads)))
    # on a GPU: the process's one set of FAISS GPU resources (partitioning.kmeans), not new ones per index
    index = gpu_flat_index(z.shape[1]) if faiss.get_num_gpus() > 0 else faiss.IndexFlatL2(z.shape[1])
    index.add(z[ref])
    out = np.empty(n, dtype=np.float64)
    for lo in range(0, n, KNN_ROWS):
        rows = np.arange(lo, min(n, lo + KNN_ROWS))
        d2, ids = index.search(z[rows], k + 1)
        own = (ref[np.maximum(ids, 0)] == rows[:, None]) & (ids >= 0)
        out[rows] = np.where(own.any(1), d2[:, k], d2[:, k - 1])
    return np.sqrt(np.maximum(out, 0.0))


def feature_assortativity(x: np.ndarray, edge_index: Any, max_edges: int = ASSORTATIVITY_EDGES,
                           seed: int = FOREST_SEED) -> float:
    """How much the graph's links say about its features: the :data:`ASSORTATIVITY_QUANTILE` quantile, over the
    columns of ``x`` [N, F] that vary, of the Spearman correlation of a column's values at the two ends of an edge
    (each edge both ways; self loops dropped; up to ``max_edges`` edges sampled with ``seed``). Near 0 when the links
    are random with respect to every column; nan without an edge or a varying column."""
    from scipy.stats import rankdata

    ei = np.asarray(edge_index.cpu() if hasattr(edge_index, "cpu") else edge_index).reshape(2, -1)
    keep = np.flatnonzero(ei[0] != ei[1])  # positions of the links that are not self loops (no copy of the links)
    if keep.size > max_edges:
        keep = keep[np.random.default_rng(seed).choice(keep.size, max_edges, replace=False)]
    if keep.size == 0:
        return float("nan")
    ei = ei[:, keep]
    nodes, local = np.unique(ei, return_inverse=True)
    local = local.reshape(2, -1)
    src, dst = np.concatenate([local[0], local[1]]), np.concatenate([local[1], local[0]])
    x = np.asarray(x)
    corr = []
    for lo in range(0, x.shape[1], 64):  # blocks of columns: [sampled nodes, 64] at a time
        r = rankdata(np.asarray(x[nodes, lo:lo + 64], dtype=np.float64), axis=0)  # ties: average ranks
        a, b = r[src], r[dst]
        a -= a.mean(0)
        b -= b.mean(0)
        den = np.sqrt((a * a).sum(0) * (b * b).sum(0))
        ok = den > 0
        corr.append((a * b).sum(0)[ok] / den[ok])
    corr = np.concatenate(corr)
    return float(np.quantile(corr, ASSORTATIVITY_QUANTILE)) if corr.size else float("nan")


def joins(corroboration: float, assortativity: float) -> bool:
    """The automatic view's rule: the forest joins where it corroborates the contrast (:data:`CORROBORATION`) or
    where the links say nothing about the features (:data:`ASSORTATIVITY`); a measure that is nan counts as not met."""
    return bool(corroboration >= CORROBORATION) or bool(assortativity < ASSORTATIVITY)


def top_count(n: int) -> int:
    """How many of ``n`` nodes make the contrast's top :data:`TOP_SHARE` (at least one)."""
    return max(1, math.ceil(TOP_SHARE * n))


def corroboration(scores: np.ndarray, forest: np.ndarray) -> tuple[float, int]:
    """(the forest's AUROC for the top :data:`TOP_SHARE` of ``scores`` against the other nodes, the number of top
    nodes); the AUROC is nan when fewer than :data:`MIN_TOP` nodes make the top. Ties of the forest count half."""
    from gcad_dist.metrics import auroc

    n = int(scores.shape[0])
    k = top_count(n)
    if k < MIN_TOP or n - k < 1:
        return float("nan"), k
    top = np.zeros(n, dtype=np.int64)
    top[np.argsort(-np.asarray(scores, dtype=np.float64), kind="stable")[:k]] = 1
    return auroc(top, forest), k


def fused(scores: np.ndarray, forest: np.ndarray, has: np.ndarray) -> np.ndarray:
    """The sum of the contrast's robust z-score (median and MAD over the nodes ``has`` with a context) and the
    forest's (over all nodes); float32 [N]."""
    import torch

    from gcad_dist.model.loose_context import robust_z

    s = torch.from_numpy(np.asarray(scores, dtype=np.float64))
    f = torch.from_numpy(np.asarray(forest, dtype=np.float64))
    z = robust_z(s, torch.from_numpy(np.asarray(has, dtype=bool))) + robust_z(f, torch.ones_like(f, dtype=torch.bool))
    return z.numpy().astype(np.float32)


def apply_feature_view(scores: np.ndarray, x_raw: np.ndarray, has: np.ndarray, threads: int = 1,
                       always: bool = False, edge_index: Any = None) -> tuple[np.ndarray, dict[str, Any]]:
    """The score with the feature view: ``scores`` (the contrast's, [N]) fused with the forest on ``x_raw`` [N, F]
    when the forest corroborates them; with :func:`knn_scores` when it does not but the graph's links ``edge_index``
    [2, E] say nothing about the features (:func:`feature_assortativity` below :data:`ASSORTATIVITY`; not measured
    when None); with the one of the two that those measures name if ``always``; else ``scores`` unchanged. Also the
    record of the choice (``used``, ``corroboration``, ``top_nodes``, ``threshold``, ``assortativity``,
    ``assortativity_threshold``, ``always``, ``score``: ``"isolation forest"``, ``"knn"`` or None) for logs and
    metrics files. ``has``: the nodes with a context."""
    if x_raw.shape[0] != scores.shape[0]:
        raise ValueError(f"feature view: {x_raw.shape[0]} feature rows for {scores.shape[0]} scores")
    k = top_count(int(scores.shape[0]))
    if k < MIN_TOP and not always:  # too few top nodes to measure: no forest to fit
        forest, c, a = None, float("nan"), float("nan")
    else:
        forest = forest_scores(x_raw, threads=threads)
        c, k = corroboration(scores, forest)
        a = float("nan") if edge_index is None else feature_assortativity(x_raw, edge_index)
    use = always or joins(c, a)
    # the links say nothing: the distance joins (a graph of at most k nodes has no k-th neighbour: the forest)
    uncorroborated = bool(a < ASSORTATIVITY) and not c >= CORROBORATION and scores.shape[0] > KNN_NEIGHBOURS
    info = {"used": use, "corroboration": None if math.isnan(c) else round(c, 4), "top_nodes": k,
            "threshold": CORROBORATION, "assortativity": None if math.isnan(a) else round(a, 4),
            "assortativity_threshold": ASSORTATIVITY, "always": always,
            "score": ("knn" if uncorroborated else "isolation forest") if use else None}
    if not use:
        return np.asarray(scores, dtype=np.float32), info
    added = knn_scores(x_raw, threads=threads) if uncorroborated else forest
    return fused(scores, added, has), info


def feature_view_phrase(info: dict[str, Any]) -> str:
    """The feature view's choice in words (:func:`apply_feature_view`'s record)."""
    c = info.get("corroboration")
    if info.get("always"):
        said = "n/a" if c is None else f"{c:.3f}"
        added = ("the robust z-score of each node's distance to its nearest nodes in feature space (the links say "
                 "nothing about the features)" if info.get("score") == "knn"
                 else "the isolation forest's robust z-score")
        return (f"feature view always on (--feature-view always): {added} is added to "
                f"the contrast's (corroboration {said}; the automatic view needs {CORROBORATION:g})")
    if c is None:
        return (f"feature view off: the top {100 * TOP_SHARE:g}% of the scores are {info['top_nodes']} node(s), "
                f"fewer than {MIN_TOP} to measure; the contrast's score as it is")
    head = (f"an isolation forest on the raw features ranks the contrast's top {100 * TOP_SHARE:g}% "
            f"({info['top_nodes']} nodes) at AUROC {c:.3f} against the other nodes")
    a = info.get("assortativity")
    if a is not None and a < ASSORTATIVITY and not c >= CORROBORATION:
        return (head + f"; the graph's links say nothing about the features (assortativity {a:.3f} < "
                f"{ASSORTATIVITY:g}: a node's context is a random sample of the graph), so the robust z-score of each "
                f"node's distance to its {KNN_NEIGHBOURS}th nearest node in feature space is added to the contrast's")
    if a is not None:
        head += f" (feature assortativity of the links {a:.3f})"
    if info["used"]:
        return head + f"; >= {CORROBORATION:g}: the views agree, so its robust z-score is added to the contrast's"
    return head + f"; < {CORROBORATION:g}, so the contrast's score is kept as it is"
