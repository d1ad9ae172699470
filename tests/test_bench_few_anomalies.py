"""bench.few_anomalies: fine-tuning's few-anomaly keep rule replayed both ways on stored candidate scores."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from bench.few_anomalies import FewAnomaliesConfig, main, replay, study, table
from gcad_dist.cli import UsageError


def _run(root: Path, seed: int, n: int = 600, val_anomalies: int = 6) -> None:
    """A bench.pretrain_transfer dataset folder with one fine-tuning run of the old default (every candidate averaged
    alike with fewer than 10 validation anomalies), one candidate below chance on validation and on test."""
    from gcad_dist.metrics import auroc
    from gcad_dist.model.candidate_ensemble import standardised_mean

    rng = np.random.default_rng(seed)
    y = np.zeros(n, dtype=np.int8)
    val = np.zeros(n, dtype=bool)
    val[:200] = True
    y[:val_anomalies] = 1
    y[300:330] = 1  # test anomalies
    scores = np.stack([rng.normal(size=n) + 2.0 * y, rng.normal(size=n) - 2.0 * y,
                       rng.normal(size=n) + 1.0 * y]).astype(np.float32)
    run = root / "g" / f"ft0.1-s{seed}"
    run.mkdir(parents=True)
    names = ["checkpoint", "graph", "zero-shot"]
    test = np.zeros(n, dtype=bool)
    test[300:] = True
    np.savez(run / "candidate_scores.npz", names=np.array(names), scores=scores, selection_scores=scores, y=y,
             val=val, test=test, train=np.zeros(n, bool))
    blend, _ = standardised_mean(list(scores))
    (run / "metrics.json").write_text(json.dumps({
        "config": {"keep_rule": "cross-fitted", "candidate_weights": "lift", "rejoin": True},
        "model_selection": {"kept": names}, "test": {"auroc": auroc(y[test], blend[test])}}))


def test_replay_drops_the_candidate_below_chance_and_reproduces_the_old_blend(tmp_path: Path,
                                                                               capsys: pytest.CaptureFixture) -> None:
    _run(tmp_path, 0)
    _run(tmp_path, 1)
    r = replay(tmp_path / "g" / "ft0.1-s0")
    assert r["reproduced"] and r["val_anomalies"] == 6
    assert r["average"]["kept"] == "checkpoint + graph + zero-shot"
    assert r["above-chance"]["kept"] == "checkpoint + zero-shot"
    assert r["above-chance"]["metrics"][0] > r["average"]["metrics"][0]
    rows = study(FewAnomaliesConfig(runs=[str(tmp_path)]))
    text = table(rows)
    assert "| g 0.1 | 2 | 6,6 | 2/2 |" in text and "| 2 / 0 / 0 |" in text and "mean change over 1 rows" in text
    assert main([str(tmp_path), "--part", "val"]) == 0
    assert "| average (val AUROC / AUPRC) | above-chance |" in capsys.readouterr().out
    assert main([str(tmp_path), "--arms", "above-chance", "weighted"]) == 0
    assert "| above-chance (test AUROC / AUPRC) | weighted |" in capsys.readouterr().out
    with pytest.raises(UsageError, match="--arms"):
        main([str(tmp_path), "--arms", "average", "drop"])
    with pytest.raises(UsageError, match="no fine-tuning run"):
        study(FewAnomaliesConfig(runs=[str(tmp_path / "g")]))
    with pytest.raises(UsageError, match="no such folder"):
        study(FewAnomaliesConfig(runs=[str(tmp_path / "absent")]))


def test_ten_validation_anomalies_replay_the_same_both_ways(tmp_path: Path) -> None:
    _run(tmp_path, 0, val_anomalies=12)
    r = replay(tmp_path / "g" / "ft0.1-s0")
    assert r["average"] == r["above-chance"]


def test_contrasts_replay_train_rule_from_train_rejoin_scores(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """--contrasts: bench.train_rejoin --scores-dir files replayed with gcad_dist.train's contrast rule; the average
    arm reproduces the study's old arm where its record lies beside the scores."""
    from gcad_dist.metrics import auroc
    from gcad_dist.model.candidate_ensemble import standardised_mean

    _run(tmp_path / "ft", 0)  # reuse the fixture's scores as three contrasts
    z = np.load(tmp_path / "ft" / "g" / "ft0.1-s0" / "candidate_scores.npz")
    scores_dir = tmp_path / "scores"
    scores_dir.mkdir()
    np.savez(scores_dir / "g-s0.npz", **{k: z[k] for k in z.files})
    test = z["test"].astype(bool)
    blend, _ = standardised_mean(list(np.asarray(z["scores"], dtype=np.float64)))
    (scores_dir / "g-s0.json").write_text(json.dumps({"old": {"forest_view": False, "test": {
        "auroc": auroc(z["y"][test], blend[test])}}}))
    rows = study(FewAnomaliesConfig(runs=[str(scores_dir)], contrasts=True))
    r = rows["g"][0]
    assert r["reproduced"] and r["above-chance"]["kept"] == "checkpoint + zero-shot"
    assert main([str(scores_dir), "--contrasts", "--arms", "average", "weighted"]) == 0
    assert "| g | 1 | 6 | 1/1 |" in capsys.readouterr().out
    with pytest.raises(UsageError, match="scores-dir"):
        study(FewAnomaliesConfig(runs=[str(tmp_path / "ft")], contrasts=True))
