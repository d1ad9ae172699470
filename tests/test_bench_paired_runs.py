"""bench.paired_runs: two bench.pretrain_transfer folders compared run by run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.paired_runs import compare, main, table
from gcad_dist.cli import UsageError


def _run(root: Path, ds: str, frac: str, seed: int, auroc: float, auprc: float) -> None:
    d = root / ds / f"ft{frac}-s{seed}"
    d.mkdir(parents=True)
    m = {"auroc": auroc, "auprc": auprc}
    (d / "metrics.json").write_text(json.dumps({"val": m, "test": m}))


def test_paired_changes_per_dataset_and_their_mean(tmp_path, capsys) -> None:
    old, new = tmp_path / "old", tmp_path / "new"
    for s, (a, b) in enumerate([(0.6, 0.7), (0.5, 0.5), (0.7, 0.6)]):
        _run(old, "g1", "0.1", s, a, 0.1)
        _run(new, "g1", "0.1", s, b, 0.2)
    _run(old, "g2", "0.1", 0, 0.9, 0.5)
    _run(new, "g2", "0.1", 0, 0.8, 0.4)
    _run(new, "g2", "0.1", 1, 0.8, 0.4)  # in one folder only
    r = compare(old, new)
    g1, g2 = r["rows"]
    assert g1["d_auroc"] == pytest.approx(0.0) and g1["d_auprc"] == pytest.approx(0.1)
    assert (g1["ahead"], g1["level"]) == (1, 1)
    assert g2["seeds"] == [0] and g2["d_auroc"] == pytest.approx(-0.1)
    assert r["mean"]["d_auroc"] == pytest.approx(-0.05) and r["mean"]["worst_d_auroc"] == pytest.approx(-0.1)
    assert r["unpaired"] == ["g2/ft0.1-s1"]
    assert "| g1 | 0.1 | 3 |" in table(r) and "g2/ft0.1-s1" in table(r)
    assert main([str(old), str(new), "--json", str(tmp_path / "r.json")]) == 0
    assert json.loads((tmp_path / "r.json").read_text())["mean"] == r["mean"]


def test_empty_folders_are_a_usage_error(tmp_path) -> None:
    (tmp_path / "a").mkdir()
    with pytest.raises(UsageError, match="no fine-tuning run"):
        compare(tmp_path / "a", tmp_path / "a")
