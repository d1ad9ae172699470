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
    import torch

    backend = km.resolve_backend("auto")
    if faiss.get_num_gpus() > 0:
        assert backend == "faiss-gpu" and km.resolve_device("auto") is True
    elif torch.cuda.is_available():
        assert backend == "torch-cuda" and km.resolve_device("auto") is True
    else:
        assert backend == "faiss-cpu" and km.resolve_device("auto") is False
        with pytest.raises(ValueError, match="no GPU backend"):
            km.resolve_backend("yes")
    assert km.resolve_backend("no") == "faiss-cpu" and km.resolve_device("no") is False


@pytest.mark.parametrize("ratio, expect", [(0.15, 32), (0.05, 90), (0.1, 45), (0.5, 32), (0.01, 450)])
def test_default_min_part_size_gives_five_injected_nodes(ratio: float, expect: int) -> None:
    from partitioning.corrupt import num_injected

    m = km.default_min_part_size(ratio)
    assert m == expect and m >= km.MIN_PART_FLOOR and num_injected(m, ratio) >= km.MIN_INJECTED
    if m > km.MIN_PART_FLOOR:
        assert num_injected(m - 1, ratio) < km.MIN_INJECTED  # the smallest such size


@pytest.mark.parametrize("seed", range(6))
def test_merge_small_parts_leaves_no_small_part(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n, k = int(rng.integers(60, 400)), int(rng.integers(2, 25))
    x = rng.normal(size=(n, 3)).astype(np.float32)
    # skewed part sizes: a few big parts, many tiny ones
    labels = rng.choice(k, size=n, p=rng.dirichlet(np.full(k, 0.3)))
    present = np.unique(labels)
    labels = np.searchsorted(present, labels)
    cent = rng.normal(size=(present.size, 3)).astype(np.float32)
    m = int(rng.integers(2, n // 2 + 1))
    res = km.merge_small_parts(x, labels, cent, m)
    sizes = np.bincount(res.labels)
    assert sizes.size == res.kept.size and sizes.min() >= m  # dense labels, no small part
    assert res.kept.size >= min(2, present.size)
    np.testing.assert_array_equal(res.centroids, cent[res.kept])
    old_sizes = np.bincount(labels)
    assert res.merged == present.size - res.kept.size
    if res.kept.size > 2 or old_sizes[res.kept].min() >= m:
        # no top-up: a surviving part kept every node it had, and every part below m was dissolved
        stay = np.isin(labels, res.kept)
        np.testing.assert_array_equal(res.kept[res.labels[stay]], labels[stay])
        assert set(np.flatnonzero(old_sizes >= m)) <= set(res.kept.tolist())
    # the reported inertia change is exact
    before = ((x.astype(np.float64) - cent[labels]) ** 2).sum()
    after = ((x.astype(np.float64) - cent[res.kept[res.labels]]) ** 2).sum()
    assert res.inertia_delta == pytest.approx(after - before, rel=1e-9, abs=1e-6)
    assert res.moved == int((res.kept[res.labels] != labels).sum())


def test_merge_sends_an_outlier_pair_to_the_nearest_part() -> None:
    x = np.concatenate([np.zeros((40, 2)), np.full((40, 2), 10.0), [[11.0, 11.0], [12.0, 12.0]]]).astype(np.float32)
    labels = np.repeat([0, 1, 2], [40, 40, 2])
    cent = np.array([[0, 0], [10, 10], [11.5, 11.5]], dtype=np.float32)
    res = km.merge_small_parts(x, labels, cent, 32)
    np.testing.assert_array_equal(res.labels, np.repeat([0, 1], [40, 42]))
    assert res.merged == 1 and res.moved == 2 and res.kept.tolist() == [0, 1]
    # two parts left, one of them small: it takes the other's nodes closest to it
    res2 = km.merge_small_parts(x[:50], np.repeat([0, 1], [40, 10]), cent[:2], 20)
    assert np.bincount(res2.labels).tolist() == [30, 20] and res2.merged == 0 and res2.moved == 10
    with pytest.raises(ValueError, match="two parts"):
        km.merge_small_parts(x[:50], np.repeat([0, 1], [40, 10]), cent[:2], 26)


def test_faiss_gpu_path_seeds_on_the_device_and_reuses_one_index_maker(monkeypatch) -> None:
    """The faiss-gpu backend (here with its two GPU pieces stood in on the CPU: the device seeding on a CPU tensor,
    the GPU flat index by a CPU one) trains and assigns exactly as faiss-cpu does, and asks gpu_flat_index for
    every index it uses instead of making GPU resources per index."""
    import torch

    rng = np.random.default_rng(3)
    x = (rng.normal(size=(3000, 8)) + rng.integers(0, 4, size=(3000, 1)) * 5).astype(np.float32)
    faiss = km._faiss()
    made = []
    monkeypatch.setattr(km, "gpu_flat_index", lambda d: made.append(d) or faiss.IndexFlatL2(d))
    monkeypatch.setattr(km, "_seeding_rows", lambda rows: torch.from_numpy(rows))
    cpu_c, cpu_obj = km.train_centroids(x, 4, niter=10, seed=1, nredo=2, backend="faiss-cpu")
    gpu_c, gpu_obj = km.train_centroids(x, 4, niter=10, seed=1, nredo=2, backend="faiss-gpu")
    np.testing.assert_allclose(gpu_c, cpu_c, rtol=1e-5, atol=1e-5)
    assert gpu_obj == pytest.approx(cpu_obj, rel=1e-6)
    labels_gpu, _ = km.assign(x, gpu_c, backend="faiss-gpu")
    labels_cpu, _ = km.assign(x, cpu_c, backend="faiss-cpu")
    assert (labels_gpu == labels_cpu).all()
    assert made == [8, 8, 8]  # two restarts and the assignment


def test_device_seeding_needs_cuda_and_can_be_turned_off(monkeypatch) -> None:
    import torch

    x = np.zeros((4, 2), dtype=np.float32)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert km._seeding_rows(x) is None
    monkeypatch.setattr(km, "DEVICE_SEEDING", False)
    assert km._seeding_rows(x) is None
