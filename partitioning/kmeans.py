"""K-means on node features (FAISS, or PyTorch on CUDA), and the elbow rule that picks K automatically.

* Backends (:func:`resolve_backend`; ``--gpu auto`` takes the first that is available):
  ``faiss-gpu`` (FAISS Lloyd iterations and flat index on a GPU, when ``faiss.get_num_gpus() > 0``; every index
  on one set of GPU resources per process, :func:`gpu_flat_index`),
  ``torch-cuda`` (FAISS sees no GPU but ``torch.cuda.is_available()``: Lloyd iterations written in
  PyTorch on the CUDA device -- e.g. on a CUDA-13-only host, where Meta's CUDA-12 ``faiss-gpu`` wheel
  cannot load), ``faiss-cpu``. ``--gpu yes`` needs one of the two GPU backends, ``--gpu no`` is FAISS CPU.
* Training runs on a uniform sample of the rows (``sample`` points, drawn once with the seed), seeded
  with greedy k-means++ (vectorised, one pass per centroid; NumPy, or on the CUDA device for torch-cuda and
  for faiss-gpu where torch sees that GPU, with the same random draws and the same result) and
  refined by Lloyd iterations: ``faiss.Kmeans``, or :func:`_torch_lloyd` (the same iteration as FAISS:
  assign, objective, centroid = mean of its points, an empty cluster splits the largest one with a
  ``1 +- 1/1024`` perturbation; the objective returned is that of the last assignment, as FAISS's).
* All N rows are then assigned to their nearest centroid by exact L2 (a FAISS flat index, or a chunked
  ``||x||^2 - 2 x c^T + ||c||^2`` matmul + argmin in PyTorch), in chunks so the distance buffers stay small.
* ``--k auto``: K-means is run for every K of a grid on a sample and the inertia (sum of squared
  distances) recorded. K is the elbow found by the *Kneedle* rule (Satopaa et al. 2011) in its offline
  form, applied to log(inertia): scale K and log-inertia to [0, 1], draw the chord from the first to
  the last point of the decreasing curve and take the grid point farthest below that chord, i.e. the
  argmax of ``(1 - k_norm) - log_inertia_norm``. The log makes the rule follow *relative* drops, so one
  huge early drop (K=2 -> 3) does not hide a later, sharper elbow.
* Minimum part size (:func:`merge_small_parts`): a part below the minimum is dissolved, smallest
  first, its nodes going to the nearest remaining centroid; a node alone in its part would be its own
  context (and score 0), a part of a few nodes gets no injected nodes.

Everything is deterministic for a given seed (sample, k-means++ seeding and FAISS seed all derive from
it) on a fixed thread count (the torch-cuda backend sums the centroids in float64 with atomic adds: its
order of summation varies, the float32 centroids almost never do).
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field

import numpy as np

log = logging.getLogger(__name__)

MIN_INJECTED = 5  # the default minimum part size gives every part at least this many injected nodes
MIN_PART_FLOOR = 32  # ... and at least this many own nodes

DEFAULT_K_GRID: tuple[int, ...] = (2, 3, 4, 5, 6, 8, 10, 12, 15, 20, 25, 30, 40, 50)  # --k auto
ELBOW_METHOD = "kneedle on log(inertia): argmax over the grid of (1 - k_norm) - log_inertia_norm"


def _faiss():
    import faiss

    return faiss


#: faiss-gpu: k-means++ seeding on torch's CUDA device when there is one (bench/gpu.py turns it off to time the
#: NumPy seeding it replaced)
DEVICE_SEEDING = True


def _seeding_rows(x: np.ndarray):
    """``x`` as a tensor on torch's current CUDA device, for the faiss-gpu backend's k-means++ seeding
    (:func:`_torch_kmeans_pp_init`: the same draws and centroids as :func:`kmeans_pp_init`, with the
    distance passes on the GPU); None where torch or its CUDA is missing, or :data:`DEVICE_SEEDING` is off."""
    if not DEVICE_SEEDING:
        return None
    try:
        import torch
    except ImportError:  # pragma: no cover - torch is a dependency of the project
        return None
    if not torch.cuda.is_available():
        return None
    return torch.from_numpy(x).to(torch.device("cuda"))


_GPU_RESOURCES = None  # faiss.StandardGpuResources, made once per process by gpu_flat_index


def gpu_flat_index(d: int):
    """An exact L2 index (``faiss.GpuIndexFlatL2``) on the first GPU, on one ``StandardGpuResources`` kept for the
    process. ``faiss.Kmeans(gpu=True)`` and ``index_cpu_to_all_gpus`` make new resources (streams, cuBLAS handle,
    scratch memory) for every index, which on an H100 cost more than the K-means itself (BENCHMARKS.md, session 34)."""
    global _GPU_RESOURCES
    faiss = _faiss()
    if _GPU_RESOURCES is None:
        _GPU_RESOURCES = faiss.StandardGpuResources()
    return faiss.GpuIndexFlatL2(_GPU_RESOURCES, d)


def available_threads() -> int:
    """Cores this process may use (respects CPU affinity)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - non-Linux
        return max(1, os.cpu_count() or 1)


