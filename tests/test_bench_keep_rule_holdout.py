"""bench.keep_rule_holdout: validation halved before the runs, both keep rules measured on the half no run saw."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from bench.keep_rule_holdout import evaluate, main, prepare, table
from gcad_dist.cli import UsageError


def _graph(path: Path, n: int = 500, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    y = (rng.random(n) < 0.1).astype(np.int8)
    src = rng.integers(0, n, 3 * n)
    dst = (src + 1 + rng.integers(0, n - 1, 3 * n)) % n
    np.savez(path, x=rng.normal(size=(n, 4)).astype(np.float32), edge_index=np.stack([src, dst]), y=y)
    return y


def test_prepare_halves_each_seeds_validation_and_keeps_the_rest_of_its_split(tmp_path: Path) -> None:
    from gcad_dist.data.splits import make_split
    from partitioning.io import load_graph

    y = _graph(tmp_path / "g.npz")
    prepare(str(tmp_path / "g.npz"), str(tmp_path / "ho" / "g.npz"), seeds=3)
    hold = np.load(tmp_path / "ho" / "g.hold.npy")
    copy = load_graph(tmp_path / "ho" / "g.npz")
    original = load_graph(tmp_path / "g.npz").to_data()
    assert hold.shape == (3, y.size) and copy.masks["val"].shape == (3, y.size)
    for s in range(3):
        split = make_split(original, seed=s)  # what gcad_dist.finetune --seed s splits the original into
        tr, va, te = (np.asarray(m) for m in split)
        v1, v2 = copy.masks["val"][s], hold[s]
        assert np.array_equal(copy.masks["train"][s], tr) and np.array_equal(copy.masks["test"][s], te)
        assert not (v1 & v2).any() and np.array_equal(v1 | v2, va)
        assert abs(int(y[v1].sum()) - int(y[v2].sum())) <= 1  # stratified
        # the copy's split s, as fine-tuning makes it, never holds a held-out node
        cs = make_split(copy.to_data(), seed=s)
        assert not any((np.asarray(m) & v2).any() for m in cs)


def _run(root: Path, holds: Path, seed: int, n: int = 800) -> None:
    """A fine-tuning run on a prepared copy: a trained candidate whose plain scores flatter it on V1 (perfect there,
    noise elsewhere) but whose cross-fitted scores do not, and an honest zero-shot candidate."""
    rng = np.random.default_rng(seed)
    y = (rng.random(n) < 0.1).astype(np.int8)
    idx = rng.permutation(n)
    val, hold, test = np.zeros(n, bool), np.zeros(n, bool), np.zeros(n, bool)
    val[idx[:200]], hold[idx[200:400]], test[idx[400:]] = True, True, True
    overfit = rng.normal(size=n)
    overfit[val] += 4.0 * y[val]
    honest = rng.normal(size=n) + 1.5 * y
    d = root / "g" / f"ft0.1-s{seed}"
    d.mkdir(parents=True)
    scores = np.stack([overfit, honest]).astype(np.float32)
    selection = np.stack([rng.normal(size=n), honest]).astype(np.float32)
    np.savez(d / "candidate_scores.npz", names=np.array(["checkpoint", "zero-shot"]), scores=scores,
             selection_scores=selection, y=y, val=val, test=test, train=np.zeros(n, bool))
    holds.mkdir(exist_ok=True)
    f = holds / "g.hold.npy"
    h = np.load(f) if f.exists() else np.zeros((2, n), bool)
    h[seed] = hold
    np.save(f, h)


def test_the_cross_fitted_rule_drops_a_candidate_that_only_flatters_itself(tmp_path: Path,
                                                                           capsys: pytest.CaptureFixture) -> None:
    for s in range(2):
        _run(tmp_path / "runs", tmp_path / "holds", s)
    recs = evaluate([str(tmp_path / "runs")], str(tmp_path / "holds"))
    assert [(r["graph"], r["seed"]) for r in recs] == [("g", 0), ("g", 1)]
    for r in recs:
        assert r["rules"]["validation"]["kept"] == "checkpoint"
        assert r["rules"]["cross-fitted"]["kept"] == "zero-shot"
        assert r["rules"]["cross-fitted"]["metrics"][1] > r["rules"]["validation"]["metrics"][1] + 0.2
    t = table(recs)
    assert "| g | 0.1 | 2 |" in t and "Mean change over the 1 graphs" in t
    assert main(["evaluate", str(tmp_path / "runs"), "--holds", str(tmp_path / "holds")]) == 0
    assert "| g | 0.1 | 2 |" in capsys.readouterr().out


def test_held_out_figures_read_no_test_label_and_overlap_is_refused(tmp_path: Path) -> None:
    _run(tmp_path / "runs", tmp_path / "holds", 0)
    before = evaluate([str(tmp_path / "runs")], str(tmp_path / "holds"))[0]["rules"]
    f = tmp_path / "runs" / "g" / "ft0.1-s0" / "candidate_scores.npz"
    d = dict(np.load(f))
    y = d["y"].copy()
    y[d["test"]] = 1 - y[d["test"]]
    np.savez(f, **{**d, "y": y})
    assert evaluate([str(tmp_path / "runs")], str(tmp_path / "holds"))[0]["rules"] == before
    np.savez(f, **{**d, "val": d["val"] | np.load(tmp_path / "holds" / "g.hold.npy")[0]})
    with pytest.raises(UsageError, match="overlaps"):
        evaluate([str(tmp_path / "runs")], str(tmp_path / "holds"))
    with pytest.raises(UsageError, match="candidate_scores"):
        evaluate([str(tmp_path / "nothing")], str(tmp_path / "holds"))


def test_on_test_chooses_on_the_whole_validation_split_and_measures_on_test(tmp_path: Path,
                                                                           capsys: pytest.CaptureFixture) -> None:
    from gcad_dist.metrics import auprc

    _run(tmp_path / "runs", tmp_path / "holds", 0)
    r = evaluate([str(tmp_path / "runs")], None, on_test=True)[0]
    d = np.load(tmp_path / "runs" / "g" / "ft0.1-s0" / "candidate_scores.npz")
    test, y = d["test"], d["y"]
    assert r["v2_anomalies"] == int(y[test].sum())
    # the candidates' figures are their test figures; the zero-shot one alone is kept by the cross-fitted rule
    assert r["candidates"]["zero-shot"][1] == pytest.approx(auprc(y[test], d["scores"][1][test]))
    assert r["rules"]["cross-fitted"]["kept"] == "zero-shot"
    assert main(["evaluate", str(tmp_path / "runs"), "--on-test"]) == 0
    out = capsys.readouterr().out
    assert "test, cross-fitted" in out and "Each candidate alone on test" in out
    with pytest.raises(SystemExit):  # one of --holds / --on-test, not both
        main(["evaluate", str(tmp_path / "runs"), "--on-test", "--holds", str(tmp_path / "holds")])
