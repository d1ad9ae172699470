"""bench.zero_shot_views: fine-tuning's blend replayed with the zero-shot candidate scored with the views."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from bench.zero_shot_views import ZeroShotViewsConfig, main, replay, study, table
from gcad_dist.cli import UsageError


def _run(root: Path, seed: int, n: int = 800) -> np.ndarray:
    """A bench.pretrain_transfer dataset folder with one fine-tuning run (all four candidates kept, alike, as with
    few validation anomalies) whose metrics.json holds the blend's own test AUROC; returns the labels."""
    from gcad_dist.metrics import auroc
    from gcad_dist.model.candidate_ensemble import standardised_mean

    rng = np.random.default_rng(seed)
    y = (rng.random(n) < 0.05).astype(np.int8)
    val = np.zeros(n, dtype=bool)
    val[: n // 2] = True
    scores = np.stack([rng.normal(size=n) + 1.0 * y, rng.normal(size=n), rng.normal(size=n) + 0.5 * y,
                       rng.normal(size=n)]).astype(np.float32)  # the zero-shot candidate (last) at chance
    run = root / "g" / f"ft0.1-s{seed}"
    run.mkdir(parents=True)
    names = ["checkpoint", "graph", "scratch", "zero-shot"]
    np.savez(run / "candidate_scores.npz", names=np.array(names), scores=scores, y=y, val=val, test=~val,
             train=np.zeros(n, bool))
    blend, _ = standardised_mean(list(scores))
    (run / "metrics.json").write_text(json.dumps({"model_selection": {"kept": names},
                                                  "test": {"auroc": auroc(y[~val], blend[~val])}}))
    return y


def test_replay_reproduces_the_blend_and_swaps_the_zero_shot_candidate_only(tmp_path: Path,
                                                                            capsys: pytest.CaptureFixture) -> None:
    """The recomputed blend reproduces the run's test AUROC; with the zero-shot candidate's own scores as the views
    nothing changes, with views that rank the anomalies first the blend rises; the table and the command line say so;
    a missing graph is a usage error."""
    y = _run(tmp_path, 0)
    run = tmp_path / "g" / "ft0.1-s0"
    own = np.load(run / "candidate_scores.npz")["scores"][3].astype(np.float64)
    same = replay(run, own)
    assert same["reproduced"] and same["shipped"] == same["views"]
    better = replay(run, own + 4.0 * y)
    assert better["views"][0] > better["shipped"][0] + 0.05 and better["views"][1] > better["shipped"][1]
    with pytest.raises(UsageError, match="view scores"):
        replay(run, own[:10])
    # views_scores' cache: the study reads it instead of scoring the (absent) checkpoint
    pd.DataFrame({"node_id": np.arange(y.size)[::-1], "score": (own + 4.0 * y)[::-1]}).to_csv(
        tmp_path / "g" / "views_scores.csv", index=False)
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "g.npz").write_bytes(b"")
    rows = study(ZeroShotViewsConfig(out=str(tmp_path), data_dir=str(tmp_path / "data")))
    assert rows["g 0.1"][0]["views"] == pytest.approx(better["views"])
    assert "| g 0.1 | 1 | 1/1 |" in table(rows)
    assert main([str(tmp_path), "--data-dir", str(tmp_path / "data")]) == 0
    assert "| 1/1 |" in capsys.readouterr().out
    with pytest.raises(UsageError, match="no g.npz"):
        study(ZeroShotViewsConfig(out=str(tmp_path), data_dir=str(tmp_path)))
