"""bench.train_rejoin (session 75): one fit of gcad_dist.train's contrasts finished with and without --rejoin."""

from __future__ import annotations

import json

import numpy as np
import pytest


def test_train_rejoin_bench_finishes_one_fit_twice_and_resumes(tmp_path, capsys, monkeypatch) -> None:
    import bench.train_rejoin as bench
    import gcad_dist.train as train
    from gcad_dist.cli import run_cli
    from partitioning.io import save_npz
    from partitioning.synthetic import SyntheticConfig, generate

    save_npz(generate(SyntheticConfig(nodes=500, avg_degree=6, features=8, anomaly_fraction=0.12, seed=5)),
             tmp_path / "g.npz")
    calls = []
    real = train.fit_candidates
    monkeypatch.setattr(train, "fit_candidates", lambda *a, **k: calls.append(1) or real(*a, **k))
    args = ["--data-dir", str(tmp_path), "--datasets", "g", "--seeds", "0", "--out", str(tmp_path / "o"),
            "--epochs", "4", "--halvings", "2", "--scores-dir", str(tmp_path / "s")]
    with pytest.raises(SystemExit) as e:
        run_cli(bench.main, args)
    assert int(e.value.code or 0) == 0, capsys.readouterr().err
    out = capsys.readouterr().out
    assert "| g | 1 |" in out and "dataset (test)" in out and "dataset (halves)" in out
    rec = json.loads((tmp_path / "o" / "g-s0.json").read_text())
    assert len(calls) == 1 and rec["contrasts"] == 3  # one fit, both arms finished from it
    for arm in ("old", "new"):
        assert 0.0 <= rec[arm]["test"]["auroc"] <= 1.0 and len(rec[arm]["halves"]) == 2
    assert rec["old"]["rejoined"] == []  # --no-rejoin never rejoins
    if not rec["new"]["rejoined"]:  # nothing rejoined: both arms are the same model
        assert rec["new"]["test"] == rec["old"]["test"] and rec["new"]["kept"] == rec["old"]["kept"]
    z = np.load(tmp_path / "s" / "g-s0.npz")
    assert z["scores"].shape == (3, 500) and z["selection_scores"].shape == (3, 500) and z["val"].dtype == bool
    # resumed: the stored record is reused, no fit; --part halves prints no test table
    with pytest.raises(SystemExit):
        run_cli(bench.main, [*args, "--part", "halves"])
    out = capsys.readouterr().out
    assert len(calls) == 1 and "dataset (halves)" in out and "dataset (test)" not in out
    with pytest.raises(SystemExit) as e:
        run_cli(bench.main, [*args, "--seeds", "x"])
    assert int(e.value.code) != 0 and "--seeds" in capsys.readouterr().err
