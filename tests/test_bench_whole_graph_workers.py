"""bench.whole_graph_workers: the three modes pre-train the same store; with split targets each of two workers
averages the contexts of about half of the links a step (the timings themselves are measurements, not asserted)."""

from __future__ import annotations

import json

import pytest

from bench import whole_graph_workers as wgw
from gcad_dist.cli import UsageError


def test_table_ratios_against_the_baseline_and_one_worker() -> None:
    result = {"rows": [
        {"mode": "2 workers, every node (before)", "timed": {"rc": 0, "s_per_step": 1.2}, "full": []},
        {"mode": "1 worker", "timed": {"rc": 0, "s_per_step": 1.0}, "full": []},
        {"mode": "2 workers, split targets (default)", "timed": {"rc": 0, "s_per_step": 0.6},
         "full": [{"seed": 0, "pretrain": {"train_seconds": 90.0}, "auroc": 0.9, "auprc": 0.5}]}]}
    text = wgw.table(result)
    assert "| 2 workers, every node (before) | 1.200 | baseline | 0.83x |" in text
    assert "| 2 workers, split targets (default) | 0.600 | 2.00x faster | 1.67x | 0: 90 s, 0.9000 / 0.5000 |" in text


def test_modes_and_bad_input() -> None:
    m = wgw.modes(wgw.WholeGraphWorkersConfig(workers=3))
    assert [(w, extra) for _, w, extra in m] == [(3, ["--no-shard-targets"]), (1, []), (3, [])]
    with pytest.raises(UsageError, match="--workers"):
        wgw.run(wgw.WholeGraphWorkersConfig(workers=1))


@pytest.mark.slow
def test_split_targets_train_on_half_the_links_a_worker(tmp_path) -> None:
    out = tmp_path / "b"
    result = wgw.run(wgw.WholeGraphWorkersConfig(out=str(out), nodes=300, avg_degree=20, steps=3))
    assert all(r["timed"]["rc"] == 0 for r in result["rows"])

    def links_a_step(i: int) -> float:
        h = json.loads((out / f"timed{i}" / "metrics.json").read_text())["history"][0]
        return h["edges_per_s"] * h["time_s"] / h["steps"]  # summed over the workers

    every, one, split = (links_a_step(i) for i in range(3))
    assert every == pytest.approx(2 * one)  # before: both workers averaged every node's context
    assert split == pytest.approx(one)  # now the two shares together are the one step's links
