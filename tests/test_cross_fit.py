"""Cross-fitted validation scores (gcad_dist.selection.CrossFit) and the keep rule that reads them."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import torch

from gcad_dist.metrics import auprc
from gcad_dist.selection import CrossFit, validation_folds


def _labels(n: int = 400, pos: int = 40, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    y = np.zeros(n, dtype=np.int64)
    y[rng.choice(n, pos, replace=False)] = 1
    val = np.zeros(n, dtype=bool)
    val[rng.choice(n, n // 2, replace=False)] = True
    return y, val


def test_validation_folds_are_stratified_halves_of_the_labelled_validation_nodes() -> None:
    y, val = _labels()
    y[:5] = -1  # unknown labels stay out of both halves
    folds = validation_folds(y, val, seed=3)
    inside = val & (y >= 0)
    assert set(np.unique(folds[~inside])) == {-1} and set(np.unique(folds[inside])) == {0, 1}
    for cls in (0, 1):
        a, b = int(((folds == 0) & (y == cls)).sum()), int(((folds == 1) & (y == cls)).sum())
        assert abs(a - b) <= 1
    assert not np.array_equal(folds, validation_folds(y, val, seed=4))  # seeded
    one = np.zeros_like(y)
    one[np.flatnonzero(val)[0]] = 1
    assert validation_folds(one, val) is None  # one validation anomaly: a half would hold none


def test_cross_fitted_scores_remove_the_optimism_of_choosing_evaluations_on_validation() -> None:
    """Noise evaluations: the mean of the five best on validation looks far better than chance on validation; the
    cross-fitted scores, each half scored by evaluations the other half chose, do not."""
    y, val = _labels()
    folds = validation_folds(y, val, seed=0)
    rng = np.random.default_rng(1)
    cross = CrossFit(y, folds, k=5)
    evals = [rng.normal(size=y.size) for _ in range(200)]
    for e, s in enumerate(evals):
        cross.update(e, s)
    vm = folds >= 0
    best = sorted(range(200), key=lambda i: -auprc(y[vm], evals[i][vm]))[:5]
    chosen_here = np.mean([evals[i] for i in best], 0)
    base = y[vm].mean()
    assert auprc(y[vm], chosen_here[vm]) > base + 0.05
    assert auprc(y[vm], cross.scores(chosen_here)[vm]) < auprc(y[vm], chosen_here[vm]) - 0.05
    # each half's nodes hold the other half's choice, standardised; nodes outside validation keep the full scores
    z = cross.scores(chosen_here)
    other = np.mean([t[2] for t in cross.top[0]], 0)
    np.testing.assert_allclose(z[folds == 1], ((other - other.mean()) / other.std())[folds == 1], rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(z[~vm], ((chosen_here - chosen_here.mean()) / chosen_here.std())[~vm], atol=1e-4)


def test_each_half_chooses_on_its_own_nodes_and_the_state_round_trips() -> None:
    y, val = _labels()
    folds = validation_folds(y, val, seed=0)
    good0 = np.where((folds == 0) & (y == 1), 5.0, 0.0) + np.linspace(0, 1e-3, y.size)  # perfect on half 0 only
    good1 = np.where((folds == 1) & (y == 1), 5.0, 0.0) + np.linspace(0, 1e-3, y.size)
    cross = CrossFit(y, folds, k=1)
    cross.update(1, good0)
    cross.update(2, good1)
    assert [t[1] for t in cross.top[0]] == [1] and [t[1] for t in cross.top[1]] == [2]
    z = cross.scores(good0)
    # half 1 is scored by what half 0 chose (good0, blind to half 1's anomalies), and the reverse
    assert auprc(y[folds == 1], z[folds == 1]) < 0.5 and auprc(y[folds == 0], z[folds == 0]) < 0.5
    saved = cross.state()
    assert all(isinstance(t[2], torch.Tensor) for half in saved["top"] for t in half)
    again = CrossFit(y, folds, k=1)
    again.load(saved)
    np.testing.assert_array_equal(again.scores(good0), z)
    other = CrossFit(y, validation_folds(y, val, seed=9), k=1)
    try:
        other.load(saved)
    except ValueError as e:
        assert "other validation halves" in str(e)
    else:
        raise AssertionError("a state of other halves was loaded")


def test_keep_candidates_judges_by_selection_scores_only_when_cross_fitted() -> None:
    """Plain scores say A is far better; the cross-fitted ones say B is: the rule follows whichever it is asked to
    read, and a fit without selection scores (zero-shot) is judged by its scores either way."""
    from gcad_dist.train import keep_candidates

    y, val = _labels(n=2000, pos=200)
    rng = np.random.default_rng(0)
    strong = y + 0.3 * rng.normal(size=y.size)
    weak = rng.normal(size=y.size)
    a = SimpleNamespace(scores=strong, selection_scores=weak, best_epoch=1, val={}, test={})
    b = SimpleNamespace(scores=weak, selection_scores=strong, best_epoch=1, val={}, test={})
    z = SimpleNamespace(scores=weak.copy(), best_epoch=0, val={}, test={})  # no selection_scores attribute
    fits = [(a, None, None), (b, None, None), (z, None, None)]
    kept, rec = keep_candidates(fits, y, val, names=["a", "b", "zs"])
    assert rec["best"] == "a" and kept == [0] and rec["cross_fitted"] is False
    kept, rec = keep_candidates(fits, y, val, names=["a", "b", "zs"], cross_fitted=True)
    assert rec["best"] == "b" and kept == [1] and rec["cross_fitted"] is True
