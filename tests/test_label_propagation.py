"""gcad_dist.label_propagation (session 97): the Smooth step of Correct and Smooth on an anomaly score."""

from __future__ import annotations

import numpy as np
import pytest


def _path_graph(n: int) -> np.ndarray:
    """An undirected path 0 - 1 - ... - n-1, both directions."""
    a = np.arange(n - 1)
    return np.stack([np.concatenate([a, a + 1]), np.concatenate([a + 1, a])])


def test_ranks_scale_to_unit_interval_and_share_ties() -> None:
    from gcad_dist.label_propagation import ranks

    r = ranks([3.0, 1.0, 2.0, 2.0])
    assert r.tolist() == [1.0, 0.25, 0.625, 0.625]
    with pytest.raises(ValueError, match="non-empty 1-D"):
        ranks(np.zeros((2, 2)))


def test_without_smoothing_the_scores_keep_their_order() -> None:
    from gcad_dist.label_propagation import ranks, smooth_scores

    rng = np.random.default_rng(0)
    s = rng.normal(size=50)
    ei = _path_graph(50)
    y = np.zeros(50, dtype=int)
    out = smooth_scores(s, ei, y, np.zeros(50, bool), alpha=0.0, clamp="none")
    assert np.array_equal(out, ranks(s))


def test_a_neighbour_labelled_anomalous_lifts_a_node_above_its_twin() -> None:
    """Nodes 1 and 4 score alike; 1's neighbour 0 is a training anomaly, 4's neighbour 5 a training normal node (two
    separate pairs, 0-1 and 4-5, plus filler nodes): with smoothing 1 ranks above 4, and the clamp decides how far."""
    from gcad_dist.label_propagation import smooth_scores

    s = np.array([0.1, 0.5, 0.2, 0.3, 0.5, 0.35, 0.0, 0.4])
    ei = np.array([[0, 1, 4, 5, 2, 3], [1, 0, 5, 4, 3, 2]])
    y = np.array([1, 0, 0, 0, 0, 0, 0, 0])
    train = np.zeros(8, bool)
    train[[0, 5]] = True
    both = smooth_scores(s, ei, y, train, alpha=0.5, clamp="both")
    assert both[1] > both[4]
    fixed = smooth_scores(s, ei, y, train, alpha=0.5, clamp="both", iterations=60)  # converged: G = G0/2 + mean/2
    assert fixed[0] == pytest.approx(0.5 * 1.0 + 0.5 * fixed[1])  # the clamped anomaly, its neighbour's value mixed in
    anomalies = smooth_scores(s, ei, y, train, alpha=0.5, clamp="anomalies")
    assert anomalies[1] > anomalies[4]
    assert anomalies[4] > both[4]  # node 5's own rank stays with clamp=anomalies, pulled to 0 with both
    # a node without in-edges (6) keeps its own rank
    assert both[6] == pytest.approx(1 / 8)


def test_labels_outside_training_are_never_read() -> None:
    from gcad_dist.label_propagation import smooth_scores

    rng = np.random.default_rng(1)
    n = 200
    s = rng.normal(size=n)
    ei = rng.integers(0, n, size=(2, 1000))
    y = (rng.random(n) < 0.1).astype(int)
    train = rng.random(n) < 0.4
    flipped = y.copy()
    flipped[~train] = 1 - flipped[~train]
    for clamp in ("anomalies", "both"):
        a = smooth_scores(s, ei, y, train, alpha=0.3, clamp=clamp)
        b = smooth_scores(s, ei, flipped, train, alpha=0.3, clamp=clamp)
        assert np.array_equal(a, b)


def test_bad_settings_are_refused() -> None:
    from gcad_dist.label_propagation import smooth_scores

    ei = _path_graph(4)
    with pytest.raises(ValueError, match="alpha"):
        smooth_scores(np.arange(4.0), ei, np.zeros(4), np.zeros(4, bool), alpha=1.0)
    with pytest.raises(ValueError, match="clamp"):
        smooth_scores(np.arange(4.0), ei, np.zeros(4), np.zeros(4, bool), alpha=0.3, clamp="normals")
    with pytest.raises(ValueError, match="labels of 4 nodes"):
        smooth_scores(np.arange(4.0), ei, np.zeros(4), np.zeros(3, bool), alpha=0.3)
