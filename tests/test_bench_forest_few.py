"""bench.forest_few (session 77): one fit of gcad_dist.train's contrasts finished with two --forest-min-anomalies."""

from __future__ import annotations

import json

import pytest


def test_forest_few_bench_finishes_one_fit_twice_and_resumes(tmp_path, capsys, monkeypatch) -> None:
    import bench.forest_few as bench
    import gcad_dist.train as train
    from gcad_dist.cli import run_cli
    from partitioning.io import save_npz
    from partitioning.synthetic import SyntheticConfig, generate

    # camouflage linked at random, 4% anomalies: fewer than 10 in validation, and trees that see them
    save_npz(generate(SyntheticConfig(nodes=600, avg_degree=6, features=8, anomaly_fraction=0.04,
                                      anomaly_mix=(0, 0, 0, 1), mixing=1.0, seed=4)), tmp_path / "g.npz")
    calls = []
    real = train.fit_candidates
    monkeypatch.setattr(train, "fit_candidates", lambda *a, **k: calls.append(1) or real(*a, **k))
    args = ["--data-dir", str(tmp_path), "--datasets", "g", "--seeds", "0", "--out", str(tmp_path / "o"),
            "--epochs", "4"]
    with pytest.raises(SystemExit) as e:
        run_cli(bench.main, args)
    assert int(e.value.code or 0) == 0, capsys.readouterr().err
    out = capsys.readouterr().out
    assert "| g | 1 |" in out and "mean over datasets" in out
    rec = json.loads((tmp_path / "o" / "g-s0.json").read_text())
    assert len(calls) == 1 and rec["arms"] == [10, 1]  # one fit, both arms finished from it
    assert 1 <= rec["old"]["positives"] < 10 and not rec["old"]["joined"]  # below 10 the old arm never joins
    assert rec["new"]["joined"] and rec["new"]["choice"] == "blend"  # the case this bench is for
    assert rec["new"]["test"] != rec["old"]["test"]
    # resumed: the stored record is reused, no fit; other arms refit
    with pytest.raises(SystemExit):
        run_cli(bench.main, args)
    assert len(calls) == 1
    with pytest.raises(SystemExit):
        run_cli(bench.main, [*args, "--arms", "10", "10"])
    same = json.loads((tmp_path / "o" / "g-s0.json").read_text())
    assert len(calls) == 2 and same["new"] == same["old"]  # equal settings: the same model
    capsys.readouterr()
    for bad in (["--seeds", "x"], ["--arms", "0", "1"]):
        with pytest.raises(SystemExit) as e:
            run_cli(bench.main, [*args, *bad])
        assert int(e.value.code) != 0 and "Traceback" not in capsys.readouterr().err
