"""bench.dense_pretrain: both modes pre-train the same store, the capped one on fewer links a step; the table gives
each mode's seconds a step against the baseline's (the timings themselves are measurements, not asserted)."""

from __future__ import annotations

import json

import pytest

from bench import dense_pretrain


def test_table_ratio_against_the_baseline() -> None:
    result = {"rows": [
        {"mode": "every link (before)", "timed": {"rc": 0, "s_per_step": 1.5, "steps_per_epoch": 200}, "full": []},
        {"mode": "capped (default)", "timed": {"rc": 0, "s_per_step": 0.5, "steps_per_epoch": 100},
         "full": [{"seed": 0, "pretrain": {"train_seconds": 120.0}, "auroc": 0.87, "auprc": 0.77}]}]}
    text = dense_pretrain.table(result)
    assert "| every link (before) | 1.500 | 200 | 300 | baseline |" in text
    assert "| capped (default) | 0.500 | 100 | 50 | 3.0x, 6.0x faster | 0: 120 s, 0.8700 / 0.7700 |" in text


def test_modes_baseline_first_then_each_cap() -> None:
    cfg = dense_pretrain.DensePretrainConfig(dense_links=1000, max_degrees=[32, 16])
    m = dense_pretrain.modes(cfg)
    assert list(m) == ["every link (before)", "capped (default)", "capped, --max-degree 32",
                       "capped, --max-degree 16"]
    assert m["every link (before)"] == ["--dense-links", str(10**15)]  # the baseline keeps every link
    assert m["capped (default)"] == ["--dense-links", "1000"]
    assert m["capped, --max-degree 32"] == ["--dense-links", "1000", "--max-degree", "32"]
    assert list(dense_pretrain.modes(dense_pretrain.DensePretrainConfig()).values()) == [
        ["--dense-links", str(10**15)], []]  # no flag beyond the default's


def test_steady_step_seconds_leave_the_first_step_out(tmp_path) -> None:
    ev = tmp_path / "events.jsonl"
    lines = [{"event": "placement"}, {"event": "progress", "step": 1, "time": 100.0},
             {"event": "progress", "step": 3, "time": 101.0}, {"event": "progress", "step": 5, "time": 102.0}]
    ev.write_text("\n".join(json.dumps(e) for e in lines))
    assert dense_pretrain.steady_step_seconds(ev) == 0.5
    ev.write_text(json.dumps(lines[1]))
    assert dense_pretrain.steady_step_seconds(ev) is None


def test_both_modes_run_and_the_capped_one_uses_fewer_links(tmp_path) -> None:
    out = tmp_path / "b"
    result = dense_pretrain.run(dense_pretrain.DensePretrainConfig(out=str(out), nodes=200, avg_degree=150, steps=2,
                                                                   dense_links=1000))
    timed = [r["timed"] for r in result["rows"]]
    assert all(t["rc"] == 0 and t["train_seconds"] > 0 for t in timed)
    edges = [json.loads((out / f"timed{i}" / "metrics.json").read_text())["history"][0]["edges_per_s"]
             * json.loads((out / f"timed{i}" / "metrics.json").read_text())["history"][0]["time_s"]
             for i in range(2)]
    assert edges[1] < 0.9 * edges[0]  # a cap of 64 in-edges on a graph of mean degree 150
    # an epoch is the loop's plan: the capped store's pass costs its capped links, so its epoch is no longer
    steps = [t["steps_per_epoch"] for t in timed]
    assert steps[1] <= steps[0] and all(n >= 100 for n in steps)  # --min-steps-per-epoch's 100 at least
    assert all(r["full"] == [] for r in result["rows"])  # --full not asked: no 3-epoch runs


def test_a_missing_graph_is_a_one_line_error(tmp_path) -> None:
    with pytest.raises(dense_pretrain.UsageError, match="--graph: .* does not exist"):
        dense_pretrain.run(dense_pretrain.DensePretrainConfig(out=str(tmp_path / "o"), graph=str(tmp_path / "no.npz")))
