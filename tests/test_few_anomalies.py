"""gcad_dist.finetune --few-anomalies above-chance (session 76): with 1-9 validation anomalies, too few for the keep
rule's bootstrap, a candidate at or below 0.5 in validation AUROC leaves the average (gcad_dist.train.keep_candidates
``few=``)."""

from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import pytest

from gcad_dist.selection import MIN_POSITIVES
from gcad_dist.train import FEW_VALIDATION_MODES, keep_candidates


def _fits(*scores: np.ndarray) -> list:
    return [(SimpleNamespace(scores=s, selection_scores=None, best_epoch=0, val={}, test={}), None, None)
            for s in scores]


def _scores(n: int = 400, anomalies: int = 6, seed: int = 0):
    """Labels with ``anomalies`` anomalies among the first 200 nodes (validation), more among the last 200, and
    scores: ``good`` and ``good2`` rank the validation anomalies high, ``anti`` ranks them low."""
    rng = np.random.default_rng(seed)
    y = np.zeros(n, dtype=np.int64)
    y[:anomalies] = 1
    y[200:200 + 20] = 1
    val = np.zeros(n, dtype=bool)
    val[:200] = True
    good, good2, anti = rng.normal(size=n), rng.normal(size=n), rng.normal(size=n)
    good[y == 1] += 3.0
    good2[y == 1] += 2.0
    anti[y == 1] -= 3.0
    return y, val, good, good2, anti


def test_few_validation_anomalies_drop_the_candidates_at_or_below_chance() -> None:
    y, val, good, good2, anti = _scores()
    names = ["good", "anti", "good2"]
    kept, rec = keep_candidates(_fits(good, anti, good2), y, val, names=names, weighting="lift")
    assert kept == [0, 1, 2] and rec["too_few_validation_anomalies"] == 6  # as before session 76: all averaged
    kept, rec = keep_candidates(_fits(good, anti, good2), y, val, names=names, weighting="lift", few="above-chance")
    assert kept == [0, 2] and rec["kept"] == ["good", "good2"] and rec["chosen"] == "good + good2"
    assert rec["below_chance"] == ["anti"] and rec["val_auroc"]["anti"] < 0.5 < rec["val_auroc"]["good2"]
    assert rec["weights"] == pytest.approx({"good": 0.5, "good2": 0.5})  # alike below 10 anomalies
    assert "at or below 0.5" in rec["rule"]
    # the labels of the other nodes are not read: scrambled, the choice is the same
    y2 = y.copy()
    y2[200:] = np.random.default_rng(1).integers(0, 2, size=200)
    assert keep_candidates(_fits(good, anti, good2), y2, val, names=names, weighting="lift",
                           few="above-chance")[0] == kept
    # a candidate judged by its cross-fitted scores: those decide, not its plain ones
    fits = _fits(good, good2, good2)
    fits[2][0].selection_scores = anti
    assert keep_candidates(fits, y, val, names=names, cross_fitted=True, few="above-chance")[0] == [0, 1]


def test_none_above_chance_keeps_every_candidate_and_enough_anomalies_change_nothing() -> None:
    y, val, good, good2, anti = _scores()
    kept, rec = keep_candidates(_fits(anti, -good), y, val, names=["anti", "neg"], few="above-chance")
    assert kept == [0, 1] and rec["below_chance"] == []
    # 10 validation anomalies or more: the bootstrap decides, `few` is not used
    y, val, good, good2, anti = _scores(anomalies=MIN_POSITIVES)
    a = keep_candidates(_fits(good, anti, good2), y, val, names=["good", "anti", "good2"], weighting="lift")
    b = keep_candidates(_fits(good, anti, good2), y, val, names=["good", "anti", "good2"], weighting="lift",
                        few="above-chance")
    assert a[0] == b[0] and "below_chance" not in b[1] and "val_auroc" not in b[1]
    # no validation anomaly: nothing to measure, every candidate kept
    y0 = y.copy()
    y0[val] = 0
    kept, rec = keep_candidates(_fits(good, anti), y0, val, names=["good", "anti"], few="above-chance")
    assert kept == [0, 1] and "below_chance" not in rec
    with pytest.raises(ValueError, match="few"):
        keep_candidates(_fits(good, anti), y, val, few="drop")
    assert FEW_VALIDATION_MODES == ("average", "above-chance", "weighted")