BACKENDS = ("faiss-gpu", "torch-cuda", "faiss-cpu")  # the order --gpu auto tries them in
GPU_BACKENDS = ("faiss-gpu", "torch-cuda")


def _faiss_num_gpus() -> int:
    try:
        faiss = _faiss()
    except ImportError:  # no FAISS at all: the torch-cuda backend still works
        return 0
    return int(faiss.get_num_gpus()) if hasattr(faiss, "get_num_gpus") else 0


def _torch_cuda_available() -> bool:
    import torch  # lazily: only the torch-cuda backend needs it

    return bool(torch.cuda.is_available())


def resolve_backend(gpu: str = "auto") -> str:
    """K-means backend for ``gpu`` = ``auto`` | ``yes`` | ``no``: ``faiss-gpu``, ``torch-cuda`` or ``faiss-cpu``.

    ``auto``: FAISS on a GPU when FAISS sees one, else PyTorch Lloyd iterations on CUDA when torch sees a
    GPU, else FAISS on the CPU. ``yes``: one of the two GPU backends, ValueError when neither is there (the
    caller turns it into a usage error). ``no``: FAISS on the CPU.
    """
    if gpu not in ("auto", "yes", "no"):
        raise ValueError(f"expected auto, yes or no, got {gpu!r}")
    if gpu == "no":
        return "faiss-cpu"
    if _faiss_num_gpus() > 0:
        return "faiss-gpu"
    if _torch_cuda_available():
        return "torch-cuda"
    if gpu == "yes":
        raise ValueError(
            "yes was asked but there is no GPU backend: FAISS sees no GPU and torch sees no CUDA device "
            "(install faiss-gpu, or a CUDA build of torch on a GPU machine; or use --gpu auto|no)"
        )
    return "faiss-cpu"


def resolve_device(gpu: str = "auto") -> bool:
    """True when :func:`resolve_backend` picks a GPU backend (``faiss-gpu`` or ``torch-cuda``)."""
    return resolve_backend(gpu) in GPU_BACKENDS


def _backend(use_gpu: bool, backend: str | None) -> str:
    """``backend`` when given, else the FAISS backend ``use_gpu`` names (the pre-torch-cuda API)."""
    if backend is None:
        return "faiss-gpu" if use_gpu else "faiss-cpu"
    if backend not in BACKENDS:
        raise ValueError(f"backend: expected one of {', '.join(BACKENDS)}, got {backend!r}")
    return backend


def sample_rows(n: int, size: int, seed: int) -> np.ndarray:
    """Sorted uniform sample of ``min(size, n)`` row ids without replacement (all rows if size >= n)."""
    if size >= n:
        return np.arange(n, dtype=np.int64)
    rng = np.random.default_rng([seed, 0x5A])
    return np.sort(rng.choice(n, size=size, replace=False)).astype(np.int64)


