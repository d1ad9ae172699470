"""The forest view's local-inconsistency columns (``--forest-columns local``, session 89): what the trees read, their
saved state, and a run whose checkpoint scores as training did."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
import torch

from tests.test_forest_view import _graph


def test_local_columns_are_the_detectors_scores_placed_in_the_one_hop_prefix():
    """[x, mean, degree, passthrough, neighbour cosine, local kNN, 2nd hop]: the two columns equal the ``nbr-cosine``
    and ``local-knn`` detectors' scores of the leading columns (cast to float32, as every column is)."""
    from gcad_dist.detectors import fit_score
    from gcad_dist.model.forest import LOCAL_COLUMNS, feature_columns, graph_features

    d = _graph(n=300, f=5)
    extra = torch.rand(d.num_nodes, 2, generator=torch.Generator().manual_seed(1))
    x = torch.cat([d.x, extra], dim=1)
    plain = graph_features(x, d.edge_index, passthrough=2, hops=2)
    feats = graph_features(x, d.edge_index, passthrough=2, hops=2, local=True)
    f, p, k = 5, 2, len(LOCAL_COLUMNS)
    assert feats.shape[1] == feature_columns(f, p, 2, local=True) == plain.shape[1] + k
    one_hop = feature_columns(f, p, local=True)
    torch.testing.assert_close(feats[:, :2 * f + 1 + p], plain[:, :2 * f + 1 + p])  # x, mean, degree, passthrough
    torch.testing.assert_close(feats[:, one_hop:], plain[:, 2 * f + 1 + p:])  # the 2nd hop, after them
    data = SimpleNamespace(x=d.x, edge_index=d.edge_index, num_nodes=d.num_nodes)
    for j, name in enumerate(("nbr-cosine", "local-knn")):
        want = torch.from_numpy(fit_score(name, data, None, 0)).float()
        torch.testing.assert_close(feats[:, 2 * f + 1 + p + j], want)
    assert not torch.equal(feats[:, 2 * f + 1 + p], feats[:, 2 * f + 2 + p])


def test_local_trees_score_from_their_state_and_older_states_read_no_local_columns():
    from gcad_dist.model.forest import ForestScorer
    from gcad_dist.model.tree_blend import fit_tree_blend, trees_from_state

    d = _graph()
    train = torch.arange(d.num_nodes) % 2 == 0
    blend = fit_tree_blend(d.x, d.edge_index, d.y, train, seed=0, local=True)
    assert blend.local and blend.forest.local and blend.boosted.local
    again = trees_from_state(blend.state_dict())
    assert again.local
    torch.testing.assert_close(again(d.x, d.edge_index), blend(d.x, d.edge_index))
    assert "local=True" in repr(blend.forest)
    plain = fit_tree_blend(d.x, d.edge_index, d.y, train, seed=0)
    state = plain.forest.state_dict()
    assert "local" not in state["_extra_state"] and not ForestScorer.from_state(state).local  # the state as before
    old = {k: v for k, v in plain.boosted.state_dict().items()}
    assert "local" not in old["_extra_state"] and not trees_from_state(plain.state_dict()).local
    with pytest.raises(ValueError, match="same input columns"):
        type(blend)(blend.forest, plain.boosted, list(blend.cdfs))


def test_forest_columns_local_is_checked_recorded_and_its_checkpoint_scores_as_training_did(tmp_path, capsys):
    """``gcad_dist.train --forest-columns local`` (the join test on one validation anomaly, so that the trees join):
    metrics.json records the columns, the written blend's trees read them, and the checkpoint scores the validation
    nodes as the run did; a bad value is one line, exit 2."""
    from gcad_dist.data.label_inputs import with_label_inputs
    from gcad_dist.data.splits import make_split
    from gcad_dist.finetune import FinetuneConfig
    from gcad_dist.finetune import build_parser as finetune_parser
    from gcad_dist.metrics import evaluate
    from gcad_dist.model.rank_blend import RankBlend
    from gcad_dist.score import load_checkpoint_model
    from gcad_dist.supervised import predict
    from gcad_dist.train import TrainConfig, load_labelled
    from partitioning.io import save_npz
    from partitioning.synthetic import SyntheticConfig, generate
    from tests.test_train import _cli

    assert FinetuneConfig.forest_columns == TrainConfig.forest_columns == "local"  # since session 90; as train's
    assert "--forest-columns" in finetune_parser().format_help()
    g = tmp_path / "g.npz"
    save_npz(generate(SyntheticConfig(nodes=600, avg_degree=6, features=8, anomaly_fraction=0.06,
                                      anomaly_mix=(0, 1, 0, 1), seed=5)), g)
    args = ["gcad_dist.train", "--graph", str(g), "--epochs", "4", "--eval-every", "2", "--hidden", "8",
            "--threads", "1", "--no-progress", "--no-plots", "--seed", "0", "--pretrain", "off",
            "--forest-min-anomalies", "1"]
    code, err = _cli([*args, "--out", str(tmp_path / "bad"), "--forest-columns", "global"], capsys)
    assert code == 2 and "--forest-columns" in err and "Traceback" not in err
    code, err = _cli([*args, "--out", str(tmp_path / "run"), "--forest-columns", "local"], capsys)
    assert code == 0, err
    m = json.loads((tmp_path / "run" / "metrics.json").read_text())
    fv = m["forest_view"]
    assert fv["columns"] == "local" and "neighbour cosine" in fv["rule"] and m["config"]["forest_columns"] == "local"
    assert fv["kept"], fv
    loaded = load_checkpoint_model(tmp_path / "run")
    assert isinstance(loaded.model, RankBlend)
    trees = loaded.model.members[1]
    assert trees.local
    data = load_labelled(str(g))
    split = make_split(data, seed=0)
    s = predict(loaded.model, with_label_inputs(data, split.train) if loaded.label_inputs else data)
    # float32 rounding apart: a near-tie of two ranks may swap
    assert evaluate(data.y, s, mask=split.val)["auroc"] == pytest.approx(m["val"]["auroc"], abs=2e-3)
