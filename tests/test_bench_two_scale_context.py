"""bench.two_scale_context: the two-scale score from saved scores (no pre-training), and a local model's second score."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from bench.two_scale_context import TwoScaleConfig, main, robust_z, run, table, two_scale
from gcad_dist.cli import UsageError


def _graph(tmp_path, n: int = 300, seed: int = 0) -> np.ndarray:
    """A random graph; anomalies (a tenth) are seen by the 2-hop score only, a third of them by the 1-hop score too.
    Saved scores for seeds 0 and 1 in the layout the bench writes."""
    rng = np.random.default_rng(seed)
    y = np.zeros(n, dtype=np.int64)
    y[rng.choice(n, n // 10, replace=False)] = 1
    src = np.repeat(np.arange(n), rng.integers(1, 6, n))
    dst = rng.integers(0, n, src.size)
    keep = src != dst
    ei = np.stack([np.concatenate([src[keep], dst[keep]]), np.concatenate([dst[keep], src[keep]])])
    np.savez(tmp_path / "toy.npz", x=rng.normal(size=(n, 4)).astype(np.float32), edge_index=ei, y=y)
    (tmp_path / "ts").mkdir()
    for s in (0, 1):
        both = rng.normal(size=n) < 0.5
        s1 = rng.normal(size=n) + 3.0 * y * both
        s2 = rng.normal(size=n) + 3.0 * y
        np.savez(tmp_path / "ts" / f"toy-{s}.npz", s1=s1.astype(np.float32), s2=s2.astype(np.float32))
    return np.bincount(ei[1], minlength=n)


def test_robust_z_centres_and_scales_on_the_nodes_with_neighbours() -> None:
    s = np.array([100.0, 1.0, 2.0, 3.0, 4.0, 5.0])
    has = np.array([False, True, True, True, True, True])
    z = robust_z(s, has)
    assert z[0] == 0.0 and z[3] == 0.0  # the lone node at the median; the median node at 0
    assert z[4] == pytest.approx(1.0 / 1.4826)  # MAD of 1..5 is 1
    assert np.all(np.isfinite(robust_z(np.ones(4), np.ones(4, dtype=bool))))  # MAD 0: no division by zero


def test_two_scale_is_the_sum_of_both_detrended_scores_z() -> None:
    rng = np.random.default_rng(1)
    deg = rng.integers(0, 9, 50)
    s1, s2 = rng.normal(size=50), rng.normal(size=50)
    d1, d2, both = two_scale(s1, s2, deg)
    np.testing.assert_allclose(both, robust_z(d1, deg > 0) + robust_z(d2, deg > 0))
    x = np.log1p(deg[deg > 0])
    assert abs(np.polyfit(x, d1[deg > 0], 1)[0]) < 1e-4 and abs(np.polyfit(x, d2[deg > 0], 1)[0]) < 1e-4  # detrended


def test_run_tabulates_saved_scores_and_the_two_scale_score_gains_what_2_hops_see(tmp_path, capsys) -> None:
    _graph(tmp_path)
    cfg = TwoScaleConfig(out=str(tmp_path / "ts"), datasets=["toy"], seeds=[0, 1], data_dir=str(tmp_path),
                         no_train=True)
    recs = run(cfg)
    assert [r["seed"] for r in recs] == [0, 1]
    for r in recs:
        assert r["two-scale"][0] > r["1-hop"][0] + 0.05
    test = run(TwoScaleConfig(**{**cfg.__dict__, "on_test": True}))
    assert [r["1-hop"] for r in test] != [r["1-hop"] for r in recs]  # other nodes
    t = table(recs).splitlines()
    assert t[0].startswith("| graph (training + validation) |") and t[2].startswith("| toy | 2 |")
    assert main(["--out", str(tmp_path / "ts"), "--datasets", "toy", "--seeds", "0", "--data-dir", str(tmp_path),
                 "--no-train", "--on-test"]) == 0
    assert "| graph (test) |" in capsys.readouterr().out
    with pytest.raises(UsageError, match="no toy-2.npz"):
        run(TwoScaleConfig(**{**cfg.__dict__, "seeds": [2]}))
    with pytest.raises(UsageError, match="no other.npz"):
        run(TwoScaleConfig(**{**cfg.__dict__, "datasets": ["other"]}))


def test_a_one_hop_local_model_scores_with_the_two_hop_ball_too() -> None:
    """What score_both relies on: the local model's context_hops switched at scoring time gives the ball's score,
    different from the neighbours' and the same twice (fixed generator)."""
    from gcad_dist.model.gccad import GCCAD, GCCADConfig

    torch.manual_seed(0)
    n, f = 60, 5
    src = torch.randint(0, n, (240,))
    dst = torch.randint(0, n, (240,))
    ei = torch.stack([torch.cat([src, dst]), torch.cat([dst, src])])
    model = GCCAD(GCCADConfig(in_dim=f, hidden=8, contrast="local", loss="logistic", tau=0.2)).eval()
    x = torch.randn(n, f)
    with torch.no_grad():
        one = model.score(model(x, ei))
        model.config.context_hops = 2
        two, again = model.score(model(x, ei)), model.score(model(x, ei))
    assert one.shape == two.shape == (n,)
    assert not torch.allclose(one, two) and torch.equal(two, again)
