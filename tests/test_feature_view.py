"""The feature view (gcad_dist.feature_view; GCCADConfig.feature_view; pretrain --feature-view; score --feature-view):
an isolation forest on the raw features, added to the label-free score where it corroborates the contrast or
where the graph's links say nothing about the features."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch

from gcad_dist import feature_view as fv
from gcad_dist.model import GCCADConfig
from gcad_dist.model.loose_context import robust_z

LOCAL = dict(in_dim=8, hidden=16, contrast="local", loss="logistic", tau=0.2, ensemble=2, degree_detrend=True)


def _features(n: int = 3000, f: int = 16, seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(x, a, b): Gaussian features where the nodes ``a`` (2%) are extreme in 3 columns (a camouflage signature) and
    the nodes ``b`` (2%) are not (normal in every column)."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, f)).astype(np.float32)
    idx = rng.permutation(n)
    a, b = idx[: n // 50], idx[n // 50: 2 * n // 50]
    x[np.ix_(a, [1, 5, 9])] += 5.0
    return x, a, b


def test_corroboration_is_the_forests_auroc_for_the_contrasts_top_nodes() -> None:
    n = 2000
    forest = np.arange(n, dtype=np.float64)  # node i is the i-th least isolated
    assert fv.corroboration(forest, forest) == (1.0, 20)  # the same order: the top 1% is the forest's top
    assert fv.corroboration(-forest, forest)[0] == 0.0  # the contrast's top are the forest's least isolated
    c, k = fv.corroboration(np.random.default_rng(0).normal(size=n), forest)
    assert k == 20 and 0.25 < c < 0.75  # unrelated views: about chance
    assert math.isnan(fv.corroboration(forest[:900], forest[:900])[0])  # 900 nodes: 9 top nodes, too few
    # ties of the forest count half: a constant forest says nothing
    assert fv.corroboration(forest, np.ones(n))[0] == 0.5


def test_fused_is_the_sum_of_both_robust_z_scores() -> None:
    rng = np.random.default_rng(1)
    s, f = rng.normal(size=500), rng.exponential(size=500)
    has = np.ones(500, dtype=bool)
    has[:10] = False  # nodes without neighbours: out of the contrast's median and MAD
    every = torch.ones(500, dtype=torch.bool)
    want = robust_z(torch.from_numpy(s), torch.from_numpy(has)) + robust_z(torch.from_numpy(f), every)
    got = fv.fused(s, f, has)
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, want.numpy().astype(np.float32), rtol=1e-6)


def test_the_view_joins_where_the_forest_ranks_the_contrasts_top_nodes_high() -> None:
    x, a, b = _features()
    n = x.shape[0]
    has = np.ones(n, dtype=bool)
    rng = np.random.default_rng(2)
    # a contrast that finds half of the signature nodes (the others look normal to it), and nothing else
    s = rng.normal(size=n)
    s[a[: len(a) // 2]] += 10.0
    out, info = fv.apply_feature_view(s, x, has)
    assert info["used"] and info["corroboration"] >= fv.CORROBORATION and info["top_nodes"] == 30
    missed = a[len(a) // 2:]  # the signature nodes the contrast missed now rank above the normal ones
    normal = np.setdiff1d(np.arange(n), a)
    assert np.median(out[missed]) > np.quantile(out[normal], 0.95)
    assert np.median(s[missed]) < np.quantile(s[normal], 0.95)  # which they did not before
    np.testing.assert_allclose(out, fv.fused(s, fv.forest_scores(x), has), rtol=1e-6)


def test_the_view_stays_off_where_the_forest_disagrees() -> None:
    x, a, b = _features()
    n = x.shape[0]
    rng = np.random.default_rng(3)
    s = rng.normal(size=n)
    s[b] += 10.0  # the contrast's top nodes are normal in the features: the forest's outliers are something else
    out, info = fv.apply_feature_view(s, x, np.ones(n, dtype=bool))
    assert not info["used"] and info["corroboration"] < 0.6
    np.testing.assert_array_equal(out, s.astype(np.float32))  # the contrast's score as it is
    assert "kept as it is" in fv.feature_view_phrase(info)
    forced, info = fv.apply_feature_view(s, x, np.ones(n, dtype=bool), always=True)  # score --feature-view always
    assert info["used"] and info["always"] and "always on" in fv.feature_view_phrase(info)
    np.testing.assert_allclose(forced, fv.fused(s, fv.forest_scores(x), np.ones(n, dtype=bool)), rtol=1e-6)
    small, info = fv.apply_feature_view(s[:500], x[:500], np.ones(500, dtype=bool))
    assert not info["used"] and info["corroboration"] is None and "fewer than 10" in fv.feature_view_phrase(info)
    with pytest.raises(ValueError, match="feature rows"):
        fv.apply_feature_view(s, x[:10], np.ones(n, dtype=bool))


def _linked(n: int, groups: bool, seed: int = 0) -> np.ndarray:
    """[2, E] edges, four a node: within its group of 100 consecutive ids (``groups``) or to random nodes."""
    rng = np.random.default_rng(seed)
    src = np.repeat(np.arange(n), 4)
    dst = src // 100 * 100 + rng.integers(0, 100, src.size) if groups else rng.integers(0, n, src.size)
    return np.stack([src, np.minimum(dst, n - 1)])


def test_feature_assortativity_measures_how_much_the_links_say_about_the_features() -> None:
    n = 3000
    rng = np.random.default_rng(5)
    x = (rng.normal(size=(n // 100, 16))[np.arange(n) // 100] + rng.normal(size=(n, 16))).astype(np.float32)
    near, rand = _linked(n, True), _linked(n, False)
    assert fv.feature_assortativity(x, near) > 0.3  # a group's nodes share its centre
    assert abs(fv.feature_assortativity(x, rand)) < 0.05 < fv.ASSORTATIVITY  # random links: nothing
    assert fv.feature_assortativity(x, torch.from_numpy(near)) == fv.feature_assortativity(x, near)  # a tensor too
    # monotone maps of a column leave it unchanged (Spearman: heavy tails and counts read as their ranks)
    assert fv.feature_assortativity(np.exp(3 * x), near) == pytest.approx(fv.feature_assortativity(x, near), abs=1e-9)
    # the links follow 2 of 16 columns only: the 90th percentile over the columns still sees them
    few = rng.normal(size=(n, 16)).astype(np.float32)
    few[:, :2] = x[:, :2]
    assert fv.feature_assortativity(few, near) > 2 * fv.ASSORTATIVITY
    # self loops say nothing; sampled edges give the same answer twice
    loops = np.concatenate([rand, np.stack([np.arange(n), np.arange(n)])], 1)
    assert fv.feature_assortativity(x, loops) == fv.feature_assortativity(x, rand)
    assert fv.feature_assortativity(x, near, max_edges=2000) == fv.feature_assortativity(x, near, max_edges=2000)
    assert fv.feature_assortativity(x, near, max_edges=2000) > 0.3
    assert math.isnan(fv.feature_assortativity(x, np.zeros((2, 0), dtype=np.int64)))
    assert math.isnan(fv.feature_assortativity(np.ones((n, 3)), near))  # no column varies


def test_the_view_joins_where_the_links_say_nothing_about_the_features() -> None:
    x, a, b = _features()
    n = x.shape[0]
    rng = np.random.default_rng(3)
    s = rng.normal(size=n)
    s[b] += 10.0  # as above: the forest does not corroborate the contrast
    out, info = fv.apply_feature_view(s, x, np.ones(n, dtype=bool), edge_index=_linked(n, False))
    assert info["used"] and info["corroboration"] < 0.6 and info["assortativity"] < fv.ASSORTATIVITY
    # no context to corroborate it: the distance to the 5th nearest node joins, not the forest (session 88)
    assert info["score"] == "knn"
    np.testing.assert_allclose(out, fv.fused(s, fv.knn_scores(x), np.ones(n, dtype=bool)), rtol=1e-6)
    assert not np.allclose(out, fv.fused(s, fv.forest_scores(x), np.ones(n, dtype=bool)), rtol=1e-3)
    assert "say nothing about the features" in fv.feature_view_phrase(info)
    assert "5th nearest node" in fv.feature_view_phrase(info)
    forced, info = fv.apply_feature_view(s, x, np.ones(n, dtype=bool), edge_index=_linked(n, False), always=True)
    np.testing.assert_array_equal(forced, out)  # always: the same choice of score
    assert info["score"] == "knn" and "nearest nodes" in fv.feature_view_phrase(info)
    # links that follow the features: the corroboration alone decides, as before
    grouped = x + np.random.default_rng(4).normal(size=(n // 100, x.shape[1]))[np.arange(n) // 100].astype(np.float32)
    out, info = fv.apply_feature_view(s, grouped, np.ones(n, dtype=bool), edge_index=_linked(n, True))
    assert not info["used"] and info["assortativity"] > fv.ASSORTATIVITY
    assert "kept as it is" in fv.feature_view_phrase(info) and "assortativity" in fv.feature_view_phrase(info)
    np.testing.assert_array_equal(out, s.astype(np.float32))


def test_config_recipe_and_harness_option(monkeypatch: pytest.MonkeyPatch) -> None:
    from gcad_dist.detectors import gccad_pre, settings_of
    from gcad_dist.distributed.train_loop import model_config
    from gcad_dist.pretrain import RECIPES, PretrainConfig, apply_recipe, parse_config

    with pytest.raises(ValueError, match="feature_view needs"):
        GCCADConfig(in_dim=8, contrast="graph", feature_view=True)
    local = apply_recipe(PretrainConfig(store="s"), store_corrupted=False)
    assert local.feature_view is RECIPES["local"]["feature_view"] is True  # the default since session 50
    assert apply_recipe(PretrainConfig(store="s"), store_corrupted=True).feature_view is False
    assert apply_recipe(PretrainConfig(store="s", contrast="graph"), store_corrupted=False).feature_view is False
    assert model_config(local, in_dim=4).feature_view is True
    assert parse_config(["--store", "s", "--no-feature-view"]).feature_view is False
    assert parse_config(["--store", "s"]).feature_view is None
    assert (fv.TOP_SHARE, fv.MIN_TOP, fv.CORROBORATION, fv.ASSORTATIVITY) == (0.01, 10, 0.75, 0.06)  # documented
    # the harness: earlier runs (no view) keep their keys; today's default is in the key
    old = settings_of("gccad-pre", {"pre_feature_view": False})
    assert "pre_feature_view" not in old
    assert settings_of("gccad-pre", {})["pre_feature_view"] is True
    seen: list[dict] = []
    monkeypatch.setattr(gccad_pre, "_pipeline", lambda *a: seen.append(a[6]) or np.zeros(1))
    gccad_pre.fit_score(None, None, 0)
    gccad_pre.fit_score(None, None, 0, pre_feature_view=False)
    assert seen[0]["feature_view"] is True and seen[1]["feature_view"] is False


@pytest.fixture(scope="module")
def camouflage_graph(tmp_path_factory: pytest.TempPathFactory):
    """A 1,500-node generated graph of camouflaged and contextual anomalies (enough nodes for the view to measure)."""
    from partitioning.io import save_npz
    from partitioning.synthetic import SyntheticConfig, generate

    g = generate(SyntheticConfig(nodes=1500, avg_degree=8, features=8, anomaly_fraction=0.06,
                                 anomaly_mix=(0, 1, 0, 2), seed=4))
    path = tmp_path_factory.mktemp("graph") / "camo.npz"
    save_npz(g, path)
    return g, path


def test_score_applies_the_recorded_view_and_its_flag_overrides_it(camouflage_graph, tmp_path, make_checkpoint,
                                                                    run_score) -> None:
    pytest.importorskip("pyarrow")
    import pandas as pd

    from gcad_dist.score import load_checkpoint_model, prepare_data, score_data

    g, path = camouflage_graph
    ck = make_checkpoint("view", **{k: v for k, v in LOCAL.items() if k not in ("in_dim", "hidden")},
                         feature_view=True)
    code, err = run_score(["--checkpoint", str(ck), "--graph", str(path), "--out", str(tmp_path / "a.parquet"),
                           "--normalize", "standard"])
    assert code == 0, err
    m = json.loads((tmp_path / "a.parquet.metrics.json").read_text())
    view = m["feature_view"]
    assert view["top_nodes"] == 15 and 0 <= view["corroboration"] <= 1 and view["threshold"] == fv.CORROBORATION
    code, err = run_score(["--checkpoint", str(ck), "--graph", str(path), "--out", str(tmp_path / "b.parquet"),
                           "--normalize", "standard", "--feature-view", "off"])
    assert code == 0, err
    assert "feature_view" not in json.loads((tmp_path / "b.parquet.metrics.json").read_text())
    loaded = load_checkpoint_model(ck)
    data = prepare_data(g, loaded, "standard")
    plain = score_data(loaded.model, data, device="cpu")
    b = pd.read_parquet(tmp_path / "b.parquet")["score"].to_numpy()
    np.testing.assert_allclose(b, plain, rtol=1e-5, atol=1e-6)
    a = pd.read_parquet(tmp_path / "a.parquet")["score"].to_numpy()
    has = (torch.bincount(data.edge_index[1], minlength=data.num_nodes) > 0).numpy()
    want = fv.fused(plain, fv.forest_scores(g.x), has) if view["used"] else plain
    np.testing.assert_allclose(a, want, rtol=1e-4, atol=1e-4)
    # another model's checkpoint: a clear error
    other = make_checkpoint("graph", contrast="graph")
    code, err = run_score(["--checkpoint", str(other), "--graph", str(path), "--out", str(tmp_path / "c.parquet"),
                           "--feature-view", "auto"])
    assert code == 2 and "--feature-view: applies to label-free local checkpoints" in err
    # always: the fusion whatever the corroboration
    code, err = run_score(["--checkpoint", str(ck), "--graph", str(path), "--out", str(tmp_path / "d.parquet"),
                           "--normalize", "standard", "--feature-view", "always"])
    assert code == 0, err
    assert json.loads((tmp_path / "d.parquet.metrics.json").read_text())["feature_view"]["always"] is True
    d = pd.read_parquet(tmp_path / "d.parquet")["score"].to_numpy()
    np.testing.assert_allclose(d, fv.fused(plain, fv.forest_scores(g.x), has), rtol=1e-4, atol=1e-4)


def test_fine_tuning_reports_the_view_and_writes_models_without_it(camouflage_graph, tmp_path, capsys) -> None:
    from gcad_dist.checkpoint import load_model_file, save_model
    from gcad_dist.cli import run_cli
    from gcad_dist.finetune import main as finetune_main
    from gcad_dist.model import GCCAD

    _, path = camouflage_graph
    torch.manual_seed(2)
    cfg = GCCADConfig(**LOCAL, feature_view=True)
    pre = tmp_path / "pre" / "final"
    save_model(pre, GCCAD(cfg), cfg, extra={"stage": "pretrain", "normalize": "standard"})
    for epochs, name in ((2, "ft"), (0, "zs")):
        out = tmp_path / name
        with pytest.raises(SystemExit) as e:
            run_cli(finetune_main, ["--checkpoint", str(pre), "--graph", str(path), "--out", str(out), "--model",
                                    "checkpoint", "--epochs", str(epochs), "--seed", "0", "--no-progress",
                                    "--no-plots", "--threads", "1"])
        assert int(e.value.code or 0) == 0, capsys.readouterr().err
        m = json.loads((out / "metrics.json").read_text())
        assert m["zero_shot_feature_view"]["choice"]["top_nodes"] == 15 and m["zero_shot_feature_view"]["test"]
        if epochs:  # a fitted model is scored by its own contrast
            assert load_model_file(out / "final")["config"]["feature_view"] is False
        else:  # the checkpoint unchanged, as gcad_dist.score scores it
            assert load_model_file(out / "final")["config"]["feature_view"] is True
            assert m["test"] == m["zero_shot_feature_view"]["test"]


def test_forest_scores_on_threads_are_the_one_thread_scores(monkeypatch):
    """Blocks of rows scored on several threads give every row the score one call gives it (the harness's
    IsolationForest too)."""
    from torch_geometric.data import Data

    from gcad_dist.detectors import isolation

    monkeypatch.setattr(fv, "FOREST_ROWS", 37)  # 500 rows: 14 blocks, the last one short
    x = np.random.default_rng(0).normal(size=(500, 6)).astype(np.float32)
    x[:5] += 6.0
    one, many = fv.forest_scores(x, threads=1), fv.forest_scores(x, threads=3)
    assert np.array_equal(one, many)
    assert one[:5].min() > np.median(one)  # the shifted rows are the isolated ones
    data = Data(x=torch.from_numpy(x), edge_index=torch.zeros(2, 0, dtype=torch.long))
    assert np.array_equal(isolation.fit_score(data, None, 0, threads=1), isolation.fit_score(data, None, 0, threads=4))


def test_knn_scores_are_the_distance_to_the_kth_other_node() -> None:
    """knn_scores: each row's distance to its k-th nearest other row after a z-score; an exact duplicate is a
    neighbour at distance 0, the row itself never; above ``reference`` rows, the distances are to a fixed sample."""
    pytest.importorskip("faiss")
    x = np.array([[0.0], [1.0], [2.0], [3.0], [4.0], [5.0], [40.0], [40.0]])
    sd = x.std(ddof=1)
    d = fv.knn_scores(x, k=5)
    # node 0's others at 1..5: the 5th is 5; node 6's duplicate is at 0, then 35..38: the 5th is 38 (in units of sd)
    np.testing.assert_allclose(d[[0, 3, 6, 7]] * sd, [5.0, 3.0, 38.0, 38.0], rtol=1e-5)
    np.testing.assert_allclose(fv.knn_scores(x, k=1)[[6, 7]], [0.0, 0.0], atol=1e-6)
    with pytest.raises(ValueError, match="need more than"):
        fv.knn_scores(x[:5], k=5)
    # a reference sample: brute force over the sampled rows, each row's own entry left out
    rng = np.random.default_rng(0)
    y = rng.normal(size=(300, 4)) * [1.0, 2.0, 5.0, 0.5]
    got = fv.knn_scores(y, k=3, reference=120, seed=7)
    z = (y - y.mean(0)) / y.std(0, ddof=1)
    ref = np.sort(np.random.default_rng(7).choice(300, 120, replace=False))
    dist = np.sqrt(((z[:, None, :] - z[None, ref, :]) ** 2).sum(-1))
    dist[ref, np.arange(120)] = np.inf  # a sampled row is not its own neighbour
    np.testing.assert_allclose(got, np.sort(dist, axis=1)[:, 2], rtol=1e-4)
    np.testing.assert_allclose(fv.knn_scores(y, k=3), fv.knn_scores(y, k=3, reference=300), rtol=1e-6)


def test_a_graph_of_at_most_k_nodes_forced_on_keeps_the_forest(monkeypatch: pytest.MonkeyPatch) -> None:
    """--feature-view always on a graph too small for a 5th neighbour: the forest, not an error."""
    monkeypatch.setattr(fv, "feature_assortativity", lambda *a, **k: 0.0)  # links that say nothing
    x = np.random.default_rng(0).normal(size=(5, 3)).astype(np.float32)
    out, info = fv.apply_feature_view(np.arange(5.0), x, np.ones(5, dtype=bool), always=True,
                                      edge_index=np.array([[0, 1, 2, 3], [1, 2, 3, 4]]))
    assert info["used"] and info["score"] == "isolation forest" and np.isfinite(out).all()
