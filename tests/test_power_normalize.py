"""``--normalize power``: z-score, Yeo-Johnson per column, z-score (partitioning/features.py)."""

from __future__ import annotations

from pathlib import Path

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


def _yeo_johnson_two_branches(z: np.ndarray, lambdas: np.ndarray) -> np.ndarray:
    """The former ``yeo_johnson``: each side of zero with its own formula, by boolean indexing."""
    z = np.asarray(z, dtype=np.float64)
    lam = np.broadcast_to(np.asarray(lambdas, dtype=np.float64), z.shape)
    pos = z >= 0
    out = np.empty_like(z)
    zp, lp = z[pos], lam[pos]
    near0 = np.abs(lp) < 1e-8
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        out[pos] = np.where(near0, np.log1p(zp), np.expm1(lp * np.log1p(zp)) / np.where(near0, 1.0, lp))
        zn, ln = -z[~pos], 2.0 - lam[~pos]
        near2 = np.abs(ln) < 1e-8
        out[~pos] = -np.where(near2, np.log1p(zn), np.expm1(ln * np.log1p(zn)) / np.where(near2, 1.0, ln))
    return out


def test_yeo_johnson_is_the_two_branch_formula_to_the_bit() -> None:
    rng = np.random.default_rng(0)
    z = np.r_[rng.normal(size=(500, 12)) * rng.lognormal(0, 2, (500, 12)), np.zeros((1, 12)), -np.zeros((1, 12)),
              np.full((1, 12), np.nan), np.full((1, 12), 1e300), np.full((1, 12), -1e300)]
    lam = np.array([0.0, 2.0, 1e-9, 2 - 1e-9, -3e-9, 1.0, 40.0, -40.0, 0.5, 1.7, 2 + 5e-9, -1.3])
    for zz, ll in ((z, lam), (z, 0.0), (z[:, 4], 2.0), (z[:-2].astype(np.float32), lam)):
        got, want = feat.yeo_johnson(zz, ll), _yeo_johnson_two_branches(zz, ll)
        assert got.dtype == np.float64 and np.array_equal(got.view(np.int64), want.view(np.int64))


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
    # close to the full fit (the sparse counts' exponent rests on their few non-zero values: within 15%)
    np.testing.assert_allclose(a, full, atol=0.5, rtol=0.15)


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
    monkeypatch.setattr(feat, "fit_power_lambdas", lambda z, **_: np.array([feat.POWER_LAMBDA_BOUND, 1.0]))
    out, entry = feat.power_normalize(x)
    assert np.isfinite(out).all() and out[-1, 0] > 9 and entry["std2"][0] > 1e30
    np.testing.assert_allclose(out[:, 1], (x[:, 1] - 49.5) / x[:, 1].std(ddof=1), rtol=1e-5)


# --- the exponent fit: a vectorised maximum likelihood against scikit-learn's column loop -----------------------


#: two fits of the same likelihood (summed in another order) stop within the search's tolerance of each other
_SAME_OPTIMUM = {"atol": 1e-6, "rtol": 1e-7}


def _sklearn_lambdas(sample: np.ndarray) -> np.ndarray:
    """The exponents of the former fit: scikit-learn's ``PowerTransformer`` (scipy's ``yeojohnson_normmax`` per
    column), clipped, 1 for a constant column."""
    import warnings

    from sklearn.preprocessing import PowerTransformer

    lambdas = np.ones(sample.shape[1])
    varying = np.ptp(sample, axis=0) > 0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        lambdas[varying] = PowerTransformer(method="yeo-johnson", standardize=False).fit(sample[:, varying]).lambdas_
    return np.clip(np.nan_to_num(lambdas, nan=1.0), -feat.POWER_LAMBDA_BOUND, feat.POWER_LAMBDA_BOUND)


def _llf(z: np.ndarray, lambdas: np.ndarray) -> np.ndarray:
    """scipy's Yeo-Johnson log-likelihood of each column at its exponent."""
    from scipy import stats

    with np.errstate(all="ignore"):
        return np.array([stats.yeojohnson_llf(lam, z[:, j]) for j, lam in enumerate(lambdas)])


def _zscore(x: np.ndarray) -> np.ndarray:
    """The first step of ``power_normalize``, in float64."""
    mean, std = feat.feature_stats(x)
    return feat.standardize(x, mean, np.where(std > 0, std, 1.0)).astype(np.float64)


