"""Corrupt subgraphs (METHOD.md section 4): injected counts, sources, induced edges, labels."""

from __future__ import annotations

import logging

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from partitioning.corrupt import PartIndex, corrupt_subgraphs, num_injected
from partitioning.graph import csr_from_edges


def random_graph(n: int, e: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return csr_from_edges(rng.integers(0, n, e), rng.integers(0, n, e), n)


def dense(indptr: np.ndarray, indices: np.ndarray, n: int) -> np.ndarray:
    a = np.zeros((n, n), dtype=bool)
    a[np.repeat(np.arange(n), np.diff(indptr)), indices] = True
    return a


def check_all(n: int, e: int, k: int, ratio: float, reps: int, seed: int) -> None:
    """Every property of the corrupt subgraphs against brute force on a small graph."""
    indptr, indices = random_graph(n, e, seed)
    parts = np.random.default_rng(seed + 1).integers(0, k, n)
    adj = dense(indptr, indices, n)
    subs = list(corrupt_subgraphs(indptr, indices, parts, ratio=ratio, corruptions=reps, seed=seed, num_parts=k))
    nonempty = [p for p in range(k) if (parts == p).any()]
    assert [(s.part, s.replica) for s in subs] == [(p, r) for p in nonempty for r in range(reps)]
    for s in subs:
        own = np.flatnonzero(parts == s.part)
        m = min(int(np.floor(ratio * own.size + 0.5)), n - own.size)
        assert s.subgraph_id == s.part * reps + s.replica
        # own nodes of subgraph i are exactly part i, first and sorted
        np.testing.assert_array_equal(s.nodes[: s.num_own], own)
        injected = s.nodes[s.num_own :]
        assert injected.size == m == s.num_injected
        assert np.all(np.diff(injected) > 0)  # sorted, no repeats
        assert np.all(parts[injected] != s.part)  # all from other parts
        # labels: 0 own, 1 injected
        np.testing.assert_array_equal(s.y, np.r_[np.zeros(own.size), np.ones(m)].astype(np.int8))
        # edges are exactly the induced edges
        np.testing.assert_array_equal(dense(s.indptr, s.indices, s.num_nodes), adj[np.ix_(s.nodes, s.nodes)])
        for r in range(s.num_nodes):  # rows sorted (a loop in a test on 50-node graphs)
            assert np.all(np.diff(s.indices[s.indptr[r] : s.indptr[r + 1]]) > 0)


def test_corrupt_matches_brute_force() -> None:
    check_all(n=200, e=800, k=4, ratio=0.15, reps=2, seed=0)


@settings(max_examples=25, deadline=None)
@given(
    n=st.integers(2, 60),
    e=st.integers(0, 300),
    k=st.integers(2, 6),
    ratio=st.floats(0.01, 0.99),
    reps=st.integers(1, 3),
    seed=st.integers(0, 2**16),
)
def test_corrupt_properties(n: int, e: int, k: int, ratio: float, reps: int, seed: int) -> None:
    check_all(n, e, k, ratio, reps, seed)


def test_same_seed_same_subgraphs_and_replicas_differ() -> None:
    indptr, indices = random_graph(500, 2000, 3)
    parts = np.random.default_rng(0).integers(0, 3, 500)
    a = list(corrupt_subgraphs(indptr, indices, parts, corruptions=2, seed=5))
    b = list(corrupt_subgraphs(indptr, indices, parts, corruptions=2, seed=5))
    c = list(corrupt_subgraphs(indptr, indices, parts, corruptions=2, seed=6))
    for x, y in zip(a, b):
        np.testing.assert_array_equal(x.nodes, y.nodes)
        np.testing.assert_array_equal(x.indices, y.indices)
    assert any(not np.array_equal(x.nodes, z.nodes) for x, z in zip(a, c))
    assert not np.array_equal(a[0].nodes, a[1].nodes)  # two replicas of part 0


def test_injection_is_uniform_over_other_parts() -> None:
    # part 0 = nodes 0..9, the others 10..39; draw 3 nodes 4000 times: each other node ~ 400 times
    parts = np.r_[np.zeros(10, int), np.ones(15, int), np.full(15, 2)]
    idx = PartIndex(parts)
    draws = np.concatenate([idx.sample_others(0, 3, np.random.default_rng([9, t])) for t in range(4000)])
    counts = np.bincount(draws, minlength=40)
    assert counts[:10].sum() == 0
    assert np.all(np.abs(counts[10:] - 400) < 100)


def test_rounding_half_up() -> None:
    np.testing.assert_array_equal(num_injected(np.array([10, 20, 100, 3, 0]), 0.15), [2, 3, 15, 0, 0])
    np.testing.assert_array_equal(num_injected(np.array([1, 3]), 0.5), [1, 2])


def test_big_part_injects_what_exists(caplog: pytest.LogCaptureFixture) -> None:
    indptr, indices = random_graph(100, 300, 1)
    parts = np.r_[np.zeros(95, int), np.ones(5, int)]
    with caplog.at_level(logging.WARNING):
        subs = list(corrupt_subgraphs(indptr, indices, parts, ratio=0.9))
    assert subs[0].num_injected == 5  # round(0.9 * 95) = 86 wanted, only 5 nodes elsewhere
    assert "only 5" in caplog.text


@pytest.mark.parametrize("kwargs", [{"ratio": 0.0}, {"ratio": 1.0}, {"corruptions": 0}])
def test_bad_arguments(kwargs: dict) -> None:
    indptr, indices = random_graph(10, 20, 0)
    with pytest.raises(ValueError):
        list(corrupt_subgraphs(indptr, indices, np.arange(10) % 2, **kwargs))
