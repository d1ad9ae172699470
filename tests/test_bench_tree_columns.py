"""bench.tree_columns: the forest view's trees with and without local-inconsistency columns, on a small generated
graph."""

from __future__ import annotations

import re

import numpy as np
import pytest

from bench.tree_columns import ARMS, label_free_columns, main, measure


@pytest.fixture
def path(planted_trees_npz):
    """conftest's small generated graph with 6% planted anomalies."""
    return planted_trees_npz


def test_the_table_compares_the_arms_on_validation(path, capsys) -> None:
    assert main(["--datasets", str(path), str(path), "--seeds", "0", "1"]) == 0
    out = capsys.readouterr().out
    assert " | ".join(f"{m}: AUROC / AUPRC" for m in ARMS) in out
    row = next(line for line in out.splitlines() if line.startswith(f"| {path} |"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[1] == "2" and len(cells) == 3 + len(ARMS) + len(ARMS) - 1
    for cell in cells[3:3 + len(ARMS)]:  # every arm finds the planted anomalies on validation
        auroc, auprc = (float(v) for v in cell.split(" / "))
        assert 0.6 < auroc <= 1.0 and 0.0 < auprc <= 1.0
    for cell in cells[3 + len(ARMS):]:
        assert re.fullmatch(r"[+-]\d\.\d{4} / [+-]\d\.\d{4}, \d/2, \d/2", cell)
    assert len(re.findall(r"Mean change over the 2 graphs, .*: [+-]\d\.\d{4} AUROC, [+-]\d\.\d{4} AUPRC\.", out)) == 2


def test_the_arms_are_the_blend_without_and_with_the_local_columns(path) -> None:
    """The first arm is fit_tree_blend without the local columns (--forest-columns none); the second
    fit_tree_blend(local=True), the same trees as [x, neighbour cosine, local kNN] passed through; the third also the
    kNN distance passed through. No column reads a label."""
    import torch

    from gcad_dist.data.splits import make_split
    from gcad_dist.detectors import fit_score
    from gcad_dist.metrics import auroc
    from gcad_dist.model.tree_blend import fit_tree_blend
    from gcad_dist.quality import _load

    _, data = _load(path)
    names = sorted({n for _, v in ARMS.values() for n in v})
    cols = dict(zip(names, label_free_columns(data, tuple(names)).T))
    shuffled = data.clone()
    shuffled.y = data.y[torch.randperm(data.num_nodes, generator=torch.Generator().manual_seed(0))]
    np.testing.assert_array_equal(label_free_columns(shuffled, tuple(names)), np.stack([cols[n] for n in names], 1))
    got = measure(data, 0, 1, cols)
    split = make_split(data, seed=0)
    y = torch.as_tensor(data.y).numpy()
    val = split.val.numpy()
    for arm, (local, used) in ARMS.items():
        extra = [torch.from_numpy(fit_score(n, data, None, 0)).float()[:, None] for n in used]
        x = torch.cat([data.x, *extra], dim=1)
        blend = fit_tree_blend(x, data.edge_index, y, split.train.numpy(), seed=0, passthrough=len(used), local=local)
        assert got[arm][0] == pytest.approx(auroc(y[val], blend(x, data.edge_index).numpy()[val]), abs=1e-12)
    # the local columns are the detectors' scores: passed through instead, the same trees
    lf = ("nbr-cosine", "local-knn")
    x = torch.cat([data.x, *[torch.from_numpy(fit_score(n, data, None, 0)).float()[:, None] for n in lf]], dim=1)
    blend = fit_tree_blend(x, data.edge_index, y, split.train.numpy(), seed=0, passthrough=2)
    arm = list(ARMS)[1]
    assert got[arm][0] == pytest.approx(auroc(y[val], blend(x, data.edge_index).numpy()[val]), abs=1e-12)


def test_a_graph_without_labels_is_refused(unlabelled_npz) -> None:
    from partitioning.errors import GraphInputError

    with pytest.raises(GraphInputError, match="no labels"):
        main(["--datasets", str(unlabelled_npz)])
