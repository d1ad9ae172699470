"""Build the corrupt-subgraph store: ``python -m partitioning.build --graph G --out S.zarr``.

Stages: load the graph -> fingerprint (of the raw input) -> ``--normalize power`` (default: z-score every
feature over all nodes, make heavy-tailed columns near-Gaussian with a Yeo-Johnson transform, z-score again;
label-free; K-means and the stored ``x`` see the normalised features)
-> (``--k auto``: inertia curve over a K grid on a sample, elbow) -> K-means
on the node features (FAISS, or PyTorch on CUDA: ``--gpu``; train on a sample, assign all nodes) -> parts below ``--min-part-size``
merged into their nearest neighbours -> corrupt subgraphs (METHOD.md section 4; ``--corruption-mix``
adds feature-swap and planted-edge corruptions beside node injection) -> edge statistics
(share of edges the partition keeps) -> atomic Zarr store (``partitioning/STORE_FORMAT.md``).
Multi-graph input (``graph_id`` set): each graph is a part, no clustering and no merging is done.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import logging
import os
import sys
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from partitioning.cli import auto_or, bar_disable
from partitioning.features import NORMALIZE_CHOICES, describe_normalization, manifest_normalization
from partitioning.graph import Graph
from partitioning.kmeans import DEFAULT_K_GRID

log = logging.getLogger("partitioning.build")


@dataclass
class BuildConfig:
    """All settings of one store build (recorded in the manifest)."""

    graph: str
    out: str
    k: int | None = None  # None = auto (elbow over k_grid)
    k_grid: tuple[int, ...] = DEFAULT_K_GRID
    min_part_size: int | None = None  # None = auto: max(32, smallest part with 5 injected nodes at ratio)
    sample: int = 100_000
    elbow_sample: int = 20_000
    ratio: float = 0.15
    corruptions: int = 1
    corruption_mix: str = "inject"  # kinds (and weights) of corruption; "inject" = the paper's (METHOD.md s. 4)
    seed: int = 0
    niter: int = 20
    nredo: int = 3  # K-means restarts of the final clustering (best inertia kept); the elbow uses 1
    # every feature normalised over all nodes before K-means and storing (partitioning.features): "power" = z-score,
    # Yeo-Johnson, z-score (the default since session 39: label-free validation AUROC of GCCAD-pre +0.023 over the
    # four judged graphs, BENCHMARKS.md); "standard" = z-score; "none" = raw
    normalize: str = "power"
    # K-means on features averaged over 0..H hops of the graph (partitioning.smoothing); 0 = on the features
    # themselves (the paper's). The store keeps the features themselves either way.
    cluster_hops: int = 0
    gpu: str = "auto"
    threads: int = 0  # 0 = every core this process may use
    chunk_mib: float = 8.0
    overwrite: bool = False
    plot: bool = True
    progress: bool = True


@dataclass
class BuildResult:
    """What a build did: the manifest written, seconds per stage, store size."""

    manifest: dict[str, Any]
    seconds: dict[str, float] = field(default_factory=dict)
    store_bytes: int = 0
    plot_path: str | None = None


class Stages:
    """Times named stages (``with stages("load"): ...``); subclasses may record more (bench: RSS)."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}

    @contextlib.contextmanager
    def __call__(self, name: str) -> Iterator[None]:
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[name] = self.seconds.get(name, 0.0) + time.perf_counter() - t0


