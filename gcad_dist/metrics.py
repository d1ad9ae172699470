"""Anomaly-detection metrics: AUROC, AUPRC (average precision) and Recall@K.

K is the number of true anomalies. Every metric is available pooled (all nodes together) and as
the mean over graphs (the paper's figure for many-small-graph data). All of it is vectorised over
nodes *and* graphs: per-graph figures come from one sort by ``(graph, score)``, not a loop.

Ties in the score are handled like scikit-learn: AUROC counts a tied positive/negative pair as
1/2 (average ranks); AUPRC evaluates precision/recall once per distinct threshold
(``sklearn.metrics.average_precision_score``). Recall@K breaks ties by the original node order.
A graph whose evaluated nodes are all one class has no AUROC/AUPRC/Recall@K: it is skipped in the
per-graph mean and counted in ``graphs_skipped``; the mean therefore covers only ``graphs_used`` graphs
and must be reported with that count (:func:`group_mean_phrase`).

Partly labelled graphs: :func:`evaluate` leaves out every node whose label is unknown (``y < 0``);
the lower-level functions take 0/1 labels only.
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["auroc", "auprc", "recall_at_k", "per_graph_metrics", "evaluate", "group_mean_phrase"]


def _np(a: Any) -> np.ndarray:
    if hasattr(a, "detach"):
        a = a.detach().cpu().numpy()
    return np.asarray(a)


def _prepare(y: Any, score: Any, graph: Any | None) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    y = _np(y).astype(np.int64).ravel()
    s = _np(score).astype(np.float64).ravel()
    if y.shape != s.shape:
        raise ValueError(f"labels {y.shape} and scores {s.shape} differ in length")
    if y.size and y.min() < 0:
        raise ValueError("labels must be 0/1 here; evaluate() leaves out unknown labels (-1)")
    if graph is None:
        g = np.zeros(y.size, dtype=np.int64)
    else:
        g = _np(graph).astype(np.int64).ravel()
        if g.shape != y.shape:
            raise ValueError(f"graph ids {g.shape} and labels {y.shape} differ in length")
    # Relabel graph ids to 0..G-1 (only graphs that have evaluated nodes).
    uniq, g = np.unique(g, return_inverse=True)
    return y, s, g.astype(np.int64), int(uniq.size)


def per_graph_metrics(y: Any, score: Any, graph: Any | None = None) -> dict[str, np.ndarray]:
    """AUROC, AUPRC and Recall@K of every graph at once.

    Args:
        y: 0/1 labels [n] (1 = anomaly).
        score: anomaly scores [n], higher = more anomalous.
        graph: graph id per node [n] (any integers) or None (one graph).

    Returns:
        dict of arrays over the G graphs present (ascending graph id): ``auroc``, ``auprc``,
        ``recall_at_k`` (NaN for single-class graphs), ``num_pos``, ``num_nodes`` and ``valid``
        (both classes present).
    """
    y, s, g, G = _prepare(y, score, graph)
    n = y.size
    n_nodes = np.bincount(g, minlength=G)
    n_pos = np.bincount(g, weights=y, minlength=G).astype(np.int64)
    n_neg = n_nodes - n_pos
    valid = (n_pos > 0) & (n_neg > 0)
    out = {
        "num_nodes": n_nodes,
        "num_pos": n_pos,
        "valid": valid,
        "auroc": np.full(G, np.nan),
        "auprc": np.full(G, np.nan),
        "recall_at_k": np.full(G, np.nan),
    }
    if n == 0:
        return out

    # ---- AUROC via average ranks within each graph (ascending score) ----
    order = np.lexsort((s, g))  # by graph, then score ascending
    gs, ss, ys = g[order], s[order], y[order]
    graph_start = np.concatenate([[0], np.cumsum(n_nodes)[:-1]])
    # tie groups: same graph and same score
    new_tie = np.ones(n, dtype=bool)
    new_tie[1:] = (gs[1:] != gs[:-1]) | (ss[1:] != ss[:-1])
    tie_id = np.cumsum(new_tie) - 1
    tie_first = np.flatnonzero(new_tie)
    tie_size = np.bincount(tie_id)
    pos_in_graph = np.arange(n) - graph_start[gs]  # 0-based rank within graph
    avg_rank = (pos_in_graph[tie_first] + (tie_size - 1) / 2.0 + 1.0)[tie_id]  # 1-based average rank
    rank_sum_pos = np.bincount(gs, weights=avg_rank * ys, minlength=G)
    with np.errstate(divide="ignore", invalid="ignore"):
        auc = (rank_sum_pos - n_pos * (n_pos + 1) / 2.0) / (n_pos * n_neg)
    out["auroc"] = np.where(valid, auc, np.nan)

    # ---- AUPRC: descending thresholds, one precision/recall point per distinct score ----
    order_d = np.lexsort((-s, g))
    gd, sd, yd = g[order_d], s[order_d], y[order_d]
    new_tie_d = np.ones(n, dtype=bool)
    new_tie_d[1:] = (gd[1:] != gd[:-1]) | (sd[1:] != sd[:-1])
    last_of_tie = np.ones(n, dtype=bool)
    last_of_tie[:-1] = new_tie_d[1:]
    tp_cum = np.cumsum(yd)
    tp_before_graph = np.concatenate([[0], np.cumsum(n_pos)[:-1]])
    tp_in_graph = tp_cum - tp_before_graph[gd]
    cnt_in_graph = np.arange(n) - graph_start[gd] + 1
    idx = np.flatnonzero(last_of_tie)
    prec = tp_in_graph[idx] / cnt_in_graph[idx]
    tp_at = tp_in_graph[idx]
    tp_prev = np.concatenate([[0], tp_at[:-1]])
    first_tie_of_graph = np.ones(idx.size, dtype=bool)
    first_tie_of_graph[1:] = gd[idx[1:]] != gd[idx[:-1]]
    tp_prev[first_tie_of_graph] = 0
    d_tp = tp_at - tp_prev
    ap_num = np.bincount(gd[idx], weights=prec * d_tp, minlength=G)
    with np.errstate(divide="ignore", invalid="ignore"):
        ap = ap_num / n_pos
    out["auprc"] = np.where(valid, ap, np.nan)

    # ---- Recall@K with K = number of anomalies of the graph (stable tie-break) ----
    order_k = np.lexsort((np.arange(n), -s, g))
    gk, yk = g[order_k], y[order_k]
    rank_k = np.arange(n) - graph_start[gk]
    hit = (rank_k < n_pos[gk]) & (yk == 1)
    with np.errstate(divide="ignore", invalid="ignore"):
        rec = np.bincount(gk, weights=hit, minlength=G) / n_pos
    out["recall_at_k"] = np.where(valid, rec, np.nan)
    return out


def auroc(y: Any, score: Any) -> float:
    """Area under the ROC curve (NaN if only one class is present)."""
    return float(per_graph_metrics(y, score)["auroc"][0]) if _np(y).size else float("nan")


def auprc(y: Any, score: Any) -> float:
    """Average precision (area under the precision-recall curve, sklearn's step definition)."""
    return float(per_graph_metrics(y, score)["auprc"][0]) if _np(y).size else float("nan")


def recall_at_k(y: Any, score: Any, k: int | None = None) -> float:
    """Share of all anomalies that are among the ``k`` top-scored nodes (``k`` defaults to #anomalies)."""
    y_np = _np(y).astype(np.int64).ravel()
    n_pos = int(y_np.sum())
    if k is None:
        return float(per_graph_metrics(y_np, score)["recall_at_k"][0]) if y_np.size else float("nan")
    if n_pos == 0:
        return float("nan")
    s = _np(score).astype(np.float64).ravel()
    top = np.lexsort((np.arange(s.size), -s))[: int(k)]
    return float(y_np[top].sum() / n_pos)


def evaluate(y: Any, score: Any, graph: Any | None = None, mask: Any | None = None) -> dict[str, float]:
    """Pooled AUROC / AUPRC / Recall@K, plus per-graph means when ``graph`` is given.

    Only nodes with a known label are evaluated: nodes with ``y < 0`` (unknown) are left out, as are
    nodes outside ``mask``.

    Args:
        y, score: labels (1 = anomaly, 0 = normal, -1 = unknown) and scores over all nodes.
        graph: graph id per node, or None.
        mask: bool mask of the nodes to evaluate (e.g. the test split), or None for all.

    Returns:
        ``{"auroc", "auprc", "recall_at_k", "num_nodes", "num_pos", "num_unlabelled"}`` (``num_nodes``:
        the evaluated, labelled nodes; ``num_unlabelled``: nodes in ``mask`` left out for an unknown
        label) and, with ``graph``, ``auroc_graph_mean``, ``auprc_graph_mean``,
        ``recall_at_k_graph_mean`` (means over the ``graphs_used`` graphs whose evaluated nodes hold
        both classes), ``graphs_used``, ``graphs_skipped`` (graphs with a single class among the
        evaluated nodes) and ``graphs_total`` (graphs with at least one evaluated node).
    """
    y_np, s_np = _np(y).ravel(), _np(score).ravel()
    g_np = None if graph is None else _np(graph).ravel()
    m = np.ones(y_np.size, dtype=bool) if mask is None else _np(mask).astype(bool).ravel()
    known = m & (y_np >= 0)
    unlabelled = int(np.count_nonzero(m)) - int(np.count_nonzero(known))
    if unlabelled or mask is not None:
        y_np, s_np = y_np[known], s_np[known]
        g_np = None if g_np is None else g_np[known]
    pooled = per_graph_metrics(y_np, s_np, None)
    res: dict[str, float] = {
        "auroc": float(pooled["auroc"][0]) if y_np.size else float("nan"),
        "auprc": float(pooled["auprc"][0]) if y_np.size else float("nan"),
        "recall_at_k": float(pooled["recall_at_k"][0]) if y_np.size else float("nan"),
        "num_nodes": int(y_np.size),
        "num_pos": int(np.asarray(y_np, dtype=np.int64).sum()),
        "num_unlabelled": unlabelled,
    }
    if g_np is not None:
        pg = per_graph_metrics(y_np, s_np, g_np)
        v = pg["valid"]
        for key in ("auroc", "auprc", "recall_at_k"):
            res[f"{key}_graph_mean"] = float(pg[key][v].mean()) if v.any() else float("nan")
        res["graphs_used"] = int(v.sum())
        res["graphs_skipped"] = int((~v).sum())
        res["graphs_total"] = int(v.size)
    return res


def group_mean_phrase(m: dict[str, Any], unit: str = "graphs", total: int | None = None) -> str:
    """The per-group mean of :func:`evaluate` said with what it covers, e.g.
    ``mean over the 5 of 25 parts that contain both classes: AUROC 0.8123 AUPRC 0.3011``.

    ``total`` is the number of groups (default ``graphs_total``: groups with an evaluated node).
    """
    used = int(m.get("graphs_used", 0))
    total = int(m.get("graphs_total", used) if total is None else total)
    if used == 0:
        return f"none of the {total} {unit} contains both classes: no mean"
    return (f"mean over the {used} of {total} {unit} that contain both classes: "
            f"AUROC {m['auroc_graph_mean']:.4f} AUPRC {m['auprc_graph_mean']:.4f}")
