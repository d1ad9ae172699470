"""Known labels as inputs (gcad_dist.data.label_inputs): what the columns count, that no validation or test label
enters them, the masked trick's draws, and that a fit with them finds anomalies that only their neighbours give away."""

from __future__ import annotations

import pytest
import torch

from gcad_dist.data.label_inputs import (LABEL_COLUMNS, LabelInputSampler, neighbour_label_features,
                                         with_label_inputs)


def _undirected(pairs: list[tuple[int, int]]) -> torch.Tensor:
    ei = torch.tensor(pairs).t()
    return torch.cat([ei, ei.flip(0)], 1)


def test_columns_count_the_neighbours_labelled_anomalous():
    # path 0-1-2-3 plus 1-3; node 4 alone
    ei = _undirected([(0, 1), (1, 2), (2, 3), (1, 3)])
    anomalous = torch.tensor([True, False, True, False, False])
    f = neighbour_label_features(ei, 5, anomalous)
    count = torch.expm1(f[:, 0])
    assert torch.allclose(count, torch.tensor([0.0, 2.0, 0.0, 1.0, 0.0]), atol=1e-6)  # 1 sees 0 and 2; 3 sees 2
    assert torch.allclose(f[:, 1], torch.tensor([0.0, 2 / 3, 0.0, 0.5, 0.0]))  # shares of in-degree; alone: 0
    assert f.shape == (5, LABEL_COLUMNS)


def test_only_training_labels_enter_the_inputs():
    """Flipping every label outside the train split changes neither the columns nor the training draws."""
    from torch_geometric.data import Data

    from gcad_dist.data.splits import stratified_split

    torch.manual_seed(0)
    n = 300
    y = (torch.rand(n) < 0.2).long()
    ei = torch.randint(0, n, (2, 1500))
    data = Data(x=torch.randn(n, 3), edge_index=torch.cat([ei, ei.flip(0)], 1), y=y)
    split = stratified_split(y, seed=0)
    flipped = data.clone()
    flipped.y = torch.where(split.train, y, 1 - y)
    a, b = with_label_inputs(data, split.train), with_label_inputs(flipped, split.train)
    assert torch.equal(a.x, b.x) and a.x.size(1) == 3 + LABEL_COLUMNS and data.x.size(1) == 3
    assert torch.equal(a.x[:, :3], data.x)
    sa = LabelInputSampler(data.edge_index, n, data.y, split.train, seed=1)
    sb = LabelInputSampler(flipped.edge_index, n, flipped.y, split.train, seed=1)
    for _ in range(3):
        (fa, ma), (fb, mb) = sa.sample(), sb.sample()
        assert torch.equal(fa, fb) and torch.equal(ma, mb)


def test_each_epoch_lends_half_of_the_anomalies_and_trains_on_every_other_node():
    n = 40
    y = torch.zeros(n, dtype=torch.long)
    y[:7] = 1
    train = torch.zeros(n, dtype=torch.bool)
    train[:30] = True  # 7 anomalies, 23 normals
    ei = _undirected([(i, (i + 1) % n) for i in range(n)])
    s = LabelInputSampler(ei, n, y, train, seed=0)
    masks = []
    for _ in range(4):
        feats, loss_mask = s.sample()
        lent = train & ~loss_mask
        assert not (loss_mask & ~train).any()  # the loss stays on training nodes
        assert int((lent & (y == 1)).sum()) == 3  # floor(0.5 * 7) anomalies lent
        assert bool(loss_mask[train & (y == 0)].all())  # a normal label is never an input: every normal is in the loss
        # the columns come from the lent anomalies only
        assert torch.allclose(feats, neighbour_label_features(ei, n, lent & (y == 1)))
        masks.append(loss_mask)
    assert any(not torch.equal(masks[0], m) for m in masks[1:])  # redrawn every epoch
    again = LabelInputSampler(ei, n, y, train, seed=0)
    assert torch.equal(again.sample()[1], masks[0])  # seeded
    one = y.clone()
    one[1:7] = 0  # a single training anomaly is never lent: it stays in the loss
    s1 = LabelInputSampler(ei, n, one, train, seed=0)
    assert all(bool(s1.sample()[1][0]) for _ in range(5))
    with pytest.raises(ValueError, match="rate"):
        LabelInputSampler(ei, n, y, train, seed=0, rate=1.0)