def _shapes(n: int = 3000, seed: int = 4) -> np.ndarray:
    rng = np.random.default_rng(seed)
    words = (rng.random((n, 40)) < 0.02) * rng.integers(1, 4, (n, 40))  # a bag of words, rows normalised
    bow = words / np.maximum(words.sum(1, keepdims=True), 1)
    return np.c_[
        rng.lognormal(0.0, 1.0, n),
        rng.lognormal(2.0, 0.4, n),
        rng.exponential(3.0, n),
        rng.poisson(0.5, n),
        rng.poisson(8.0, n),
        bow[:, :3],  # mostly zero
        rng.normal(5.0, 2.0, n),
        -rng.lognormal(0.0, 1.5, n),  # all negative
        rng.standard_t(3, n),
        rng.pareto(1.5, n),
    ]


def _mle(z: np.ndarray) -> np.ndarray:
    """The maximum-likelihood exponents with every row in the fit (no majority value left out), clipped as
    ``fit_power_lambdas`` clips: what scikit-learn's ``PowerTransformer`` computes."""
    return np.clip(feat.yeo_johnson_mle(z), -feat.POWER_LAMBDA_BOUND, feat.POWER_LAMBDA_BOUND)


def _assert_agrees_with_sklearn(z: np.ndarray, got: np.ndarray) -> None:
    ref = _sklearn_lambdas(z)
    assert got.shape == ref.shape and np.isfinite(got).all()
    interior = np.abs(ref) < feat.POWER_LAMBDA_BOUND
    np.testing.assert_allclose(got[interior], ref[interior], atol=1e-4, rtol=0)
    l_got, l_ref = _llf(z, got), _llf(z, ref)
    varying = np.ptp(z, axis=0) > 0
    assert (l_got[varying] >= l_ref[varying] - 1e-9 * np.maximum(1.0, np.abs(l_ref[varying]))).all()


@pytest.mark.parametrize("zscore", [True, False])
def test_exponents_match_scikit_learn(zscore: bool) -> None:
    """The same optimum as scikit-learn's column loop (to 1e-4), and never a lower likelihood; raw columns
    too, where scipy's overflow-safe interval is narrower than +-POWER_LAMBDA_BOUND."""
    for x in (_columns().astype(np.float64), _shapes()):
        z = _zscore(x) if zscore else x
        _assert_agrees_with_sklearn(z, _mle(z))


def test_constant_and_missing_columns_keep_the_identity() -> None:
    rng = np.random.default_rng(0)
    z = np.c_[np.zeros(50), np.full(50, -3.0), rng.normal(size=50), rng.normal(size=50)]
    z[7, 3] = np.nan
    lam = feat.fit_power_lambdas(z)
    assert lam[0] == lam[1] == lam[3] == 1.0 and lam[2] != 1.0
    np.testing.assert_array_equal(feat.yeo_johnson_mle(z[:1]), 1.0)  # fewer than 2 rows


def test_masked_fit_is_the_fit_of_the_selected_rows() -> None:
    rng = np.random.default_rng(1)
    z = _zscore(np.c_[_columns(n=1200), _shapes(n=1200)])
    mask = rng.random(z.shape) < rng.uniform(0.2, 0.9, z.shape[1])  # different rows in each column
    mask[:, 3] = True  # the constant column
    mask[:, 1] = False
    mask[:2, 1] = True  # two rows: still fitted
    got = feat.yeo_johnson_mle(z, mask)
    want = np.array([feat.yeo_johnson_mle(z[mask[:, j], j : j + 1])[0] for j in range(z.shape[1])])
    np.testing.assert_allclose(got, want, **_SAME_OPTIMUM)
    assert got[3] == 1.0
    # an excluded NaN or outlier does not matter; an included NaN, one included row or constant values give 1
    z2, mask2 = z.copy(), mask.copy()
    z2[~mask2[:, 0], 0] = np.nan
    z2[np.flatnonzero(~mask2[:, 4])[:5], 4] = 1e6
    np.testing.assert_allclose(feat.yeo_johnson_mle(z2, mask2), got, **_SAME_OPTIMUM)
    mask2[:, 1] = False
    mask2[0, 1] = True
    z2[np.flatnonzero(mask2[:, 2])[0], 2] = np.nan
    z2[mask2[:, 5], 5] = 2.5
    again = feat.yeo_johnson_mle(z2, mask2)
    assert again[1] == again[2] == again[5] == 1.0
    np.testing.assert_allclose(feat.yeo_johnson_mle(z, np.ones(z.shape, dtype=bool)), feat.yeo_johnson_mle(z),
                               **_SAME_OPTIMUM)
    with pytest.raises(ValueError, match="mask shape"):
        feat.yeo_johnson_mle(z, mask[:, :3])


