"""``--normalize power``: z-score, Yeo-Johnson per column, z-score (partitioning/features.py)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from partitioning import features as feat


def _columns(n: int = 4000, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return np.c_[
        rng.lognormal(0.0, 2.0, n) * 1e3,  # heavy right tail (an amount)
        rng.normal(size=n),  # Gaussian
        rng.integers(0, 2, n),  # binary
        np.full(n, 7.0),  # constant
        -rng.exponential(size=n),  # left tail
        rng.poisson(0.3, n),  # sparse counts
    ].astype(np.float32)


def _skew(a: np.ndarray) -> np.ndarray:
    a = a.astype(np.float64) - a.mean(0)
    return (a**3).mean(0) / np.maximum((a**2).mean(0), 1e-300) ** 1.5


def test_yeo_johnson_matches_scikit_learn() -> None:
    from sklearn.preprocessing import PowerTransformer

    x = _columns().astype(np.float64)
    z = (x - x.mean(0)) / np.where(x.std(0) > 0, x.std(0), 1)
    cols = [0, 1, 2, 4, 5]
    pt = PowerTransformer(method="yeo-johnson", standardize=False).fit(z[:, cols])
    np.testing.assert_allclose(feat.yeo_johnson(z[:, cols], pt.lambdas_), pt.transform(z[:, cols]), rtol=1e-9,
                               atol=1e-9)
    # the exponents 0 and 2, where the formula switches to log1p
    w = np.linspace(-3, 3, 13)[:, None].repeat(2, 1)
    out = feat.yeo_johnson(w, np.array([0.0, 2.0]))
    np.testing.assert_allclose(out[w[:, 0] >= 0, 0], np.log1p(w[w[:, 0] >= 0, 0]))
    np.testing.assert_allclose(out[w[:, 1] < 0, 1], -np.log1p(-w[w[:, 1] < 0, 1]))


def test_power_normalize_what_it_changes_and_keeps() -> None:
    x = _columns()
    out, entry = feat.power_normalize(x, block_rows=333)
    std, _ = feat.normalize_store_features(x, "standard")
    assert out.dtype == np.float32 and out.flags.c_contiguous and np.isfinite(out).all()
    assert entry["normalize"] == "power" and len(entry["lambdas"]) == x.shape[1]
    # heavy tails pulled in: the skew of the amount falls from about 12 to about 1, the left tail's to near 0
    before, after = _skew(std[:, [0, 4]]), _skew(out[:, [0, 4]])
    assert abs(before[0]) > 5 and abs(after[0]) < 1.5
    assert abs(before[1]) > 1.5 and abs(after[1]) < 0.5
    # a Gaussian column is nearly unchanged, a binary one exactly (an increasing map of two values, z-scored)
    assert np.corrcoef(out[:, 1], std[:, 1])[0, 1] > 0.999
    np.testing.assert_allclose(out[:, 2], std[:, 2], atol=1e-5)
    # a constant column stays 0, with the identity exponent
    np.testing.assert_array_equal(out[:, 3], 0.0)
    assert entry["lambdas"][3] == 1.0
    # the order within each column is kept (the transform is increasing)
    for j in (0, 1, 4, 5):
        assert (np.diff(out[np.argsort(x[:, j], kind="stable"), j]) >= -1e-6).all()
    # z-scored at the end, and the same whatever the row blocks
    np.testing.assert_allclose(out[:, [0, 1, 2, 4, 5]].std(0, ddof=1), 1.0, rtol=1e-4)
    np.testing.assert_allclose(out.mean(0), 0.0, atol=1e-4)
    again, _ = feat.power_normalize(x, block_rows=4000)
    np.testing.assert_allclose(again, out, atol=1e-6)
    x0 = x.copy()
    feat.power_normalize(x)
    np.testing.assert_array_equal(x, x0)  # the input is not modified


def test_large_graphs_fit_on_a_seeded_sample(monkeypatch: pytest.MonkeyPatch) -> None:
    x = _columns(n=3000, seed=1)
    full = feat.power_normalize(x)[1]["lambdas"]
    monkeypatch.setattr(feat, "POWER_FIT_ROWS", 1000)
    a, b = feat.power_normalize(x)[1]["lambdas"], feat.power_normalize(x)[1]["lambdas"]
    assert a == b and a != full  # deterministic, and fitted on the sample
    np.testing.assert_allclose(a, full, atol=0.5)  # close to the full fit


def test_extreme_exponents_stay_finite() -> None:
    rng = np.random.default_rng(3)
    x = np.zeros((5000, 2), dtype=np.float32)
    x[rng.choice(5000, 3, replace=False), 0] = 1e6  # a few huge values in a column of zeros
    x[:, 1] = rng.pareto(0.5, 5000)  # heavier than any moment
    out, entry = feat.power_normalize(x)
    assert np.isfinite(out).all()
    assert all(abs(v) <= feat.POWER_LAMBDA_BOUND for v in entry["lambdas"])


def test_training_and_scoring_use_the_same_transform() -> None:
    from gcad_dist.cli import UsageError
    from gcad_dist.train import normalize_features

    x = _columns(n=1500)
    got = normalize_features(torch.from_numpy(x), "power")
    assert got.dtype == torch.float32
    np.testing.assert_allclose(got.numpy(), feat.power_normalize(x)[0], atol=1e-6)
    with pytest.raises(UsageError, match="power"):
        normalize_features(torch.from_numpy(x), "minmax")


def test_exponents_far_from_one_do_not_overflow_float32(monkeypatch: pytest.MonkeyPatch) -> None:
    """(1 + 10) ** 40 is beyond float32; the transform is rescaled in float64 before it is stored as float32."""
    x = np.r_[np.zeros(99), 1.0].astype(np.float32)[:, None].repeat(2, axis=1)  # z of the last row: about 10
    x[:, 1] = np.arange(100)
    monkeypatch.setattr(feat, "fit_power_lambdas", lambda z, seed=0: np.array([feat.POWER_LAMBDA_BOUND, 1.0]))
    out, entry = feat.power_normalize(x)
    assert np.isfinite(out).all() and out[-1, 0] > 9 and entry["std2"][0] > 1e30
    np.testing.assert_allclose(out[:, 1], (x[:, 1] - 49.5) / x[:, 1].std(ddof=1), rtol=1e-5)