def _ring_graph(n: int = 600, rings: int = 12, size: int = 5, seed: int = 0):
    """Random sparse graph with ``rings`` cliques of ``size`` anomalies; features carry no signal at all."""
    from torch_geometric.data import Data

    from gcad_dist.data.splits import stratified_split

    g = torch.Generator().manual_seed(seed)
    ei = torch.randint(0, n, (2, 2 * n), generator=g)
    members = torch.randperm(n, generator=g)[: rings * size].view(rings, size)
    ring_edges = torch.stack([members[:, :, None].expand(-1, -1, size), members[:, None, :].expand(-1, size, -1)])
    ring_edges = ring_edges.reshape(2, -1)
    ring_edges = ring_edges[:, ring_edges[0] != ring_edges[1]]
    y = torch.zeros(n, dtype=torch.long)
    y[members.flatten()] = 1
    edge_index = torch.cat([ei, ei.flip(0), ring_edges], 1)
    data = Data(x=torch.randn(n, 4, generator=g), edge_index=edge_index, y=y)
    return data, stratified_split(y, seed=seed)


def test_a_fit_with_label_inputs_finds_rings_that_features_hide():
    """Ring members share nothing but their links to each other: an MLP sees them only through the label columns."""
    from gcad_dist.model.baselines import BaselineConfig, build_baseline
    from gcad_dist.supervised import SupervisedConfig, fit_supervised

    torch.set_num_threads(1)
    data, split = _ring_graph()
    cfg = SupervisedConfig(epochs=80, lr=1e-2, eval_every=5, snapshots=1, progress=False, seed=0)
    torch.manual_seed(0)
    plain = fit_supervised(build_baseline(BaselineConfig(in_dim=4, kind="mlp", hidden=16)), data, split, cfg)
    torch.manual_seed(0)
    with_labels = fit_supervised(build_baseline(BaselineConfig(in_dim=4 + LABEL_COLUMNS, kind="mlp", hidden=16)),
                                 with_label_inputs(data, split.train), split,
                                 SupervisedConfig(**{**cfg.__dict__, "label_inputs": True}))
    assert plain.test["auroc"] < 0.65, plain.test
    assert with_labels.test["auroc"] > 0.8, with_labels.test


def test_label_inputs_need_their_columns():
    from gcad_dist.model.baselines import BaselineConfig, build_baseline
    from gcad_dist.supervised import SupervisedConfig, fit_supervised

    data, split = _ring_graph(n=100, rings=2)  # 4 feature columns, none of them label inputs
    with pytest.raises(ValueError, match="label_inputs"):
        fit_supervised(build_baseline(BaselineConfig(in_dim=4, kind="mlp", hidden=8)), data, split,
                       SupervisedConfig(epochs=2, progress=False, label_inputs=True))


def test_train_cli_label_inputs_checkpoint_scores_and_finetune_refuses(tmp_path, capsys):
    """``gcad_dist.train --label-inputs``: the model reads F + 2 columns, the checkpoint says so, ``gcad_dist.score``
    rebuilds the columns from the graph's labels (the same as training's where only the train split is labelled), and
    fine-tuning such a checkpoint is refused with a one-line error."""
    import json

    from gcad_dist.score import load_checkpoint_model, prepare_data
    from gcad_dist.supervised import predict
    from gcad_dist.train import load_labelled
    from gcad_dist.data.splits import make_split
    from tests.test_train import _cli, _generate

    g = _generate(tmp_path / "g.npz", nodes=300)
    out = tmp_path / "run"
    code, err = _cli(["gcad_dist.train", "--graph", str(g), "--out", str(out), "--epochs", "4", "--eval-every", "2",
                      "--hidden", "8", "--threads", "1", "--no-progress", "--no-plots", "--contrast", "graph",
                      "--label-inputs"], capsys)
    assert code == 0, err
    m = json.loads((out / "metrics.json").read_text())
    assert m["config"]["label_inputs"] is True and m["model_config"]["in_dim"] == 8 + LABEL_COLUMNS
    loaded = load_checkpoint_model(out)
    assert loaded.label_inputs and loaded.in_dim == 8 + LABEL_COLUMNS
    # the graph with only its training labels kept: scoring builds exactly the columns the run was selected with
    data = load_labelled(str(g))
    split = make_split(data, seed=0)
    only_train = data.clone()
    only_train.y = torch.where(split.train, data.y, torch.full_like(data.y, -1))
    scored = prepare_data(only_train, loaded, normalize="none")
    assert torch.equal(scored.x, with_label_inputs(data, split.train).x)
    s = predict(loaded.model, scored).numpy()
    from gcad_dist.metrics import evaluate

    assert evaluate(data.y, s, mask=split.val)["auprc"] == pytest.approx(m["val"]["auprc"], abs=1e-6)
    code, err = _cli(["gcad_dist.finetune", "--checkpoint", str(out), "--graph", str(g), "--out", str(tmp_path / "ft")],
                     capsys)
    assert code == 2 and "--label-inputs" in err and "Traceback" not in err


