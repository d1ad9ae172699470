"""Corruption kinds beside node injection (``--corruption-mix``): what each changes and what it keeps."""

from __future__ import annotations

import json

import numpy as np
import pytest

from partitioning.corrupt import (EDGE_MIN, KINDS, corrupt_subgraphs, format_mix, num_injected, parse_mix,
                                  split_counts, subgraph_edge_share)
from partitioning.graph import csr_from_edges

MIX = "inject,features,edges"


def graph(n: int = 400, e: int = 2400, k: int = 4, seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    indptr, indices = csr_from_edges(rng.integers(0, n, e), rng.integers(0, n, e), n)
    return indptr, indices, rng.integers(0, k, n)


def dense(indptr: np.ndarray, indices: np.ndarray, n: int) -> np.ndarray:
    a = np.zeros((n, n), dtype=bool)
    a[np.repeat(np.arange(n), np.diff(indptr)), indices] = True
    return a


def rows_of(s, kind: str) -> np.ndarray:
    """Local rows of one kind: the label-1 rows are injected, then features, then edges (store order)."""
    start = s.num_own + sum(s.counts.get(k, 0) for k in KINDS[: KINDS.index(kind)])
    return np.arange(start, start + s.counts.get(kind, 0))


def subs_of(mix: str, seed: int = 0, reps: int = 1, **kw):
    indptr, indices, parts = graph(**kw)
    return indptr, indices, parts, list(corrupt_subgraphs(indptr, indices, parts, ratio=0.15, corruptions=reps,
                                                          seed=seed, mix=mix))


def test_paper_mix_is_bit_identical_to_plain_injection() -> None:
    indptr, indices, parts = graph()
    for mix in (None, "inject", {"inject": 3.0}):
        a = list(corrupt_subgraphs(indptr, indices, parts, corruptions=2, seed=3))
        b = list(corrupt_subgraphs(indptr, indices, parts, corruptions=2, seed=3, mix=mix))
        for x, y in zip(a, b, strict=True):
            for name in ("nodes", "indptr", "indices"):
                np.testing.assert_array_equal(getattr(x, name), getattr(y, name))
            assert x.num_own == y.num_own and y.link_nodes is None and y.planted is None


@pytest.mark.parametrize("mix", ["features", "edges", "inject,features", MIX, "inject:2,features:1,edges:1"])
def test_labels_ratio_and_untouched_nodes(mix: str) -> None:
    indptr, indices, parts, subs = subs_of(mix)
    adj = dense(indptr, indices, parts.size)
    weights = parse_mix(mix)
    for s in subs:
        own = np.flatnonzero(parts == s.part)
        m = int(num_injected(own.size, 0.15))
        # ratio: round(ratio * |part|) corrupted in all (no collision can empty a node's draws here)
        assert s.num_injected == m == sum(s.counts[k] for k in weights)
        assert set(s.counts) - {"planted_edges"} == set(weights)
        # labels mark exactly the corrupted rows: 0 then 1, and the corrupted rows are the kinds' rows
        np.testing.assert_array_equal(s.y, np.r_[np.zeros(s.num_own), np.ones(m)].astype(np.int8))
        links = s.nodes if s.link_nodes is None else s.link_nodes
        # every source node appears at most once by its links; own rows + the features/edges rows = the part
        assert np.unique(links).size == links.size
        host_rows = np.r_[np.arange(s.num_own), rows_of(s, "features"), rows_of(s, "edges")]
        np.testing.assert_array_equal(np.sort(links[host_rows]), own)
        # untouched rows: own id, own features (nodes == links) and exactly their induced edges
        a = dense(s.indptr, s.indices, s.num_nodes)
        clean = np.arange(s.num_own)
        np.testing.assert_array_equal(s.nodes[clean], links[clean])
        assert np.all(np.diff(s.nodes[clean]) > 0)
        edgy = rows_of(s, "edges")
        plain = np.setdiff1d(np.arange(s.num_nodes), edgy)  # rows without planted edges
        np.testing.assert_array_equal(a[np.ix_(plain, plain)], adj[np.ix_(links[plain], links[plain])])
        # injected rows: other parts, own features and links
        inj = rows_of(s, "inject")
        assert np.all(parts[s.nodes[inj]] != s.part)
        np.testing.assert_array_equal(s.nodes[inj], links[inj])
        # CSR: symmetric, rows sorted, no self loops, no duplicates
        assert np.array_equal(a, a.T) and not a.diagonal().any()
        assert a.sum() == s.indices.size
        for r in range(s.num_nodes):
            assert np.all(np.diff(s.indices[s.indptr[r] : s.indptr[r + 1]]) > 0)


def test_features_kind_swaps_features_keeps_links() -> None:
    indptr, indices, parts, subs = subs_of("inject,features")
    adj = dense(indptr, indices, parts.size)
    for s in subs:
        f = rows_of(s, "features")
        assert f.size > 0
        host, donor = s.link_nodes[f], s.nodes[f]
        assert np.all(parts[host] == s.part) and np.all(parts[donor] != s.part)  # x row = another part's node's
        assert np.unique(donor).size == donor.size
        assert not np.isin(donor, s.nodes[rows_of(s, "inject")]).any()  # donors are not also injected
        # edges of a feature-swapped row are exactly its host's original induced edges
        a = dense(s.indptr, s.indices, s.num_nodes)
        np.testing.assert_array_equal(a[f], adj[np.ix_(host, s.link_nodes)])
        assert not s.planted.any()


def test_features_kind_rows_carry_donor_features_in_the_store(tmp_path) -> None:
    from partitioning.store.reader import StoreReader
    from partitioning.store.writer import write_store

    indptr, indices, parts, subs = subs_of("features")
    x = np.random.default_rng(1).normal(size=(parts.size, 3)).astype(np.float32)
    write_store(tmp_path / "s.zarr", x, subs, {"corruption": {"kinds": ["features"]}})
    r = StoreReader(str(tmp_path / "s.zarr"))
    for i, s in enumerate(subs):
        d = r.get(i)
        np.testing.assert_array_equal(d.x.numpy(), x[s.nodes])  # donor features on the host's row
        f = rows_of(s, "features")
        assert not np.allclose(d.x.numpy()[f], x[s.link_nodes[f]])
        np.testing.assert_array_equal(d.y.numpy(), s.y)


def test_edges_kind_keeps_features_adds_edges() -> None:
    indptr, indices, parts, subs = subs_of("edges")
    adj = dense(indptr, indices, parts.size)
    for s in subs:
        e = rows_of(s, "edges")
        assert e.size > 0
        np.testing.assert_array_equal(s.nodes, s.link_nodes)  # every row keeps its own features
        a = dense(s.indptr, s.indices, s.num_nodes)
        orig = adj[np.ix_(s.nodes, s.nodes)]
        new = a & ~orig
        assert not (orig & ~a).any()  # no source edge lost
        assert np.all(new[e].sum(1) >= 1)  # each edge-corrupted node gained edges ...
        rest = np.setdiff1d(np.arange(s.num_nodes), e)
        assert not new[np.ix_(rest, rest)].any()  # ... and every new edge touches one of them
        deg = orig[e].sum(1)
        assert np.all(new[e].sum(1) <= np.maximum(EDGE_MIN, deg) + new[np.ix_(e, e)].sum(1))
        assert new.sum() // 2 == s.counts["planted_edges"]
        # the planted mask marks exactly the new entries
        rows = np.repeat(np.arange(s.num_nodes), np.diff(s.indptr))
        np.testing.assert_array_equal(s.planted, new[rows, s.indices])


def test_edge_corruption_without_room_falls_back_to_unchanged() -> None:
    # a complete part: no node can gain an edge, so no node is edge-corrupted (and none is mislabelled)
    n = 12
    iu, ju = np.triu_indices(n, 1)
    indptr, indices = csr_from_edges(iu, ju, n)
    parts = np.r_[np.zeros(10, int), np.ones(2, int)]
    s = next(iter(corrupt_subgraphs(indptr, indices, parts, ratio=0.3, mix="edges")))
    assert s.counts["edges"] == 0 and s.num_own == 10 and not s.y.any()
    np.testing.assert_array_equal(s.nodes, np.arange(10))


def test_deterministic_per_seed() -> None:
    *_, a = subs_of(MIX, seed=4, reps=2)
    *_, b = subs_of(MIX, seed=4, reps=2)
    *_, c = subs_of(MIX, seed=5, reps=2)
    for x, y in zip(a, b, strict=True):
        for name in ("nodes", "link_nodes", "indptr", "indices", "planted"):
            np.testing.assert_array_equal(getattr(x, name), getattr(y, name))
        assert x.counts == y.counts
    assert any(not np.array_equal(x.nodes, z.nodes) for x, z in zip(a, c))
    assert not np.array_equal(a[0].link_nodes, a[1].link_nodes)  # replicas differ


def test_edge_share_ignores_planted_edges_and_follows_links() -> None:
    indptr, indices, parts = graph()
    n, m = parts.size, indices.size // 2
    plain = list(corrupt_subgraphs(indptr, indices, parts, seed=2, mix="inject"))
    # features/edges keep every own node's source links: the share is at least the uncut share
    mixed = list(corrupt_subgraphs(indptr, indices, parts, seed=2, mix="features,edges"))
    own_only = sum(dense(indptr, indices, n)[np.ix_(parts == p, parts == p)].sum() for p in range(4)) // 2
    assert subgraph_edge_share(mixed, n, m) == pytest.approx(own_only / m)
    assert subgraph_edge_share(plain, n, m) >= own_only / m


def test_split_counts_and_parse() -> None:
    rng = np.random.default_rng(0)
    assert split_counts(7, {"inject": 1.0}, None) == {"inject": 7}
    c = split_counts(7, parse_mix(MIX), rng)
    assert sum(c.values()) == 7 and sorted(c.values()) == [2, 2, 3]
    assert split_counts(8, parse_mix("inject:2,features:1,edges:1"), rng) == {"inject": 4, "features": 2, "edges": 2}
    # remainders spread over the kinds: over many draws each kind gets the extra node equally often
    extra = np.array([list(split_counts(4, parse_mix(MIX), rng).values()) for _ in range(3000)]).sum(0)
    assert np.all(np.abs(extra - 4000) < 200)
    assert parse_mix("edges, inject") == {"inject": 1.0, "edges": 1.0}  # canonical kind order
    assert format_mix(parse_mix(MIX)) == MIX and format_mix(parse_mix("inject:2,edges")) == "inject:2,edges:1"
    for bad in ("", "inject,inject", "nodes", "inject:0", "inject:x", "features:-1"):
        with pytest.raises(ValueError):
            parse_mix(bad)


def _graph_file(tmp_path) -> tuple[np.ndarray, np.ndarray]:
    """A 300-node graph with 4 random features saved as ``tmp_path / "g.npz"``; returns its CSR."""
    from partitioning.graph import Graph
    from partitioning.io import save_npz

    indptr, indices, _ = graph(n=300, e=1500)
    x = np.random.default_rng(0).normal(size=(300, 4)).astype(np.float32)
    save_npz(Graph(x=x, indptr=indptr, indices=indices), tmp_path / "g.npz")
    return indptr, indices


def test_build_records_the_mix(tmp_path, capsys) -> None:
    from partitioning.build import main
    from partitioning.store.reader import StoreReader

    _graph_file(tmp_path)
    out = tmp_path / "s.zarr"
    assert main(["--graph", str(tmp_path / "g.npz"), "--out", str(out), "--k", "3", "--no-progress", "--no-plot",
                 "--corruption-mix", "edges,inject,features", "--json"]) == 0
    text = capsys.readouterr().out
    assert "corrupted" in text and "planted edges" in text
    man = json.loads(text[text.index("{"):])
    cor = man["corruption"]
    assert cor["kinds"] == list(KINDS) and cor["spec"] == MIX and not cor["paper"] and cor["ratio"] == 0.15
    assert man["params"]["corruption_mix"] == "edges,inject,features"
    per = cor["per_subgraph"]
    r = StoreReader(str(out))
    corrupted = [int(r.get(i).y.sum()) for i in range(len(r))]
    assert corrupted == [a + b + c for a, b, c in zip(per["inject"], per["features"], per["edges"])]
    assert cor["counts"]["inject"] == sum(per["inject"]) and man["counts"]["injected_nodes"] == sum(corrupted)
    # the paper's setting, the default, records itself as such
    assert main(["--graph", str(tmp_path / "g.npz"), "--out", str(tmp_path / "p.zarr"), "--k", "3",
                 "--no-progress", "--no-plot", "--json"]) == 0
    text = capsys.readouterr().out
    man = json.loads(text[text.index("{"):])
    assert man["corruption"]["kinds"] == ["inject"] and man["corruption"]["paper"]
    assert man["corruption"]["counts"]["inject"] == man["counts"]["injected_nodes"]


def test_bad_mix_is_a_usage_error(tmp_path, capsys) -> None:
    from partitioning.build import main
    from partitioning.cli import UsageError

    with pytest.raises(UsageError, match="--corruption-mix"):
        main(["--graph", str(tmp_path / "none.npz"), "--out", str(tmp_path / "s.zarr"), "--corruption-mix", "nodes"])


def test_mix_none_parses_and_stores_parts_uncorrupted() -> None:
    assert parse_mix("none") == {} and parse_mix({}) == {} and format_mix({}) == "none"
    for bad in ("none,inject", "inject,none"):
        with pytest.raises(ValueError, match="none"):
            parse_mix(bad)
    indptr, indices, _ = graph(n=200, e=900)
    parts = np.random.default_rng(1).integers(0, 3, 200)
    subs = list(corrupt_subgraphs(indptr, indices, parts, mix="none", seed=0))
    assert [s.part for s in subs] == [0, 1, 2]
    for s in subs:
        own = np.flatnonzero(parts == s.part)
        assert np.array_equal(s.nodes, own) and s.num_own == own.size and s.counts == {}
        # every source edge between two of the part's nodes, and no other
        want = sum(int(np.isin(indices[indptr[v]:indptr[v + 1]], own).sum()) for v in own)
        assert s.indptr[-1] == want
    whole = list(corrupt_subgraphs(indptr, indices, np.zeros(200, dtype=np.int64), mix="none"))
    assert len(whole) == 1 and np.array_equal(whole[0].indices, indices) and np.array_equal(whole[0].indptr, indptr)


def test_build_whole_graph_store_without_corruption(tmp_path, capsys, caplog) -> None:
    from partitioning.build import main
    from partitioning.cli import UsageError
    from partitioning.store.reader import StoreReader

    indptr, _ = _graph_file(tmp_path)
    out = tmp_path / "s.zarr"
    assert main(["--graph", str(tmp_path / "g.npz"), "--out", str(out), "--k", "1", "--corruption-mix", "none",
                 "--no-progress", "--no-plot", "--json"]) == 0
    text = capsys.readouterr().out
    assert "none corrupted" in text and "whole graph" in text
    man = json.loads(text[text.index("{"):])
    assert man["partition"]["k"] == 1 and man["partition"]["edges_kept"] == 1.0
    assert man["corruption"]["kinds"] == [] and man["corruption"]["spec"] == "none" and not man["corruption"]["paper"]
    r = StoreReader(str(out))
    assert len(r) == 1 and int(r.own_counts.sum()) == 300
    d = r.get(0)
    assert d.num_nodes == 300 and int(d.y.sum()) == 0 and d.edge_index.size(1) == indptr[-1]
    for argv, needle in ((["--k", "1", "--corruption-mix", "inject"], "--k"),
                         (["--k", "1", "--corruption-mix", "features"], "--k"),
                         (["--corruption-mix", "none", "--corruptions", "2"], "--corruptions")):
        with pytest.raises(UsageError, match=needle):
            main(["--graph", str(tmp_path / "g.npz"), "--out", str(tmp_path / "t.zarr"), *argv])
    # pre-training on it needs per-step corruptions
    from gcad_dist.cli import UsageError as GcadUsageError
    from gcad_dist.pretrain import parse_config, validate

    with pytest.raises(GcadUsageError, match="--swap-features"):
        validate(parse_config(["--store", str(out), "--out", str(tmp_path / "pre"), "--recipe", "paper"]))
    cfg = parse_config(["--store", str(out), "--out", str(tmp_path / "pre")])
    validate(cfg)  # --recipe auto: the local recipe for a store without corruption
    assert (cfg.recipe, cfg.contrast, cfg.loss, cfg.tau, cfg.swap_features, cfg.ensemble) == \
        ("local", "local", "logistic", 0.2, 0.15, 5)
    cfg = parse_config(["--store", str(out), "--out", str(tmp_path / "pre"), "--tau", "0.3", "--contrast", "ego"])
    validate(cfg)  # explicit options win over the recipe (and an ego model is one model)
    assert (cfg.recipe, cfg.contrast, cfg.tau, cfg.swap_features, cfg.ensemble) == ("local", "ego", 0.3, 0.15, 1)
    with pytest.raises(GcadUsageError, match="--ensemble 3: an ensemble is trained for the local contrast only"):
        validate(parse_config(["--store", str(out), "--out", str(tmp_path / "pre"), "--contrast", "ego",
                               "--ensemble", "3"]))
    # a store of corrupt subgraphs keeps the paper's settings
    assert main(["--graph", str(tmp_path / "g.npz"), "--out", str(tmp_path / "p.zarr"), "--k", "3", "--no-progress",
                 "--no-plot"]) == 0
    cfg = parse_config(["--store", str(tmp_path / "p.zarr"), "--out", str(tmp_path / "pre")])
    validate(cfg)
    assert (cfg.recipe, cfg.contrast, cfg.loss, cfg.tau, cfg.swap_features, cfg.ensemble) == \
        ("paper", "graph", "contrastive", 0.1, 0.0, 1)
    # the local recipe there works on cut neighbourhoods: a warning says so (none on the whole-graph store above)
    with caplog.at_level("WARNING", logger="gcad_dist.pretrain"):
        validate(parse_config(["--store", str(tmp_path / "p.zarr"), "--out", str(tmp_path / "pre"), "--recipe", "local"]))
    assert "whole-graph" in caplog.text and "of the graph's edges" in caplog.text
    # --k 1 alone implies --corruption-mix none
    assert main(["--graph", str(tmp_path / "g.npz"), "--out", str(tmp_path / "w.zarr"), "--k", "1", "--no-progress",
                 "--json"]) == 0
    text = capsys.readouterr().out
    assert json.loads(text[text.index("{"):])["corruption"]["spec"] == "none"
