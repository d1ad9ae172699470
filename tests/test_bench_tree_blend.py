"""bench.tree_blend: the validation table of the forest view's trees on a small generated graph, and clear errors."""

from __future__ import annotations

import re

import pytest

from bench.tree_blend import main
from gcad_dist.cli import UsageError


@pytest.fixture
def path(planted_trees_npz):
    """conftest's small generated graph with 6% planted anomalies."""
    return planted_trees_npz


def test_the_table_measures_the_forest_the_boosted_trees_and_their_blend(path, capsys) -> None:
    assert main(["--datasets", str(path), "--seeds", "0", "1"]) == 0
    out = capsys.readouterr().out
    assert "| forest (baseline): AUROC / AUPRC |" in out
    row = next(line for line in out.splitlines() if line.startswith(f"| {path} |"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[1] == "2"
    n_train, n_val = cells[2].split(" / ")
    assert int(n_train.split("-")[0]) >= 30 and int(n_val.split("-")[0]) >= 10  # 6% of 40% / 20% of 1500 nodes
    for cell in cells[3:6]:  # each model finds the planted anomalies on validation
        auroc, auprc = (float(v) for v in cell.split(" / "))
        assert 0.6 < auroc <= 1.0 and 0.0 < auprc <= 1.0
    assert re.fullmatch(r"[+-]\d\.\d{4} / [+-]\d\.\d{4}", cells[6])
    assert re.fullmatch(r"\d/2, \d/2", cells[7])


def _anomaly_counts(out: str, path) -> tuple[int, int]:
    row = next(line for line in out.splitlines() if line.startswith(f"| {path} |"))
    n_train, n_val = row.strip("|").split("|")[2].strip().split(" / ")
    return int(n_train), int(n_val)


def test_label_fraction_fits_the_trees_on_fewer_training_anomalies(path, capsys) -> None:
    assert main(["--datasets", str(path), "--seeds", "0"]) == 0
    full = _anomaly_counts(capsys.readouterr().out, path)
    assert main(["--datasets", str(path), "--seeds", "0", "--label-fraction", "0.1"]) == 0
    tenth = _anomaly_counts(capsys.readouterr().out, path)
    assert tenth[0] == max(1, round(0.1 * full[0]))  # the stratified sample of gcad_dist.train --label-fraction
    assert tenth[1] == full[1]  # validation untouched
    with pytest.raises(UsageError, match="--label-fraction"):
        main(["--datasets", str(path), "--label-fraction", "0"])


def test_a_graph_without_labels_is_refused(unlabelled_npz) -> None:
    from partitioning.errors import GraphInputError

    with pytest.raises(GraphInputError, match="no labels"):
        main(["--datasets", str(unlabelled_npz)])


def test_a_split_without_anomalies_in_training_is_one_line(tmp_path) -> None:
    import numpy as np

    n = 200
    path = tmp_path / "few.npz"
    y = np.zeros(n, dtype=np.int64)
    y[0] = 1  # one anomaly, outside seed 0's training split: no tree can be fitted there
    np.savez(path, x=np.random.default_rng(0).normal(size=(n, 4)).astype(np.float32),
             edge_index=np.stack([np.arange(n), (np.arange(n) + 1) % n]), y=y)
    with pytest.raises(UsageError, match="seed 0: the training nodes hold a single class"):
        main(["--datasets", str(path), "--seeds", "0", "1", "2", "3"])
