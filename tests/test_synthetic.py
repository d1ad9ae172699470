"""partitioning.synthetic: determinism, sizes, labels, planted anomalies, CLI."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from partitioning.errors import GraphInputError
from partitioning.io import load_graph
from partitioning.synthetic import SyntheticConfig, SyntheticGraph, camouflage_columns, generate, synthesize

REPO = Path(__file__).resolve().parents[1]
SMALL = SyntheticConfig(nodes=5000, avg_degree=12.0, features=16, anomaly_fraction=0.04, seed=3)


def _auroc(positive: np.ndarray, score: np.ndarray) -> float:
    """Mann-Whitney AUROC (scores are continuous, so ties do not matter here)."""
    ranks = np.empty(score.size)
    ranks[np.argsort(score, kind="stable")] = np.arange(1, score.size + 1)
    n_pos = int(positive.sum())
    n_neg = positive.size - n_pos
    return float((ranks[positive].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))


def _ari(a: np.ndarray, b: np.ndarray) -> float:
    """Adjusted Rand index from the contingency table."""
    _, ai = np.unique(a, return_inverse=True)
    _, bi = np.unique(b, return_inverse=True)
    table = np.zeros((ai.max() + 1, bi.max() + 1))
    np.add.at(table, (ai, bi), 1)
    comb = lambda v: (v * (v - 1) / 2).sum()  # noqa: E731
    n = comb(np.array([a.size]))
    index, ra, rb = comb(table), comb(table.sum(1)), comb(table.sum(0))
    expected = ra * rb / n
    return float((index - expected) / ((ra + rb) / 2 - expected))


@pytest.fixture(scope="module")
def small() -> SyntheticGraph:
    return synthesize(SMALL)


def test_deterministic_for_a_seed(small: SyntheticGraph) -> None:
    again = synthesize(SMALL)
    assert again.graph.fingerprint() == small.graph.fingerprint()
    np.testing.assert_array_equal(again.anomaly_type, small.anomaly_type)
    np.testing.assert_array_equal(again.community, small.community)


def test_different_seeds_differ(small: SyntheticGraph) -> None:
    other = generate(dataclasses.replace(SMALL, seed=4))
    assert other.fingerprint() != small.graph.fingerprint()
    assert not np.array_equal(other.indices[:100], small.graph.indices[:100])
    assert not np.allclose(other.x, small.graph.x)


def test_sizes_as_asked(small: SyntheticGraph) -> None:
    g = small.graph
    assert g.num_nodes == SMALL.nodes
    assert g.num_features == SMALL.features
    target = SMALL.nodes * SMALL.avg_degree / 2
    assert abs(g.num_edges - target) <= 0.01 * target
    assert g.x.dtype == np.float32 and g.x.flags.c_contiguous and np.isfinite(g.x).all()
    assert np.unique(small.community).size == SMALL.resolved_communities()


def test_simple_undirected_csr(small: SyntheticGraph) -> None:
    g = small.graph
    rows = np.repeat(np.arange(g.num_nodes), np.diff(g.indptr))
    assert (rows != g.indices).all(), "self-loop"
    # sorted strictly within rows => no duplicates; symmetric as a set of (row, col) keys
    key = rows * g.num_nodes + g.indices
    assert (np.diff(key) > 0).all()
    np.testing.assert_array_equal(np.sort(g.indices * g.num_nodes + rows), key)


def test_labels_and_anomaly_fraction(small: SyntheticGraph) -> None:
    y, t = small.graph.y, small.anomaly_type
    assert y.dtype == np.int8 and set(np.unique(y)) <= {0, 1}
    np.testing.assert_array_equal(y, (t > 0).astype(np.int8))
    assert y.sum() == round(SMALL.nodes * SMALL.anomaly_fraction)
    counts = np.bincount(t, minlength=4)
    assert (counts[1:] > 0).all(), counts
    mix = np.asarray(SMALL.anomaly_mix) / sum(SMALL.anomaly_mix)
    assert np.allclose(counts[1:] / y.sum(), mix, atol=0.1)


def test_zero_anomalies() -> None:
    r = synthesize(SyntheticConfig(nodes=500, avg_degree=6, features=4, anomaly_fraction=0.0))
    assert r.graph.y.sum() == 0 and (r.anomaly_type == 0).all()


def test_structure_power_law_and_communities(small: SyntheticGraph) -> None:
    g = small.graph
    deg = np.diff(g.indptr)
    assert deg.max() > 5 * deg.mean()  # heavy tail
    ei = g.edge_index()
    normal = small.anomaly_type[ei[0]] + small.anomaly_type[ei[1]] == 0
    intra = (small.community[ei[0]] == small.community[ei[1]])[normal].mean()
    assert intra > 1 - SMALL.mixing - 0.05


def test_structural_anomalies_are_cliques(small: SyntheticGraph) -> None:
    g, t = small.graph, small.anomaly_type
    members = np.flatnonzero(t == 3)
    assert members.size % SMALL.clique_size == 0
    ei = g.edge_index()
    both = (t[ei[0]] == 3) & (t[ei[1]] == 3)
    per_node = np.bincount(ei[0][both], minlength=g.num_nodes)[members]
    assert (per_node >= SMALL.clique_size - 1).all()


def _centroids(r: SyntheticGraph) -> np.ndarray:
    normal = r.anomaly_type == 0
    c = r.community
    sums = np.zeros((c.max() + 1, r.graph.num_features))
    np.add.at(sums, c[normal], r.graph.x[normal])
    return sums / np.bincount(c[normal], minlength=c.max() + 1)[:, None]


def test_feature_anomalies_leave_their_community(small: SyntheticGraph) -> None:
    x, t, c = small.graph.x, small.anomaly_type, small.community
    cent = _centroids(small)
    nearest = ((x[:, None, :] - cent[None]) ** 2).sum(-1).argmin(1)
    assert (nearest[t == 0] == c[t == 0]).mean() > 0.9  # communities are recoverable from features
    assert (nearest[t == 1] != c[t == 1]).mean() > 0.9  # swapped nodes look like another community
    own = np.linalg.norm(x - cent[c], axis=1)
    assert np.median(own[t == 2]) > np.quantile(own[t == 0], 0.9)  # contextual: far from own centroid


def test_anomalies_detectable_from_context(small: SyntheticGraph) -> None:
    """1 - cos(x_i, mean of neighbours' x) separates community-swap and contextual anomalies."""
    g, t = small.graph, small.anomaly_type
    ei = g.edge_index()
    deg = np.diff(g.indptr)
    nbr = np.zeros_like(g.x)
    np.add.at(nbr, ei[0], g.x[ei[1]])
    nbr /= np.maximum(deg, 1)[:, None]
    score = 1 - (g.x * nbr).sum(1) / (np.linalg.norm(g.x, axis=1) * np.linalg.norm(nbr, axis=1) + 1e-9)
    for kind in (1, 2):
        sel = (t == 0) | (t == kind)
        assert _auroc(t[sel] == kind, score[sel]) > 0.85


def test_kmeans_recovers_communities(small: SyntheticGraph) -> None:
    faiss = pytest.importorskip("faiss")
    k = SMALL.resolved_communities()
    km = faiss.Kmeans(SMALL.features, k, niter=25, nredo=3, seed=0)
    km.train(small.graph.x)
    labels = km.index.search(small.graph.x, 1)[1][:, 0]
    assert _ari(small.community, labels) > 0.6


@pytest.mark.parametrize(
    ("field", "value", "option"),
    [
        ("nodes", -5, "--nodes"),
        ("avg_degree", 0.0, "--avg-degree"),
        ("avg_degree", 50.0, "--avg-degree"),
        ("anomaly_fraction", 0.9, "--anomaly-fraction"),
        ("anomaly_mix", (0.0, 0.0, 0.0), "--anomaly-mix"),
        ("communities", 0, "--communities"),
        ("features", 0, "--features"),
        ("mixing", 1.5, "--mixing"),
        ("power_law_exponent", 1.5, "--power-law-exponent"),
        ("clique_size", 1, "--clique-size"),
    ],
)
def test_bad_config(field: str, value, option: str) -> None:
    cfg = SyntheticConfig(nodes=40, avg_degree=4.0)
    setattr(cfg, field, value)
    with pytest.raises(GraphInputError) as info:
        synthesize(cfg)
    assert info.value.source == option


def test_cli_writes_loadable_npz(tmp_path: Path) -> None:
    out = tmp_path / "syn.npz"
    cmd = [sys.executable, "-m", "partitioning.synthetic", "--nodes", "3000", "--avg-degree", "8",
           "--features", "8", "--seed", "1", "--out", str(out)]
    res = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert "3000 nodes" in res.stdout
    g = load_graph(out)
    assert g.num_nodes == 3000 and g.num_features == 8
    with np.load(out) as f:
        assert f["anomaly_type"].dtype == np.int8
        np.testing.assert_array_equal((f["anomaly_type"] > 0).astype(np.int8), g.y)
    same = synthesize(SyntheticConfig(nodes=3000, avg_degree=8, features=8, seed=1))
    assert same.graph.fingerprint() == g.fingerprint()


@pytest.mark.parametrize(
    ("args", "option"),
    [(["--nodes", "-5"], "--nodes"), (["--communities", "many"], "--communities"), (["--mixing", "2"], "--mixing")],
)
def test_cli_bad_option_one_line(tmp_path: Path, args: list[str], option: str) -> None:
    cmd = [sys.executable, "-m", "partitioning.synthetic", *args, "--out", str(tmp_path / "x.npz")]
    res = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=120)
    assert res.returncode == 2
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {option}: "), res.stderr
    assert not (tmp_path / "x.npz").exists()