def test_trees_read_the_label_columns():
    """``gcad_dist.quality --label-inputs`` gives the tree ensemble the same two columns (one hop, so no mask is
    needed): its scores are those of the forest fitted on ``[x, mean nbr x, degree, label columns, the second hop's
    mean]`` (the label columns are passed through, not averaged again)."""
    import numpy as np
    from sklearn.ensemble import RandomForestClassifier

    from gcad_dist.detectors import fit_score
    from gcad_dist.model.forest import graph_features

    data, split = _ring_graph(n=200, rings=4, seed=1)
    got = fit_score("trees", data, split, 0, label_inputs=True, threads=1)
    f = data.x.shape[1]
    two = graph_features(data.x, data.edge_index, hops=2).numpy()
    labels = with_label_inputs(data, split.train).x[:, -LABEL_COLUMNS:].numpy()
    feats = np.concatenate([two[:, : 2 * f + 1], labels, two[:, 2 * f + 1 :]], 1)
    tr = split.train.numpy()
    y = data.y.numpy()[tr]
    w = np.where(y == 1, (y.size - y.sum()) / y.sum(), 1.0)
    forest = RandomForestClassifier(n_estimators=100, max_features="sqrt", random_state=0, n_jobs=1)
    want = forest.fit(feats[tr], y, sample_weight=w).predict_proba(feats)[:, 1]
    assert np.allclose(got, want)
    assert not np.allclose(got, fit_score("trees", data, split, 0, label_inputs=False, threads=1))


def test_label_inputs_default_on_for_gccad_only():
    from gcad_dist.supervised import SupervisedConfig
    from gcad_dist.train import TrainConfig, resolve_label_inputs, supervised_config

    assert resolve_label_inputs("gccad") and resolve_label_inputs("gccad-ce")
    assert not any(resolve_label_inputs(m) for m in ("mlp", "gcn", "gin", "sage", "gat"))
    assert not resolve_label_inputs("gccad", False) and resolve_label_inputs("sage", True)
    assert supervised_config(TrainConfig(graph="", out="")).label_inputs is True
    assert supervised_config(TrainConfig(graph="", out="", model="sage")).label_inputs is False
    assert SupervisedConfig().label_inputs is False  # the loop itself only reads columns it is told about



def test_label_inputs_need_ten_labelled_training_anomalies():
    """GCCAD's default reads the label inputs only when the fit's training labels hold at least 10 anomalies (the
    masked trick leaves half of them in each epoch's loss); a given value always wins; the settings record says
    which rule decided."""
    from gcad_dist.train import LABEL_INPUTS_MIN_ANOMALIES, label_inputs_rule, resolve_label_inputs

    assert LABEL_INPUTS_MIN_ANOMALIES == 10
    assert not resolve_label_inputs("gccad", None, 9) and resolve_label_inputs("gccad", None, 10)
    assert resolve_label_inputs("gccad", True, 1) and not resolve_label_inputs("gccad", False, 500)
    assert not resolve_label_inputs("sage", None, 500) and resolve_label_inputs("gccad", None, None)
    assert label_inputs_rule("gccad") == "from 10 labelled training anomalies"
    assert label_inputs_rule("gccad", True) is True and label_inputs_rule("sage") is False


@pytest.mark.parametrize("fraction,want", [(1.0, True), (0.1, False)])
def test_train_cli_resolves_label_inputs_from_the_kept_labels(tmp_path, capsys, fraction, want):
    """``gcad_dist.train`` counts the anomalies among the training labels it fits on (after --label-fraction): the
    run records what it did, the model's width follows, and the checkpoint says so."""
    import json

    from gcad_dist.score import load_checkpoint_model
    from tests.test_train import _cli, _generate

    g = _generate(tmp_path / "g.npz", nodes=600)
    out = tmp_path / "run"
    code, err = _cli(["gcad_dist.train", "--graph", str(g), "--out", str(out), "--epochs", "2", "--eval-every", "1",
                      "--hidden", "8", "--threads", "1", "--no-progress", "--no-plots", "--contrast", "graph",
                      "--label-fraction", str(fraction)], capsys)
    assert code == 0, err
    m = json.loads((out / "metrics.json").read_text())
    n = m["label_budget"]["train_labelled_anomalies"]
    assert (n >= 10) is want
    assert m["config"]["label_inputs"] is want and m["model_config"]["in_dim"] == 8 + (LABEL_COLUMNS if want else 0)
    assert load_checkpoint_model(out).label_inputs is want