def count_distinct_rows(x: np.ndarray) -> int:
    """Number of distinct rows of ``x`` (rows viewed as opaque byte strings; -0.0 != 0.0 is ignored)."""
    if x.shape[0] == 0:
        return 0
    rows = np.ascontiguousarray(x).view(np.dtype((np.void, x.dtype.itemsize * x.shape[1])))
    return int(np.unique(rows).size)


def kmeans_pp_init(x: np.ndarray, k: int, seed: int, trials: int | None = None, redo: int = 0) -> np.ndarray:
    """Greedy k-means++ seeding (D^2 sampling; as in scikit-learn, ``2 + ln k`` candidates per step, the
    one that lowers the potential most is kept). One vectorised pass over ``x`` per centroid."""
    n = x.shape[0]
    rng = np.random.default_rng([seed, k, redo, 0x99])
    trials = trials or 2 + int(np.log(k))
    xf = x.astype(np.float32, copy=False)
    sq = np.einsum("ij,ij->i", xf, xf, dtype=np.float64)
    centers = np.empty((k, x.shape[1]), dtype=np.float32)
    first = int(rng.integers(n))
    centers[0] = xf[first]
    d2 = np.maximum(sq - 2.0 * (xf @ centers[0]).astype(np.float64) + sq[first], 0.0)
    for j in range(1, k):
        total = d2.sum()
        if total <= 0.0:  # fewer distinct points than centroids so far: pick uniformly
            cand = rng.integers(n, size=trials)
        else:  # inverse-CDF draws, O(n), no copies of x
            cand = np.minimum(np.searchsorted(np.cumsum(d2), rng.random(trials) * total, side="right"), n - 1)
        dc = sq[None, :] - 2.0 * (xf[cand] @ xf.T).astype(np.float64) + sq[cand][:, None]  # [trials, n]
        np.minimum(np.maximum(dc, 0.0), d2[None, :], out=dc)
        best = int(np.argmin(dc.sum(axis=1)))
        centers[j] = xf[cand[best]]
        d2 = dc[best]
    return centers


def train_centroids(
    x: np.ndarray,
    k: int,
    *,
    niter: int = 20,
    seed: int = 0,
    use_gpu: bool = False,
    nredo: int = 1,
    backend: str | None = None,
) -> tuple[np.ndarray, float]:
    """Fit K-means on all rows of ``x`` (already the training sample). Returns (centroids [k,F], inertia).

    ``nredo`` independent runs (own k-means++ seeding each); the one with the lowest inertia is kept.
    ``backend`` (:data:`BACKENDS`) picks FAISS CPU / GPU or PyTorch on CUDA; without it ``use_gpu``
    picks FAISS GPU or CPU.
    """
    backend = _backend(use_gpu, backend)
    x = np.ascontiguousarray(x, dtype=np.float32)
    n, d = x.shape
    if k > n:
        raise ValueError(f"K={k} is larger than the number of training points ({n})")
    if backend == "torch-cuda":
        return _torch_train(x, k, niter=niter, seed=seed, nredo=nredo, device="cuda")
    faiss = _faiss()
    xt = _seeding_rows(x) if backend == "faiss-gpu" else None  # seed on the GPU FAISS trains on
    best: tuple[np.ndarray, float] | None = None
    for redo in range(max(1, nredo)):
        if xt is None:
            init = kmeans_pp_init(x, k, seed, redo=redo)
        else:
            init = _torch_kmeans_pp_init(xt, k, seed, redo=redo)
        km = faiss.Kmeans(
            d,
            k,
            niter=niter,
            seed=seed + redo,
            verbose=False,
            # train on every sampled point: no second subsampling inside FAISS, no "too few points" warning
            max_points_per_centroid=int(np.ceil(n / k)) + 1,
            min_points_per_centroid=1,
        )
        if backend == "faiss-gpu":
            km.index = gpu_flat_index(d)
        obj = float(km.train(x, init_centroids=init))
        if best is None or obj < best[1]:
            best = (np.ascontiguousarray(km.centroids, dtype=np.float32), obj)
    return best


