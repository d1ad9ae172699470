"""bench.forest_hops: the forest view's trees with the forest at one hop and at two, on a small generated graph."""

from __future__ import annotations

import re

import pytest

from bench.forest_hops import ARMS, main, measure


@pytest.fixture
def path(planted_trees_npz):
    """conftest's small generated graph with 6% planted anomalies."""
    return planted_trees_npz


def test_the_table_compares_both_blends_on_validation(path, capsys) -> None:
    assert main(["--datasets", str(path), str(path), "--seeds", "0", "1"]) == 0
    out = capsys.readouterr().out
    assert f"| {ARMS[0]}: AUROC / AUPRC | {ARMS[1]}: AUROC / AUPRC |" in out
    row = next(line for line in out.splitlines() if line.startswith(f"| {path} |"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[1] == "2"
    for cell in cells[3:5]:  # both blends find the planted anomalies on validation
        auroc, auprc = (float(v) for v in cell.split(" / "))
        assert 0.6 < auroc <= 1.0 and 0.0 < auprc <= 1.0
    assert re.fullmatch(r"[+-]\d\.\d{4} / [+-]\d\.\d{4}", cells[5])
    assert re.fullmatch(r"\d/2, \d/2", cells[6])
    assert re.search(r"Mean change over the 2 graphs: [+-]\d\.\d{4} AUROC, [+-]\d\.\d{4} AUPRC\.", out)


def test_the_arms_are_the_one_hop_blend_and_the_shipped_one(path) -> None:
    """The 'before' arm is fit_tree_blend(forest_hops=1), the 'now' arm the default fit_tree_blend."""
    import torch

    from gcad_dist.data.splits import make_split
    from gcad_dist.metrics import auroc
    from gcad_dist.model.tree_blend import fit_tree_blend
    from gcad_dist.quality import _load

    _, data = _load(path)
    got = measure(data, 0, 1)
    split = make_split(data, seed=0)
    y = torch.as_tensor(data.y).numpy()
    val = split.val.numpy()
    for name, kw in zip(ARMS, ({"forest_hops": 1}, {})):
        blend = fit_tree_blend(data.x, data.edge_index, y, split.train.numpy(), seed=0, **kw)
        assert got[name][0] == pytest.approx(auroc(y[val], blend(data.x, data.edge_index).numpy()[val]), abs=1e-12)


def test_a_graph_without_labels_is_refused(unlabelled_npz) -> None:
    from partitioning.errors import GraphInputError

    with pytest.raises(GraphInputError, match="no labels"):
        main(["--datasets", str(unlabelled_npz)])
