"""bench.dense_ball: both paths of the two-hop ball give the same means; the table gives the ratio to the unique path
and the automatic choice (the timings themselves are measurements, not asserted)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from bench import dense_ball


def test_measure_both_paths_agree_and_the_dense_graph_takes_the_matrix() -> None:
    g = torch.Generator().manual_seed(0)
    n = 120
    ei = torch.randint(0, n, (2, 40 * n), generator=g)
    row = dense_ball.measure(torch.randn(n, 4, generator=g), ei, fanout=5, repeats=1)
    assert row["auto"] == "matrix" and row["max_diff"] < 1e-5
    assert row["nodes"] == n and row["links"] == 40 * n
    sparse = torch.randint(0, 3000, (2, 6000), generator=g)
    assert dense_ball.measure(torch.randn(3000, 4, generator=g), sparse, 5, 1)["auto"] == "unique"


def test_table_ratio_against_the_unique_path() -> None:
    rows = [{"graph": "g", "links": 1000, "sample_s": 0.5, "unique_s": 4.0, "matrix_s": 1.0, "auto": "matrix",
             "max_diff": 1e-7},
            {"graph": "h", "links": 10, "sample_s": 0.1, "unique_s": 0.2, "matrix_s": 0.4, "auto": "unique",
             "max_diff": 0.0}]
    text = dense_ball.table(rows)
    assert "| g | 1,000 | 0.50 | 4.00 | 1.00 | 4.00x faster | matrix | 1.0e-07 |" in text
    assert "| h | 10 | 0.10 | 0.20 | 0.40 | 0.50x slower | unique | 0.0e+00 |" in text


def test_a_missing_graph_is_a_one_line_error(tmp_path) -> None:
    with pytest.raises(dense_ball.UsageError, match="--graph: .* does not exist"):
        dense_ball.main(["--graph", str(tmp_path / "no.npz")])


def test_a_graph_file_is_read(tmp_path, capsys) -> None:
    rng = np.random.default_rng(0)
    n = 80
    src, dst = rng.integers(0, n, 600), rng.integers(0, n, 600)
    path = tmp_path / "g.npz"
    np.savez(path, x=rng.normal(size=(n, 3)).astype(np.float32), edge_index=np.stack([src, dst]))
    assert dense_ball.main(["--graph", str(path), "--repeats", "1", "--fanout", "3"]) == 0
    assert "| g.npz |" in capsys.readouterr().out
