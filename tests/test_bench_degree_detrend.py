"""bench.degree_detrend: both scores from the same saved scores, measured on the harness's nodes (no pre-training)."""

from __future__ import annotations

import numpy as np
import pytest

from bench.degree_detrend import DetrendConfig, compare, detrended, main, table
from gcad_dist.cli import UsageError


def _graph(tmp_path, n: int = 400, seed: int = 0):
    """A graph whose normal nodes' scores fall with degree; anomalies (a tenth, half of them hubs) sit above their own
    degree's normals. Saved scores for seeds 0 and 1 in the layout bench.labelfree_pretext writes."""
    rng = np.random.default_rng(seed)
    y = np.zeros(n, dtype=np.int64)
    y[rng.choice(n, n // 10, replace=False)] = 1
    hubs = np.flatnonzero(y == 1)[: n // 20]
    deg_target = np.where(np.isin(np.arange(n), hubs), 40, rng.integers(1, 6, n))
    src = np.repeat(np.arange(n), deg_target)
    dst = rng.integers(0, n, src.size)
    keep = src != dst
    ei = np.stack([np.concatenate([src[keep], dst[keep]]), np.concatenate([dst[keep], src[keep]])])
    x = rng.normal(size=(n, 4)).astype(np.float32)
    kinds = np.where(y == 1, np.where(np.isin(np.arange(n), hubs), 3, 2), 0)
    np.savez(tmp_path / "toy.npz", x=x, edge_index=ei, y=y, anomaly_type=kinds)
    deg = np.bincount(ei[1], minlength=n)
    (tmp_path / "lfp" / "B").mkdir(parents=True)
    for s in (0, 1):
        score = 1.0 - 0.2 * np.log1p(deg) + 0.01 * rng.normal(size=n) + 0.1 * y
        np.save(tmp_path / "lfp" / "B" / f"toy-{s}.npy", score.astype(np.float32))
    return deg


def test_detrended_is_the_models_rule_and_leaves_no_slope() -> None:
    deg = np.array([0, 1, 2, 3, 5, 8, 13, 21])
    s = (1.0 - 0.1 * np.log1p(deg)).astype(np.float32)
    d = detrended(s, deg)
    assert np.ptp(d[1:]) < 1e-5  # a pure trend leaves one level
    assert d[0] == pytest.approx(np.median(d[1:]))  # the lone node at the others' median


def test_compare_gains_on_hubs_hidden_by_the_trend_and_reads_the_chosen_nodes(tmp_path, capsys) -> None:
    _graph(tmp_path)
    cfg = DetrendConfig(scores=str(tmp_path / "lfp"), datasets=["toy"], data_dir=str(tmp_path), by_kind=True)
    recs = compare(cfg)
    assert [r["seed"] for r in recs] == [0, 1]
    for r in recs:
        assert r["slope"] < -0.1
        assert r["detrended"][0] > r["score"][0] + 0.05
        assert r["kinds"][3][1] > r["kinds"][3][0]  # the hubs gain
    test = compare(DetrendConfig(**{**cfg.__dict__, "on_test": True}))
    assert [r["score"] for r in test] != [r["score"] for r in recs]  # other nodes
    t = table(recs).splitlines()
    assert t[0].startswith("| graph (training + validation) |") and t[2].startswith("| toy | 2 |")
    assert "| toy | 3 |" in "\n".join(t)
    assert main(["--scores", str(tmp_path / "lfp"), "--datasets", "toy", "--data-dir", str(tmp_path), "--on-test"]) == 0
    assert "| graph (test) |" in capsys.readouterr().out


def test_missing_scores_or_graph_is_a_usage_error(tmp_path) -> None:
    _graph(tmp_path)
    with pytest.raises(UsageError, match="no other.npz"):
        compare(DetrendConfig(scores=str(tmp_path / "lfp"), datasets=["other"], data_dir=str(tmp_path)))
    with pytest.raises(UsageError, match="pre_degree_detrend:0"):
        compare(DetrendConfig(scores=str(tmp_path / "lfp"), variant="D", datasets=["toy"], data_dir=str(tmp_path)))