def test_column_blocks_do_not_change_the_exponents(monkeypatch: pytest.MonkeyPatch) -> None:
    z = _zscore(np.c_[_columns(n=2000), _shapes(n=2000)])
    mask = np.random.default_rng(2).random(z.shape) < 0.7
    whole, masked = feat.fit_power_lambdas(z), feat.yeo_johnson_mle(z, mask)
    for columns in (1, 3):
        monkeypatch.setattr(feat, "BLOCK_BYTES", 8 * z.shape[0] * columns)
        np.testing.assert_allclose(feat.fit_power_lambdas(z), whole, **_SAME_OPTIMUM)
        np.testing.assert_allclose(feat.yeo_johnson_mle(z, mask), masked, **_SAME_OPTIMUM)


def test_the_fit_holds_column_blocks_not_the_sample(monkeypatch: pytest.MonkeyPatch) -> None:
    """Working memory follows the column block, not the [n, F] sample in float64 (50,000 x 1433: 570 MB)."""
    import tracemalloc

    rng = np.random.default_rng(3)
    z = (rng.random((4000, 400)) < 0.05).astype(np.float32)
    z[:, :8] = rng.lognormal(size=(4000, 8))
    monkeypatch.setattr(feat, "BLOCK_BYTES", 8 * 4000 * 20)  # 20 columns: 640 kB per float64 array
    tracemalloc.start()
    try:
        lam = feat.fit_power_lambdas(z)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert np.isfinite(lam).all() and peak < 6 << 20  # the sample in float64 would be 12.8 MB


def test_books_exponents_match_scikit_learn(shared_data: Path) -> None:
    """A real graph (1418 x 21): counts, ratios and heavy tails."""
    path = shared_data / "books.npz"
    if not path.exists():
        pytest.skip(f"{path} is not here")
    z = _zscore(np.load(path)["x"])
    _assert_agrees_with_sklearn(z, _mle(z))


def test_a_majority_value_is_left_out_of_the_fit() -> None:
    """A value held by more than half of a column's rows (the zeros of sparse counts, of a bag of words) does not
    decide its exponent: the other values do, and the transform still maps the whole column, in order."""
    rng = np.random.default_rng(5)
    n = 4000
    words = (rng.random((n, 60)) < 0.03) * rng.integers(1, 4, (n, 60))
    bow = words / np.maximum(words.sum(1, keepdims=True), 1)  # row-normalised, as inj_cora's features
    counts = np.where(rng.random(n) < 0.7, 0.0, np.round(rng.lognormal(1.0, 1.0, n)))  # zero-inflated, heavy tail
    x = np.c_[bow[:, :2], counts, rng.lognormal(0.0, 1.0, n), rng.integers(0, 2, n)]
    z = _zscore(x)
    major = feat.majority_rows(z.T.copy())
    assert major is not None
    np.testing.assert_array_equal(major.T[:, :3], z[:, :3] == z[:, :3].min(0))  # the zeros (the columns' minimum)
    assert not major.T[:, 3].any()  # no majority in a continuous column
    lam = feat.fit_power_lambdas(z)
    full = _mle(z)
    # with the zeros in the fit, the exponents of the sparse columns are extreme; without, they are not
    assert (np.abs(full[:2]) > 15).all() and (np.abs(lam[:3]) < 8).all()
    for j in range(3):  # each is the fit of the column's other values alone
        rest = z[~major.T[:, j], j : j + 1]
        np.testing.assert_allclose(lam[j], feat.yeo_johnson_mle(rest)[0], **_SAME_OPTIMUM)
    np.testing.assert_allclose(lam[3], full[3], **_SAME_OPTIMUM)  # no majority: the usual fit
    out, _ = feat.power_normalize(x.astype(np.float32))
    for j in range(3):  # the zeros stay one value, below every other, and the order is kept
        zero = x[:, j] == 0
        assert np.ptp(out[zero, j]) == 0 and out[zero, j][0] < out[~zero, j].min()
        assert (np.diff(out[np.argsort(x[:, j], kind="stable"), j]) >= -1e-6).all()
    std, _ = feat.normalize_store_features(x.astype(np.float32), "standard")
    np.testing.assert_allclose(out[:, 4], std[:, 4], atol=1e-5)  # two values: a z-score, as before


def test_no_majority_when_no_value_holds_half_the_rows() -> None:
    v = np.array([[0.0, 0.0, 1.0, 2.0], [0.0, 0.0, 0.0, 5.0], [3.0, 3.0, 3.0, 3.0]])
    major = feat.majority_rows(v)
    np.testing.assert_array_equal(major, [[False] * 4, [True, True, True, False], [True] * 4])
    assert feat.majority_rows(v[:1]) is None  # half is not more than half
    assert feat.majority_rows(v[:, :2]) is None  # too few rows to tell


# --- stores and checkpoints written before the majority value left the fit keep their transform ------------------


