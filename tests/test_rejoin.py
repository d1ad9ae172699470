"""gcad_dist.finetune --rejoin (session 74): a candidate the keep rule drops rejoins the kept ones where their mean with
it ranks the validation anomalies better (gcad_dist.selection.rejoin, gcad_dist.train.keep_candidates)."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from gcad_dist.selection import MIN_POSITIVES, REJOIN_CONFIDENCE, rejoin
from gcad_dist.train import keep_candidates


def _two_kinds(n: int = 600, per_kind: int = 30, seed: int = 0):
    """Labels with two kinds of anomalies, and scores: ``a`` ranks kind A high, ``b`` kind B (a kind of half as
    many nodes, so that the keep rule judging each candidate alone drops it), ``noise`` nothing."""
    rng = np.random.default_rng(seed)
    y = np.zeros(n, dtype=np.int64)
    kind_a, kind_b = np.arange(per_kind), np.arange(per_kind, per_kind + max(per_kind // 2, 1))
    y[kind_a] = y[kind_b] = 1
    a, b, noise = rng.normal(size=n), rng.normal(size=n), rng.normal(size=n)
    a[kind_a] += 5.0
    b[kind_b] += 5.0
    return y, a, b, noise


def _standardised(*scores: np.ndarray) -> np.ndarray:
    return np.stack([(s - s.mean()) / s.std() for s in scores])


def test_a_complementary_candidate_rejoins_with_an_equal_share() -> None:
    y, a, b, noise = _two_kinds()
    z = _standardised(a, b, noise)
    w, steps = rejoin(y, z, [1.0, 0.0, 0.0])
    np.testing.assert_allclose(w, [0.5, 0.5, 0.0])  # b joins; the noise does not
    assert [s["candidate"] for s in steps] == [1]
    assert steps[0]["auprc_after"] > steps[0]["auprc_before"] and steps[0]["p_better"] >= REJOIN_CONFIDENCE


def test_nothing_rejoins_where_it_does_not_help() -> None:
    y, a, b, noise = _two_kinds()
    both = a + b  # ranks both kinds already
    w, steps = rejoin(y, _standardised(both, noise), [1.0, 0.0])
    np.testing.assert_array_equal(w, [1.0, 0.0])
    assert steps == []
    # weights are kept as they are where every candidate is already in, or none is
    np.testing.assert_array_equal(rejoin(y, _standardised(a, b), [0.3, 0.7])[0], [0.3, 0.7])
    with pytest.raises(ValueError, match="do not match"):
        rejoin(y, _standardised(a, b), [1.0, 0.0, 0.0])


def _fits(*scores: np.ndarray) -> list:
    return [(SimpleNamespace(scores=s, selection_scores=None, best_epoch=0, val={}, test={}), None, None)
            for s in scores]


def test_keep_candidates_lets_the_dropped_candidate_rejoin_and_reads_validation_labels_only() -> None:
    y, a, b, noise = _two_kinds()
    val = np.zeros(y.size, dtype=bool)
    val[:400] = True  # both kinds of anomalies are validation nodes; nodes 400-599 are "test"
    names = ["a", "b", "noise"]
    kept, rec = keep_candidates(_fits(a, b, noise), y, val, names=names, weighting="lift")
    assert rec["kept"] == ["a"]  # judged alone, b is clearly below a
    kept, rec = keep_candidates(_fits(a, b, noise), y, val, names=names, weighting="lift", rejoin=True)
    assert kept == [0, 1] and rec["kept"] == ["a", "b"] and rec["chosen"] == "a + b"
    assert [r["candidate"] for r in rec["rejoined"]] == ["b"]
    assert sum(rec["weights"].values()) == pytest.approx(1.0) and rec["weights"]["b"] == pytest.approx(0.5)
    assert "rejoins" in rec["rule"]
    # the labels of the other nodes are not read: scrambled, the choice is the same
    y2 = y.copy()
    y2[400:] = np.random.default_rng(1).integers(0, 2, size=200)
    assert keep_candidates(_fits(a, b, noise), y2, val, names=names, weighting="lift", rejoin=True)[1]["weights"] \
        == rec["weights"]
    # equal weighting: the rejoined candidate gets the same share, recorded as weights too
    kept, rec = keep_candidates(_fits(a, b, noise), y, val, names=names, rejoin=True)
    assert rec["weights"] == pytest.approx({"a": 0.5, "b": 0.5})


def test_keep_candidates_with_too_few_validation_anomalies_keeps_all_and_rejoins_nothing() -> None:
    y, a, b, noise = _two_kinds(per_kind=MIN_POSITIVES // 2)
    kept, rec = keep_candidates(_fits(a, b, noise), y, np.ones(y.size, dtype=bool), names=["a", "b", "noise"],
                                weighting="lift", rejoin=True)
    assert kept == [0, 1, 2] and "rejoined" not in rec


def test_finetune_checkpoint_with_a_rejoined_candidate_reproduces(tmp_path, capsys, monkeypatch) -> None:
    """A fine-tuned checkpoint whose kept candidates include a rejoined one (its weight from the rejoin rule, not the
    lift) is written as the run scored: gcad_dist.score of it gives metrics.json's test AUROC / AUPRC."""
    import dataclasses

    import torch

    import gcad_dist.selection as selection
    from gcad_dist.checkpoint import save_model
    from gcad_dist.cli import run_cli
    from gcad_dist.data.splits import make_split
    from gcad_dist.finetune import main as finetune_main
    from gcad_dist.metrics import evaluate
    from gcad_dist.model import GCCAD, GCCADConfig
    from gcad_dist.score import score_graph
    from partitioning.io import save_npz
    from partitioning.synthetic import SyntheticConfig, generate

    g = generate(SyntheticConfig(nodes=1500, avg_degree=8, features=8, anomaly_fraction=0.08, mixing=0.5,
                                 anomaly_mix=(0.5, 0.5, 0.0, 0.5), contextual_candidates=10, seed=12))
    path = tmp_path / "g.npz"
    save_npz(g, path)
    torch.manual_seed(1)
    cfg = GCCADConfig(in_dim=8, hidden=16, contrast="local", loss="logistic", tau=0.2, ensemble=3)
    save_model(tmp_path / "pre", GCCAD(cfg), cfg, extra={"stage": "pretrain", "normalize": "standard"})
    real = selection.compare_auprc
    # every bootstrap sure: the keep rule keeps the best candidate alone, and any that raises its validation AUPRC
    # rejoins, so that this small run has one
    monkeypatch.setattr(selection, "compare_auprc",
                        lambda *a, **k: dataclasses.replace(real(*a, **k), p_alternative_better=1.0))
    out = tmp_path / "ft"
    with pytest.raises(SystemExit) as e:
        run_cli(finetune_main, ["--checkpoint", str(tmp_path / "pre"), "--graph", str(path), "--out", str(out),
                                "--epochs", "4", "--eval-every", "2", "--seed", "0", "--label-fraction", "0.5",
                                "--no-progress", "--no-plots", "--threads", "1", "--forest", "off",
                                "--isolation-forest", "off", "--no-label-inputs"])
    assert int(e.value.code or 0) == 0, capsys.readouterr().err
    m = json.loads((out / "metrics.json").read_text())
    sel = m["model_selection"]
    assert sel["rejoined"], sel  # the run this test is for
    assert set(sel["weights"]) == set(sel["kept"]) and sum(sel["weights"].values()) == pytest.approx(1.0)
    test = make_split(g.to_data(), seed=0).test.numpy()
    s = score_graph(out / "final", path)
    got = evaluate(g.y, s, mask=test)
    assert got["auroc"] == pytest.approx(m["test"]["auroc"], abs=1e-6)
    assert got["auprc"] == pytest.approx(m["test"]["auprc"], abs=1e-6)
    # --no-rejoin: the keep rule's choice as before session 74
    out2 = tmp_path / "ft2"
    with pytest.raises(SystemExit):
        run_cli(finetune_main, ["--checkpoint", str(tmp_path / "pre"), "--graph", str(path), "--out", str(out2),
                                "--epochs", "4", "--eval-every", "2", "--seed", "0", "--label-fraction", "0.5",
                                "--no-progress", "--no-plots", "--threads", "1", "--forest", "off",
                                "--isolation-forest", "off", "--no-label-inputs", "--no-rejoin"])
    m2 = json.loads((out2 / "metrics.json").read_text())["model_selection"]
    assert "rejoined" not in m2
    assert set(m2["kept"]) < set(sel["kept"])


