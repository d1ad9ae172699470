"""bench.forest_columns (session 90): one default gcad_dist.train run, its forest view finished under both
--forest-columns arms."""

from __future__ import annotations

import json

import pytest


def test_forest_columns_bench_finishes_one_run_under_both_arms_and_resumes(tmp_path, capsys, monkeypatch) -> None:
    import bench.forest_columns as bench
    import gcad_dist.forest_view as forest_view
    from gcad_dist.cli import run_cli
    from partitioning.io import save_npz
    from partitioning.synthetic import SyntheticConfig, generate

    save_npz(generate(SyntheticConfig(nodes=600, avg_degree=6, features=8, anomaly_fraction=0.2, seed=5)),
             tmp_path / "g.npz")
    calls = []
    real = forest_view.add_forest_view
    monkeypatch.setattr(forest_view, "add_forest_view", lambda *a, **k: calls.append(k.get("local")) or real(*a, **k))
    args = ["--data-dir", str(tmp_path), "--datasets", "g", "--seeds", "0", "--out", str(tmp_path / "o"),
            "--epochs", "3"]
    with pytest.raises(SystemExit) as e:
        run_cli(bench.main, args)
    assert int(e.value.code or 0) == 0, capsys.readouterr().err
    out = capsys.readouterr().out
    assert "| g | 1 |" in out and "dataset (val)" in out and "dataset (test)" in out
    assert calls == [False, True]  # one run, its forest view finished twice
    assert forest_view.add_forest_view is not real and forest_view.add_forest_view.__name__ == "<lambda>"  # restored
    rec = json.loads((tmp_path / "o" / "g-s0.json").read_text())
    assert rec["pretrained"]  # ~48 labelled training anomalies: gcad_dist.train pre-trains first, then fine-tunes
    for arm in ("none", "local"):  # --arms' default
        assert 0.0 <= rec[arm]["test"]["auroc"] <= 1.0 and isinstance(rec[arm]["joined"], bool)
    # the run itself went on with its own arm (--arm, default the product's): its metrics.json is that arm's
    metrics = json.loads((tmp_path / "o" / "runs" / "g-s0" / "metrics.json").read_text())
    assert rec["run_arm"] == "local" == metrics["config"]["forest_columns"]
    assert rec["local"]["test"]["auprc"] == pytest.approx(metrics["test"]["auprc"])
    assert ("columns" in metrics["forest_view"]) and "neighbour cosine" in metrics["forest_view"]["rule"]
    # resumed: the stored record is reused, no run; --part val prints no test table
    calls.clear()
    with pytest.raises(SystemExit):
        run_cli(bench.main, args + ["--part", "val"])
    out = capsys.readouterr().out
    assert calls == [] and "dataset (val)" in out and "dataset (test)" not in out
    # the stored records hold none and local: asking for another pair is refused, not a KeyError
    with pytest.raises(SystemExit) as e:
        run_cli(bench.main, args + ["--arms", "local", "labels"])
    assert e.value.code == 2 and "lack an arm" in capsys.readouterr().err


def test_forest_columns_bench_compares_the_label_columns_with_local(tmp_path, capsys, monkeypatch) -> None:
    """``--arms local labels``: the same fit finished with the local columns and with the label columns too (session
    96); the run itself goes on with --arm."""
    import bench.forest_columns as bench
    import gcad_dist.forest_view as forest_view
    from gcad_dist.cli import run_cli
    from partitioning.io import save_npz
    from partitioning.synthetic import SyntheticConfig, generate

    save_npz(generate(SyntheticConfig(nodes=600, avg_degree=6, features=8, anomaly_fraction=0.2, seed=5)),
             tmp_path / "g.npz")
    calls = []
    real = forest_view.add_forest_view
    monkeypatch.setattr(forest_view, "add_forest_view",
                        lambda *a, **k: calls.append((k.get("local"), k.get("labels"))) or real(*a, **k))
    args = ["--data-dir", str(tmp_path), "--datasets", "g", "--seeds", "0", "--out", str(tmp_path / "o"),
            "--epochs", "3", "--arms", "local", "labels", "--part", "val"]
    with pytest.raises(SystemExit) as e:
        run_cli(bench.main, args)
    assert int(e.value.code or 0) == 0, capsys.readouterr().err
    assert calls == [(True, False), (True, True)]
    out = capsys.readouterr().out
    assert "joined local / labels" in out
    rec = json.loads((tmp_path / "o" / "g-s0.json").read_text())
    assert set(rec) >= {"local", "labels"} and "none" not in rec
    with pytest.raises(SystemExit) as e:  # the run's own arm must be one of the two
        run_cli(bench.main, args + ["--arm", "none"])
    assert e.value.code == 2 and "--arms" in capsys.readouterr().err


def test_forest_columns_bench_rejects_a_missing_graph(tmp_path, capsys) -> None:
    import bench.forest_columns as bench
    from gcad_dist.cli import run_cli

    with pytest.raises(SystemExit) as e:
        run_cli(bench.main, ["--data-dir", str(tmp_path), "--datasets", "nope", "--out", str(tmp_path / "o")])
    assert e.value.code == 2 and "not found" in capsys.readouterr().err