def test_weighted_weighs_the_kept_candidates_halfway_between_alike_and_their_auroc_lift() -> None:
    y, val, good, good2, anti = _scores()
    names = ["good", "anti", "good2"]
    kept, rec = keep_candidates(_fits(good, anti, good2), y, val, names=names, weighting="lift", few="weighted")
    assert kept == [0, 2] and rec["below_chance"] == ["anti"]
    lift = np.array([rec["val_auroc"]["good"] - 0.5, rec["val_auroc"]["good2"] - 0.5])
    want = 0.25 + 0.5 * lift / lift.sum()
    assert [rec["weights"]["good"], rec["weights"]["good2"]] == pytest.approx(want.tolist())
    assert rec["weights"]["good"] > rec["weights"]["good2"] and "halfway" in rec["rule"]
    # none above chance: every candidate kept, alike
    kept, rec = keep_candidates(_fits(anti, -good), y, val, names=["anti", "neg"], weighting="lift", few="weighted")
    assert kept == [0, 1] and rec["weights"] == pytest.approx({"anti": 0.5, "neg": 0.5})
    # one kept candidate, or 10 validation anomalies or more: as above-chance
    assert "weights" not in keep_candidates(_fits(good, anti), y, val, names=["good", "anti"], few="weighted")[1]
    y, val, good, good2, anti = _scores(anomalies=MIN_POSITIVES)
    a = keep_candidates(_fits(good, anti, good2), y, val, names=names, weighting="lift", few="above-chance")
    b = keep_candidates(_fits(good, anti, good2), y, val, names=names, weighting="lift", few="weighted")
    assert a[0] == b[0] and a[1]["weights"] == b[1]["weights"]


def test_weighted_is_finetunes_default_and_train_keeps_average() -> None:
    """Adopted for gcad_dist.finetune's model-level choice (session 76). gcad_dist.train's contrasts keep ``average``
    (its ``weighted`` met its own rule, but fine-tuning's graph and scratch candidates follow gcad_dist.train's setting,
    and there it failed the guard), and so does the function unless asked."""
    import inspect

    from gcad_dist.finetune import FinetuneConfig
    from gcad_dist.finetune import build_parser as finetune_parser
    from gcad_dist.train import TrainConfig
    from gcad_dist.train import build_parser as train_parser

    assert FinetuneConfig(checkpoint="c", graph="g").few_anomalies == "weighted"
    assert finetune_parser().parse_args(["--checkpoint", "c", "--graph", "g", "--out", "o"]).few_anomalies == "weighted"
    assert TrainConfig(graph="g", out="o").few_anomalies == "average"
    assert train_parser().parse_args(["--graph", "g", "--out", "o"]).few_anomalies == "average"
    assert inspect.signature(keep_candidates).parameters["few"].default == "average"


