"""Metrics against hand-computed cases and scikit-learn; per-graph mean vs pooled; Recall@K."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from sklearn.metrics import average_precision_score, roc_auc_score

from gcad_dist.metrics import auprc, auroc, evaluate, per_graph_metrics, recall_at_k


def test_hand_computed_small_case():
    y = [0, 0, 1, 1]
    s = [0.1, 0.4, 0.35, 0.8]
    # pairs (pos, neg): (0.35>0.1) (0.35<0.4) (0.8>0.1) (0.8>0.4) -> 3/4
    assert auroc(y, s) == pytest.approx(0.75)
    # ranking 0.8(+), 0.4(-), 0.35(+), 0.1(-): AP = (1/1 + 2/3) / 2
    assert auprc(y, s) == pytest.approx((1 + 2 / 3) / 2)
    # K = 2: top-2 = {0.8 (+), 0.4 (-)} -> 1 of 2 anomalies
    assert recall_at_k(y, s) == pytest.approx(0.5)
    assert recall_at_k(y, s, k=3) == pytest.approx(1.0)


def test_ties_count_half_in_auroc_and_grouped_in_ap():
    y = [1, 0, 1, 0]
    s = [0.5, 0.5, 0.5, 0.5]
    assert auroc(y, s) == pytest.approx(0.5)
    assert auprc(y, s) == pytest.approx(0.5)  # one threshold: precision 1/2 at recall 1


def test_perfect_and_inverted_scores():
    y = np.array([0, 1, 0, 1, 0])
    assert auroc(y, y * 2.0) == 1.0 and auprc(y, y * 2.0) == 1.0 and recall_at_k(y, y * 2.0) == 1.0
    assert auroc(y, -y * 2.0) == 0.0 and recall_at_k(y, -y * 2.0) == 0.0


def test_matches_sklearn_random_with_ties():
    rng = np.random.default_rng(3)
    for _ in range(20):
        n = int(rng.integers(5, 200))
        y = rng.integers(0, 2, n)
        if y.min() == y.max():
            continue
        s = rng.integers(0, 6, n).astype(float)  # many ties
        assert auroc(y, s) == pytest.approx(roc_auc_score(y, s), abs=1e-12)
        assert auprc(y, s) == pytest.approx(average_precision_score(y, s), abs=1e-12)


def test_accepts_torch_tensors():
    y = torch.tensor([0, 1, 1, 0])
    s = torch.tensor([0.2, 0.9, 0.3, 0.1])
    assert auroc(y, s) == pytest.approx(roc_auc_score(y.numpy(), s.numpy()))


def test_per_graph_mean_differs_from_pooled_and_skips_single_class_graphs():
    # graph 0: perfect ranking at low scores; graph 1: perfect ranking at high scores;
    # graph 2: only normal nodes (skipped in the per-graph mean).
    y = np.array([0, 0, 1, 0, 0, 1, 0, 0])
    s = np.array([0.0, 0.1, 0.2, 0.8, 0.9, 1.0, 0.3, 0.4])
    g = np.array([5, 5, 5, 7, 7, 7, 9, 9])
    pg = per_graph_metrics(y, s, g)
    assert pg["valid"].tolist() == [True, True, False]
    assert np.allclose(pg["auroc"][:2], 1.0) and math.isnan(pg["auroc"][2])
    r = evaluate(y, s, graph=g)
    assert r["auroc_graph_mean"] == pytest.approx(1.0)
    assert r["auprc_graph_mean"] == pytest.approx(1.0)
    assert r["recall_at_k_graph_mean"] == pytest.approx(1.0)
    assert r["graphs_used"] == 2 and r["graphs_skipped"] == 1
    # pooled: the graph-0 anomaly (0.2) ranks below 4 of the 6 normal nodes
    assert r["auroc"] == pytest.approx(roc_auc_score(y, s))
    assert r["auroc"] < 1.0
    assert r["auprc"] == pytest.approx(average_precision_score(y, s))


def test_per_graph_matches_sklearn_per_graph():
    rng = np.random.default_rng(0)
    n = 3000
    y = rng.integers(0, 2, n)
    s = rng.random(n)
    g = rng.integers(0, 30, n)
    pg = per_graph_metrics(y, s, g)
    for i, gid in enumerate(np.unique(g)):
        m = g == gid
        assert pg["auroc"][i] == pytest.approx(roc_auc_score(y[m], s[m]), abs=1e-12)
        assert pg["auprc"][i] == pytest.approx(average_precision_score(y[m], s[m]), abs=1e-12)
        k = int(y[m].sum())
        top = np.argsort(-s[m], kind="stable")[:k]
        assert pg["recall_at_k"][i] == pytest.approx(y[m][top].sum() / k)


def test_mask_selects_nodes():
    y = np.array([1, 0, 1, 0, 1, 0])
    s = np.array([0.9, 0.1, 0.0, 1.0, 0.8, 0.2])
    mask = np.array([True, True, False, False, True, True])
    r = evaluate(y, s, mask=mask)
    assert r["num_nodes"] == 4 and r["num_pos"] == 2
    assert r["auroc"] == pytest.approx(1.0)
    assert evaluate(y, s)["auroc"] < 1.0


def test_single_class_gives_nan():
    assert math.isnan(auroc([0, 0, 0], [0.1, 0.2, 0.3]))
    assert math.isnan(auprc([1, 1], [0.1, 0.2]))


def test_recall_at_k_ties_broken_by_node_order():
    y = [0, 1, 0, 0]
    s = [0.5, 0.5, 0.5, 0.1]  # K = 1: first of the tied nodes (node 0, normal) wins
    assert recall_at_k(y, s) == 0.0


def test_unknown_labels_are_left_out_of_evaluate():
    """y = -1 (unknown, partly labelled graphs): evaluate() scores only the labelled nodes; the 0/1-only
    functions refuse -1 rather than count it."""
    rng = np.random.default_rng(0)
    y = (rng.random(200) < 0.2).astype(np.int64)
    s = rng.random(200) + 0.5 * y
    known = rng.random(200) < 0.3
    yp = np.where(known, y, -1)
    r = evaluate(yp, s)
    assert r["num_nodes"] == int(known.sum()) and r["num_unlabelled"] == int((~known).sum())
    assert r["num_pos"] == int(y[known].sum())
    assert r["auroc"] == pytest.approx(roc_auc_score(y[known], s[known]), abs=1e-12)
    assert r["auprc"] == pytest.approx(average_precision_score(y[known], s[known]), abs=1e-12)
    half = np.arange(200) < 100
    r = evaluate(yp, s, mask=half)
    assert r["num_nodes"] == int((known & half).sum()) and r["num_unlabelled"] == int((~known & half).sum())
    g = np.arange(200) // 50
    r = evaluate(yp, s, g)
    assert r["graphs_total"] == 4 and r["graphs_used"] + r["graphs_skipped"] == 4
    with pytest.raises(ValueError, match="unknown labels"):
        auroc(yp, s)


def test_group_mean_phrase_says_what_the_mean_covers():
    from gcad_dist.metrics import group_mean_phrase

    y = np.array([1, 0, 0, 0, 1, 0, 0, 0, 0])
    s = np.array([0.9, 0.1, 0.2, 0.3, 0.8, 0.1, 0.5, 0.4, 0.3])
    g = np.array([0, 0, 0, 1, 1, 1, 2, 2, 2])
    r = evaluate(y, s, g)
    text = group_mean_phrase(r, "parts", total=25)
    assert text.startswith("mean over the 2 of 25 parts that contain both classes: AUROC 1.0000 AUPRC 1.0000")
    assert "of 3 graphs" in group_mean_phrase(r)
    assert "none of the 3 graphs" in group_mean_phrase(evaluate(np.zeros(9, np.int64), s, g))
