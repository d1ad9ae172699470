"""bench.finetune_selection: the keep rule on held-out validation halves, with and without one candidate."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from bench.finetune_selection import SelectionConfig, halves, held_out, main, study, table
from gcad_dist.cli import UsageError


def _run(root: Path, seed: int, n: int = 600) -> None:
    """A run folder as bench.pretrain_transfer names it: two weak candidates and a strong 'zero-shot' one; the test
    nodes' scores are noise, so a result that read them would show."""
    rng = np.random.default_rng(seed)
    y = (rng.random(n) < 0.1).astype(np.int8)
    val = np.zeros(n, dtype=bool)
    val[: n // 2] = True
    weak = [rng.normal(size=n) + 0.3 * y for _ in range(2)]
    strong = rng.normal(size=n) + 3.0 * y
    strong[~val] = rng.normal(size=int((~val).sum()))
    d = root / "g" / f"ft0.1-s{seed}"
    d.mkdir(parents=True)
    np.savez(d / "candidate_scores.npz", names=np.array(["checkpoint", "graph", "zero-shot"]),
             scores=np.stack([*weak, strong]).astype(np.float32), y=y, val=val, test=~val, train=np.zeros(n, bool))


def test_halves_are_stratified_disjoint_and_used_both_ways() -> None:
    y = np.array([1, 0, 0, 1, 0, 0, 1, 0, 0, 1, 0, 0])
    val = np.ones(12, dtype=bool)
    val[-2:] = False
    hs = halves(y, val, 3, seed=0)
    assert len(hs) == 6
    for a, b in hs:
        assert not set(a) & set(b) and set(a) | set(b) == set(np.flatnonzero(val))
        assert y[a].sum() == 2 and y[b].sum() == 2
    assert np.array_equal(hs[0][0], hs[1][1])


def test_a_strong_candidate_raises_the_held_out_figures(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    for s in range(2):
        _run(tmp_path, s)
    recs = study(SelectionConfig(runs=[str(tmp_path)], halvings=3))
    assert [(r["dataset"], r["fraction"], r["seed"]) for r in recs] == [("g", "0.1", 0), ("g", "0.1", 1)]
    for r in recs:
        assert r["full"][1] > r["without"][1] + 0.2  # AUPRC: the strong candidate is kept (alone)
        assert r["kept"].most_common(1)[0][0] == "zero-shot"
    t = table(recs, "zero-shot").splitlines()
    val_pos = np.mean([r["val_anomalies"] for r in recs])
    assert t[2].startswith(f"| g | 0.1 | 2 | {val_pos:.0f} |") and "| 2/2 | zero-shot (" in t[2]
    assert main([str(tmp_path), "--halvings", "2"]) == 0
    assert "| g | 0.1 | 2 |" in capsys.readouterr().out


def test_the_held_out_figures_read_no_test_label(tmp_path: Path) -> None:
    _run(tmp_path, 0)
    f = tmp_path / "g" / "ft0.1-s0" / "candidate_scores.npz"
    d = dict(np.load(f))
    before = held_out(list(d["names"]), d["scores"], d["y"].astype(np.int64), d["val"], 2)
    y = d["y"].copy()
    y[~d["val"]] = 1 - y[~d["val"]]
    after = held_out(list(d["names"]), d["scores"], y.astype(np.int64), d["val"], 2)
    assert np.array_equal(before[0], after[0]) and before[1] == after[1]


def test_no_run_found_is_a_usage_error(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="candidate_scores"):
        study(SelectionConfig(runs=[str(tmp_path)]))


def test_swap_replaces_one_candidate_by_the_sibling_run_s(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """``--swap graph:z``: the variant is the run with 'graph' scored as in the sibling run z<fraction>-s<seed> (here a
    strong score), judged by cross-fitted scores where asked; the sibling itself is not read as a run; a sibling on
    other labels or a malformed --swap is a usage error."""
    _run(tmp_path, 0)
    d = dict(np.load(tmp_path / "g" / "ft0.1-s0" / "candidate_scores.npz"))
    d["selection_scores"] = d["scores"]
    np.savez(tmp_path / "g" / "ft0.1-s0" / "candidate_scores.npz", **d)
    rng = np.random.default_rng(5)
    strong = rng.normal(size=d["y"].shape[0]) + 3.0 * d["y"]
    z = tmp_path / "g" / "z0.1-s0"
    z.mkdir()
    np.savez(z / "candidate_scores.npz", names=np.array(["graph"]), scores=strong[None].astype(np.float32),
             selection_scores=strong[None].astype(np.float32), y=d["y"], val=d["val"], test=d["test"],
             train=d["train"])
    for cross_fitted in (False, True):
        recs = study(SelectionConfig(runs=[str(tmp_path)], swap="graph:z", halvings=2, cross_fitted=cross_fitted))
        assert len(recs) == 1 and recs[0]["full"][1] > recs[0]["without"][1] - 1e-9
        assert any("graph" in k for k in recs[0]["kept"])
    assert main([str(tmp_path), "--swap", "graph:z", "--halvings", "2"]) == 0
    assert "| as run | graph swapped |" in capsys.readouterr().out
    with pytest.raises(UsageError, match="NAME:PREFIX"):
        main([str(tmp_path), "--swap", "graph"])
    bad = dict(np.load(z / "candidate_scores.npz"))
    bad["y"] = 1 - bad["y"]
    np.savez(z / "candidate_scores.npz", **bad)
    with pytest.raises(UsageError, match="other labels"):
        study(SelectionConfig(runs=[str(tmp_path)], swap="graph:z", halvings=2))


def test_add_isolation_forest_offers_the_label_free_forest_as_one_more_candidate(
        tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """``--add-isolation-forest DATA_DIR``: where the anomalies are extreme in a column of the raw features and the
    run's candidates are weak, the forest is kept and the held-out figures rise; a graph on other labels is a usage
    error."""
    n = 600
    _run(tmp_path, 0, n)
    f = tmp_path / "g" / "ft0.1-s0" / "candidate_scores.npz"
    d = dict(np.load(f))
    keep = [0, 1]  # the two weak candidates only
    np.savez(f, **{**d, "names": d["names"][keep], "scores": d["scores"][keep]})
    rng = np.random.default_rng(1)
    x = rng.normal(size=(n, 4)).astype(np.float32)
    x[d["y"] == 1, 0] += 6.0  # the anomalies: far out in column 0
    src = rng.integers(0, n, 2000)
    data = tmp_path / "data"
    data.mkdir()
    np.savez(data / "g.npz", x=x, edge_index=np.stack([src, rng.integers(0, n, 2000)]), y=d["y"].astype(np.int64))
    recs = study(SelectionConfig(runs=[str(tmp_path / "g")], halvings=2, add_isolation_forest=str(data)))
    assert len(recs) == 1 and recs[0]["full"][1] > recs[0]["without"][1] + 0.2
    assert "isolation-forest" in recs[0]["kept"].most_common(1)[0][0]
    assert main([str(tmp_path / "g"), "--halvings", "2", "--add-isolation-forest", str(data)]) == 0
    assert "| as run | with isolation-forest |" in capsys.readouterr().out
    np.savez(data / "g.npz", x=x, edge_index=np.stack([src, src]), y=1 - d["y"].astype(np.int64))
    with pytest.raises(UsageError, match="other labels"):
        study(SelectionConfig(runs=[str(tmp_path / "g")], halvings=2, add_isolation_forest=str(data)))
    with pytest.raises(UsageError, match="give one of them"):
        main([str(tmp_path / "g"), "--swap", "graph:z", "--add-isolation-forest", str(data)])
    # a run of gcad_dist.finetune since session 65 may hold the forest already: not added twice
    np.savez(f, **{**d, "names": np.array(["checkpoint", "isolation-forest"]), "scores": d["scores"][keep]})
    with pytest.raises(UsageError, match="--without isolation-forest"):
        study(SelectionConfig(runs=[str(tmp_path / "g")], halvings=2, add_isolation_forest=str(data)))


def test_add_isolation_forest_is_not_offered_below_ten_validation_anomalies(tmp_path: Path) -> None:
    """With fewer than 10 validation anomalies the keep rule averages every candidate, so the forest is not offered:
    both variants are the run as it is."""
    n = 120
    _run(tmp_path, 0, n)
    d = dict(np.load(tmp_path / "g" / "ft0.1-s0" / "candidate_scores.npz"))
    assert 0 < int(d["y"][d["val"]].sum()) < 10
    data = tmp_path / "data"
    data.mkdir()
    x = np.random.default_rng(2).normal(size=(n, 3)).astype(np.float32)
    np.savez(data / "g.npz", x=x, edge_index=np.array([[0, 1], [1, 2]]), y=d["y"].astype(np.int64))
    (r,) = study(SelectionConfig(runs=[str(tmp_path / "g")], halvings=2, add_isolation_forest=str(data)))
    assert np.array_equal(r["full"], r["without"]) and "isolation-forest" not in str(r["kept"])


def test_lift_weights_weigh_each_candidate_by_its_lift_on_the_choosing_half(tmp_path: Path,
                                                                           capsys: pytest.CaptureFixture) -> None:
    """--lift-weights: the strong candidate dominates the weighted mean, so the held-out figures are far above the
    weak candidates' and close to the keep rule's (which keeps the strong one alone); a candidate ranking anomalies
    last weighs 0; the figures read no test label; the table names the variant."""
    _run(tmp_path, 0)
    f = tmp_path / "g" / "ft0.1-s0" / "candidate_scores.npz"
    d = dict(np.load(f))
    y, val = d["y"].astype(np.int64), d["val"]
    names = [*map(str, d["names"]), "inverted"]
    scores = np.concatenate([d["scores"], -d["scores"][2:3]])
    lifted, sets = held_out(names, scores, y, val, 3, lift="lift")
    kept, _ = held_out(names, scores, y, val, 3)
    weak, _ = held_out(names[:1], scores[:1], y, val, 3)
    assert lifted[1] > weak[1] + 0.2 and abs(lifted[1] - kept[1]) < 0.1
    assert all("inverted" not in k for k in sets)
    y2 = y.copy()
    y2[~val] = 1 - y2[~val]
    assert np.array_equal(held_out(names, scores, y2, val, 3, lift="lift")[0], lifted)
    half, half_sets = held_out(names, scores, y, val, 3, lift="half-lift")
    assert weak[1] < half[1] < lifted[1] + 1e-9 and all("inverted" in k for k in half_sets)  # none weighs 0
    kept_lift, kept_sets = held_out(names, scores, y, val, 3, lift="kept")  # the keep rule keeps the strong one alone
    assert np.allclose(kept_lift, kept) and set(kept_sets) == {"zero-shot"}
    assert main([str(tmp_path), "--halvings", "2", "--lift-weights"]) == 0
    out = capsys.readouterr().out
    assert "| as run | lift-weighted |" in out and "| g | 0.1 | 1 |" in out
    assert main([str(tmp_path), "--halvings", "2", "--lift-weights", "half-lift"]) == 0
    assert "| as run | half-lift-weighted |" in capsys.readouterr().out
    with pytest.raises(UsageError, match="give one of them"):
        main([str(tmp_path), "--lift-weights", "--swap", "scratch:z"])


def test_swap_with_kept_weighting_weighs_both_variants_by_lift(tmp_path: Path) -> None:
    """``--swap NAME:PREFIX --weighting kept``: both variants combine their kept candidates with the shipped lift
    weights (held_out(lift="kept")), so its "as run" figure is the one --lift-weights kept reports for the run; the
    default (equal) is the keep rule's mean as before; --weighting without --swap is a usage error."""
    _run(tmp_path, 0)
    d = dict(np.load(tmp_path / "g" / "ft0.1-s0" / "candidate_scores.npz"))
    z = tmp_path / "g" / "z0.1-s0"
    z.mkdir()
    np.savez(z / "candidate_scores.npz", names=np.array(["graph"]), scores=d["scores"][1:2], y=d["y"], val=d["val"],
             test=d["test"], train=d["train"])
    kept = study(SelectionConfig(runs=[str(tmp_path)], swap="graph:z", halvings=2, weighting="kept"))[0]
    equal = study(SelectionConfig(runs=[str(tmp_path)], swap="graph:z", halvings=2))[0]
    lifted = study(SelectionConfig(runs=[str(tmp_path)], lift_weights="kept", halvings=2))[0]
    np.testing.assert_allclose(kept["without"], lifted["full"])
    np.testing.assert_allclose(kept["full"], kept["without"])  # the sibling holds the same scores
    np.testing.assert_allclose(equal["without"], lifted["without"])
    with pytest.raises(UsageError, match="--weighting"):
        main([str(tmp_path), "--weighting", "kept"])


def test_pick_takes_the_sibling_s_candidate_only_where_the_choosing_half_prefers_it(tmp_path: Path,
                                                                                   capsys: pytest.CaptureFixture) -> None:
    """``--swap NAME:PREFIX --pick``: per halving, the variant is the swapped run where the sibling's candidate ranks
    the choosing half's anomalies better, else the run as is. A sibling that is better everywhere gives the swap's
    figure, one that is worse gives the run's; the choice reads no test label; --pick without --swap is a usage
    error."""
    from bench.finetune_selection import picks

    _run(tmp_path, 0, n=2000)
    d = dict(np.load(tmp_path / "g" / "ft0.1-s0" / "candidate_scores.npz"))
    rng = np.random.default_rng(7)
    for name, shift in (("zb", 3.0), ("zw", 0.0)):  # better / worse than the run's weak 'graph'
        z = tmp_path / "g" / f"{name}0.1-s0"
        z.mkdir()
        sc = (rng.normal(size=d["y"].shape[0]) + shift * d["y"])[None].astype(np.float32)
        np.savez(z / "candidate_scores.npz", names=np.array(["graph"]), scores=sc, y=d["y"], val=d["val"],
                 test=d["test"], train=d["train"])
    better = study(SelectionConfig(runs=[str(tmp_path)], swap="graph:zb", halvings=3, pick=True))[0]
    swapped = study(SelectionConfig(runs=[str(tmp_path)], swap="graph:zb", halvings=3))[0]
    worse = study(SelectionConfig(runs=[str(tmp_path)], swap="graph:zw", halvings=3, pick=True))[0]
    np.testing.assert_allclose(better["full"], swapped["full"])
    np.testing.assert_allclose(worse["full"], worse["without"])
    y, val = d["y"].astype(np.int64), d["val"]
    own = d["scores"][1]
    other = own + 5.0 * y
    use = picks(y, val, own, other, 3, 0)
    assert use.shape == (6,) and use.all()
    y2 = y.copy()
    y2[~val] = 1 - y2[~val]  # other test labels: the same choice
    np.testing.assert_array_equal(picks(y2, val, own, other, 3, 0), use)
    assert not picks(np.where(val, 0, y), val, own, other, 3, 0).any()  # no validation anomaly: the run's own
    assert main([str(tmp_path), "--swap", "graph:zb", "--pick", "--halvings", "2"]) == 0
    assert "| as run | graph picked |" in capsys.readouterr().out
    with pytest.raises(UsageError, match="--pick"):
        main([str(tmp_path), "--pick"])


def test_rejoin_compares_the_keep_rule_with_and_without_rejoin(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """--rejoin: a candidate that ranks another kind of anomaly than the strong one, dropped by the keep rule, rejoins
    on the choosing halves, and the held-out figures rise; the figures read no test label; the table names both."""
    rng = np.random.default_rng(3)
    n = 1200
    y = np.zeros(n, dtype=np.int8)
    kind_a, kind_b = np.arange(0, 120, 2), np.arange(1, 60, 2)  # both kinds among the validation nodes (the first 600)
    y[kind_a] = y[kind_b] = 1
    val = np.zeros(n, dtype=bool)
    val[: n // 2] = True
    a, b = rng.normal(size=n), rng.normal(size=n)
    a[kind_a] += 5.0
    b[kind_b] += 5.0
    d = tmp_path / "g" / "ft0.1-s0"
    d.mkdir(parents=True)
    np.savez(d / "candidate_scores.npz", names=np.array(["checkpoint", "graph"]), scores=np.stack([a, b]),
             y=y, val=val, test=~val, train=np.zeros(n, bool))
    names, scores = ["checkpoint", "graph"], np.stack([a, b])
    with_, sets = held_out(names, scores, y.astype(np.int64), val, 2, rejoin=True)
    without, sets0 = held_out(names, scores, y.astype(np.int64), val, 2, rejoin=False)
    assert sets0["checkpoint"] >= 2 and set(sets) == {"checkpoint + graph"}  # dropped on some halvings, back on all
    assert with_[1] > without[1] + 0.05
    y2 = y.astype(np.int64)
    y2[~val] = 1 - y2[~val]
    assert np.array_equal(held_out(names, scores, y2, val, 2, rejoin=True)[0], with_)
    assert main([str(tmp_path), "--halvings", "2", "--rejoin"]) == 0
    assert "| without rejoin | with rejoin |" in capsys.readouterr().out
    with pytest.raises(UsageError, match="give one of them"):
        main([str(tmp_path), "--rejoin", "--lift-weights"])