def test_finetune_drops_a_candidate_below_chance_and_its_checkpoint_reproduces(tmp_path, capsys, monkeypatch,
                                                                                make_local_checkpoint) -> None:
    """A books-like run (fewer than 10 validation anomalies) where one candidate is below chance on validation (forced
    here, so that this small run has one): it leaves the average, metrics.json records it, and gcad_dist.score of the
    written checkpoint gives the run's test AUROC / AUPRC, also weighted (--few-anomalies weighted); --few-anomalies
    average keeps every candidate."""
    import gcad_dist.train as train_mod
    from gcad_dist.cli import run_cli
    from gcad_dist.data.splits import make_split
    from gcad_dist.finetune import main as finetune_main
    from gcad_dist.metrics import evaluate
    from gcad_dist.score import score_graph
    from partitioning.io import save_npz
    from partitioning.synthetic import SyntheticConfig, generate

    g = generate(SyntheticConfig(nodes=600, avg_degree=8, features=8, anomaly_fraction=0.04, mixing=0.5,
                                 anomaly_mix=(0.5, 0.5, 0.0, 0.5), contextual_candidates=10, seed=12))
    path = tmp_path / "g.npz"
    save_npz(g, path)
    pre = make_local_checkpoint("standard")  # the label-free recipe's model, as gcad_dist.pretrain writes it
    real = train_mod._above_chance

    def forced(kept, val_auroc, names, record):  # the first candidate measured below chance
        return real(kept, [0.4 if n == names[kept[0]] else max(a, 0.6) for n, a in zip(names, val_auroc)],
                    names, record)

    monkeypatch.setattr(train_mod, "_above_chance", forced)
    common = ["--checkpoint", str(pre), "--graph", str(path), "--epochs", "4", "--eval-every", "2",
              "--seed", "0", "--label-fraction", "0.5", "--no-progress", "--no-plots", "--threads", "1",
              "--forest", "off", "--isolation-forest", "off", "--no-label-inputs"]
    runs = {}
    for mode in ("above-chance", "average", "weighted"):
        out = tmp_path / mode
        with pytest.raises(SystemExit) as e:
            run_cli(finetune_main, [*common, "--out", str(out), "--few-anomalies", mode])
        assert int(e.value.code or 0) == 0, capsys.readouterr().err
        runs[mode] = m = json.loads((out / "metrics.json").read_text())
        assert 0 < m["model_selection"]["too_few_validation_anomalies"] < MIN_POSITIVES  # the regime this is for
        test = make_split(g.to_data(), seed=0).test.numpy()
        got = evaluate(g.y, score_graph(out / "final", path), mask=test)
        assert got["auroc"] == pytest.approx(m["test"]["auroc"], abs=1e-6), mode
        assert got["auprc"] == pytest.approx(m["test"]["auprc"], abs=1e-6), mode
    new, old = runs["above-chance"]["model_selection"], runs["average"]["model_selection"]
    assert new["below_chance"] == [old["kept"][0]] and new["kept"] == old["kept"][1:]
    assert "below_chance" not in old and runs["above-chance"]["config"]["few_anomalies"] == "above-chance"
    weighted = runs["weighted"]["model_selection"]  # the same kept set, weighed by validation AUROC: written as scored
    assert weighted["kept"] == new["kept"] and sum(weighted["weights"].values()) == pytest.approx(1.0)
    assert "halfway" in weighted["rule"]


def test_train_weighted_contrasts_with_few_validation_anomalies_are_written_as_scored(tmp_path, capsys,
                                                                                       train_run_reproduces) -> None:
    """gcad_dist.train --few-anomalies weighted (session 76): with fewer than 10 validation anomalies its contrasts
    weigh by their validation AUROC, and gcad_dist.score's model of the run reproduces its validation and test
    AUROC / AUPRC; --few-anomalies average keeps them alike."""
    from gcad_dist.cli import run_cli
    from gcad_dist.train import main as train_main
    from partitioning.io import save_npz
    from partitioning.synthetic import SyntheticConfig, generate

    g = generate(SyntheticConfig(nodes=500, avg_degree=6, features=8, anomaly_fraction=0.05, mixing=0.5,
                                 anomaly_mix=(0.5, 0.5, 0.0, 0.5), contextual_candidates=10, seed=4))
    path = tmp_path / "g.npz"
    save_npz(g, path)
    args = ["--graph", str(path), "--epochs", "6", "--eval-every", "2", "--hidden", "16", "--seed", "0",
            "--threads", "1", "--no-progress", "--no-plots", "--forest", "off"]
    sels = {}
    for mode in ("weighted", "average"):
        out = tmp_path / mode
        with pytest.raises(SystemExit) as e:
            run_cli(train_main, [*args, "--out", str(out), "--few-anomalies", mode])
        assert int(e.value.code or 0) == 0, capsys.readouterr().err
        m = json.loads((out / "metrics.json").read_text())
        sels[mode] = sel = m["contrast_selection"]
        assert 0 < sel["too_few_validation_anomalies"] < MIN_POSITIVES  # the regime this is for
        train_run_reproduces(out, path, m, mode)
    w = sels["weighted"]
    if len(w["kept"]) > 1:
        assert set(w["weights"]) == set(w["kept"]) and sum(w["weights"].values()) == pytest.approx(1.0)
    assert "val_auroc" in w and "val_auroc" not in sels["average"] and "weights" not in sels["average"]
