"""The torch-cuda K-means backend (partitioning.kmeans), run on the CPU here, against FAISS; backend choice."""

from __future__ import annotations

import numpy as np
import pytest

from partitioning import kmeans as km

torch = pytest.importorskip("torch")


def blobs(k: int, n: int = 3000, dim: int = 8, seed: int = 0) -> np.ndarray:
    """Well-separated Gaussian blobs: centres ~ N(0, 20^2), unit noise."""
    rng = np.random.default_rng(seed)
    centres = rng.normal(0.0, 20.0, (k, dim))
    return (centres[rng.integers(0, k, n)] + rng.normal(0.0, 1.0, (n, dim))).astype(np.float32)


def faiss_train(x: np.ndarray, init: np.ndarray, niter: int) -> tuple[np.ndarray, float]:
    import faiss

    n, d = x.shape
    k = init.shape[0]
    obj = faiss.Kmeans(d, k, niter=niter, seed=0, gpu=False, verbose=False,
                       max_points_per_centroid=int(np.ceil(n / k)) + 1, min_points_per_centroid=1)
    inertia = float(obj.train(x, init_centroids=init))
    return np.ascontiguousarray(obj.centroids), inertia


@pytest.mark.parametrize("k, seed", [(5, 0), (8, 1)])
def test_torch_lloyd_matches_faiss_from_the_same_start(k: int, seed: int) -> None:
    x = blobs(k, seed=seed)
    init = km.kmeans_pp_init(x, k, seed)
    c_faiss, obj_faiss = faiss_train(x, init, niter=10)
    c_torch, obj_torch = km._torch_lloyd(x, init, 10, device="cpu", chunk_rows=700)  # several chunks
    assert c_torch.dtype == np.float32 and c_torch.shape == init.shape
    np.testing.assert_allclose(c_torch, c_faiss, rtol=1e-4, atol=1e-4)
    assert obj_torch == pytest.approx(obj_faiss, rel=1e-3)
    lab_t, inert_t = km._torch_assign(x, c_torch, device="cpu", chunk_rows=1000)
    lab_f, inert_f = km.assign(x, c_faiss, backend="faiss-cpu")
    np.testing.assert_array_equal(lab_t, lab_f)  # same start: the same labelling, not only up to a permutation
    assert inert_t == pytest.approx(inert_f, rel=1e-3)


def test_torch_train_keeps_best_restart_and_is_deterministic() -> None:
    x = blobs(6, seed=4)
    c1, o1 = km._torch_train(x, 6, niter=8, seed=3, nredo=3, device="cpu")
    c2, o2 = km._torch_train(x, 6, niter=8, seed=3, nredo=3, device="cpu")
    np.testing.assert_array_equal(c1, c2)
    assert o1 == o2
    singles = [km._torch_lloyd(x, km.kmeans_pp_init(x, 6, 3, redo=r), 8, device="cpu")[1] for r in range(3)]
    assert o1 == pytest.approx(min(singles), rel=1e-9)
    _, o_faiss = km.train_centroids(x, 6, niter=8, seed=3, nredo=3, backend="faiss-cpu")
    assert o1 == pytest.approx(o_faiss, rel=1e-3)


def test_torch_assign_equals_flat_l2() -> None:
    import faiss

    rng = np.random.default_rng(0)
    x = rng.normal(size=(2500, 12)).astype(np.float32)
    c = rng.normal(size=(9, 12)).astype(np.float32)
    labels, inertia = km._torch_assign(x, c, device="cpu", chunk_rows=300)  # several chunks, the last partial
    index = faiss.IndexFlatL2(12)
    index.add(c)
    dist, idx = index.search(x, 1)
    assert labels.dtype == np.int64 and labels.shape == (2500,)
    d = ((x[:, None, :].astype(np.float64) - c[None].astype(np.float64)) ** 2).sum(-1)
    differ = labels != idx[:, 0]
    # any disagreement must be a tie (to float32 round-off) between the two choices
    rows = np.flatnonzero(differ)
    np.testing.assert_allclose(d[rows, labels[rows]], d[rows, idx[rows, 0]], rtol=1e-5)
    assert differ.mean() < 1e-3
    assert inertia == pytest.approx(float(dist[:, 0].astype(np.float64).sum()), rel=1e-5)
    assert inertia == pytest.approx(d.min(1).sum(), rel=1e-5)
    # a row equal to a centroid: distance clamped at 0, never negative
    lab0, in0 = km._torch_assign(c[:3] * 1000.0, c * 1000.0, device="cpu")
    np.testing.assert_array_equal(lab0, [0, 1, 2])
    assert in0 >= 0.0


