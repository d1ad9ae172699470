"""bench.study: the (dataset, seed) records a bench writes and reads back."""

from __future__ import annotations

import json

import pytest


def test_a_study_runs_each_pair_once_writes_it_whole_and_resumes(tmp_path) -> None:
    from bench.study import run_study

    calls = []

    def run_one(ds: str, seed: int) -> dict:
        calls.append((ds, seed))
        return {"dataset": ds, "seed": seed, "arms": [1, 2]}

    recs = run_study(tmp_path / "o", ["a", "b"], [0, 1], run_one)
    assert calls == [("a", 0), ("a", 1), ("b", 0), ("b", 1)] and [r["seed"] for r in recs] == [0, 1, 0, 1]
    assert json.loads((tmp_path / "o" / "b-s1.json").read_text()) == recs[-1]
    assert not list((tmp_path / "o").glob("*.tmp"))
    calls.clear()
    assert run_study(tmp_path / "o", ["a", "b"], [0, 1], run_one) == recs and calls == []  # read back, none run
    # a record the bench no longer accepts (other arms) is run again; a stopped study runs only what is missing
    (tmp_path / "o" / "a-s0.json").write_text(json.dumps({"dataset": "a", "seed": 0, "arms": [3, 4]}))
    (tmp_path / "o" / "b-s0.json").unlink()
    run_study(tmp_path / "o", ["a", "b"], [0, 1], run_one, reuse=lambda r: r["arms"] == [1, 2])
    assert calls == [("a", 0), ("b", 0)]


def test_seeds_are_checked_with_the_option_named() -> None:
    from bench.study import parse_seeds
    from gcad_dist.cli import UsageError

    assert parse_seeds("0, 1,2,") == [0, 1, 2]
    with pytest.raises(UsageError, match="--seeds: comma-separated integers"):
        parse_seeds("0,x")
    with pytest.raises(UsageError, match="--seeds: at least one"):
        parse_seeds(" , ")


def test_the_paired_table_gives_each_datasets_means_its_change_and_the_mean_and_worst_over_datasets() -> None:
    from bench.study import paired_table

    def rec(ds: str, old: list[float], new: list[float], joined: bool) -> dict:
        return {"dataset": ds, "old": {"test": old}, "new": {"test": new, "joined": joined}}

    recs = [rec("b", [0.5, 0.1], [0.7, 0.2], True), rec("b", [0.7, 0.3], [0.7, 0.4], False),
            rec("a", [0.9, 0.5], [0.8, 0.5], False)]
    joined = ("joined", lambda rs: f"{sum(r['new']['joined'] for r in rs)} of {len(rs)}")
    lines = paired_table(recs, ("old", "new"), lambda r, arm: r[arm]["test"], "test", names=("before", "after"),
                         before=[("n", lambda rs: str(len(rs) * 10))], after=[joined]).splitlines()
    assert lines[0] == "| dataset (test) | seeds | n | before AUROC / AUPRC | after AUROC / AUPRC | change | joined |"
    assert lines[1] == "|---|---|---|---|---|---|---|"
    assert lines[2] == "| a | 1 | 10 | 0.9000 / 0.5000 | 0.8000 / 0.5000 | -0.1000 / +0.0000 | 0 of 1 |"
    assert lines[3] == "| b | 2 | 20 | 0.6000 / 0.2000 | 0.7000 / 0.3000 | +0.1000 / +0.1000 | 1 of 2 |"
    # each dataset weighs alike (a's one seed as much as b's two); worst is per column
    assert lines[4] == "| mean over datasets | | | | | +0.0000 / +0.0500 (worst -0.1000 / +0.0000) | |"
    assert len(lines) == 5
    # datasets in the given order; no records, no rows
    order = paired_table(recs, ("old", "new"), lambda r, arm: r[arm]["test"], "test", order=lambda s: s != "b")
    assert [ln.split(" | ")[0] for ln in order.splitlines()[2:4]] == ["| b", "| a"]
    assert len(paired_table([], ("old", "new"), lambda r, arm: [0, 0], "val").splitlines()) == 2