def assign(
    x: np.ndarray,
    centroids: np.ndarray,
    *,
    use_gpu: bool = False,
    chunk_rows: int = 262_144,
    backend: str | None = None,
) -> tuple[np.ndarray, float]:
    """Nearest centroid of every row (exact L2), searched in chunks. Returns (labels int64 [N], inertia).

    ``backend`` as in :func:`train_centroids`.
    """
    backend = _backend(use_gpu, backend)
    if backend == "torch-cuda":
        return _torch_assign(x, centroids, device="cuda", chunk_rows=chunk_rows)
    faiss = _faiss()
    index = gpu_flat_index(centroids.shape[1]) if backend == "faiss-gpu" else faiss.IndexFlatL2(centroids.shape[1])
    index.add(np.ascontiguousarray(centroids, dtype=np.float32))
    n = x.shape[0]
    labels = np.empty(n, dtype=np.int64)
    inertia = 0.0
    for start in range(0, n, chunk_rows):
        block = np.ascontiguousarray(x[start : start + chunk_rows], dtype=np.float32)
        dist, idx = index.search(block, 1)
        labels[start : start + block.shape[0]] = idx[:, 0]
        inertia += float(dist[:, 0].astype(np.float64).sum())
    return labels, inertia


# -- PyTorch backend (torch-cuda; ``device`` is a parameter so the tests run it on the CPU) ----------------
SPLIT_EPS = 1.0 / 1024  # FAISS's perturbation when an empty cluster takes half of the largest one
_DIST_BUFFER_BYTES = 1 << 28  # float32 [rows, K] distance block of the torch path: at most 256 MiB