def test_train_checkpoint_with_a_rejoined_contrast_reproduces(tmp_path, capsys, monkeypatch,
                                                              train_run_reproduces) -> None:
    """gcad_dist.train --rejoin (session 75): a supervised run whose kept contrasts include a rejoined one is written
    as it scored (gcad_dist.score of model.pt gives metrics.json's test AUROC / AUPRC, the rejoined contrast's equal
    share included); --no-rejoin keeps the keep rule's choice."""
    import dataclasses

    import gcad_dist.selection as selection
    from gcad_dist.cli import run_cli
    from gcad_dist.train import main as train_main
    from partitioning.io import save_npz
    from partitioning.synthetic import SyntheticConfig, generate

    g = generate(SyntheticConfig(nodes=800, avg_degree=6, features=8, anomaly_fraction=0.12, mixing=0.5,
                                 anomaly_mix=(0.5, 0.5, 0.0, 0.5), contextual_candidates=10, seed=4))
    path = tmp_path / "g.npz"
    save_npz(g, path)
    real = selection.compare_auprc
    # every bootstrap sure: the keep rule keeps the best contrast alone, and any that raises its validation AUPRC
    # rejoins, so that this small run has one
    monkeypatch.setattr(selection, "compare_auprc",
                        lambda *a, **k: dataclasses.replace(real(*a, **k), p_alternative_better=1.0))
    args = ["--graph", str(path), "--epochs", "6", "--eval-every", "2", "--hidden", "16", "--seed", "0",
            "--threads", "1", "--no-progress", "--no-plots", "--forest", "off"]
    out = tmp_path / "run"
    with pytest.raises(SystemExit) as e:
        run_cli(train_main, [*args, "--out", str(out), "--rejoin"])
    assert int(e.value.code or 0) == 0, capsys.readouterr().err
    m = json.loads((out / "metrics.json").read_text())
    sel = m["contrast_selection"]
    assert sel["rejoined"] and len(sel["kept"]) > 1, sel  # the run this test is for
    assert set(sel["weights"]) == set(sel["kept"]) and sum(sel["weights"].values()) == pytest.approx(1.0)
    assert m["config"]["rejoin"] is True
    train_run_reproduces(out, path, m, "rejoin")
    # --no-rejoin: the keep rule's choice, the kept contrasts' plain mean
    out2 = tmp_path / "run2"
    with pytest.raises(SystemExit):
        run_cli(train_main, [*args, "--out", str(out2), "--no-rejoin"])
    sel2 = json.loads((out2 / "metrics.json").read_text())["contrast_selection"]
    assert "rejoined" not in sel2 and "weights" not in sel2
    assert set(sel2["kept"]) < set(sel["kept"])
