"""bench.workers_lr: its runs, their rates and its table (the pre-training itself is gcad_dist.pretrain's, tested there)."""

from __future__ import annotations

import pytest

from bench.workers_lr import Run, main, parse_run, table
from gcad_dist.cli import UsageError
from gcad_dist.pretrain import BASE_LR, PretrainConfig, apply_auto_batch


def test_runs_parse_and_their_rates_follow_the_rules() -> None:
    run = parse_run("2:8192:per-worker")
    assert run == Run(2, 8192, "per-worker") and run.name == "w2-b8192-per-worker"
    assert run.rate() == pytest.approx(BASE_LR * 8 ** 0.5)  # one worker's batch alone: the rule before session 51
    assert parse_run("2:8192:auto").rate() is None  # left to gcad_dist.pretrain, which counts both workers' seeds
    now = apply_auto_batch(PretrainConfig(store="s", contrast="local", workers=2, batch_size=8192), 60_000)
    assert now.lr == pytest.approx(BASE_LR * 4)
    assert parse_run("1:1024:3e-3").rate() == 3e-3
    for bad in ("2:1024", "0:1024:auto", "2:many:auto", "2:1024:fast", "2:1024:-1", "2:1024:auto:x"):
        with pytest.raises(UsageError, match="--runs"):
            parse_run(bad)


def test_table_gives_differences_from_the_first_run() -> None:
    rows = [{"run": "w1-b1024-auto", "workers": 1, "seeds_per_step": 1024, "lr": 1e-3, "steps": 2931,
             "pretrain_s": 88.8, "auroc": 0.97, "auprc": 0.823},
            {"run": "w2-b1024-per-worker", "workers": 2, "seeds_per_step": 2048, "lr": 1e-3, "steps": 1467,
             "pretrain_s": 84.4, "auroc": 0.9649, "auprc": 0.8126}]
    text = table(rows).splitlines()
    assert len(text) == 4 and text[2].endswith("| +0.0000 | +0.0000 |")
    assert "| 2048 |" in text[3] and text[3].endswith("| -0.0051 | -0.0104 |")


def test_missing_inputs_are_one_line_errors(tmp_path) -> None:
    with pytest.raises(UsageError, match="--graph"):
        main(["--graph", str(tmp_path / "none.npz"), "--store", str(tmp_path), "--out", str(tmp_path / "o")])