def check_config(cfg: BuildConfig) -> None:
    """Option checks that need no data. Raises UsageError naming the option."""
    from partitioning.cli import UsageError

    if not 0.0 < cfg.ratio < 1.0:
        raise UsageError(f"--ratio: must lie strictly between 0 and 1, got {cfg.ratio}")
    from partitioning.corrupt import parse_mix

    try:
        mix = parse_mix(cfg.corruption_mix)
    except ValueError as e:
        raise UsageError(f"--corruption-mix: {e}") from None
    if cfg.k is not None and cfg.k < 1:
        raise UsageError(f"--k: must be at least 1 (1: the whole graph as one part, the label-free recipe; 2 or "
                         f"more: K-means parts; or auto), got {cfg.k}")
    if cfg.k == 1 and mix:
        raise UsageError(f"--k: 1 part (the whole graph) stores no corruption (pre-training corrupts it on the fly): "
                         f"give --k 2 or more, or --corruption-mix none, got --corruption-mix {cfg.corruption_mix}")
    if not mix and cfg.corruptions != 1:
        raise UsageError(f"--corruptions: --corruption-mix none stores each part once, got {cfg.corruptions}")
    if cfg.min_part_size is not None and cfg.min_part_size < 1:
        raise UsageError(f"--min-part-size: must be at least 1 (or auto), got {cfg.min_part_size}")
    for name in ("corruptions", "sample", "niter", "nredo"):
        if getattr(cfg, name) < 1:
            raise UsageError(f"--{name}: must be at least 1, got {getattr(cfg, name)}")
    if cfg.threads < 0:
        raise UsageError(f"--threads: must be >= 0, got {cfg.threads}")
    if cfg.cluster_hops < 0:
        raise UsageError(f"--cluster-hops: must be >= 0, got {cfg.cluster_hops}")
    if cfg.chunk_mib <= 0:
        raise UsageError(f"--chunk-mib: must be > 0, got {cfg.chunk_mib}")
    if cfg.normalize not in NORMALIZE_CHOICES:
        raise UsageError(f"--normalize: expected one of {', '.join(NORMALIZE_CHOICES)}, got {cfg.normalize!r}")
    if cfg.gpu not in ("auto", "yes", "no"):
        raise UsageError(f"--gpu: expected auto, yes or no, got {cfg.gpu!r}")
    if cfg.k is None:
        if len(set(cfg.k_grid)) < 3:
            raise UsageError(f"--k-grid: --k auto needs at least 3 distinct values, got {list(cfg.k_grid)}")
        if min(cfg.k_grid) < 2:
            raise UsageError(f"--k-grid: values must be at least 2, got {min(cfg.k_grid)}")
        if cfg.elbow_sample < max(cfg.k_grid):
            raise UsageError(f"--elbow-sample: {cfg.elbow_sample} points cannot fit K={max(cfg.k_grid)} centroids")


