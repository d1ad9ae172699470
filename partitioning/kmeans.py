"""K-means on node features with FAISS, and the elbow rule that picks K automatically.

* Training runs on a uniform sample of the rows (``sample`` points, drawn once with the seed), seeded
  with greedy k-means++ (vectorised, one pass per centroid) and refined by FAISS Lloyd iterations
  (``faiss.Kmeans``), on a GPU when FAISS sees one (``faiss.get_num_gpus() > 0``), else on CPU.
* All N rows are then assigned to their nearest centroid with an exact flat L2 index, searched in
  chunks so the distance buffers stay small.
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
it) on a fixed thread count.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field

import numpy as np

log = logging.getLogger(__name__)

MIN_INJECTED = 5  # the default minimum part size gives every part at least this many injected nodes
MIN_PART_FLOOR = 32  # ... and at least this many own nodes

ELBOW_METHOD = "kneedle on log(inertia): argmax over the grid of (1 - k_norm) - log_inertia_norm"


def _faiss():
    import faiss

    return faiss


def available_threads() -> int:
    """Cores this process may use (respects CPU affinity)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - non-Linux
        return max(1, os.cpu_count() or 1)


def resolve_device(gpu: str = "auto") -> bool:
    """True to use a FAISS GPU index. ``gpu`` is ``auto`` | ``yes`` | ``no``.

    Raises ValueError for ``yes`` when FAISS sees no GPU (the caller turns it into a usage error).
    """
    faiss = _faiss()
    n_gpu = faiss.get_num_gpus() if hasattr(faiss, "get_num_gpus") else 0
    if gpu == "no":
        return False
    if gpu == "yes":
        if n_gpu == 0:
            raise ValueError("yes was asked but FAISS sees no GPU (install faiss-gpu, or use --gpu auto|no)")
        return True
    if gpu == "auto":
        return n_gpu > 0
    raise ValueError(f"expected auto, yes or no, got {gpu!r}")


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
    x: np.ndarray, k: int, *, niter: int = 20, seed: int = 0, use_gpu: bool = False, nredo: int = 1
) -> tuple[np.ndarray, float]:
    """Fit K-means on all rows of ``x`` (already the training sample). Returns (centroids [k,F], inertia).

    ``nredo`` independent runs (own k-means++ seeding each); the one with the lowest inertia is kept.
    """
    faiss = _faiss()
    x = np.ascontiguousarray(x, dtype=np.float32)
    n, d = x.shape
    if k > n:
        raise ValueError(f"K={k} is larger than the number of training points ({n})")
    best: tuple[np.ndarray, float] | None = None
    for redo in range(max(1, nredo)):
        init = kmeans_pp_init(x, k, seed, redo=redo)
        km = faiss.Kmeans(
            d,
            k,
            niter=niter,
            seed=seed + redo,
            gpu=bool(use_gpu),
            verbose=False,
            # train on every sampled point: no second subsampling inside FAISS, no "too few points" warning
            max_points_per_centroid=int(np.ceil(n / k)) + 1,
            min_points_per_centroid=1,
        )
        obj = float(km.train(x, init_centroids=init))
        if best is None or obj < best[1]:
            best = (np.ascontiguousarray(km.centroids, dtype=np.float32), obj)
    return best


def assign(
    x: np.ndarray, centroids: np.ndarray, *, use_gpu: bool = False, chunk_rows: int = 262_144
) -> tuple[np.ndarray, float]:
    """Nearest centroid of every row (exact L2), searched in chunks. Returns (labels int64 [N], inertia)."""
    faiss = _faiss()
    index = faiss.IndexFlatL2(centroids.shape[1])
    if use_gpu:
        index = faiss.index_cpu_to_all_gpus(index)
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
) -> ElbowResult:
    """Run K-means for each K of ``k_grid`` on ``x_sample`` and pick the elbow (loop over K only)."""
    from tqdm.auto import tqdm

    ks = sorted(set(int(k) for k in k_grid))
    inertias = []
    for k in tqdm(ks, desc="elbow", unit="K", disable=not progress):
        _, obj = train_centroids(x_sample, k, niter=niter, seed=seed, use_gpu=use_gpu)
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
    use_gpu: bool
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
) -> KMeansResult:
    """Cluster the rows of ``x``: K given, or ``k=None`` to pick it at the elbow of ``k_grid``.

    Trains on a seeded sample of ``sample`` rows, then assigns all rows in chunks. The elbow curve is
    computed on its own seeded sample of ``elbow_sample`` rows (one K-means run per grid point).
    """
    faiss = _faiss()
    faiss.omp_set_num_threads(threads or available_threads())
    use_gpu = resolve_device(gpu)
    rows = sample_rows(x.shape[0], sample, seed)
    xs = np.ascontiguousarray(x[rows], dtype=np.float32)
    elbow = None
    if k is None:
        if not k_grid:
            raise ValueError("k=None needs a K grid")
        xe = np.ascontiguousarray(x[sample_rows(x.shape[0], elbow_sample, seed + 1)], dtype=np.float32)
        elbow = elbow_curve(xe, k_grid, niter=niter, seed=seed, use_gpu=use_gpu, progress=progress)
        del xe
        k = elbow.k
        log.info("elbow: K=%d from grid %s", k, elbow.ks)
    centroids, sample_obj = train_centroids(xs, k, niter=niter, seed=seed, use_gpu=use_gpu, nredo=nredo)
    labels, inertia = assign(x, centroids, use_gpu=use_gpu)
    return KMeansResult(
        labels=labels,
        centroids=centroids,
        inertia=inertia,
        sample_inertia=sample_obj,
        k=int(k),
        sample_size=int(xs.shape[0]),
        use_gpu=use_gpu,
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
