"""``partitioning.build --cluster-hops``: K-means on graph-smoothed features (partitioning.smoothing)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from partitioning.build import BuildConfig, build, check_config
from partitioning.cli import UsageError
from partitioning.graph import Graph, csr_from_edges
from partitioning.smoothing import smooth_features
from partitioning.store.reader import StoreReader


def test_smoothing_by_hand_and_isolated_nodes() -> None:
    # path 0 - 1 - 2, node 3 isolated; features 1-d
    indptr, indices = csr_from_edges(np.array([0, 1]), np.array([1, 2]), 4)
    x = np.array([[0.0], [3.0], [6.0], [5.0]], dtype=np.float32)
    assert smooth_features(x, indptr, indices, 0) is x
    one = smooth_features(x, indptr, indices, 1)  # (x + mean of neighbours) / 2
    np.testing.assert_allclose(one[:, 0], [(0 + 3) / 2, (3 + 3) / 2, (6 + 3) / 2, 5.0])
    two = smooth_features(x, indptr, indices, 2)
    ax = np.array([3.0, 3.0, 3.0, 5.0])
    a2x = np.array([3.0, 3.0, 3.0, 5.0])  # A(Ax): node 1 averages 3 and 3
    np.testing.assert_allclose(two[:, 0], (x[:, 0] + ax + a2x) / 3, rtol=1e-6)
    assert two.dtype == np.float32
    with pytest.raises(ValueError):
        smooth_features(x, indptr, indices, -1)


def _two_communities(n: int = 200, planted: int = 10, seed: int = 0) -> tuple[Graph, np.ndarray, np.ndarray]:
    """Two communities (edges only inside each), features of community c around 4c, except ``planted`` nodes
    of community 0 that carry community-1 features (contextual anomalies)."""
    rng = np.random.default_rng(seed)
    comm = np.repeat([0, 1], n // 2)
    src = rng.integers(0, n // 2, 6 * n)
    dst = rng.integers(0, n // 2, 6 * n)
    src = np.concatenate([src, src + n // 2])
    dst = np.concatenate([dst, dst + n // 2])
    indptr, indices = csr_from_edges(src, dst, n)
    x = (rng.normal(size=(n, 4)) + 4.0 * comm[:, None]).astype(np.float32)
    odd = rng.choice(n // 2, planted, replace=False)
    x[odd] += 4.0
    return Graph(x=x, indptr=indptr, indices=indices, source="two communities"), comm, odd


@pytest.mark.parametrize("hops", [0, 2])
def test_cluster_hops_puts_foreign_features_with_their_neighbours(tmp_path: Path, hops: int) -> None:
    g, comm, odd = _two_communities()
    res = build(BuildConfig(graph=g.source, out=str(tmp_path / "s.zarr"), k=2, threads=1, plot=False, progress=False,
                            cluster_hops=hops), graph=g)
    part = StoreReader(str(tmp_path / "s.zarr")).node_part()
    normal = np.setdiff1d(np.arange(comm.size), odd)
    # the communities' ordinary nodes are split by community either way (part ids are arbitrary)
    same = part[normal] == part[normal][0]
    assert (same == (comm[normal] == comm[normal][0])).all()
    home = part[normal][comm[normal] == 0][0]
    in_home = (part[odd] == home).mean()
    kept = res.manifest["partition"]["edges_kept"]
    assert res.manifest["partition"]["cluster_hops"] == hops
    if hops == 0:  # by their features: in the other community's part, their links cut
        assert in_home == 0.0 and kept < 1.0
    else:  # by their neighbourhood: with their neighbours, no edge cut
        assert in_home == 1.0 and kept == pytest.approx(1.0)
    # the store keeps the features themselves (normalised by the build's default), not the smoothed ones
    from partitioning.features import power_normalize

    c = StoreReader(str(tmp_path / "s.zarr")).get_csr(0)
    z = power_normalize(g.x)[0]
    np.testing.assert_allclose(c["x"], z[np.asarray(c["global_id"])], atol=1e-4)


def test_cluster_hops_validated() -> None:
    with pytest.raises(UsageError, match="--cluster-hops"):
        check_config(BuildConfig(graph="g", out="o", k=2, cluster_hops=-1))