def test_camouflage_shifts_the_signature_columns_only() -> None:
    """The fourth kind keeps a node's links and all but the signature columns, shifted the same way for all."""
    base = SyntheticConfig(nodes=2000, avg_degree=8, features=16, anomaly_fraction=0.05, anomaly_mix=(0, 1, 0), seed=5)
    cam = dataclasses.replace(base, anomaly_mix=(0, 1, 0, 1), camouflage_shift=3.0)
    a, b = synthesize(base), synthesize(cam)
    t = b.anomaly_type
    counts = np.bincount(t, minlength=5)
    assert counts[4] == 50 and counts[2] == 50 and counts[[1, 3]].sum() == 0
    assert b.graph.y.sum() == 100
    cols, signs = camouflage_columns(16, cam.seed)
    assert cols.size == 2 and set(np.abs(signs)) == {1.0}
    # against the mean of the normal nodes of its community: shifted in the signature columns only
    np.testing.assert_array_equal(a.community, b.community)
    x, comm = b.graph.x.astype(np.float64), b.community
    normal = t == 0
    means = np.stack([x[normal & (comm == k)].mean(axis=0) for k in range(comm.max() + 1)])
    m = t == 4
    dev = (x[m] - means[comm[m]]).mean(axis=0)  # 50 nodes: standard error about 0.15 per column
    rest = np.setdiff1d(np.arange(16), cols)
    np.testing.assert_allclose(dev[cols], 3.0 * signs, atol=0.6)
    assert np.abs(dev[rest]).max() < 0.6


