"""bench.knn_view: both scores timed on the same features, the forest the ratio's baseline; bad sizes are one line."""

from __future__ import annotations

import pytest

pytest.importorskip("faiss")


def test_table_times_both_scores_with_the_forest_as_baseline(capsys: pytest.CaptureFixture[str]) -> None:
    from bench.knn_view import KnnViewConfig, main, run

    records = run(KnnViewConfig(nodes=[300], features=4))
    assert len(records) == 1 and records[0]["rows"] == 300 and records[0]["reference"] == 300
    assert records[0]["forest_s"] > 0 and records[0]["knn_s"] > 0
    assert main(["--nodes", "200", "--features", "3"]) == 0
    out = capsys.readouterr().out
    assert "isolation forest s (baseline)" in out and "| 200 | 3 | 200 |" in out and out.rstrip().endswith("x |")


def test_bad_sizes_are_a_usage_error() -> None:
    from bench.knn_view import main

    with pytest.raises(SystemExit):
        main(["--nodes", "5"])
