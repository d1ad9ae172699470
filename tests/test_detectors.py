"""gcad_dist.detectors: every reference detector finds planted anomalies on a small generated graph, the
label-free ones never read labels, and a missing optional package is one clear line."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from gcad_dist.detectors import DETECTORS, check_available, fit_score, strip_labels
from gcad_dist.metrics import auroc

FAST = ["iforest", "knn", "nbr-cosine", "local-knn", "trees", "boosted-trees", "dominant", "cola"]


@pytest.fixture(scope="module")
def graph():
    """1,200 nodes, 5% planted anomalies (community swaps, contextual, cliques) and a seeded split."""
    from gcad_dist.data.splits import make_split
    from partitioning.synthetic import SyntheticConfig, synthesize

    torch.set_num_threads(1)
    sg = synthesize(SyntheticConfig(nodes=1200, avg_degree=10, features=16, anomaly_fraction=0.05, seed=0))
    data = sg.graph.to_data()
    return data, make_split(data, seed=0), sg.anomaly_type


def _needs(name: str) -> None:
    why = check_available(name)
    if why:
        pytest.skip(why)


#: (planted kind it must find: 1 swap, 2 contextual, 3 clique, None = all on the test split; minimum AUROC)
EXPECT = {"iforest": (2, 0.7), "knn": (2, 0.65), "nbr-cosine": (1, 0.9), "local-knn": (2, 0.9),
          "trees": (None, 0.8), "boosted-trees": (None, 0.8),
          "dominant": (None, 0.8),
          "cola": (None, 0.75)}


@pytest.mark.parametrize("name", FAST)
def test_detector_scores_planted_anomalies_above_chance(graph, name):
    _needs(name)
    data, split, kinds = graph
    s = fit_score(name, data, split, seed=0, threads=1, device="cpu")
    assert s.shape == (data.num_nodes,) and np.isfinite(s).all()
    kind, low = EXPECT[name]
    if kind is None:  # all anomalies, test nodes only
        test = split.test.numpy()
        value = auroc(data.y.numpy()[test], s[test])
    else:  # one planted kind against the normal nodes (IsolationForest only sees feature outliers)
        sel = (kinds == kind) | (kinds == 0)
        value = auroc(kinds[sel] == kind, s[sel])
    assert value > low, (name, value)


@pytest.mark.parametrize("name", [n for n in FAST if DETECTORS[n].labels == "none"])
def test_label_free_detectors_read_no_labels(graph, name, monkeypatch):
    _needs(name)
    from gcad_dist.detectors.pygod_models import SETTINGS

    for model in SETTINGS.values():  # identical scores are the point here, not quality: keep it short
        monkeypatch.setitem(model, "epoch", 5)
    data, split, _ = graph
    a = fit_score(name, data, split, seed=3, threads=1, device="cpu")
    shuffled = data.clone()
    shuffled.y = data.y[torch.randperm(data.num_nodes, generator=torch.Generator().manual_seed(1))]
    b = fit_score(name, shuffled, None, seed=3, threads=1, device="cpu")
    np.testing.assert_array_equal(a, b)
    bare = strip_labels(data)
    assert getattr(bare, "y", None) is None and bare.num_nodes == data.num_nodes
    np.testing.assert_array_equal(a, fit_score(name, bare, None, seed=3, threads=1, device="cpu"))


@pytest.mark.parametrize("name", ["trees", "boosted-trees"])
def test_supervised_trees_use_only_train_labels(graph, name):
    """Changing labels outside the train split leaves the tree ensembles' scores unchanged."""
    data, split, _ = graph
    a = fit_score(name, data, split, seed=0, threads=1)
    other = data.clone()
    outside = ~split.train
    other.y = data.y.clone()
    other.y[outside] = 1 - other.y[outside]
    np.testing.assert_array_equal(a, fit_score(name, other, split, seed=0, threads=1))