def _chunk_for(k: int, chunk_rows: int | None = None) -> int:
    rows = max(1024, _DIST_BUFFER_BYTES // (4 * max(1, k)))
    return max(1, min(rows, chunk_rows)) if chunk_rows else rows


def _torch_nearest(xt, xsq, c, chunk: int):
    """Labels (int64) and clamped squared distances (float32) of the rows of ``xt`` (on ``c``'s device)."""
    import torch

    n = xt.shape[0]
    csq = (c * c).sum(1)
    labels = torch.empty(n, dtype=torch.int64, device=c.device)
    dmin = torch.empty(n, dtype=torch.float32, device=c.device)
    for s in range(0, n, chunk):
        e = min(n, s + chunk)
        dist = torch.addmm(csq[None, :], xt[s:e], c.T, beta=1.0, alpha=-2.0)  # -2 x c^T + ||c||^2
        dist += xsq[s:e, None]
        val, idx = dist.min(dim=1)  # first minimum on ties, as FAISS
        labels[s:e] = idx
        dmin[s:e] = val.clamp_(min=0.0)
    return labels, dmin


def _split_empty(c, counts) -> None:
    """FAISS's rule for empty clusters, in place: each empty cluster (loop over those only) takes a copy of
    the largest cluster's centroid, the two moved apart by ``1 +- SPLIT_EPS`` (opposite signs on even and
    odd dimensions), and half of its count. FAISS draws the cluster to split with probability by size;
    this takes the largest, deterministically."""
    import torch

    d = c.shape[1]
    sign = torch.where(torch.arange(d, device=c.device) % 2 == 0, 1.0, -1.0).to(c.dtype)
    for ci in torch.nonzero(counts == 0).flatten().tolist():
        cj = int(torch.argmax(counts))
        c[ci] = c[cj] * (1.0 + SPLIT_EPS * sign)
        c[cj] = c[cj] * (1.0 - SPLIT_EPS * sign)
        half = counts[cj] // 2
        counts[ci] = half
        counts[cj] -= half


def _torch_lloyd(x: np.ndarray, init: np.ndarray, niter: int, device="cuda", chunk_rows: int | None = None,
                 xt=None) -> tuple[np.ndarray, float]:
    """``niter`` Lloyd iterations from ``init`` on a torch device, as FAISS iterates: assign every row to
    its nearest centroid (objective = sum of squared distances), move each centroid to the mean of its
    rows (sums by ``index_add_`` in float64), split the largest cluster into the empty ones. Returns
    (centroids float32 [k, F], objective of the last assignment). ``xt``: ``x`` already on the device."""
    import torch

    dev = torch.device(device)
    if xt is None:
        xt = torch.from_numpy(np.ascontiguousarray(x, dtype=np.float32)).to(dev)
    n, d = xt.shape
    c = torch.from_numpy(np.ascontiguousarray(init, dtype=np.float32)).to(dev)
    k = c.shape[0]
    chunk = _chunk_for(k, chunk_rows)
    xsq = (xt * xt).sum(1)
    obj = torch.zeros((), dtype=torch.float64, device=dev)
    for _ in range(niter):
        labels, dmin = _torch_nearest(xt, xsq, c, chunk)
        obj = dmin.sum(dtype=torch.float64)
        sums = torch.zeros((k, d), dtype=torch.float64, device=dev)
        for s in range(0, n, chunk):
            e = min(n, s + chunk)
            sums.index_add_(0, labels[s:e], xt[s:e].to(torch.float64))
        counts = torch.bincount(labels, minlength=k)
        c = (sums / counts.clamp(min=1).to(torch.float64)[:, None]).to(torch.float32)
        if bool((counts == 0).any()):
            _split_empty(c, counts)
    return c.cpu().numpy().astype(np.float32, copy=False), float(obj)


def _torch_kmeans_pp_init(xt, k: int, seed: int, trials: int | None = None, redo: int = 0) -> np.ndarray:
    """:func:`kmeans_pp_init` on ``xt``'s torch device: the same random draws (NumPy's generator, seeded
    alike), the distances and the D^2 sampling on the device, with no host synchronisation inside the loop.
    Equal to the NumPy seeding up to rounding (a candidate drawn at a tie of the cumulative sums can differ)."""
    import torch

    n = xt.shape[0]
    dev = xt.device
    rng = np.random.default_rng([seed, k, redo, 0x99])
    trials = trials or 2 + int(np.log(k))
    sq = (xt.double() ** 2).sum(1)
    centers = torch.empty((k, xt.shape[1]), dtype=torch.float32, device=dev)
    first = int(rng.integers(n))
    centers[0] = xt[first]
    d2 = (sq - 2.0 * (xt @ centers[0]).double() + sq[first]).clamp_(min=0.0)
    # the draws of all steps up front, as the NumPy loop makes them (one rng.random(trials) per step)
    u = torch.from_numpy(np.stack([rng.random(trials) for _ in range(1, k)]) if k > 1 else np.zeros((0, trials)))
    u = u.to(dev)
    for j in range(1, k):
        cum = torch.cumsum(d2, 0)
        total = cum[-1]
        drawn = torch.searchsorted(cum, u[j - 1] * total, right=True).clamp_(max=n - 1)
        # fewer distinct points than centroids so far (every distance 0): NumPy draws uniformly; any rows do
        cand = torch.where(total > 0, drawn, torch.arange(trials, device=dev) % n)
        dc = sq[None, :] - 2.0 * (xt[cand] @ xt.T).double() + sq[cand][:, None]  # [trials, n]
        dc = torch.minimum(dc.clamp_(min=0.0), d2[None, :])
        best = torch.argmin(dc.sum(1))
        centers[j] = xt[cand[best]]
        d2 = dc[best]
    return centers.cpu().numpy()


def _torch_train(x: np.ndarray, k: int, *, niter: int, seed: int, nredo: int, device="cuda",
                 chunk_rows: int | None = None) -> tuple[np.ndarray, float]:
    """:func:`train_centroids` on a torch device: per redo the same k-means++ start as the FAISS path,
    then :func:`_torch_lloyd`; the run with the lowest objective is kept."""
    import torch

    x = np.ascontiguousarray(x, dtype=np.float32)
    xt = torch.from_numpy(x).to(torch.device(device))  # once for all restarts
    best: tuple[np.ndarray, float] | None = None
    for redo in range(max(1, nredo)):
        init = _torch_kmeans_pp_init(xt, k, seed, redo=redo)
        cent, obj = _torch_lloyd(x, init, niter, device, chunk_rows, xt=xt)
        if best is None or obj < best[1]:
            best = (cent, obj)
    return best


def _torch_assign(x: np.ndarray, centroids: np.ndarray, device="cuda", chunk_rows: int = 262_144
                  ) -> tuple[np.ndarray, float]:
    """:func:`assign` on a torch device: host chunks of ``chunk_rows`` rows are copied over and searched
    exactly (matmul distances, argmin); labels int64 [N], inertia summed in float64."""
    import torch

    dev = torch.device(device)
    c = torch.from_numpy(np.ascontiguousarray(centroids, dtype=np.float32)).to(dev)
    chunk = _chunk_for(c.shape[0], chunk_rows)
    n = x.shape[0]
    labels = torch.empty(n, dtype=torch.int64, device=dev)
    inertia = torch.zeros((), dtype=torch.float64, device=dev)
    for s in range(0, n, chunk):
        block = torch.from_numpy(np.ascontiguousarray(x[s : s + chunk], dtype=np.float32)).to(dev)
        lab, dmin = _torch_nearest(block, (block * block).sum(1), c, block.shape[0])
        labels[s : s + block.shape[0]] = lab
        inertia += dmin.sum(dtype=torch.float64)
    return labels.cpu().numpy(), float(inertia)


def find_elbow(ks: np.ndarray | list[int], inertias: np.ndarray | list[float]) -> int:
    """K at the elbow of a decreasing inertia curve.

    Kneedle on log(inertia): the grid point farthest below the chord of the curve normalised to [0, 1].
    """
    ks = np.asarray(ks, dtype=np.float64)
    ys = np.asarray(inertias, dtype=np.float64)
    if ks.size == 0:
        raise ValueError("empty K grid")
    order = np.argsort(ks)
    ks, ys = ks[order], ys[order]
    if ks.size < 3 or ks[-1] == ks[0]:
        return int(ks[0])
    # Make the curve monotone (K-means is a local optimiser; a larger K can end slightly worse).
    ys = np.log(np.maximum(np.minimum.accumulate(ys), 1e-300))
    span = ys[0] - ys[-1]
    if span <= 0:
        return int(ks[0])
    kn = (ks - ks[0]) / (ks[-1] - ks[0])
    yn = (ys - ys[-1]) / span
    gap = (1.0 - kn) - yn  # chord from (0, 1) to (1, 0); positive below it
    return int(ks[int(np.argmax(gap))])


@dataclass
class ElbowResult:
    """Inertia curve over a K grid (computed on a sample) and the chosen K."""

    k: int
    ks: list[int]
    inertias: list[float]
    sample_size: int
    method: str = ELBOW_METHOD


def elbow_curve(
    x_sample: np.ndarray,
    k_grid: list[int],
    *,
    niter: int = 20,
    seed: int = 0,
    use_gpu: bool = False,
    progress: bool = False,
    backend: str | None = None,
) -> ElbowResult:
    """Run K-means for each K of ``k_grid`` on ``x_sample`` and pick the elbow (loop over K only)."""
    from tqdm.auto import tqdm

    from partitioning.cli import bar_disable

    ks = sorted(set(int(k) for k in k_grid))
    inertias = []
    for k in tqdm(ks, desc="elbow", unit="K", disable=bar_disable(progress)):
        _, obj = train_centroids(x_sample, k, niter=niter, seed=seed, use_gpu=use_gpu, backend=backend)
        inertias.append(obj)
    return ElbowResult(k=find_elbow(ks, inertias), ks=ks, inertias=inertias, sample_size=int(x_sample.shape[0]))


@dataclass
class KMeansResult:
    """Final clustering of all N rows."""

    labels: np.ndarray  # int64 [N], cluster of each row
    centroids: np.ndarray  # float32 [K, F]
    inertia: float  # sum of squared distances of all N rows to their centroid
    sample_inertia: float  # training objective on the sample
    k: int
    sample_size: int
    use_gpu: bool  # a GPU backend (faiss-gpu or torch-cuda)
    backend: str = "faiss-cpu"  # faiss-gpu | torch-cuda | faiss-cpu (resolve_backend)
    elbow: ElbowResult | None = None
    extra: dict = field(default_factory=dict)


def kmeans(
    x: np.ndarray,
    k: int | None,
    *,
    k_grid: list[int] | None = None,
    sample: int = 100_000,
    elbow_sample: int = 20_000,
    niter: int = 20,
    nredo: int = 1,
    seed: int = 0,
    gpu: str = "auto",
    threads: int | None = None,
    progress: bool = False,
    backend: str | None = None,
) -> KMeansResult:
    """Cluster the rows of ``x``: K given, or ``k=None`` to pick it at the elbow of ``k_grid``.

    Trains on a seeded sample of ``sample`` rows, then assigns all rows in chunks. The elbow curve is
    computed on its own seeded sample of ``elbow_sample`` rows (one K-means run per grid point).
    ``gpu``: auto | yes | no, see :func:`resolve_backend`; ``backend`` (one of :data:`BACKENDS`), when
    given, is used as it is instead (bench/gpu.py times torch-cuda on a host where FAISS has a GPU too).
    """
    backend = _backend(False, backend) if backend is not None else resolve_backend(gpu)
    if backend != "torch-cuda":
        _faiss().omp_set_num_threads(threads or available_threads())
    rows = sample_rows(x.shape[0], sample, seed)
    xs = np.ascontiguousarray(x[rows], dtype=np.float32)
    elbow = None
    if k is None:
        if not k_grid:
            raise ValueError("k=None needs a K grid")
        xe = np.ascontiguousarray(x[sample_rows(x.shape[0], elbow_sample, seed + 1)], dtype=np.float32)
        elbow = elbow_curve(xe, k_grid, niter=niter, seed=seed, backend=backend, progress=progress)
        del xe
        k = elbow.k
        log.info("elbow: K=%d from grid %s", k, elbow.ks)
    centroids, sample_obj = train_centroids(xs, k, niter=niter, seed=seed, nredo=nredo, backend=backend)
    labels, inertia = assign(x, centroids, backend=backend)
    return KMeansResult(
        labels=labels,
        centroids=centroids,
        inertia=inertia,
        sample_inertia=sample_obj,
        k=int(k),
        sample_size=int(xs.shape[0]),
        use_gpu=backend in GPU_BACKENDS,
        backend=backend,
        elbow=elbow,
    )


def default_min_part_size(ratio: float) -> int:
    """Default ``--min-part-size``: ``max(32, n5)``, n5 the smallest part that gets ``MIN_INJECTED``
    (5) injected nodes at ``ratio`` (``round(ratio * n) >= 5``; 30 at the default ratio 0.15).

    32 own nodes keep the context (a readout over the part's own nodes) from being dominated by one
    node; 5 injected nodes give each corrupt subgraph a few anomalies to contrast with the context.
    """
    n = max(1, int(np.ceil((MIN_INJECTED - 0.5) / ratio - 1e-9)))
    while np.floor(n * ratio + 0.5) < MIN_INJECTED:  # float round-off of the division: at most a step or two
        n += 1
    while n > 1 and np.floor((n - 1) * ratio + 0.5) >= MIN_INJECTED:
        n -= 1
    return max(MIN_PART_FLOOR, n)


@dataclass
class MergeResult:
    """Parts after :func:`merge_small_parts`, relabelled ``0..K'-1`` in the order of their old ids."""

    labels: np.ndarray  # int64 [N]
    centroids: np.ndarray  # [K', F] the survivors' centroids (not refitted)
    kept: np.ndarray  # int64 [K'] old id of each new part
    merged: int  # parts dissolved
    moved: int  # nodes that changed part
    inertia_delta: float  # change of the sum of squared distances to the own part's centroid


def _sq_dist(x: np.ndarray, c: np.ndarray) -> np.ndarray:
    """[n, k] squared L2 distances in float64 (small n: the nodes of the parts being dissolved)."""
    x = x.astype(np.float64, copy=False)
    c = c.astype(np.float64, copy=False)
    d = (x * x).sum(1)[:, None] - 2.0 * (x @ c.T) + (c * c).sum(1)[None, :]
    return np.maximum(d, 0.0)


def merge_small_parts(x: np.ndarray, labels: np.ndarray, centroids: np.ndarray, min_size: int) -> MergeResult:
    """Dissolve every part with fewer than ``min_size`` nodes and relabel the rest ``0..K'-1``.

    Smallest part first (ties: lowest id), its nodes go to the nearest centroid among the parts left,
    so a small part may grow past the minimum with the nodes of a smaller neighbour before its own turn.
    Stops when no part is small, or when two parts are left: the small one of those then takes the
    ``min_size - size`` nodes of the other that lie closest to it relative to their own centroid. Needs
    ``2 * min_size <= N`` for that last step to leave both parts at the minimum. The loop is over the
    dissolved parts (at most K); each step is vectorised over the part's nodes.
    """
    labels = np.asarray(labels, dtype=np.int64).copy()
    orig = labels.copy()
    k = int(centroids.shape[0])
    n = int(labels.size)
    if min_size > 1 and 2 * min_size > n:
        raise ValueError(f"min_size {min_size} leaves no room for two parts of {n} nodes")
    sizes = np.bincount(labels, minlength=k).astype(np.int64)
    alive = sizes > 0
    order = np.argsort(labels, kind="stable")
    starts = np.zeros(k + 1, dtype=np.int64)
    np.cumsum(sizes, out=starts[1:])
    moved_chunks: list[np.ndarray] = []  # nodes moved so far (a node can move again with its new part)
    merged = 0
    while alive.sum() > 2:
        live = np.flatnonzero(alive)
        small = live[sizes[live] < min_size]
        if small.size == 0:
            break
        p = int(small[np.argmin(sizes[small])])
        moved = np.concatenate(moved_chunks) if moved_chunks else np.zeros(0, np.int64)
        members = np.concatenate([order[starts[p] : starts[p + 1]], moved])
        members = np.unique(members[labels[members] == p])
        alive[p] = False
        targets = np.flatnonzero(alive)
        dest = targets[np.argmin(_sq_dist(x[members], centroids[targets]), axis=1)]
        labels[members] = dest
        sizes[p] = 0
        np.add.at(sizes, dest, 1)
        moved_chunks = [moved, members]
        merged += 1
    live = np.flatnonzero(alive)
    if live.size == 2 and sizes[live].min() < min_size:
        # Two parts left, one small: it takes the other's nodes that are closest to it.
        p, q = (live[0], live[1]) if sizes[live[0]] < sizes[live[1]] else (live[1], live[0])
        cand = np.flatnonzero(labels == q)
        d = _sq_dist(x[cand], centroids[[p, q]])
        take = cand[np.argsort(d[:, 0] - d[:, 1], kind="stable")[: min_size - sizes[p]]]
        labels[take] = p
        sizes[p] += take.size
        sizes[q] -= take.size
    kept = np.flatnonzero(alive)
    new_id = np.full(k, -1, dtype=np.int64)
    new_id[kept] = np.arange(kept.size)
    changed = np.flatnonzero(labels != orig)
    delta = 0.0
    if changed.size:
        xc = x[changed].astype(np.float64)
        delta = float(
            (((xc - centroids[labels[changed]]) ** 2).sum(1) - ((xc - centroids[orig[changed]]) ** 2).sum(1)).sum()
        )
    return MergeResult(
        labels=new_id[labels], centroids=np.ascontiguousarray(centroids[kept]), kept=kept, merged=merged,
        moved=int(changed.size), inertia_delta=delta,
    )
