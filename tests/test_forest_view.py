"""The forest view of supervised GCCAD: the forest as a torch module, the rank blend, the keep rule, the checkpoint."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from torch_geometric.data import Data


def _graph(n: int = 400, f: int = 6, seed: int = 0, shift: float = 2.5) -> Data:
    """Random links; anomalies (10%) told by their own first two columns."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, f, generator=g)
    y = torch.zeros(n, dtype=torch.long)
    y[torch.randperm(n, generator=g)[: n // 10]] = 1
    x[y == 1, :2] += shift
    src = torch.randint(0, n, (4 * n,), generator=g)
    dst = torch.randint(0, n, (4 * n,), generator=g)
    ei = torch.cat([torch.stack([src, dst]), torch.stack([dst, src])], dim=1)
    return Data(x=x, edge_index=ei, y=y, num_nodes=n)


def test_graph_features_count_a_repeated_link_once_and_leave_isolated_nodes_at_zero():
    from gcad_dist.model.forest import graph_features

    x = torch.tensor([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0], [7.0, 8.0]])
    ei = torch.tensor([[1, 1, 2, 0], [0, 0, 0, 1]])  # 1 -> 0 twice, 2 -> 0, 0 -> 1; node 3 has no neighbour
    f = graph_features(x, ei)
    assert f.dtype == torch.float32 and f.shape == (4, 5)
    assert torch.allclose(f[0], torch.tensor([1.0, 2.0, 4.0, 5.0, 2.0]))  # mean of nodes 1 and 2, degree 2
    assert torch.allclose(f[1], torch.tensor([3.0, 4.0, 1.0, 2.0, 1.0]))
    assert torch.allclose(f[3], torch.tensor([7.0, 8.0, 0.0, 0.0, 0.0]))
    # passthrough columns stay as they are, after the degree
    p = graph_features(torch.cat([x, torch.full((4, 1), 9.0)], 1), ei, passthrough=1)
    assert p.shape == (4, 6) and torch.equal(p[:, :5], f) and torch.all(p[:, 5] == 9.0)
    # a second hop: the neighbours' mean of the first hop's means, appended after the passthrough columns, so that
    # the one-hop layout is a prefix of it (what the boosted trees read of the forest's features)
    two = graph_features(torch.cat([x, torch.full((4, 1), 9.0)], 1), ei, passthrough=1, hops=2)
    assert two.shape == (4, 8) and torch.equal(two[:, :6], p)
    assert torch.allclose(two[0, 6:], (f[1, 2:4] + f[2, 2:4]) / 2)  # node 0's neighbours: 1 and 2
    assert torch.allclose(two[1, 6:], f[0, 2:4]) and torch.all(two[3, 6:] == 0.0)
    from gcad_dist.model.forest import feature_columns

    assert feature_columns(2, 1, 2) == 8 and feature_columns(2) == 5
    with pytest.raises(ValueError, match="hops"):
        graph_features(x, ei, hops=0)


def test_forest_module_scores_as_scikit_learn_predicts():
    from sklearn.ensemble import RandomForestClassifier

    from gcad_dist.model.forest import FOREST_HOPS, ForestScorer, fit_forest, graph_features

    data = _graph()
    train = torch.arange(data.num_nodes) % 2 == 0
    forest = fit_forest(data.x, data.edge_index, data.y, train, seed=3, threads=1)
    assert forest.hops == FOREST_HOPS == 2  # GADBench's two mean layers (session 85)
    got = forest.score(forest(data.x, data.edge_index)).numpy()
    feats = graph_features(data.x, data.edge_index, hops=FOREST_HOPS).numpy()
    y = data.y.numpy()[train.numpy()]
    w = np.where(y == 1, (y.size - y.sum()) / y.sum(), 1.0)
    ref = RandomForestClassifier(n_estimators=100, max_features="sqrt", random_state=3, n_jobs=1)
    want = ref.fit(feats[train.numpy()], y, sample_weight=w).predict_proba(feats)[:, 1]
    assert np.allclose(got, want, atol=1e-6)
    # its state alone rebuilds it (what a checkpoint keeps), on another graph too
    other = _graph(n=120, seed=5)
    again = ForestScorer.from_state(forest.state_dict())
    assert torch.equal(again(other.x, other.edge_index), forest(other.x, other.edge_index))
    assert np.allclose(again(other.x, other.edge_index).numpy(),
                       ref.predict_proba(graph_features(other.x, other.edge_index, hops=FOREST_HOPS).numpy())[:, 1],
                       atol=1e-6)
    with pytest.raises(ValueError, match="single class"):
        fit_forest(data.x, data.edge_index, torch.zeros_like(data.y), train, seed=0)
    with pytest.raises(ValueError, match="columns"):  # given features of another layout
        one_hop = graph_features(data.x, data.edge_index).numpy()
        fit_forest(data.x, data.edge_index, data.y, train, seed=0, feats=one_hop)


def test_a_one_hop_forest_of_an_older_checkpoint_still_scores_on_one_hop():
    """A forest state written before session 85 has no ``hops``: it is read as one hop, and scores as scikit-learn's
    forest fitted on the one-hop features predicts."""
    from sklearn.ensemble import RandomForestClassifier

    from gcad_dist.model.forest import ForestScorer, fit_forest, graph_features

    data = _graph()
    train = torch.arange(data.num_nodes) % 2 == 0
    forest = fit_forest(data.x, data.edge_index, data.y, train, seed=3, threads=1, hops=1)
    state = forest.state_dict()
    del state["_extra_state"]["hops"]
    old = ForestScorer.from_state(state)
    assert old.hops == 1
    feats = graph_features(data.x, data.edge_index).numpy()
    y = data.y.numpy()[train.numpy()]
    w = np.where(y == 1, (y.size - y.sum()) / y.sum(), 1.0)
    ref = RandomForestClassifier(n_estimators=100, max_features="sqrt", random_state=3, n_jobs=1)
    want = ref.fit(feats[train.numpy()], y, sample_weight=w).predict_proba(feats)[:, 1]
    assert np.allclose(old(data.x, data.edge_index).numpy(), want, atol=1e-6)


def test_the_walk_compares_float32_features_with_a_float64_threshold_exactly():
    """One split at 0.1 (not a float32): float32(0.1) lies above it and goes right, the float32 just below goes
    left, as scikit-learn compares; a NaN goes right; a tree that is one leaf scores its leaf."""
    from gcad_dist.model.forest import ForestScorer

    node = torch.tensor
    split = ForestScorer(feature=node([0, 0, 0, 0]), threshold=node([0.1, 0.0, 0.0, 0.0], dtype=torch.float64),
                         left=node([1, 1, 2, 3]), right=node([2, 1, 2, 3]),
                         proba=node([0.5, 0.0, 1.0, 0.25], dtype=torch.float64), roots=node([0, 3]), depth=1,
                         in_features=1)
    just_below = np.nextafter(np.float32(0.1), np.float32(-1.0))
    x = torch.tensor([[np.float32(0.1)], [just_below], [float("nan")], [-3.0]], dtype=torch.float32)
    got = split(x, torch.zeros(2, 0, dtype=torch.long)).numpy()
    assert np.allclose(got, [(1.0 + 0.25) / 2, (0.0 + 0.25) / 2, (1.0 + 0.25) / 2, (0.0 + 0.25) / 2])


def test_empirical_cdf_is_the_mid_rank_on_its_scores_and_keeps_order_elsewhere():
    from scipy.stats import rankdata

    from gcad_dist.model.rank_blend import EmpiricalCDF

    rng = np.random.default_rng(0)
    s = np.concatenate([np.zeros(300), rng.random(700)])  # a point mass, as a forest's scores have
    cdf = EmpiricalCDF.fit(s)
    got = cdf(torch.as_tensor(s)).numpy()
    assert np.allclose(got, (rankdata(s) - 0.5) / s.size, atol=1e-6)
    # more distinct scores than knots: still strictly increasing in the score, and close to the rank
    big = rng.standard_normal(20_000)
    c2 = EmpiricalCDF.fit(big, max_knots=101)
    order = np.argsort(big)
    v = c2(torch.as_tensor(big)).numpy().astype(np.float64)
    assert np.all(np.diff(v[order]) >= 0) and np.unique(v).size > 19_000  # float32 ties only where scores nearly tie
    assert np.abs(v - (rankdata(big) - 0.5) / big.size).max() < 0.01
    # beyond the training range: order kept, values within 1e-6 of the ends
    out = cdf(torch.tensor([-5.0, -1.0, 2.0, 9.0])).numpy()
    assert out[0] < out[1] <= cdf(torch.tensor([0.0])).item() and out[2] < out[3] and 0 < out[3] - got.max() < 1e-5


class _Fixed(torch.nn.Module):
    """A member whose scores are given (it counts its runs)."""

    def __init__(self, s) -> None:
        super().__init__()
        self.s = torch.as_tensor(s, dtype=torch.float32)
        self.calls = 0

    def forward(self, *a, **k):
        self.calls += 1
        return self.s

    def score(self, out):
        return out


def test_rank_blend_scores_the_mean_of_its_members_ranks():
    from gcad_dist.model.rank_blend import EmpiricalCDF, RankBlend

    a, b = np.array([0.1, 0.5, 0.2, 0.9]), np.array([10.0, 0.0, 30.0, 20.0])
    blend = RankBlend([_Fixed(a), _Fixed(b)], [EmpiricalCDF.fit(a), EmpiricalCDF.fit(b)])
    got = blend.score(blend(None)).numpy()
    assert np.allclose(got, [(0.125 + 0.375) / 2, (0.625 + 0.125) / 2, (0.375 + 0.875) / 2, (0.875 + 0.625) / 2])


def test_rank_blend_weights_leave_a_zero_weight_member_unrun():
    from gcad_dist.model.rank_blend import EmpiricalCDF, RankBlend

    a, b = np.array([0.1, 0.5, 0.2, 0.9]), np.array([10.0, 0.0, 30.0, 20.0])
    ma, mb = _Fixed(a), _Fixed(b)
    cdfs = [EmpiricalCDF.fit(a), EmpiricalCDF.fit(b)]
    alone = RankBlend([ma, mb], cdfs, weights=[0.0, 1.0])
    assert np.allclose(alone.score(alone(None)).numpy(), [0.375, 0.125, 0.875, 0.625]) and ma.calls == 0
    tilted = RankBlend([ma, mb], cdfs, weights=[1.0, 3.0])  # normalised to 0.25 / 0.75
    assert np.allclose(tilted.score(tilted(None)).numpy(), [0.25 * 0.125 + 0.75 * 0.375, 0.25 * 0.625 + 0.75 * 0.125,
                                                            0.25 * 0.375 + 0.75 * 0.875, 0.25 * 0.875 + 0.75 * 0.625])
    for bad in ([1.0], [-1.0, 2.0], [0.0, 0.0], [float("nan"), 1.0]):
        with pytest.raises(ValueError, match="weight"):
            RankBlend([ma, mb], cdfs, weights=bad)


def _fit(scores: np.ndarray, selection: np.ndarray, data, split):
    from gcad_dist.metrics import evaluate
    from gcad_dist.supervised import FitResult

    y = data.y.numpy()
    return FitResult(best_epoch=1, val=evaluate(y, scores, None, split.val.numpy()),
                     test=evaluate(y, scores, None, split.test.numpy()), history={}, state_dict={},
                     scores=scores, epochs_run=1, seconds=0.0, device="cpu", selection_scores=selection)


def _split(n: int):
    from types import SimpleNamespace

    i = torch.arange(n)
    return SimpleNamespace(train=i % 5 < 2, val=i % 5 == 2, test=i % 5 > 2)


def test_the_forest_is_kept_where_it_helps_dropped_where_gccad_is_clearly_better_and_reads_no_test_label():
    from gcad_dist.forest_view import add_forest_view
    from gcad_dist.model.rank_blend import RankBlend

    data = _graph(n=1000, shift=1.0)  # the forest finds some anomalies, not all
    split = _split(data.num_nodes)
    y = data.y.numpy().astype(float)
    noise = np.random.default_rng(1).standard_normal(data.num_nodes)
    model = torch.nn.Identity()
    weak = _fit(noise, noise, data, split)  # a GCCAD that sees nothing: the forest must join
    res, m, rec = add_forest_view(weak, model, data, split, seed=0)
    assert rec["kept"] and isinstance(m, RankBlend) and rec["positives"] >= 10
    assert res.val["auprc"] > weak.val["auprc"] + 0.1
    assert res.extra["forest_view"] and res.selection_scores is not None
    assert rec["gccad_alone"] == {"val": weak.val, "test": weak.test}  # recorded beside the choice, for comparison
    perfect = y + 0.01 * noise  # a GCCAD that ranks every anomaly first: clearly better than the forest
    strong = _fit(perfect, perfect, data, split)
    res2, m2, rec2 = add_forest_view(strong, model, data, split, seed=0)
    assert not rec2["kept"] and m2 is model and res2 is strong and rec2["p_gccad_better_auprc"] >= 0.8
    # scrambling the test labels changes nothing that was chosen or measured on validation
    scrambled = data.clone()
    t = split.test.numpy()
    scrambled.y = data.y.clone()
    scrambled.y[split.test] = torch.as_tensor(np.random.default_rng(2).permutation(data.y.numpy()[t]))
    _, _, rec3 = add_forest_view(weak, model, scrambled, split, seed=0)
    for k in ("kept", "val_auprc", "val_auroc", "p_gccad_better_auprc", "p_gccad_better_auroc", "forest_val_auroc"):
        assert rec3[k] == rec[k]


def test_the_forest_alone_scores_where_validation_places_it_clearly_above_the_blend():
    """Anomalies told by their own columns (a rule a tree learns): a GCCAD that sees little only blurs the forest's
    ranking, and the forest alone scores. Where both see the anomalies with errors of their own, the blend stays."""
    from gcad_dist.forest_view import add_forest_view
    from gcad_dist.model.rank_blend import RankBlend

    data = _graph(n=1500, shift=4.0)
    split = _split(data.num_nodes)
    y = data.y.numpy().astype(float)
    rng = np.random.default_rng(3)
    vague = 0.3 * y + rng.standard_normal(data.num_nodes)  # above chance, far below the forest
    res, m, rec = add_forest_view(_fit(vague, vague, data, split), torch.nn.Identity(), data, split, seed=0)
    assert rec["kept"] and rec["choice"] == "forest" and rec["weights"] == [0.0, 1.0]
    assert rec["p_forest_better_than_blend_auprc"] >= 0.95
    assert isinstance(m, RankBlend) and m.weights.tolist() == [0.0, 1.0]
    assert res.val["auprc"] > rec["val_auprc"]["blend (cross-fitted)"] + 0.05
    assert res.val["auprc"] == pytest.approx(rec["val_auprc"]["forest"], abs=0.02)
    # both see every anomaly dimly, with errors of their own: the blend beats either and is kept
    dim = _graph(n=1500, shift=1.0)
    g = dim.y.numpy().astype(float) + np.random.default_rng(0).standard_normal(dim.num_nodes)
    res2, m2, rec2 = add_forest_view(_fit(g, g, dim, split), torch.nn.Identity(), dim, split, seed=0)
    assert rec2["kept"] and rec2["choice"] == "blend" and m2.weights.tolist() == [0.5, 0.5]
    assert rec2["val_auprc"]["blend (cross-fitted)"] > rec2["val_auprc"]["forest"]
    assert rec2["p_forest_better_than_blend_auprc"] < 0.95


def _guilt_graph(n: int = 1500, seed: int = 0) -> Data:
    """Anomalies (10%) told only by whom they link to: features and degree alike for every node, each anomaly linked
    to 4 random anomalies and 4 random nodes, each normal node to 8 random nodes."""
    g = torch.Generator().manual_seed(seed)
    y = torch.zeros(n, dtype=torch.long)
    y[torch.randperm(n, generator=g)[: n // 10]] = 1
    bad = torch.nonzero(y).flatten()
    src = torch.arange(n).repeat_interleave(8)
    dst = torch.randint(0, n, (8 * n,), generator=g)
    ring = (y[src] == 1) & (torch.arange(8 * n) % 8 < 4)
    dst[ring] = bad[torch.randint(0, bad.numel(), (int(ring.sum()),), generator=g)]
    keep = src != dst
    ei = torch.stack([src[keep], dst[keep]])
    return Data(x=torch.randn(n, 6, generator=g), edge_index=torch.cat([ei, ei.flip(0)], dim=1), y=y, num_nodes=n)


def test_the_label_columns_reach_the_trees_only_with_labels_and_score_as_the_written_blend():
    """``labels=True`` (``--forest-columns labels``): where the fit reads GCCAD's label inputs, both trees also read
    those two columns (passed through), and find anomalies that only their known anomalous neighbours give away;
    the written blend scores the graph as the fit did. Without label-input columns it is ``local``."""
    from gcad_dist.data.label_inputs import with_label_inputs
    from gcad_dist.forest_view import add_forest_view

    class Fixed(torch.nn.Module):  # a GCCAD stand-in that scores every graph with the same noise
        def __init__(self, scores: np.ndarray) -> None:
            super().__init__()
            self.register_buffer("s", torch.as_tensor(scores))

        def forward(self, x: torch.Tensor, edge_index: torch.Tensor) -> torch.Tensor:
            return self.s

        def score(self, out: torch.Tensor) -> torch.Tensor:
            return out

    plain = _guilt_graph()
    split = _split(plain.num_nodes)
    data = with_label_inputs(plain, split.train)
    noise = np.random.default_rng(1).standard_normal(data.num_nodes)
    weak = _fit(noise, noise, data, split)
    _, _, without = add_forest_view(weak, Fixed(noise), data, split, seed=0, local=True)
    res, m, rec = add_forest_view(weak, Fixed(noise), data, split, seed=0, local=True, labels=True)
    assert without["columns"] == "local" and rec["columns"] == "labels" and "neighbour-label" in rec["rule"]
    # 0.94 against 0.72 (the degree gives some away: anomalies have four more links)
    assert rec["forest_val_auroc"] > 0.9 and rec["forest_val_auroc"] > without["forest_val_auroc"] + 0.15
    assert rec["kept"] and m.members[1].passthrough == 2
    np.testing.assert_allclose(m.score(m(data.x, data.edge_index)).numpy(), res.scores, atol=1e-6)
    # no label-input columns: the label arm reads what local reads
    _, _, same = add_forest_view(_fit(noise, noise, plain, split), torch.nn.Identity(), plain, split, seed=0,
                                 local=True, labels=True)
    assert same["columns"] == "local" and same["forest_val_auroc"] == pytest.approx(
        add_forest_view(_fit(noise, noise, plain, split), torch.nn.Identity(), plain, split, seed=0,
                        local=True)[2]["forest_val_auroc"])


def test_too_few_validation_anomalies_leave_gccad_alone():
    from gcad_dist.forest_view import add_forest_view

    data = _graph(n=150)  # 15 anomalies, 3 of them in validation
    split = _split(data.num_nodes)
    noise = np.random.default_rng(1).standard_normal(data.num_nodes)
    weak = _fit(noise, noise, data, split)  # even a GCCAD that sees nothing: validation cannot say the forest helps
    res, m, rec = add_forest_view(weak, torch.nn.Identity(), data, split, seed=0)
    assert not rec["kept"] and res is weak and rec["too_few_validation_anomalies"] == rec["positives"] < 10


def test_forest_min_anomalies_runs_the_join_test_on_fewer_and_never_lets_the_forest_score_alone():
    """``min_anomalies`` (``--forest-min-anomalies``, session 77): with 1-9 validation anomalies the same bootstrap
    test decides; a joined forest blends (it may not score alone below 10), a GCCAD clearly better keeps its score,
    and the test labels are never read."""
    from gcad_dist.forest_view import add_forest_view
    from gcad_dist.model.rank_blend import RankBlend

    data = _graph(n=300, shift=4.0)  # 30 anomalies, 8 of them in validation; the forest alone would rank them first
    split = _split(data.num_nodes)
    y = data.y.numpy().astype(float)
    rng = np.random.default_rng(3)
    vague = 0.3 * y + rng.standard_normal(data.num_nodes)  # from 10 it would let the forest score alone
    fit = _fit(vague, vague, data, split)
    _, m0, rec0 = add_forest_view(fit, torch.nn.Identity(), data, split, seed=0)  # the default: 10
    assert not rec0["kept"] and rec0["too_few_validation_anomalies"] == rec0["positives"] < 10
    res, m, rec = add_forest_view(fit, torch.nn.Identity(), data, split, seed=0, min_anomalies=1)
    assert rec["kept"] and rec["choice"] == "blend" and rec["weights"] == [0.5, 0.5]
    assert isinstance(m, RankBlend) and m.weights.tolist() == [0.5, 0.5] and "too_few_validation_anomalies" not in rec
    assert rec["p_gccad_better_auprc"] < 0.8 and rec["p_gccad_better_auroc"] < 0.8 and ">= 1 validation" in rec["rule"]
    assert res.val["auprc"] > fit.val["auprc"]
    dim = _graph(n=300, shift=1.0)  # the forest finds some anomalies; GCCAD ranks every one first: the forest stays out
    perfect = dim.y.numpy() + 0.01 * rng.standard_normal(dim.num_nodes)
    strong = _fit(perfect, perfect, dim, split)
    res2, m2, rec2 = add_forest_view(strong, torch.nn.Identity(), dim, split, seed=0, min_anomalies=1)
    assert not rec2["kept"] and res2 is strong and rec2["p_gccad_better_auroc"] >= 0.8
    scrambled = data.clone()  # scrambled test labels: the same choice and validation figures
    t = split.test.numpy()
    scrambled.y = data.y.clone()
    scrambled.y[split.test] = torch.as_tensor(np.random.default_rng(2).permutation(data.y.numpy()[t]))
    _, _, rec3 = add_forest_view(fit, torch.nn.Identity(), scrambled, split, seed=0, min_anomalies=1)
    for k in ("kept", "choice", "val_auprc", "val_auroc", "p_gccad_better_auprc", "p_gccad_better_auroc"):
        assert rec3[k] == rec[k]
    with pytest.raises(ValueError, match="at least 1"):
        add_forest_view(fit, torch.nn.Identity(), data, split, seed=0, min_anomalies=0)


def test_forest_min_anomalies_flag_is_checked_and_shared(tmp_path, capsys):
    from gcad_dist.finetune import FinetuneConfig
    from gcad_dist.finetune import build_parser as finetune_parser
    from gcad_dist.train import TrainConfig
    from gcad_dist.train import build_parser as train_parser
    from tests.test_train import _cli

    assert FinetuneConfig.forest_min_anomalies == TrainConfig.forest_min_anomalies  # fine-tuning follows train
    for parser in (train_parser(), finetune_parser()):
        assert "--forest-min-anomalies" in parser.format_help()
    code, err = _cli(["gcad_dist.train", "--graph", str(tmp_path / "none.npz"), "--out", str(tmp_path / "o"),
                      "--forest-min-anomalies", "0"], capsys)
    assert code == 2 and "--forest-min-anomalies must be at least 1" in err and "Traceback" not in err


def test_train_cli_forest_view_checkpoint_scores_as_training_did(tmp_path, capsys, run_score):
    """``gcad_dist.train`` (default ``--forest auto``) on a graph whose anomalies show in their own columns: the
    forest is kept, ``metrics.json`` says so, and the checkpoint scores the graph as training scored it."""
    from gcad_dist.metrics import evaluate
    from gcad_dist.score import load_checkpoint_model
    from gcad_dist.supervised import predict
    from gcad_dist.train import load_labelled
    from gcad_dist.data.splits import make_split
    from tests.test_train import _cli

    from partitioning.io import save_npz
    from partitioning.synthetic import SyntheticConfig, generate

    g = tmp_path / "cam.npz"
    save_npz(generate(SyntheticConfig(nodes=500, avg_degree=6, features=8, anomaly_fraction=0.12,
                                      anomaly_mix=(0, 0, 0, 1), mixing=1.0, seed=4)), g)
    out = tmp_path / "run"
    args = ["gcad_dist.train", "--graph", str(g), "--out", str(out), "--epochs", "4", "--eval-every", "2",
            "--hidden", "8", "--threads", "1", "--no-progress", "--no-plots", "--contrast", "graph"]
    code, err = _cli(args, capsys)
    assert code == 0, err
    m = json.loads((out / "metrics.json").read_text())
    fv = m["forest_view"]
    assert set(fv) >= {"rule", "kept", "val_auprc", "val_auroc", "p_gccad_better_auprc", "positives"} and fv["kept"]
    loaded = load_checkpoint_model(out)
    data = load_labelled(str(g))
    split = make_split(data, seed=0)
    from gcad_dist.score import prepare_data

    only_train = data.clone()  # label inputs (on by default) must see the training labels alone, as in training
    only_train.y = torch.where(split.train, data.y, torch.full_like(data.y, -1))
    scored = prepare_data(only_train, loaded, normalize="standard")
    s = predict(loaded.model, scored).numpy()
    assert evaluate(data.y, s, mask=split.val)["auprc"] == pytest.approx(m["val"]["auprc"], abs=1e-6)
    from gcad_dist.model.rank_blend import RankBlend

    assert isinstance(loaded.model, RankBlend) is fv["kept"]
    if fv["kept"]:  # the blend's weights (or the forest alone) come back from the checkpoint
        assert loaded.model.weights.tolist() == fv["weights"]
    # gcad_dist.score on the graph with its training labels alone: the same scores
    import pyarrow.parquet as pq

    from partitioning.io import load_graph, save_npz as save

    og = load_graph(str(g))
    og.y = only_train.y.numpy()
    save(og, tmp_path / "only_train.npz")
    code, err = run_score(["--checkpoint", str(out), "--graph", str(tmp_path / "only_train.npz"),
                           "--out", str(tmp_path / "s.parquet"), "--threads", "1"])
    assert code == 0, err
    # float32 rounding apart (a near-tie may swap: one rank of 500 moves a score by 1 / 1000)
    np.testing.assert_allclose(pq.read_table(tmp_path / "s.parquet")["score"].to_numpy(), s, atol=1.0 / data.num_nodes)
    code, err = _cli(args[:4] + [str(tmp_path / "off")] + args[5:] + ["--forest", "off"], capsys)
    assert code == 0, err
    assert "forest_view" not in json.loads((tmp_path / "off" / "metrics.json").read_text())
    assert not isinstance(load_checkpoint_model(tmp_path / "off").model, RankBlend)


def test_the_forest_trains_on_the_labels_gccad_trained_on(tmp_path, monkeypatch):
    """``--label-fraction``: the forest sees the same subsample of the training labels as GCCAD's fits, no more."""
    import gcad_dist.train as train_mod
    from gcad_dist.supervised import FitResult
    from tests.test_train import _generate

    g = _generate(tmp_path / "g.npz", nodes=600, anomaly_fraction=0.2)
    seen = {}

    def fake_fit(model, data, split, cfg, state_name=None):
        seen["train"] = int(split.train.sum())
        s = np.random.default_rng(0).normal(size=data.num_nodes).astype(np.float32)
        return FitResult(best_epoch=1, epochs_run=1, seconds=0.0, device="cpu", val={"auprc": 0.1},
                         test={"auprc": 0.0}, history={}, state_dict={}, scores=s, selection_scores=s)

    monkeypatch.setattr(train_mod, "fit_supervised", fake_fit)
    out = train_mod.train_one(train_mod.TrainConfig(graph=str(g), out="", contrast="graph", hidden=8, progress=False,
                                                    threads=1, label_fraction=0.5))
    fv, budget = out.metrics["forest_view"], out.metrics["label_budget"]
    assert fv["train_nodes"] == seen["train"] == budget["train_labelled"] < budget["train_total"]
    assert fv["train_anomalies"] == budget["train_labelled_anomalies"]


def test_train_with_forest_min_anomalies_one_writes_the_blend_it_scored(tmp_path, capsys):
    """``gcad_dist.train --forest-min-anomalies 1`` on a graph with fewer than 10 validation anomalies that trees see:
    the forest joins as a blend, and the written checkpoint scores as training did; the default leaves GCCAD alone."""
    from gcad_dist.model.rank_blend import RankBlend
    from gcad_dist.score import load_checkpoint_model
    from partitioning.io import save_npz
    from partitioning.synthetic import SyntheticConfig, generate
    from tests.test_train import _cli

    g = tmp_path / "cam.npz"
    save_npz(generate(SyntheticConfig(nodes=600, avg_degree=6, features=8, anomaly_fraction=0.04,
                                      anomaly_mix=(0, 0, 0, 1), mixing=1.0, seed=4)), g)
    args = ["gcad_dist.train", "--graph", str(g), "--epochs", "4", "--eval-every", "2", "--hidden", "8",
            "--threads", "1", "--no-progress", "--no-plots", "--seed", "0"]
    code, err = _cli([*args, "--out", str(tmp_path / "new"), "--forest-min-anomalies", "1"], capsys)
    assert code == 0, err
    m = json.loads((tmp_path / "new" / "metrics.json").read_text())
    fv = m["forest_view"]
    assert 1 <= fv["positives"] < 10 and fv["kept"] and fv["choice"] == "blend" and m["config"]["forest_min_anomalies"] == 1
    loaded = load_checkpoint_model(tmp_path / "new")
    assert isinstance(loaded.model, RankBlend) and loaded.model.weights.tolist() == [0.5, 0.5]
    from gcad_dist.data.label_inputs import with_label_inputs
    from gcad_dist.data.splits import make_split
    from gcad_dist.metrics import evaluate
    from gcad_dist.supervised import predict
    from gcad_dist.train import load_labelled

    data = load_labelled(str(g))
    split = make_split(data, seed=0)
    s = predict(loaded.model, with_label_inputs(data, split.train) if loaded.label_inputs else data)
    for part, mask in (("val", split.val), ("test", split.test)):
        # float32 rounding apart: a near-tie of two ranks may swap (one pair of 10 x 230 moves AUROC by 0.0004)
        assert evaluate(data.y, s, mask=mask)["auroc"] == pytest.approx(m[part]["auroc"], abs=2e-3), part
    code, err = _cli([*args, "--out", str(tmp_path / "old"), "--forest-min-anomalies", "10"], capsys)
    assert code == 0, err
    old = json.loads((tmp_path / "old" / "metrics.json").read_text())
    assert not old["forest_view"]["kept"] and old["test"] == fv["gccad_alone"]["test"]  # same fit, GCCAD alone
