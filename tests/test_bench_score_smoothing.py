"""bench.score_smoothing (session 97): one default gcad_dist.train run, its final scores smoothed over the graph
with the training labels under several settings."""

from __future__ import annotations

import json

import numpy as np
import pytest


def test_score_smoothing_bench_captures_the_run_measures_variants_and_resumes(tmp_path, capsys) -> None:
    import bench.score_smoothing as bench
    import gcad_dist.forest_view as forest_view
    from gcad_dist.cli import run_cli
    from partitioning.io import save_npz
    from partitioning.synthetic import SyntheticConfig, generate

    save_npz(generate(SyntheticConfig(nodes=600, avg_degree=6, features=8, anomaly_fraction=0.2, seed=5)),
             tmp_path / "g.npz")
    real = forest_view.add_forest_view
    args = ["--data-dir", str(tmp_path), "--datasets", "g", "--seeds", "0", "--out", str(tmp_path / "o"),
            "--epochs", "3", "--variants", "a0.3-both"]
    with pytest.raises(SystemExit) as e:
        run_cli(bench.main, args)
    assert int(e.value.code or 0) == 0, capsys.readouterr().err
    out = capsys.readouterr().out
    assert "a0.3-both, val" in out and "a0.3-both, test" in out and "| g | 1 |" in out
    assert forest_view.add_forest_view is real  # restored
    rec = json.loads((tmp_path / "o" / "g-s0.json").read_text())
    assert set(bench.VARIANTS) <= set(rec)  # every variant measured by the run
    # the reference is the run itself: its metrics.json's figures
    metrics = json.loads((tmp_path / "o" / "runs" / "g-s0" / "metrics.json").read_text())
    assert rec["reference"]["test"]["auprc"] == pytest.approx(metrics["test"]["auprc"])
    assert rec["reference"]["val"]["auroc"] == pytest.approx(metrics["val"]["auroc"])
    with np.load(tmp_path / "o" / "arrays" / "g-s0.npz") as z:
        assert z["scores"].shape == z["y"].shape == (600,) and z["edge_index"].shape[0] == 2
    # a variant not stored is measured from the arrays, without a run; --part val prints no test table
    with pytest.raises(SystemExit):
        run_cli(bench.main, args[:-1] + ["a0.7-anomalies", "--part", "val"])
    out = capsys.readouterr().out
    assert "a0.7-anomalies, val" in out and ", test" not in out
    # a bad variant is a usage error
    with pytest.raises(SystemExit) as e:
        run_cli(bench.main, args[:-1] + ["a1.5-both"])
    assert e.value.code == 2 and "alpha in [0, 1)" in capsys.readouterr().err


def test_measure_pairs_each_variant_with_the_run_on_the_same_nodes() -> None:
    from bench.score_smoothing import measure

    rng = np.random.default_rng(0)
    n = 300
    y = (rng.random(n) < 0.1).astype(int)
    parts = rng.integers(0, 3, size=n)
    arrays = {"scores": rng.normal(size=n) + y, "y": y, "train": parts == 0, "val": parts == 1, "test": parts == 2,
              "edge_index": rng.integers(0, n, size=(2, 1500))}
    m = measure(arrays, ["a0-none", "a0.5-both"])
    assert m["a0-none"] == m["reference"]  # ranks alone: the same order, the same figures
    assert m["a0.5-both"] != m["reference"]