def test_neighbour_cosine_definition():
    """Score = 1 - cos(x_i, mean of the neighbours' x); isolated nodes score 1."""
    from torch_geometric.data import Data

    x = torch.tensor([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0], [3.0, 4.0]])
    ei = torch.tensor([[0, 1, 0, 2], [1, 0, 2, 0]])  # 0-1, 0-2; node 3 isolated
    s = fit_score("nbr-cosine", Data(x=x, edge_index=ei), None, seed=0)
    mean0 = np.array([0.5, 0.5])
    np.testing.assert_allclose(s, [1 - mean0[0] / np.linalg.norm(mean0), 0.0, 1.0, 1.0], atol=1e-12)


def test_missing_optional_package_is_one_line(monkeypatch):
    import sys

    from gcad_dist.cli import UsageError

    monkeypatch.setitem(sys.modules, "pygod", None)  # `import pygod` now raises ImportError
    why = check_available("dominant")
    assert why and "baselines" in why and "\n" not in why
    with pytest.raises(UsageError, match="baselines"):
        fit_score("cola", strip_labels(_tiny()), None, seed=0)


def _tiny():
    from torch_geometric.data import Data

    return Data(x=torch.randn(10, 3), edge_index=torch.tensor([[0, 1], [1, 0]]))


def test_dominant_handles_trailing_isolated_nodes(monkeypatch):
    """PyGOD sizes its dense adjacency by the largest edge id; the wrapper passes N."""
    _needs("dominant")
    from gcad_dist.detectors.pygod_models import SETTINGS

    monkeypatch.setitem(SETTINGS["dominant"], "epoch", 2)
    s = fit_score("dominant", _tiny(), None, seed=0, threads=1, device="cpu")
    assert s.shape == (10,) and np.isfinite(s).all()


@pytest.mark.slow
def test_gccad_pre_local_recipe_finds_planted_anomalies(graph, monkeypatch):
    """The default recipe end to end (whole-graph store -> Ray pre-training, in-process, 1 worker, its 3 epochs
    -> whole-graph score), without labels, scores the planted anomalies of the test split above chance."""
    _needs("gccad-pre")
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    data, split, _ = graph
    s = fit_score("gccad-pre", data, split, seed=0, pre_epochs=None, pre_ensemble=None, pre_cliques=None,
                  pre_tails=None, pre_batch_size=None, threads=1, device="cpu")
    assert s.shape == (data.num_nodes,) and np.isfinite(s).all()
    test = split.test.numpy()
    assert auroc(data.y.numpy()[test], s[test]) > 0.8


@pytest.mark.slow
def test_gccad_pre_paper_runs_without_labels(monkeypatch):
    """Store build (k auto) -> Ray pre-training (in-process, 1 worker, 1 epoch) -> halo scoring by parts."""
    _needs("gccad-pre-paper")
    from partitioning.synthetic import SyntheticConfig, synthesize

    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    data = synthesize(SyntheticConfig(nodes=600, avg_degree=8, features=8, anomaly_fraction=0.05, seed=0)).graph.to_data()
    s = fit_score("gccad-pre-paper", data, None, seed=0, pre_epochs=1, threads=1, device="cpu")
    assert s.shape == (600,) and np.isfinite(s).all() and np.unique(s).size > 10


def test_gccad_pre_store_normalisation_is_a_keyed_option(monkeypatch):
    """--pre-normalize reaches the build of gccad-pre's store, and is part of the run key (power by default, the
    build's default since session 39; standard before)."""
    from gcad_dist.detectors import gccad_pre, settings_of
    from partitioning.build import BuildConfig

    assert BuildConfig.normalize == "power"
    assert settings_of("gccad-pre", {})["pre_normalize"] == "power"
    assert settings_of("gccad-pre", {"pre_normalize": "standard"})["pre_normalize"] == "standard"
    seen = []
    monkeypatch.setattr(gccad_pre, "_pipeline", lambda data, seed, threads, device, workdir, build, pretrain, score:
                        seen.append(build) or np.zeros(10))
    fit_score("gccad-pre", _tiny(), None, seed=0, threads=1, device="cpu", pre_normalize="standard")
    fit_score("gccad-pre", _tiny(), None, seed=0, threads=1, device="cpu")
    assert seen[0]["normalize"] == "standard" and seen[1]["normalize"] == "power"