def _dense(labels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Relabel to 0..G-1 in ascending order of value (sort based). Returns (dense labels, kept values)."""
    order = np.argsort(labels, kind="stable")
    s = labels[order]
    start = np.ones(s.size, dtype=bool)
    start[1:] = s[1:] != s[:-1]
    dense = np.empty(labels.size, dtype=np.int64)
    dense[order] = np.cumsum(start) - 1
    return dense, s[start]


def effective_min_part_size(cfg: BuildConfig, num_nodes: int) -> int:
    """``--min-part-size`` (auto: :func:`partitioning.kmeans.default_min_part_size`), capped at N // 2 so
    that two parts always fit (a corrupt subgraph draws its injected nodes from the other parts)."""
    from partitioning.kmeans import default_min_part_size

    want = cfg.min_part_size if cfg.min_part_size is not None else default_min_part_size(cfg.ratio)
    return max(1, min(int(want), num_nodes // 2))


def _elbow_plot_path(out: Path) -> Path:
    stem = out.name[: -len(".zarr")] if out.name.endswith(".zarr") else out.name
    return out.with_name(stem + ".elbow.png")


def build(cfg: BuildConfig, stages: Stages | None = None, graph: Graph | None = None) -> BuildResult:
    """Run every stage and write the store. User errors raise UsageError / GraphInputError.

    ``graph``: an already loaded graph (``cfg.graph`` is then only recorded in the manifest).
    """
    import faiss
    import zarr
    from tqdm.auto import tqdm

    from partitioning.cli import UsageError
    from partitioning import kmeans as km
    from partitioning.corrupt import (corrupt_subgraphs, format_mix, num_injected, parse_mix, subgraph_edge_share,
                                      uncut_edge_share)
    from partitioning.features import normalize_store_features
    from partitioning.io import load_graph
    from partitioning.store.writer import check_destination, store_size_bytes, write_store

    stages = stages or Stages()
    check_config(cfg)
    mix = parse_mix(cfg.corruption_mix)  # valid: check_config parsed it
    out = check_destination(cfg.out, cfg.overwrite)  # fail before the expensive work
    try:
        backend = km.resolve_backend(cfg.gpu)  # faiss-gpu | torch-cuda | faiss-cpu
    except ValueError as e:
        raise UsageError(f"--gpu: {e}") from None
    use_gpu = backend in km.GPU_BACKENDS
    threads = cfg.threads or km.available_threads()
    faiss.omp_set_num_threads(threads)

    if graph is None:
        with stages("load"):
            graph = load_graph(cfg.graph)
    n = graph.num_nodes
    with stages("fingerprint"):
        fingerprint = graph.fingerprint()  # of the raw input graph (score --parts compares stores to it)
    if cfg.normalize != "none":
        with stages("normalize"):
            # A new graph object with a new x: the caller's graph (maybe a read-only memmap) is untouched.
            x, features = normalize_store_features(graph.x, cfg.normalize, threads=threads)
            graph = dataclasses.replace(graph, x=x)
            del x
        log.info("features %s over all %d nodes", describe_normalization(cfg.normalize), n)
    else:
        features = {"normalize": "none"}

    partition: dict[str, Any]
    centroids = None
    if graph.is_multi_graph:
        if cfg.k is not None:
            log.warning("--k %d ignored: the input has graph ids, each graph is a part", cfg.k)
        with stages("partition"):
            parts, graph_ids = _dense(np.asarray(graph.graph_id))
        k = int(graph_ids.size)
        if k < 2 and mix:
            raise UsageError(f"--graph: {cfg.graph}: multi-graph input holds a single graph; nothing to inject from")
        partition = {"method": "graph_id", "k": k, "k_requested": "graphs", "min_part_size": None, "merged_parts": 0}
    elif cfg.k == 1:  # --corruption-mix none (check_config): the whole graph as one part, no K-means
        parts = np.zeros(n, dtype=np.int64)
        k = 1
        partition = {"method": "whole graph", "cluster_hops": 0, "k": 1, "k_requested": 1, "min_part_size": None,
                     "merged_parts": 0}
    else:
        if n < 2:
            raise UsageError(f"--graph: {cfg.graph}: needs at least 2 nodes, has {n}")
        if cfg.k is not None and cfg.k > n:
            raise UsageError(f"--k: K={cfg.k} exceeds the number of nodes ({n})")
        elbow = None
        k = cfg.k
        xc = graph.x  # what K-means clusters: the features, or their graph-smoothed version (--cluster-hops)
        if cfg.cluster_hops > 0:
            from partitioning.smoothing import smooth_features

            with stages("smooth"):
                xc = smooth_features(graph.x, graph.indptr, graph.indices, cfg.cluster_hops)
            log.info("K-means on features averaged over 0..%d hops (--cluster-hops)", cfg.cluster_hops)
        if k is None:
            with stages("elbow"):
                rows = km.sample_rows(n, cfg.elbow_sample, cfg.seed + 1)
                xe = np.ascontiguousarray(xc[rows])
                distinct = km.count_distinct_rows(xe)
                if max(cfg.k_grid) > distinct:
                    raise UsageError(
                        f"--k-grid: largest K={max(cfg.k_grid)} exceeds the {distinct} distinct feature vectors "
                        f"of the elbow sample ({xe.shape[0]} rows)"
                    )
                elbow = km.elbow_curve(
                    xe, list(cfg.k_grid), niter=cfg.niter, seed=cfg.seed, backend=backend, progress=cfg.progress
                )
                del xe
                k = elbow.k
            log.info("elbow at K=%d (%s)", k, km.ELBOW_METHOD)
        min_size = effective_min_part_size(cfg, n)
        if cfg.min_part_size is not None and min_size < cfg.min_part_size:
            log.warning("--min-part-size %d capped at %d: %d nodes must fit two parts", cfg.min_part_size, min_size, n)
        k_cap = max(2, n // min_size)
        if k > k_cap:
            log.warning("K=%d cannot give parts of at least %d nodes on %d nodes; training K=%d", k, min_size, n, k_cap)
            k = k_cap
        with stages("kmeans"):
            rows = km.sample_rows(n, cfg.sample, cfg.seed)
            xs = np.ascontiguousarray(xc[rows])
            if k > xs.shape[0]:
                raise UsageError(f"--sample: {xs.shape[0]} training points cannot fit K={k} centroids")
            distinct = km.count_distinct_rows(xs)
            if k > distinct:
                raise UsageError(
                    f"--k: K={k} exceeds the {distinct} distinct feature vectors of the training sample "
                    f"({xs.shape[0]} rows)"
                )
            centroids, sample_inertia = km.train_centroids(
                xs, k, niter=cfg.niter, seed=cfg.seed, nredo=cfg.nredo, backend=backend
            )
            del xs
            labels, inertia = km.assign(xc, centroids, backend=backend)
            log.info("K-means on %s (%s): K=%d, %d training rows", "gpu" if use_gpu else "cpu", backend, k, len(rows))
            parts, kept = _dense(labels)
            if kept.size < k:
                log.warning("%d of %d clusters are empty after assignment; dropped", k - kept.size, k)
            centroids = centroids[kept]
        k_assigned = int(kept.size)
        with stages("merge"):
            merge = km.merge_small_parts(xc, parts, centroids, min_size)
            parts, centroids = merge.labels, merge.centroids
            inertia += merge.inertia_delta
        if merge.merged or merge.moved:
            log.warning("%d of %d parts had fewer than %d nodes (--min-part-size) and were merged into their "
                        "nearest parts (%d nodes moved); K=%d", merge.merged, k_assigned, min_size, merge.moved,
                        merge.kept.size)
        partition = {
            "method": "faiss-kmeans",
            "cluster_hops": int(cfg.cluster_hops),  # K-means (and the centroids) on features smoothed over 0..H hops
            "k": int(merge.kept.size),
            "k_requested": cfg.k if cfg.k is not None else "auto",
            "k_trained": int(k),
            "min_part_size": int(min_size),
            "merged_parts": int(merge.merged),
            "moved_nodes": int(merge.moved),
            "device": "gpu" if use_gpu else "cpu",
            "backend": backend,  # faiss-gpu | torch-cuda | faiss-cpu (partitioning.kmeans.resolve_backend)
            "train_sample": int(min(cfg.sample, n)),
            "niter": cfg.niter,
            "nredo": cfg.nredo,
            "inertia": inertia,
            "sample_inertia": sample_inertia,
            "init": "greedy k-means++ (seeded), then " + ("PyTorch" if backend == "torch-cuda" else "FAISS")
            + " Lloyd iterations; best of nredo runs",
            "elbow": None
            if elbow is None
            else {
                "method": km.ELBOW_METHOD,
                "ks": elbow.ks,
                "inertias": elbow.inertias,
                "sample_size": elbow.sample_size,
                "k": elbow.k,
                "plot": _elbow_plot_path(out).name if cfg.plot else None,
            },
        }
        k = int(merge.kept.size)
    sizes = np.bincount(parts, minlength=k)
    partition["smallest_part"] = int(sizes.min())
    partition["part_sizes"] = sizes.tolist() if k <= 1000 else None
    partition["injected_per_part"] = num_injected(sizes, cfg.ratio).tolist() if k <= 1000 else None

    with stages("corrupt"):
        gen = corrupt_subgraphs(
            graph.indptr, graph.indices, parts, ratio=cfg.ratio, corruptions=cfg.corruptions, seed=cfg.seed, num_parts=k,
            mix=mix,
        )
        subgraphs = list(tqdm(gen, total=k * cfg.corruptions, desc="corrupt", unit="subgraph", disable=bar_disable(cfg.progress)))
        corruption = corruption_manifest(subgraphs, mix, cfg.ratio, format_mix(mix))
    with stages("edge stats"):
        partition["edges_kept"] = uncut_edge_share(graph.indptr, graph.indices, parts)
        partition["edges_kept_subgraphs"] = subgraph_edge_share(subgraphs, n, graph.num_edges)

    manifest = {
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "tool": "partitioning.build",
        "versions": {"zarr": zarr.__version__, "faiss": faiss.__version__, "numpy": np.__version__},
        "source": {
            "path": str(cfg.graph),
            "fingerprint": fingerprint,
            "num_nodes": n,
            "num_edges": graph.num_edges,
            "num_features": graph.num_features,
            "multi_graph": graph.is_multi_graph,
            "has_labels": graph.y is not None,
        },
        "params": {**asdict(cfg), "k": cfg.k if cfg.k is not None else "auto", "k_grid": list(cfg.k_grid),
                   "min_part_size": cfg.min_part_size if cfg.min_part_size is not None else "auto", "threads": threads},
        "partition": partition,
        "features": features,
        "corruption": corruption,
        "labels": "y = 0 own node, 1 injected node (anomaly)" if corruption["paper"] else
                  "y = 0 every node (no stored corruption: pre-train with --swap-features)" if not mix else
                  "y = 0 own node left unchanged, 1 corrupted node (injected, feature-swapped or given planted edges)",
    }
    with stages("write"):
        manifest = write_store(
            out,
            graph.x,
            subgraphs,
            manifest,
            node_part=parts,
            centroids=centroids,
            overwrite=cfg.overwrite,
            chunk_mib=cfg.chunk_mib,
            progress=cfg.progress,
        )
    plot_path = None
    if partition.get("elbow") and cfg.plot:
        from partitioning.plots import plot_elbow

        with stages("plot"):
            e = partition["elbow"]
            plot_path = str(plot_elbow(e["ks"], e["inertias"], e["k"], _elbow_plot_path(out)))
    return BuildResult(manifest=manifest, seconds=dict(stages.seconds), store_bytes=store_size_bytes(out), plot_path=plot_path)


def corruption_manifest(subgraphs: list[Any], mix: dict[str, float], ratio: float, spec: str) -> dict[str, Any]:
    """The manifest's ``corruption`` entry: kinds, weights, ratio, corrupted nodes per kind in all and per
    subgraph (in store order; per subgraph only for at most 1000 subgraphs)."""
    from partitioning.corrupt import EDGE_MIN

    keys = [*mix, *(("planted_edges",) if "edges" in mix else ())]
    per = {key: [int(s.counts.get(key, 0)) for s in subgraphs] for key in keys}
    out: dict[str, Any] = {
        "kinds": list(mix),
        "spec": spec,
        "weights": {k: float(w) for k, w in mix.items()},
        "paper": list(mix) == ["inject"],
        "ratio": ratio,
        "counts": {key: int(sum(v)) for key, v in per.items()},
        "per_subgraph": per if len(subgraphs) <= 1000 else None,
    }
    if "features" in mix:
        out["features"] = "own node keeps its links, takes the features of a node drawn from another part"
    if "edges" in mix:
        out["edges"] = (f"own node keeps its features, gains max({EDGE_MIN}, degree) edges to nodes drawn uniformly "
                        "from the rest of its subgraph (collisions dropped)")
    return out


def _corruption_line(m: dict[str, Any], c: dict[str, Any]) -> str:
    """``nodes`` line of the summary: own + injected, or unchanged + corrupted by kind for a mix."""
    cor = m.get("corruption")
    if not cor or cor.get("paper", True):
        return f"nodes           {c['nodes']:,} = own {c['own_nodes']:,} + injected {c['injected_nodes']:,}"
    if not cor["kinds"]:
        return (f"nodes           {c['nodes']:,}, none corrupted (--corruption-mix none: pre-train with "
                f"--swap-features)")
    kinds = ", ".join(f"{k} {cor['counts'].get(k, 0):,}" for k in cor["kinds"])
    line = f"nodes           {c['nodes']:,} = unchanged {c['own_nodes']:,} + corrupted {c['injected_nodes']:,} ({kinds})"
    if "planted_edges" in cor["counts"]:
        line += f"; {cor['counts']['planted_edges']:,} planted edges"
    return line


def _share(v: float | None) -> str:
    return "n/a (no edges)" if v is None else f"{100 * v:.1f}%"


def _parts_line(p: dict[str, Any]) -> str:
    """``parts`` line of the summary: smallest part, the minimum and what merging did."""
    line = f"parts           smallest {p.get('smallest_part', '?'):,} nodes"
    if p.get("method") == "graph_id":
        return line + " (one part per graph, no minimum)"
    if p.get("min_part_size") is None:
        return line
    line += f" (minimum {p['min_part_size']:,}"
    if p.get("merged_parts"):
        m = p["merged_parts"]
        line += f"; {m} smaller part{'s' if m > 1 else ''} merged, {p.get('moved_nodes', 0):,} nodes moved"
    return line + ")"


def _edges_line(p: dict[str, Any]) -> str:
    """``edges kept`` line: share of the source graph's edges inside a part, and inside a corrupt subgraph."""
    return (f"edges kept      {_share(p.get('edges_kept'))} inside one part (not cut), "
            f"{_share(p.get('edges_kept_subgraphs'))} inside a corrupt subgraph")


def summary_table(result: BuildResult) -> str:
    """Plain-text summary: counts, seconds per stage, store size."""
    m = result.manifest
    c, p = m["counts"], m["partition"]
    lines = [
        f"store           {m.get('path', '')}",
        f"partition       {p['method']}, K={p['k']}" + (f" (elbow of {p['elbow']['ks']})" if p.get("elbow") else "")
        + (f", on features smoothed over {p['cluster_hops']} hop(s)" if p.get("cluster_hops") else ""),
        _parts_line(p),
        _edges_line(p),
        f"subgraphs       {c['subgraphs']:,} ({m['params']['corruptions']} per part)",
        _corruption_line(m, c),
        f"edges           {c['edge_entries'] // 2:,} undirected ({c['edge_entries']:,} CSR entries)",
        f"features        {describe_normalization(manifest_normalization(m))}",
        f"store size      {result.store_bytes / 2**20:,.1f} MiB",
        "stage           seconds",
    ]
    for name, sec in result.seconds.items():
        lines.append(f"  {name:<13} {sec:8.2f}")
    lines.append(f"  {'total':<13} {sum(result.seconds.values()):8.2f}")
    return "\n".join(lines)


_parse_auto_int = auto_or(int, "an integer")  # --k, --min-part-size: auto -> None (chosen by the build)


def _parse_grid(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(v) for v in text.split(",") if v.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None


def make_parser() -> argparse.ArgumentParser:
    from partitioning.cli import ArgumentParser, DefaultsHelpFormatter

    p = ArgumentParser(
        prog="python -m partitioning.build",
        description="Cluster a graph's nodes (FAISS K-means on the features; one part per graph for "
        "multi-graph input), build corrupt subgraphs (METHOD.md section 4: inject nodes of other parts, "
        "label them 1; --corruption-mix adds feature-swap and planted-edge corruptions) and write them to an "
        "atomic Zarr store.",
        formatter_class=DefaultsHelpFormatter,
    )
    d = BuildConfig(graph="", out="")
    p.add_argument("--graph", required=True, help="input graph: .npz, .pt (PyG Data) or a folder (see partitioning.io)")
    p.add_argument("--out", required=True, help="store folder to create, e.g. runs/tolokers.zarr (written to "
                   "<out>.tmp-<pid> then renamed)")
    p.add_argument("--k", type=_parse_auto_int, default="auto", help="number of parts, or 'auto' for the elbow of the "
                   "inertia curve over --k-grid (Kneedle on log inertia); 1 = the whole graph, no K-means and no stored "
                   "corruption (implies --corruption-mix none: the label-free recipe); ignored for multi-graph input")
    p.add_argument("--k-grid", type=_parse_grid, default=",".join(map(str, d.k_grid)),
                   help="K values tried by --k auto (comma-separated, at least 3, each >= 2)")
    p.add_argument("--min-part-size", type=_parse_auto_int, default="auto",
                   help="smallest part allowed: smaller K-means parts are dissolved (smallest first) into the "
                   "nearest remaining parts and K drops accordingly (a warning says how many); auto = max(32, the "
                   "smallest part that gets 5 injected nodes at --ratio), i.e. 32 at ratio 0.15; capped at half "
                   "the nodes so that two parts fit; 1 = no merging; not applied to multi-graph input")
    p.add_argument("--sample", type=int, default=d.sample, help="K-means is trained on this many nodes drawn "
                   "uniformly (all nodes if fewer); then every node is assigned to its nearest centroid")
    p.add_argument("--elbow-sample", type=int, default=d.elbow_sample, help="nodes drawn for the inertia curve of --k auto")
    p.add_argument("--ratio", type=float, default=d.ratio, help="injected (with --corruption-mix: corrupted) nodes per "
                   "part = round(ratio x part size), 0 < ratio < 1")
    p.add_argument("--corruptions", type=int, default=d.corruptions, help="independent corrupt subgraphs per part")
    p.add_argument("--corruption-mix", default=None, metavar="KINDS",
                   help="corruption kinds, comma-separated, each optionally KIND:WEIGHT (round(ratio x part size) "
                   "corrupted nodes per subgraph, split between the kinds by weight, all labelled 1): inject = nodes "
                   "of other parts with their links (the paper's corrupt graph, METHOD.md section 4; 'inject' alone "
                   "is exactly the paper's setting); features = an own node keeps its links but takes the features "
                   "of a node of another part (contextual anomaly); edges = an own node keeps its features and gains "
                   "max(5, degree) edges to random nodes of its subgraph (structural anomaly). "
                   "E.g. inject,features,edges. none = no stored corruption (all y = 0): pre-training draws its "
                   "corruptions afresh each step (gcad_dist.pretrain --swap-features); with --k 1 the store holds the "
                   "whole graph, every edge kept (GCCAD-pre's label-free recipe, README). Default: inject, or "
                   "none with --k 1")
    p.add_argument("--seed", type=int, default=d.seed, help="seed of every random choice (same seed, same store)")
    p.add_argument("--niter", type=int, default=d.niter, help="K-means (Lloyd) iterations per run")
    p.add_argument("--nredo", type=int, default=d.nredo, help="K-means runs (own seeding each) for the final "
                   "clustering; the lowest inertia wins")
    p.add_argument("--normalize", choices=list(NORMALIZE_CHOICES), default=d.normalize,
                   help="label-free normalisation of every feature over all nodes of the input graph, applied before "
                   "K-means and stored, its statistics recorded in the manifest: standard = z-score (unbiased std; "
                   "constant features divided by 1); power = z-score, then a Yeo-Johnson transform per column "
                   "(exponent fitted by maximum likelihood: heavy-tailed columns such as counts and amounts come out "
                   "near-Gaussian, Gaussian ones stay as they are; a value held by more than half of a column's rows, such as "
                   "the zeros of sparse counts, is left out of its fit), then z-score again; none keeps the raw features. "
                   "For pre-training that you will fine-tune on sparse bag-of-words features, standard fine-tunes better")
    p.add_argument("--cluster-hops", type=int, default=d.cluster_hops, metavar="H",
                   help="K-means on the features averaged over the node and its 1..H-hop neighbourhoods (mean over "
                   "neighbours, hop by hop) instead of on its features alone: linked nodes land in the same part "
                   "(more edges kept) and a node whose features do not fit its neighbours lands in their part, "
                   "against whose context it stands out. The store keeps the features themselves. 0 = K-means on "
                   "the features (the paper's)")
    p.add_argument("--gpu", choices=["auto", "yes", "no"], default=d.gpu, help="K-means on a GPU: auto = FAISS on "
                   "the GPU when FAISS sees one, else Lloyd iterations in PyTorch on CUDA when torch sees a GPU, else "
                   "FAISS on the CPU; yes = one of the two GPU ways (error without); no = FAISS on the CPU")
    p.add_argument("--threads", type=int, default=d.threads,
                   help="threads of FAISS (OpenMP) and of the feature normalisation (0 = all usable cores)")
    p.add_argument("--chunk-mib", type=float, default=d.chunk_mib, help="target uncompressed chunk size of the "
                   "store arrays in MiB")
    p.add_argument("--overwrite", action="store_true", help="replace an existing store at --out (only once the new "
                   "one is complete)")
    p.add_argument("--no-plot", action="store_true", help="do not write <out>.elbow.png for --k auto")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    p.add_argument("--json", action="store_true", help="print the manifest as JSON after the summary")
    p.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    return p


def config_from_args(args: argparse.Namespace) -> BuildConfig:
    k = args.k if not isinstance(args.k, str) else _parse_auto_int(args.k)
    grid = args.k_grid if isinstance(args.k_grid, tuple) else _parse_grid(args.k_grid)
    min_size = args.min_part_size if not isinstance(args.min_part_size, str) else _parse_auto_int(args.min_part_size)
    return BuildConfig(
        graph=args.graph, out=args.out, k=k, k_grid=grid, min_part_size=min_size, sample=args.sample,
        elbow_sample=args.elbow_sample,
        ratio=args.ratio, corruptions=args.corruptions, corruption_mix=(args.corruption_mix if args.corruption_mix is not None
                                                                 else "none" if k == 1 else "inject"),
        seed=args.seed, niter=args.niter, nredo=args.nredo,
        normalize=args.normalize, gpu=args.gpu, cluster_hops=args.cluster_hops,
        threads=args.threads, chunk_mib=args.chunk_mib, overwrite=args.overwrite, plot=not args.no_plot,
        progress=not args.no_progress,
    )


def main(argv: list[str] | None = None) -> int:
    from partitioning.cli import setup_logging

    args = make_parser().parse_args(argv)
    setup_logging(args.verbose)
    logging.getLogger("faiss.loader").setLevel(logging.WARNING)  # its CPU-feature probing is noise
    cfg = config_from_args(args)
    result = build(cfg)
    result.manifest["path"] = cfg.out
    print(summary_table(result))
    if result.plot_path:
        print(f"elbow plot      {result.plot_path}")
    if args.json:
        print(json.dumps(result.manifest, indent=1, default=str))
    return 0


if __name__ == "__main__":
    # Idle OpenMP threads sleep instead of spinning (much faster on a busy, shared machine). Must be
    # set before FAISS loads its OpenMP runtime.
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    from partitioning.cli import run_cli

    run_cli(main, sys.argv[1:])