def test_empty_cluster_is_split_from_the_largest() -> None:
    x = blobs(4, n=2000, seed=5) + 50.0  # far from the origin: the multiplicative split moves the centroid
    init = km.kmeans_pp_init(x, 4, seed=0)
    init[3] = init[2]  # a duplicate: cluster 3 gets no point in the first assignment (ties go to 2)
    lab0, _ = km._torch_assign(x, init, device="cpu")
    assert np.bincount(lab0, minlength=4)[3] == 0
    cent, obj = km._torch_lloyd(x, init, 10, device="cpu")
    labels, inertia = km._torch_assign(x, cent, device="cpu")
    assert np.bincount(labels, minlength=4).min() > 0
    assert np.isfinite(obj) and inertia <= obj * (1 + 1e-6)  # the final update does not raise the objective
    # one iteration: the split itself (the copy of the largest cluster's centroid, moved apart by 1 +- 1/1024)
    c1, _ = km._torch_lloyd(x, init, 1, device="cpu")
    sign = np.where(np.arange(x.shape[1]) % 2 == 0, 1.0, -1.0)
    big = int(np.argmax(np.bincount(lab0, minlength=4)))
    base = c1[big] / (1.0 - sign / 1024)
    np.testing.assert_allclose(c1[3], base * (1.0 + sign / 1024), rtol=1e-5)


@pytest.mark.parametrize("faiss_gpus, cuda, auto", [(1, True, "faiss-gpu"), (1, False, "faiss-gpu"),
                                                     (0, True, "torch-cuda"), (0, False, "faiss-cpu")])
def test_resolve_backend(monkeypatch, faiss_gpus: int, cuda: bool, auto: str) -> None:
    import faiss

    monkeypatch.setattr(faiss, "get_num_gpus", lambda: faiss_gpus)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: cuda)
    assert km.resolve_backend("auto") == auto
    assert km.resolve_backend("no") == "faiss-cpu" and km.resolve_device("no") is False
    if auto == "faiss-cpu":
        with pytest.raises(ValueError, match="faiss-gpu.*CUDA build of torch"):
            km.resolve_backend("yes")
        assert km.resolve_device("auto") is False
    else:
        assert km.resolve_backend("yes") == auto and km.resolve_device("yes") is True
    with pytest.raises(ValueError, match="auto, yes or no"):
        km.resolve_backend("maybe")


def test_backend_argument_and_legacy_use_gpu() -> None:
    x = blobs(3, n=600, seed=2)
    c_new, o_new = km.train_centroids(x, 3, niter=5, backend="faiss-cpu")
    c_old, o_old = km.train_centroids(x, 3, niter=5, use_gpu=False)
    np.testing.assert_array_equal(c_new, c_old)
    assert o_new == o_old
    with pytest.raises(ValueError, match="backend"):
        km.assign(x, c_new, backend="cuda")


def test_kmeans_result_records_backend(monkeypatch) -> None:
    x = blobs(3, n=900, seed=6)
    r = km.kmeans(x, 3, sample=500, niter=5, gpu="no")
    assert r.backend == "faiss-cpu" and r.use_gpu is False
    # the torch-cuda path end to end, its device redirected to the CPU
    monkeypatch.setattr(km, "_torch_cuda_available", lambda: True)
    monkeypatch.setattr(km, "_faiss_num_gpus", lambda: 0)
    real_train, real_assign = km._torch_train, km._torch_assign
    monkeypatch.setattr(km, "_torch_train", lambda *a, **kw: real_train(*a, **{**kw, "device": "cpu"}))
    monkeypatch.setattr(km, "_torch_assign", lambda *a, **kw: real_assign(*a, **{**kw, "device": "cpu"}))
    t = km.kmeans(x, 3, sample=500, niter=5, gpu="yes")
    assert t.backend == "torch-cuda" and t.use_gpu is True
    assert t.inertia == pytest.approx(r.inertia, rel=1e-3)


@pytest.mark.parametrize("k, seed, redo", [(5, 0, 0), (8, 1, 2), (12, 3, 1)])
def test_torch_kmeans_pp_seeding_equals_numpys(k: int, seed: int, redo: int) -> None:
    """The torch-cuda path seeds on the device with the same draws as kmeans_pp_init: the same centroids."""
    x = blobs(k, n=2000, seed=seed)
    ref = km.kmeans_pp_init(x, k, seed, redo=redo)
    got = km._torch_kmeans_pp_init(torch.from_numpy(x), k, seed, redo=redo)
    assert got.dtype == np.float32 and got.shape == ref.shape
    np.testing.assert_array_equal(got, ref)


def test_torch_kmeans_pp_seeding_with_fewer_distinct_points_than_k() -> None:
    x = np.repeat(np.eye(3, dtype=np.float32), 10, axis=0)  # 3 distinct rows, K = 5
    got = km._torch_kmeans_pp_init(torch.from_numpy(x), 5, 0)
    assert got.shape == (5, 3) and np.isfinite(got).all()
    assert {tuple(r) for r in got} == {tuple(r) for r in np.eye(3, dtype=np.float32)}  # every distinct row found