def test_gccad_pre_pretraining_options_reach_pretrain_and_keep_old_run_keys(monkeypatch):
    """--pre-dense-links, --pre-sample-threshold, --pre-fanout and --pre-lr reach pre-training's settings when given,
    and at pre-training's defaults (or unset) they leave a run's key as it was before they existed."""
    from gcad_dist.detectors import gccad_pre, settings_of

    base = settings_of("gccad-pre", {})
    for k in ("pre_dense_links", "pre_sample_threshold", "pre_fanout", "pre_lr"):
        assert k not in base
    assert settings_of("gccad-pre", {"pre_dense_links": gccad_pre.DENSE_LINKS}) == base
    assert settings_of("gccad-pre", {"pre_fanout": -1})["pre_fanout"] == -1
    seen = []
    monkeypatch.setattr(gccad_pre, "_pipeline", lambda data, seed, threads, device, workdir, build, pretrain, score:
                        seen.append(pretrain) or np.zeros(10))
    fit_score("gccad-pre", _tiny(), None, seed=0, threads=1, device="cpu", pre_dense_links=0,
              pre_sample_threshold=1000, pre_fanout=-1, pre_lr=2e-3)
    fit_score("gccad-pre", _tiny(), None, seed=0, threads=1, device="cpu")
    assert (seen[0]["dense_links"], seen[0]["sample_threshold"], seen[0]["fanouts"], seen[0]["lr"]) == (0, 1000, "-1",
                                                                                                       2e-3)
    assert not {"dense_links", "sample_threshold", "fanouts"} & set(seen[1]) and seen[1]["lr"] == gccad_pre.LOCAL_PRETRAIN["lr"]



def test_local_knn_is_the_distance_to_the_rank_th_most_alike_neighbour():
    """Against brute force: each node's sorted distances to its neighbours; fewer neighbours -> the farthest;
    an isolated node -> the largest score; self links and repeated links do not count."""
    from types import SimpleNamespace

    from gcad_dist.detectors.local_knn import fit_score as local_knn
    from gcad_dist.detectors.local_knn import local_knn_scores

    rng = np.random.default_rng(0)
    n = 40
    x = rng.normal(size=(n, 3)).astype(np.float32)
    src, dst = rng.integers(0, n - 1, 150), rng.integers(0, n - 1, 150)  # node n - 1 stays isolated
    ei = np.concatenate([np.stack([src, dst]), np.stack([dst, src]), [[0, 0], [0, 0]]], axis=1)  # a self link
    data = SimpleNamespace(x=torch.from_numpy(x), edge_index=torch.from_numpy(ei), num_nodes=n)
    s = local_knn(data, None, seed=0)
    nbrs = [sorted({int(j) for i, j in zip(ei[1], ei[0]) if i == v and j != v}) for v in range(n)]
    want = np.zeros(n)
    for v in range(n):
        if nbrs[v]:
            d = np.sort(np.linalg.norm(x[nbrs[v]] - x[v], axis=1))
            want[v] = d[min(2, d.size) - 1]
    has = np.array([bool(b) for b in nbrs])
    assert not has[n - 1] and (~has).sum() >= 1
    want[~has] = want[has].max()
    np.testing.assert_allclose(s, want, rtol=1e-5)
    # rank 1 is the nearest neighbour, and a rank below 1 is refused
    indptr = np.array([0, 2, 3, 4]); indices = np.array([1, 2, 0, 0])
    z = np.array([[0, 0], [3, 4], [1, 0]], dtype=np.float32)
    np.testing.assert_allclose(local_knn_scores(z, indptr, indices, rank=1), [1.0, 5.0, 1.0])
    np.testing.assert_allclose(local_knn_scores(z, indptr, indices, rank=2), [5.0, 5.0, 1.0])
    with pytest.raises(ValueError, match="rank"):
        local_knn_scores(z, indptr, indices, rank=0)
