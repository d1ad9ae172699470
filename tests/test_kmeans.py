"""FAISS K-means, nearest-centroid assignment and the elbow rule (partitioning.kmeans)."""

from __future__ import annotations

import numpy as np
import pytest

from partitioning import kmeans as km


def blobs(k: int, n: int = 3000, dim: int = 8, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Well-separated Gaussian blobs: centres ~ N(0, 20^2), unit noise."""
    rng = np.random.default_rng(seed)
    centres = rng.normal(0.0, 20.0, (k, dim))
    label = rng.integers(0, k, n)
    return (centres[label] + rng.normal(0.0, 1.0, (n, dim))).astype(np.float32), label


@pytest.mark.parametrize("k_true", [3, 5, 8])
def test_elbow_finds_number_of_blobs(k_true: int) -> None:
    x, _ = blobs(k_true, seed=k_true)
    res = km.kmeans(x, None, k_grid=list(range(2, 15)), sample=2000, elbow_sample=2000, seed=1, gpu="no")
    assert res.k == k_true
    assert res.elbow is not None and res.elbow.ks == list(range(2, 15))
    assert len(res.elbow.inertias) == 13


def test_find_elbow_on_known_curves() -> None:
    ks = np.arange(1, 11)
    # inertia falls by 10x per step up to K=4, then by 2% per step: the elbow is at 4
    ys = np.where(ks <= 4, 10.0 ** (6 - ks), 100.0 * 0.98 ** (ks - 4))
    assert km.find_elbow(ks, ys) == 4
    # grid order does not matter
    perm = np.random.default_rng(0).permutation(ks.size)
    assert km.find_elbow(ks[perm], ys[perm]) == 4
    # flat curve: the smallest K
    assert km.find_elbow(ks, np.ones(ks.size)) == 1


def test_clusters_recover_blobs_and_are_deterministic() -> None:
    x, truth = blobs(6, seed=3)
    a = km.kmeans(x, 6, sample=1500, seed=7, gpu="no")
    b = km.kmeans(x, 6, sample=1500, seed=7, gpu="no")
    np.testing.assert_array_equal(a.labels, b.labels)
    np.testing.assert_array_equal(a.centroids, b.centroids)
    # each found cluster is exactly one true blob (a bijection between labels)
    pairs = {(int(p), int(t)) for p, t in zip(a.labels, truth)}
    assert len(pairs) == 6
    assert a.sample_size == 1500 and a.labels.shape == (x.shape[0],)


def test_assign_is_exact_nearest_centroid() -> None:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(1000, 5)).astype(np.float32)
    c = rng.normal(size=(7, 5)).astype(np.float32)
    labels, inertia = km.assign(x, c, chunk_rows=128)  # several chunks, last one partial
    d = ((x[:, None, :].astype(np.float64) - c[None].astype(np.float64)) ** 2).sum(-1)
    np.testing.assert_array_equal(labels, d.argmin(1))
    assert inertia == pytest.approx(d.min(1).sum(), rel=1e-5)


def test_kmeans_pp_init_picks_distinct_data_points() -> None:
    x, _ = blobs(4, n=500, seed=2)
    c = km.kmeans_pp_init(x, 4, seed=0)
    rows = {tuple(r) for r in x.tolist()}
    assert all(tuple(r) in rows for r in c.tolist())
    assert len({tuple(r) for r in c.tolist()}) == 4


def test_sample_rows_and_distinct_count() -> None:
    s = km.sample_rows(100, 30, seed=0)
    assert s.size == 30 and np.unique(s).size == 30 and np.all(np.diff(s) > 0) and s.max() < 100
    np.testing.assert_array_equal(km.sample_rows(10, 30, seed=0), np.arange(10))
    x = np.repeat(np.eye(3, dtype=np.float32), 5, axis=0)
    assert km.count_distinct_rows(x) == 3


def test_device_choice_without_gpu() -> None:
    import faiss

    if faiss.get_num_gpus() > 0:
        assert km.resolve_device("auto") is True
    else:
        assert km.resolve_device("auto") is False
        with pytest.raises(ValueError, match="no GPU"):
            km.resolve_device("yes")
    assert km.resolve_device("no") is False
