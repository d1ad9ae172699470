"""bench.tree_columns: the forest view's trees with and without local-inconsistency columns, on a small generated
graph."""

from __future__ import annotations

import re

import numpy as np
import pytest

from bench.tree_columns import ARMS, DEFAULT_ARMS, LABELS, label_columns, label_free_columns, main, measure


@pytest.fixture
def path(planted_trees_npz):
    """conftest's small generated graph with 6% planted anomalies."""
    return planted_trees_npz


def test_the_table_compares_the_arms_on_validation(path, capsys) -> None:
    assert main(["--datasets", str(path), str(path), "--seeds", "0", "1"]) == 0
    out = capsys.readouterr().out
    n = len(DEFAULT_ARMS)
    assert " | ".join(f"{ARMS[m][0]}: AUROC / AUPRC" for m in DEFAULT_ARMS) in out
    row = next(line for line in out.splitlines() if line.startswith(f"| {path} |"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[1] == "2" and len(cells) == 3 + n + n - 1
    for cell in cells[3:3 + n]:  # every arm finds the planted anomalies on validation
        auroc, auprc = (float(v) for v in cell.split(" / "))
        assert 0.6 < auroc <= 1.0 and 0.0 < auprc <= 1.0
    for cell in cells[3 + n:]:
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
    names = sorted({n for _, _, v in ARMS.values() for n in v} - {LABELS})
    cols = dict(zip(names, label_free_columns(data, tuple(names)).T))
    shuffled = data.clone()
    shuffled.y = data.y[torch.randperm(data.num_nodes, generator=torch.Generator().manual_seed(0))]
    np.testing.assert_array_equal(label_free_columns(shuffled, tuple(names)), np.stack([cols[n] for n in names], 1))
    got = measure(data, 0, 1, cols, DEFAULT_ARMS)
    assert set(got) == {"anomalies", *DEFAULT_ARMS}
    split = make_split(data, seed=0)
    y = torch.as_tensor(data.y).numpy()
    val = split.val.numpy()
    for arm in DEFAULT_ARMS:
        _, local, used = ARMS[arm]
        extra = [torch.from_numpy(fit_score(n, data, None, 0)).float()[:, None] for n in used]
        x = torch.cat([data.x, *extra], dim=1)
        blend = fit_tree_blend(x, data.edge_index, y, split.train.numpy(), seed=0, passthrough=len(used), local=local)
        assert got[arm][0] == pytest.approx(auroc(y[val], blend(x, data.edge_index).numpy()[val]), abs=1e-12)
    # the local columns are the detectors' scores: passed through instead, the same trees
    lf = ("nbr-cosine", "local-knn")
    x = torch.cat([data.x, *[torch.from_numpy(fit_score(n, data, None, 0)).float()[:, None] for n in lf]], dim=1)
    blend = fit_tree_blend(x, data.edge_index, y, split.train.numpy(), seed=0, passthrough=2)
    arm = "local"
    assert got[arm][0] == pytest.approx(auroc(y[val], blend(x, data.edge_index).numpy()[val]), abs=1e-12)


def test_a_graph_without_labels_is_refused(unlabelled_npz) -> None:
    from partitioning.errors import GraphInputError

    with pytest.raises(GraphInputError, match="no labels"):
        main(["--datasets", str(unlabelled_npz)])


def test_the_label_arm_passes_the_training_anomalies_neighbour_labels_through(path) -> None:
    """The ``labels`` arm is the ``local`` blend with GCCAD's two neighbour-label columns passed through, built from
    the training split's anomalies only (a label outside it changes nothing); below 10 training anomalies (GCCAD's
    rule) it reads no label and is the ``local`` blend."""
    import torch

    from gcad_dist.data.label_inputs import neighbour_label_features
    from gcad_dist.data.splits import make_split
    from gcad_dist.metrics import auroc
    from gcad_dist.model.tree_blend import fit_tree_blend
    from gcad_dist.quality import _load

    _, data = _load(path)
    split = make_split(data, seed=1)
    y = torch.as_tensor(data.y).numpy()
    train, val = split.train.numpy(), split.val.numpy()
    got = measure(data, 1, 1, {}, ["local", "labels"])
    lab = neighbour_label_features(data.edge_index, int(data.num_nodes), torch.from_numpy(train & (y == 1)))
    assert int((y[train] == 1).sum()) >= 10 and lab[:, 0].max() > 0
    x = torch.cat([data.x, lab], dim=1)
    blend = fit_tree_blend(x, data.edge_index, y, train, seed=1, passthrough=2, local=True)
    assert got["labels"][0] == pytest.approx(auroc(y[val], blend(x, data.edge_index).numpy()[val]), abs=1e-12)
    flipped = y.copy()
    flipped[~train] = 1 - np.clip(flipped[~train], 0, 1)
    np.testing.assert_array_equal(label_columns(data, flipped, train, 10).numpy(), lab.numpy())
    assert label_columns(data, y, train, 9) is None  # GCCAD's rule: no label inputs below 10 training anomalies
