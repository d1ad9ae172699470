"""bench.forest_view: the cost table on a small generated graph, and a clear error for a graph without labels."""

from __future__ import annotations

import re

import pytest

from bench.forest_view import main
from gcad_dist.cli import UsageError


@pytest.mark.parametrize("hops", [None, 1])
def test_the_table_times_the_torch_trees_against_scikit_learn(tmp_path, capsys, hops) -> None:
    from gcad_dist.model.forest import FOREST_HOPS
    from partitioning.io import save_npz
    from partitioning.synthetic import SyntheticConfig, generate

    path = tmp_path / "g.npz"
    save_npz(generate(SyntheticConfig(nodes=1200, avg_degree=6, features=6, seed=1)), path)
    assert main(["--graph", str(path), "--repeats", "1"] + ([] if hops is None else ["--hops", str(hops)])) == 0
    out = capsys.readouterr().out
    assert f"hops={FOREST_HOPS if hops is None else hops})" in out  # the forest read the hops asked for
    for row in ("forest: scikit-learn predict_proba (baseline)", "forest: torch (checkpoint)",
                "boosted: torch (checkpoint)", "both, ranks averaged: torch (checkpoint)"):
        assert f"| {row} |" in out
    found = re.search(r"max \|torch - scikit-learn\|: forest (\S+), boosted (\S+);", out)
    assert float(found.group(1)) < 1e-6  # the checkpoint's forest scores as scikit-learn's
    assert float(found.group(2)) < 1e-4  # and its boosted trees (log-odds, summed over the trees)


def test_a_graph_without_labels_is_refused(unlabelled_npz) -> None:
    with pytest.raises(UsageError, match="no labels"):
        main(["--graph", str(unlabelled_npz)])


def test_negative_hops_are_refused(unlabelled_npz) -> None:
    with pytest.raises(UsageError, match="--hops: must be at least 1"):
        main(["--graph", str(unlabelled_npz), "--hops", "-1"])
