"""bench.signature_view: the cost table on a small generated graph, and a clear error for a graph without labels."""

from __future__ import annotations

import pytest

from bench.signature_view import main
from gcad_dist.cli import UsageError


def test_the_table_times_the_view_against_the_forest(tmp_path, capsys) -> None:
    from partitioning.io import save_npz
    from partitioning.synthetic import SyntheticConfig, generate

    path = tmp_path / "g.npz"
    save_npz(generate(SyntheticConfig(nodes=1200, avg_degree=6, features=6, seed=1)), path)
    assert main(["--graph", str(path), "--repeats", "1"]) == 0
    out = capsys.readouterr().out
    assert "| isolation forest (baseline) |" in out and "| signature view |" in out and "fit " in out


def test_a_graph_without_labels_is_refused(unlabelled_npz) -> None:
    with pytest.raises(UsageError, match="no labels"):
        main(["--graph", str(unlabelled_npz)])