@pytest.mark.parametrize("mix", [(1, 1, 1, 1), (0, 0, 1, 1), (2, 0, 1, 1), (0, 0, 0, 1)])
def test_four_shares_as_asked(mix: tuple) -> None:
    r = synthesize(SyntheticConfig(nodes=6000, avg_degree=6, features=8, anomaly_fraction=0.05, anomaly_mix=mix,
                                   clique_size=10, seed=2))
    counts = np.bincount(r.anomaly_type, minlength=5)[1:]
    assert counts.sum() == 300 == r.graph.y.sum()
    np.testing.assert_allclose(counts / 300, np.asarray(mix) / sum(mix), atol=0.04)


def test_three_shares_keep_old_graphs() -> None:
    """A three-share mix draws exactly what it drew before the fourth kind existed (seeds reproduce graphs)."""
    three = synthesize(dataclasses.replace(SMALL, anomaly_mix=(1, 1, 1)))
    four = synthesize(dataclasses.replace(SMALL, anomaly_mix=(1, 1, 1, 0)))
    assert three.graph.fingerprint() == four.graph.fingerprint()
    assert (three.anomaly_type < 4).all()


def test_camouflage_cli(tmp_path) -> None:
    from partitioning.synthetic import main

    out = tmp_path / "c.npz"
    assert main(["--out", str(out), "--nodes", "600", "--avg-degree", "6", "--features", "8",
                 "--anomaly-mix", "0", "0", "0", "1", "--camouflage-shift", "2"]) == 0
    with np.load(out) as f:
        assert (f["anomaly_type"] == 4).sum() == f["y"].sum() == 18
    with pytest.raises(GraphInputError, match="--anomaly-mix"):
        SyntheticConfig(anomaly_mix=(1, 1)).validate()
    with pytest.raises(GraphInputError, match="--camouflage-shift"):
        SyntheticConfig(camouflage_shift=0.0).validate()


