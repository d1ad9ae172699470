"""bench.score_memory: both modes score a label-free checkpoint alike, each in its own process, and the table says
so (the memory figures themselves are measurements, not asserted)."""

from __future__ import annotations

import numpy as np
import pytest

from bench import score_memory


def test_table_ratios_and_score_differences() -> None:
    rows = [{"mode": "h0", "seconds": 10.0, "max_rss_mb": 2048, "auroc": 0.9, "auprc": 0.5,
             "scores": np.array([0.1, 0.2, 0.3])},
            {"mode": "input", "seconds": 5.0, "max_rss_mb": 1024, "auroc": 0.9, "auprc": 0.5,
             "scores": np.array([0.1, 0.2, 0.3005])}]
    text = score_memory.table(rows)
    assert "| input | 5.0 | 1.00 | 0.50x | 0.50x | 0.9000 | 0.5000 | 5.00e-04 |" in text
    assert "| h0 | 10.0 | 2.00 | 1.00x | 1.00x |" in text


def test_both_modes_score_a_local_checkpoint_alike(rings_graph, make_checkpoint, tmp_path) -> None:
    ckpt = make_checkpoint("local", contrast="local", loss="logistic", ensemble=5, degree_detrend=True,
                           ball_switch=True)
    rows = score_memory.run(score_memory.ScoreMemoryBenchConfig(checkpoint=str(ckpt), graph=str(rings_graph),
                                                                out=str(tmp_path / "out")))
    assert [r["mode"] for r in rows] == ["h0", "input"]
    assert all(r["max_rss_mb"] > 0 and r["seconds"] > 0 for r in rows)
    assert rows[0]["scores"].shape == (400,)
    np.testing.assert_allclose(rows[1]["scores"], rows[0]["scores"], atol=1e-5)
    assert rows[1]["auroc"] == pytest.approx(rows[0]["auroc"], abs=1e-4)


def test_child_mode_must_be_known() -> None:
    with pytest.raises(score_memory.UsageError, match="--child"):
        score_memory.main(["--child", "gpu"])


def test_missing_inputs_and_a_failed_run_are_one_line_errors(tmp_path, make_checkpoint) -> None:
    with pytest.raises(score_memory.UsageError, match="--checkpoint: .* does not exist"):
        score_memory.main(["--checkpoint", str(tmp_path / "none"), "--graph", str(tmp_path), "--out", str(tmp_path)])
    ckpt = make_checkpoint("local", contrast="local", loss="logistic", ensemble=2)
    bad = tmp_path / "bad.npz"
    bad.write_bytes(b"not a graph")
    with pytest.raises(score_memory.UsageError, match="h0: gcad_dist.score failed .*whole log"):
        score_memory.run(score_memory.ScoreMemoryBenchConfig(checkpoint=str(ckpt), graph=str(bad),
                                                            out=str(tmp_path / "out")))