def _sparse(n: int = 2000, seed: int = 6) -> np.ndarray:
    rng = np.random.default_rng(seed)
    words = (rng.random((n, 6)) < 0.05) * rng.integers(1, 4, (n, 6))
    return np.c_[words / np.maximum(words.sum(1, keepdims=True), 1), rng.lognormal(size=n)].astype(np.float32)


def test_power_before_session_40_is_read_as_it_was_written() -> None:
    x = _sparse()
    new, entry = feat.normalize_store_features(x, "power")
    old, old_entry = feat.normalize_store_features(x, feat.POWER_ALL_ROWS)
    assert entry["normalize"] == "power" and entry[feat.POWER_FIT_KEY] == feat.POWER_FIT
    assert old_entry["normalize"] == feat.POWER_ALL_ROWS and feat.POWER_FIT_KEY not in old_entry
    assert np.abs(new[:, :6] - old[:, :6]).max() > 0.1  # the sparse columns differ ...
    np.testing.assert_allclose(new[:, 6], old[:, 6], atol=1e-5)  # ... a column without a majority does not
    # a manifest of session 39 said "power" with no marker: it is the fit on every row
    legacy = {k: v for k, v in entry.items() if k != feat.POWER_FIT_KEY}
    assert feat.manifest_normalization({"features": legacy}) == feat.POWER_ALL_ROWS
    assert feat.manifest_normalization({"features": entry}) == "power"
    assert feat.manifest_normalization({"features": old_entry}) == feat.POWER_ALL_ROWS
    assert feat.manifest_normalization({"features": {"normalize": "standard"}}) == "standard"
    assert feat.manifest_normalization({}) == "none"
    assert feat.describe_normalization(feat.POWER_ALL_ROWS).startswith("power-transformed")


def test_checkpoints_record_which_power_they_were_trained_with(tmp_path: Path) -> None:
    """``save_model`` marks today's power; a checkpoint without the mark (session 39's) is scored with the fit on
    every row, so that its features are those it was trained on."""
    from gcad_dist.checkpoint import save_model
    from gcad_dist.model.gccad import GCCAD, GCCADConfig
    from torch_geometric.data import Data

    from gcad_dist.score import load_checkpoint_model, prepare_data
    from gcad_dist.train import normalize_features

    cfg = GCCADConfig(in_dim=7, hidden=8)
    save_model(tmp_path / "new", GCCAD(cfg), cfg, extra={"normalize": "power"})
    loaded = load_checkpoint_model(tmp_path / "new")
    assert loaded.normalize == "power"
    obj = torch.load(tmp_path / "new" / "model.pt", weights_only=False)
    obj["extra"].pop(feat.POWER_FIT_KEY)  # as session 39 wrote it
    (tmp_path / "old").mkdir()
    torch.save(obj, tmp_path / "old" / "model.pt")
    old = load_checkpoint_model(tmp_path / "old")
    assert old.normalize == feat.POWER_ALL_ROWS
    x = torch.from_numpy(_sparse())
    data = Data(x=x, edge_index=torch.tensor([[0, 1], [1, 0]]))
    want = normalize_features(x, feat.POWER_ALL_ROWS)
    torch.testing.assert_close(prepare_data(data, old).x, want)  # what scoring does (--normalize auto)
    torch.testing.assert_close(prepare_data(data, old, old.normalize).x, want)  # what fine-tuning does
    save_model(tmp_path / "std", GCCAD(cfg), cfg, extra={"normalize": "standard"})
    assert load_checkpoint_model(tmp_path / "std").normalize == "standard"
    np.testing.assert_allclose(normalize_features(x, feat.POWER_ALL_ROWS).numpy(),
                               feat.power_normalize(x.numpy(), exclude_majority=False)[0], atol=1e-6)
    assert not torch.allclose(normalize_features(x, feat.POWER_ALL_ROWS), normalize_features(x, "power"))


@pytest.mark.parametrize("how", ["power", "standard"])
def test_row_blocks_on_threads_give_the_same_features(how):
    """The normalisation's row blocks run on several threads: the same features and manifest, bit for bit."""
    rng = np.random.default_rng(4)
    x = np.concatenate([rng.lognormal(0, 1.5, (1000, 3)), rng.normal(0, 1, (1000, 2))], 1).astype(np.float32)
    one, one_entry = feat.normalize_store_features(x, how, block_rows=64, threads=1)
    many, many_entry = feat.normalize_store_features(x, how, block_rows=64, threads=3)  # 16 blocks, the last one short
    assert np.array_equal(one, many)
    assert one_entry == many_entry
    assert np.abs(one.mean(0)).max() < 1e-4