def test_word_features_are_bags_of_words_of_the_communitys_topic() -> None:
    """--feature-kind words: binary rows of about --words distinct words; a normal node shares more words with its
    own community than with others, a swapped node more with another community; the same graph structure and anomaly
    sets as the Gaussian kind of the same seed; camouflage nodes carry the signature words."""
    gauss = SyntheticConfig(nodes=3000, avg_degree=8, features=300, anomaly_fraction=0.06,
                            anomaly_mix=(1, 1, 1, 1), clique_size=10, seed=4)
    words = dataclasses.replace(gauss, feature_kind="words", words=25.0)
    a, b = synthesize(gauss), synthesize(words)
    x, t, comm = b.graph.x, b.anomaly_type, b.community
    assert set(np.unique(x)) == {0.0, 1.0} and x.dtype == np.float32
    assert 15 < x[t == 0].sum(1).mean() < 25  # distinct words of 25 draws, some repeated
    np.testing.assert_array_equal(a.anomaly_type, b.anomaly_type)  # same nodes chosen, same links
    np.testing.assert_array_equal(a.graph.indices, b.graph.indices)
    normal = t == 0
    profile = np.stack([x[normal & (comm == k)].mean(0) for k in range(comm.max() + 1)])  # [C, F]
    own = (x @ profile.T)  # word overlap with each community's profile
    nearest = own.argmax(1)
    assert (nearest[normal] == comm[normal]).mean() > 0.9
    assert (nearest[t == 1] != comm[t == 1]).mean() > 0.9
    cols, _ = camouflage_columns(300, words.seed)
    assert (x[np.ix_(t == 4, cols)] == 1).all() and x[np.ix_(normal, cols)].mean() < 0.5
    assert synthesize(words).graph.fingerprint() == b.graph.fingerprint()  # a seed fixes the graph
    with pytest.raises(GraphInputError, match="--feature-kind"):
        dataclasses.replace(words, feature_kind="bits").validate()


@pytest.mark.parametrize("kind", ["gaussian", "words"])
def test_shared_clique_features_make_fraud_rings(kind: str) -> None:
    """--clique-features shared: the cliques (same nodes, same links as "own") become rings (anomaly_type 5) whose
    members look alike: a member is nearer its fellow members than a random normal node is to its own community's
    nodes; every other node keeps the features of the "own" graph, so the other kinds are unchanged."""
    own = SyntheticConfig(nodes=3000, avg_degree=8, features=64, anomaly_fraction=0.06, anomaly_mix=(1, 1, 1),
                          clique_size=10, feature_kind=kind, seed=6)
    shared = dataclasses.replace(own, clique_features="shared")
    a, b = synthesize(own), synthesize(shared)
    np.testing.assert_array_equal(a.graph.indices, b.graph.indices)  # the same links
    np.testing.assert_array_equal(np.where(a.anomaly_type == 3, 5, a.anomaly_type), b.anomaly_type)
    t, x = b.anomaly_type, b.graph.x.astype(np.float64)
    assert (t == 5).sum() == (a.anomaly_type == 3).sum() > 0 and (t == 3).sum() == 0
    np.testing.assert_array_equal(a.graph.x[t != 5], b.graph.x[t != 5])  # the rest drawn as before
    # ring members are alike: fellow members (clique neighbours) nearer than under "own", and than normal pairs
    ei = b.graph.edge_index()
    both_ring = (t[ei[0]] == 5) & (t[ei[1]] == 5)
    fellow = ((x[ei[0, both_ring]] - x[ei[1, both_ring]]) ** 2).sum(1).mean()
    before = ((a.graph.x[ei[0, both_ring]].astype(np.float64) - a.graph.x[ei[1, both_ring]]) ** 2).sum(1).mean()
    same_comm = (t[ei[0]] == 0) & (t[ei[1]] == 0) & (b.community[ei[0]] == b.community[ei[1]])
    normal_pair = ((x[ei[0, same_comm]] - x[ei[1, same_comm]]) ** 2).sum(1).mean()
    assert fellow < 0.9 * before and fellow < 1.1 * normal_pair
    with pytest.raises(GraphInputError, match="--clique-features"):
        dataclasses.replace(own, clique_features="ring").validate()
