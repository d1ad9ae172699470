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
