"""gcad_dist.selection: the paired Poisson bootstrap of validation AUPRC behind ``--contrast auto``."""

from __future__ import annotations

import numpy as np
import pytest

from gcad_dist import selection
from gcad_dist.metrics import auprc
from gcad_dist.selection import SWITCH_CONFIDENCE, bootstrap_auprc, compare_auprc


def _data(n: int = 2000, rate: float = 0.05, seed: int = 0):
    rng = np.random.default_rng(seed)
    y = (rng.random(n) < rate).astype(int)
    return rng, y, rng.normal(size=n) + y


def test_observed_column_is_the_plain_auprc_ties_included():
    rng, y, s = _data()
    tied = np.round(s, 1)  # many ties: precision read once per distinct score, as sklearn does
    ap = bootstrap_auprc(y, [s, tied], n_boot=20)
    assert ap.shape == (2, 21)
    assert ap[0, 0] == pytest.approx(auprc(y, s), abs=1e-12)
    assert ap[1, 0] == pytest.approx(auprc(y, tied), abs=1e-12)
    assert np.isfinite(ap).all() and (ap > 0).all() and (ap <= 1).all()


def test_resamples_vary_around_the_observed_value_and_are_reproducible(monkeypatch):
    rng, y, s = _data()
    a = bootstrap_auprc(y, [s], n_boot=300, seed=3)
    assert a[0, 1:].std() > 0.005 and abs(a[0, 1:].mean() - a[0, 0]) < 0.03
    np.testing.assert_array_equal(a, bootstrap_auprc(y, [s], n_boot=300, seed=3))
    # blocks of resamples give the same draws' statistics whatever the block size
    monkeypatch.setattr(selection, "_BLOCK_ELEMENTS", 7 * y.size)
    b = bootstrap_auprc(y, [s], n_boot=300, seed=3)
    assert b[0, 0] == a[0, 0] and abs(b[0, 1:].mean() - a[0, 1:].mean()) < 0.01


def test_compare_switches_on_a_clear_gain_only():
    rng, y, s = _data()
    clear = compare_auprc(y, s, s + 1.5 * y)
    assert clear.switch and clear.p_alternative_better >= SWITCH_CONFIDENCE and clear.diff_low > 0
    same = compare_auprc(y, s, s + 0.01 * rng.normal(size=y.size))
    assert not same.switch and same.diff_low < 0 < same.diff_high
    worse = compare_auprc(y, s, s - 0.8 * y)
    assert not worse.switch and worse.p_alternative_better < 0.05


def test_pairing_makes_a_consistent_small_gain_detectable():
    """Shared resamples: a small gain on every anomaly is detected although each AUPRC's own spread is larger."""
    rng, y, s = _data(n=4000)
    alt = s + 0.15 * y
    ap = bootstrap_auprc(y, [s, alt], n_boot=500)
    gain = ap[1, 0] - ap[0, 0]
    assert 0 < gain < ap[0, 1:].std() * 2
    assert compare_auprc(y, s, alt, n_boot=500).switch


def test_bad_inputs_raise_clear_errors():
    with pytest.raises(ValueError, match="differ in length"):
        bootstrap_auprc([0, 1, 0], [[0.1, 0.2]])
    with pytest.raises(ValueError, match="no validation nodes"):
        bootstrap_auprc([], [[]])
    res = compare_auprc([0, 0, 0], [0.1, 0.2, 0.3], [0.3, 0.2, 0.1])  # no anomaly: nothing to compare, keep default
    assert not res.switch and res.n_boot == 0


def test_too_few_validation_anomalies_keep_the_default():
    """One anomaly ranked higher by the alternative: every resample agrees (P = 1), yet that is no evidence."""
    rng = np.random.default_rng(0)
    y = np.zeros(300, dtype=int)
    y[:selection.MIN_POSITIVES - 1] = 1
    s = rng.normal(size=300)
    res = compare_auprc(y, s, s + 5.0 * y)
    assert res.p_alternative_better >= SWITCH_CONFIDENCE and res.positives == selection.MIN_POSITIVES - 1
    assert not res.switch and res.as_dict()["switch"] is False
    y[selection.MIN_POSITIVES - 1] = 1
    assert compare_auprc(y, s, s + 5.0 * y).switch


def test_bootstrap_auroc_matches_sklearn_with_ties_and_shares_the_auprc_resamples():
    """``bootstrap_auprc(metric="auroc")``: the observed column is sklearn's AUROC (ties count a half); each resample's
    figure is sklearn's AUROC under those Poisson weights; and p_better_auroc finds a clearly better score better."""
    import numpy as np
    from sklearn.metrics import roc_auc_score

    from gcad_dist.selection import bootstrap_auprc, p_better_auroc

    rng = np.random.default_rng(0)
    y = (rng.random(400) < 0.1).astype(int)
    s = np.round(rng.random(400) + 0.5 * y, 1)  # many ties
    a = bootstrap_auprc(y, [s], n_boot=5, seed=3, metric="auroc")
    assert a[0, 0] == pytest.approx(roc_auc_score(y, s))
    w = np.random.default_rng(3).poisson(1.0, size=(6, 400)).astype(float)  # the resamples drawn with seed 3
    w[0] = 1.0
    for b in range(1, 6):
        assert a[0, b] == pytest.approx(roc_auc_score(y, s, sample_weight=w[b]))
    good = s + 2.0 * y
    base, alt, p = p_better_auroc(y, s, good, seed=0)
    assert alt > base and p > 0.99
    assert p_better_auroc(y, good, s, seed=0)[2] < 0.01
    with pytest.raises(ValueError, match="metric"):
        bootstrap_auprc(y, [s], metric="f1")
