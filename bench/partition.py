"""Benchmark of the partitioning step (``python -m partitioning.build``) on a large graph.

    python bench/partition.py --graph /tmp/h1big.npz --k 20
    python bench/partition.py --nodes 1000000 --avg-degree 20 --features 64 --k 20   # generate first

Reports seconds and peak RSS of each stage (load, fingerprint, K-means, corrupt, write) for a build
with K given, the extra time of ``--k auto`` (the elbow stage: one K-means per grid point on the
elbow sample), and FAISS K-means against scikit-learn's MiniBatchKMeans at the same K on the same
training sample with the same budget (``niter`` passes over the sample), both scored by the inertia
of all N nodes on their nearest centroid.

Peak RSS per stage: a background thread samples the resident set size from ``/proc/self/statm``
every 5 ms and keeps the maximum seen during each stage. ``ru_maxrss`` is a high-water mark for the
whole process life, so it cannot attribute a peak to a stage that stays below an earlier one; the
sampler can (it may miss spikes shorter than 5 ms; the whole-run ``ru_maxrss`` is printed too).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import resource
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # before FAISS loads OpenMP (see build.py)
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402

from partitioning import kmeans as km  # noqa: E402
from partitioning.build import BuildConfig, Stages, build  # noqa: E402

PAGE = os.sysconf("SC_PAGE_SIZE")


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * PAGE


class RssStages(Stages):
    """Stage timer that also records the peak RSS seen during each stage (sampler thread)."""

    def __init__(self, interval: float = 0.005) -> None:
        super().__init__()
        self.peak: dict[str, int] = {}
        self._cur = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(interval,), daemon=True)
        self._thread.start()

    def _run(self, interval: float) -> None:
        while not self._stop.is_set():
            r = rss_bytes()
            with self._lock:
                self._cur = max(self._cur, r)
            time.sleep(interval)

    @contextlib.contextmanager
    def __call__(self, name: str):
        with self._lock:
            self._cur = rss_bytes()
        with super().__call__(name):
            yield
        with self._lock:
            self.peak[name] = max(self.peak.get(name, 0), self._cur, rss_bytes())

    def close(self) -> None:
        self._stop.set()
        self._thread.join()


def compare_sklearn(x: np.ndarray, k: int, sample: int, niter: int, seed: int, nredo: int) -> dict[str, float]:
    """FAISS vs MiniBatchKMeans: same sample, same K, niter passes; inertia over all rows.

    FAISS is run once (the same budget as MiniBatchKMeans) and with ``nredo`` restarts (the build).
    """
    from sklearn.cluster import MiniBatchKMeans

    rows = km.sample_rows(x.shape[0], sample, seed)
    xs = np.ascontiguousarray(x[rows])
    t = time.perf_counter()
    c_faiss, _ = km.train_centroids(xs, k, niter=niter, seed=seed)
    t_faiss = time.perf_counter() - t
    t = time.perf_counter()
    c_redo, _ = km.train_centroids(xs, k, niter=niter, seed=seed, nredo=nredo)
    t_redo = time.perf_counter() - t
    t = time.perf_counter()
    mbk = MiniBatchKMeans(
        n_clusters=k, init="k-means++", n_init=1, max_iter=niter, batch_size=4096, random_state=seed,
        max_no_improvement=None, tol=0.0,
    ).fit(xs)
    t_sk = time.perf_counter() - t
    _, in_faiss = km.assign(x, c_faiss)
    _, in_redo = km.assign(x, c_redo)
    _, in_sk = km.assign(x, mbk.cluster_centers_.astype(np.float32))
    return {"faiss_s": t_faiss, "sklearn_s": t_sk, "faiss_inertia": in_faiss, "sklearn_inertia": in_sk,
            "redo_s": t_redo, "redo_inertia": in_redo, "nredo": nredo}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--graph", help=".npz graph to partition (else one is generated with the sizes below)")
    p.add_argument("--nodes", type=int, default=1_000_000, help="generated graph: nodes")
    p.add_argument("--avg-degree", type=float, default=20.0, help="generated graph: mean degree (edges = N*deg/2)")
    p.add_argument("--features", type=int, default=64, help="generated graph: feature dimensions")
    p.add_argument("--k", type=int, default=20, help="K of the timed build")
    p.add_argument("--sample", type=int, default=100_000, help="K-means training sample")
    p.add_argument("--elbow-sample", type=int, default=20_000, help="sample of the --k auto inertia curve")
    p.add_argument("--niter", type=int, default=20, help="K-means iterations (both libraries)")
    p.add_argument("--nredo", type=int, default=3, help="K-means restarts of the build's final clustering")
    p.add_argument("--seed", type=int, default=0, help="seed")
    p.add_argument("--out", default=None, help="store path (default: a temporary folder, removed at the end)")
    p.add_argument("--skip-sklearn", action="store_true", help="skip the MiniBatchKMeans comparison")
    args = p.parse_args()

    from partitioning.io import load_graph

    stages = RssStages()
    t_all = time.perf_counter()
    if args.graph:
        with stages("load"):
            graph = load_graph(args.graph)
        source = args.graph
    else:
        from partitioning.synthetic import SyntheticConfig, generate

        with stages("generate"):
            graph = generate(SyntheticConfig(nodes=args.nodes, avg_degree=args.avg_degree, features=args.features,
                                             seed=args.seed))
        source = f"generated({args.nodes},{args.avg_degree},{args.features})"
    tmpdir = None
    if args.out is None:
        tmpdir = tempfile.mkdtemp(prefix="bench_partition_")
        out = str(Path(tmpdir) / "bench.zarr")
    else:
        out = args.out
    cfg = BuildConfig(graph=source, out=out, k=args.k, sample=args.sample, elbow_sample=args.elbow_sample,
                      niter=args.niter, nredo=args.nredo, seed=args.seed, overwrite=True, progress=False)
    result = build(cfg, stages, graph=graph)
    build_s = time.perf_counter() - t_all
    build_peak = max(stages.peak.values())

    # --k auto adds the elbow stage (the same code path the build runs)
    with stages("elbow (auto)"):
        rows = km.sample_rows(graph.num_nodes, args.elbow_sample, args.seed + 1)
        elbow = km.elbow_curve(np.ascontiguousarray(graph.x[rows]), list(cfg.k_grid), niter=args.niter, seed=args.seed)
    cmp = None
    if not args.skip_sklearn:
        with stages("faiss vs sklearn"):
            cmp = compare_sklearn(graph.x, args.k, args.sample, args.niter, args.seed, args.nredo)
    stages.close()

    c = result.manifest["counts"]
    print(f"graph: {source}: {graph.num_nodes:,} nodes, {graph.num_edges:,} undirected edges, "
          f"{graph.num_features} features; K={args.k}; cores={km.available_threads()}; "
          f"load average at end {os.getloadavg()[0]:.1f}")
    print(f"store: {c['subgraphs']} subgraphs, {c['nodes']:,} nodes ({c['injected_nodes']:,} injected), "
          f"{c['edge_entries'] // 2:,} undirected edges, {result.store_bytes / 2**20:,.0f} MiB on disk")
    print(f"{'stage':<20}{'seconds':>10}{'peak RSS GiB':>14}")
    for name, sec in stages.seconds.items():
        print(f"{name:<20}{sec:>10.2f}{stages.peak.get(name, 0) / 2**30:>14.2f}")
    print(f"{'build, K given':<20}{build_s:>10.2f}{build_peak / 2**30:>14.2f}   (load + build stages)")
    print(f"{'--k auto adds':<20}{stages.seconds['elbow (auto)']:>10.2f}   (grid {elbow.ks[0]}..{elbow.ks[-1]}, "
          f"{len(elbow.ks)} points, {elbow.sample_size:,} rows -> K={elbow.k})")
    print(f"process ru_maxrss: {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20:.2f} GiB")
    if cmp:
        print(f"K-means on {min(args.sample, graph.num_nodes):,} sampled rows, K={args.k}, {args.niter} passes; "
              f"inertia over all {graph.num_nodes:,} rows")
        print(f"{'':<20}{'fit s':>8}{'inertia':>16}{'time/sklearn':>14}{'inertia/sklearn':>17}")
        for name, t_key, i_key in (("FAISS, 1 run", "faiss_s", "faiss_inertia"),
                                   (f"FAISS, best of {cmp['nredo']}", "redo_s", "redo_inertia"),
                                   ("MiniBatchKMeans", "sklearn_s", "sklearn_inertia")):
            print(f"{name:<20}{cmp[t_key]:>8.2f}{cmp[i_key]:>16.6g}{cmp[t_key] / cmp['sklearn_s']:>14.2f}"
                  f"{cmp[i_key] / cmp['sklearn_inertia']:>17.4f}")
    if tmpdir:
        shutil.rmtree(tmpdir, ignore_errors=True)


if __name__ == "__main__":
    main()
