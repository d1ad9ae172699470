"""GPU against CPU, same run: FAISS K-means, neighbour sampling, the GCCAD / GraphSAGE steps, a Ray Train epoch.

    bash bench/gpu.sh                                  # on a GPU machine: install the GPU extras, then this
    python -m bench.gpu --json runs/gpu_bench.json     # this alone, with what is installed
    python -m bench.gpu --cpu-smoke                    # tiny sizes; runs anywhere (the test uses it)

Sections (``--sections``, all by default), each timed on the CPU and on the GPU in the same process:

* ``kmeans``: FAISS K-means (``faiss.Kmeans`` on the build's GPU flat index, ``partitioning.kmeans.gpu_flat_index``) on
  ``--kmeans-rows`` x ``--kmeans-dim`` (1M x 64) random blobs, K ``--kmeans-k``, 20 Lloyd iterations,
  the same k-means++ start for both; the assignment of every row (:func:`partitioning.kmeans.assign`);
  and the store build's whole K-means stage (:func:`partitioning.kmeans.kmeans`: 100k-row sample,
  3 restarts, assign all). Inertias are compared in the note. The same three against FAISS CPU for the
  ``torch-cuda`` backend (Lloyd iterations in PyTorch on CUDA; what ``--gpu auto`` uses where FAISS has
  no GPU, e.g. a CUDA-13-only host) when torch sees a GPU, after one untimed warm-up call.
* ``sampler``: the built-in sampler (:mod:`gcad_dist.data.sampler`) on CUDA tensors against CPU, on a
  Chung-Lu graph (``bench/sampler.py``; 1M nodes, 10M edges drawn), fan-outs 10,5, 1024 seeds; pyg-lib and
  torch-sparse (CPU C++ samplers) when installed, against the built-in one on CUDA.
* ``step``: the GCCAD and GraphSAGE training steps (forward, loss, backward, Adam; hop-trimmed, as
  pre-training runs them) on the same pre-sampled minibatches of a store's largest subgraph, built as
  ``bench/train.py`` builds them, on the GPU and the CPU; GCCAD also under bf16 autocast where the device
  supports it. The store is ``--store`` or a generated one (``--store-nodes``).
* ``ddp``: one ``python -m gcad_dist.pretrain`` epoch (``gcad_dist.pretrain.run``: Ray Train, 1 worker)
  of ``--ddp-steps`` steps with NCCL on the GPU against gloo on the CPU; on the GPU twice, with the
  minibatches sampled on the GPU (``--sample-on gpu``, the default there) and on the host (``--ddp-runs``).

Peak GPU memory (``torch.cuda.max_memory_allocated``) is reported per GPU measurement (the ddp worker's
is not visible from here). A section or a row whose piece is missing (no CUDA, FAISS without GPU
support, pyg-lib not installed, Ray cannot start) is skipped with the reason printed. CPU measurements
use ``--threads`` torch / FAISS threads (0 = every core this process may use).

Output: a Markdown table on stdout and ``--json`` (default ``gpu_bench.json``).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import math
import os
import platform
import sys
import tempfile
import time
import traceback
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # before FAISS loads OpenMP (see partitioning/build.py)
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script or with -m from the repo

import numpy as np  # noqa: E402
import torch  # noqa: E402

from gcad_dist.cli import ArgumentParser, UsageError, run_cli, setup_logging  # noqa: E402

log = logging.getLogger("bench.gpu")

SECTIONS = ("kmeans", "sampler", "step", "ddp")
DDP_RUNS = ("cpu", "gpu", "gpu-host-sampling")  # the ddp section's epochs (--ddp-runs)


@dataclass
class GpuBenchConfig:
    sections: list[str] = field(default_factory=lambda: list(SECTIONS))
    cpu_smoke: bool = False
    device: str = "cuda"
    threads: int = 0
    kmeans_rows: int = 1_000_000
    kmeans_dim: int = 64
    kmeans_k: int = 20
    kmeans_niter: int = 20
    sampler_nodes: int = 1_000_000
    sampler_edges: int = 10_000_000
    fanouts: str = "10,5"
    batch_size: int = 1024
    batches: int = 20
    store: str | None = None
    store_nodes: int = 200_000
    store_k: int = 4
    step_batches: int = 10
    hidden: int = 64
    layers: int = 2
    conv: str = "gin"
    ddp_steps: int = 30
    ddp_runs: list[str] = field(default_factory=lambda: list(DDP_RUNS))
    seed: int = 0
    json: str = "gpu_bench.json"

    def smoke(self) -> GpuBenchConfig:
        """Tiny sizes: the whole script in seconds on a CPU (``--cpu-smoke``)."""
        self.kmeans_rows, self.kmeans_dim, self.kmeans_k, self.kmeans_niter = 3000, 16, 4, 5
        self.sampler_nodes, self.sampler_edges, self.batches = 3000, 15_000, 3
        self.batch_size, self.store_nodes, self.store_k, self.step_batches = 128, 1500, 2, 2
        self.hidden, self.ddp_steps = 16, 2
        return self


class Bench:
    """Collects table rows, skips and environment facts; a section failing never stops the others."""

    def __init__(self, cfg: GpuBenchConfig) -> None:
        self.cfg = cfg
        self.rows: list[dict] = []
        self.skipped: list[dict] = []
        self.cuda = cfg.device.startswith("cuda") and torch.cuda.is_available()
        self.gpu = torch.device(cfg.device) if self.cuda else None
        self.threads = cfg.threads or _cores()
        self._store: str | None = None
        self._tmp = tempfile.TemporaryDirectory(prefix="bench-gpu-")

    # -- bookkeeping ---------------------------------------------------------------------------
    def skip(self, section: str, what: str, reason: str) -> None:
        print(f"[skip] {section}: {what}: {reason}", flush=True)
        self.skipped.append({"section": section, "what": what, "reason": reason})

    def row(self, section: str, what: str, unit: str, cpu: float | None, gpu: float | None, note: str = "",
            higher_is_better: bool = False, gpu_mem_mib: float | None = None) -> None:
        speedup = None
        if cpu and gpu:
            speedup = gpu / cpu if higher_is_better else cpu / gpu
        r = {"section": section, "what": what, "unit": unit, "cpu": cpu, "gpu": gpu, "gpu_speedup": speedup,
             "gpu_peak_mem_mib": gpu_mem_mib, "note": note}
        self.rows.append(r)
        log.info("%s | %s: cpu %s, gpu %s %s", section, what, _fmt(cpu), _fmt(gpu), unit)

    def sync(self) -> None:
        if self.cuda:
            torch.cuda.synchronize(self.gpu)

    def reset_peak(self) -> None:
        if self.cuda:
            torch.cuda.reset_peak_memory_stats(self.gpu)

    def peak_mib(self) -> float | None:
        return torch.cuda.max_memory_allocated(self.gpu) / 2**20 if self.cuda else None

    def no_gpu_reason(self) -> str:
        if not self.cfg.device.startswith("cuda"):
            return f"--device {self.cfg.device}"
        return "torch sees no CUDA GPU" + (" (CPU build of torch)" if torch.version.cuda is None else "")

    # -- shared inputs -------------------------------------------------------------------------
    def store(self) -> str:
        """``--store`` or a store built once from a generated graph (K-means on the CPU; not timed)."""
        if self.cfg.store:
            return self.cfg.store
        if self._store is None:
            from partitioning.build import BuildConfig, build
            from partitioning.synthetic import SyntheticConfig, generate

            t0 = time.perf_counter()
            n = self.cfg.store_nodes
            graph = generate(SyntheticConfig(nodes=n, avg_degree=min(20.0, max(2.0, n / 100)), seed=self.cfg.seed))
            out = str(Path(self._tmp.name) / "store.zarr")
            build(BuildConfig(graph="generated", out=out, k=self.cfg.store_k, gpu="no", threads=self.threads,
                              plot=False, progress=False, nredo=1, sample=min(100_000, n)), graph=graph)
            log.info("generated store: %d nodes, K=%d, %.1fs", n, self.cfg.store_k, time.perf_counter() - t0)
            self._store = out
        return self._store


def _cores() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - non-Linux
        return max(1, os.cpu_count() or 1)


def _fmt(v: float | None) -> str:
    if v is None:
        return "-"
    if isinstance(v, float) and math.isnan(v):
        return "nan"
    a = abs(v)
    return f"{v:,.0f}" if a >= 1000 else f"{v:.1f}" if a >= 10 else f"{v:.3f}" if a >= 0.01 else f"{v:.2e}"


# -- sections -----------------------------------------------------------------------------------
def _blobs(n: int, d: int, k: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    centers = rng.normal(0.0, 4.0, size=(k, d)).astype(np.float32)
    x = rng.normal(0.0, 1.0, size=(n, d)).astype(np.float32)
    x += centers[rng.integers(k, size=n)]
    return x


def section_kmeans(b: Bench) -> None:
    from partitioning import kmeans as km

    cfg = b.cfg
    try:
        faiss = km._faiss()
    except ImportError as e:
        b.skip("kmeans", "all", f"FAISS not importable ({e}); install the cpu or gpu extra")
        return
    n_gpu = faiss.get_num_gpus() if hasattr(faiss, "get_num_gpus") else 0
    faiss.omp_set_num_threads(b.threads)
    gpu_reason = None if n_gpu > 0 else (
        "FAISS sees no GPU (faiss-cpu installed? bash bench/gpu.sh installs faiss-gpu)" if b.cuda else b.no_gpu_reason())
    torch_reason = None if b.cuda else b.no_gpu_reason()  # the torch-cuda backend needs only torch's CUDA
    n, d, k, niter = cfg.kmeans_rows, cfg.kmeans_dim, cfg.kmeans_k, cfg.kmeans_niter
    x = _blobs(n, d, k, cfg.seed)
    init = km.kmeans_pp_init(x[: min(n, 100_000)], k, cfg.seed)  # same start for all; not timed
    shape = f"{n:,} x {d}, K {k}"
    sample = min(100_000, n)
    if gpu_reason is not None:
        b.skip("kmeans", "FAISS GPU rows", gpu_reason)
    if torch_reason is not None:
        b.skip("kmeans", "torch-cuda rows", torch_reason)
    else:  # untimed warm-up: CUDA context, cuBLAS handle, the kernels of the Lloyd step and of the search
        km._torch_lloyd(x[:1024], init, 2, device=b.gpu)
        km._torch_assign(x[:1024], init, device=b.gpu)
        b.sync()

    if gpu_reason is None:  # untimed warm-up of FAISS's GPU resources (made once per process), as for torch-cuda
        km.assign(x[:1024], init, backend="faiss-gpu")

    def train(use_gpu: bool) -> tuple[float, float, np.ndarray]:
        obj = faiss.Kmeans(d, k, niter=niter, seed=cfg.seed, verbose=False,
                           max_points_per_centroid=int(np.ceil(n / k)) + 1, min_points_per_centroid=1)
        if use_gpu:  # the build's GPU index (partitioning.kmeans.gpu_flat_index: one StandardGpuResources)
            obj.index = km.gpu_flat_index(d)
        t0 = time.perf_counter()
        inertia = float(obj.train(x, init_centroids=init))
        return time.perf_counter() - t0, inertia, np.ascontiguousarray(obj.centroids)

    res = {False: train(False)}
    if gpu_reason is None:
        b.reset_peak()
        res[True] = train(True)
    note = f"faiss {getattr(faiss, '__version__', '?')}, {b.threads} CPU threads; {niter} Lloyd iterations"
    if True in res:
        note += f"; inertia GPU/CPU {res[True][1] / res[False][1]:.4f}"
    b.row("kmeans", f"faiss.Kmeans train, {shape}", "s", res[False][0], res.get(True, (None,))[0], note)
    warm = "one untimed warm-up call on the GPU first (CUDA context, cuBLAS)"
    if torch_reason is None:
        b.reset_peak()
        t0 = time.perf_counter()
        _, t_obj = km._torch_lloyd(x, init, niter, device=b.gpu)
        b.sync()
        t_train = time.perf_counter() - t0
        b.row("kmeans", f"torch-cuda Lloyd train vs faiss.Kmeans CPU, {shape}", "s", res[False][0], t_train,
              f"PyTorch on {b.gpu} ({torch.cuda.get_device_name(b.gpu)}), same k-means++ start, {niter} Lloyd "
              f"iterations, host-to-device copy of x included; inertia torch-cuda/FAISS-CPU "
              f"{t_obj / res[False][1]:.4f}; {warm}", gpu_mem_mib=b.peak_mib())

    def timed_assign(backend: str) -> tuple[float, np.ndarray, float]:
        t0 = time.perf_counter()
        if backend == "torch-cuda":
            labels, inertia = km._torch_assign(x, res[False][2], device=b.gpu)
            b.sync()
        else:
            labels, inertia = km.assign(x, res[False][2], backend=backend)
        return time.perf_counter() - t0, labels, inertia

    assigned = {"faiss-cpu": timed_assign("faiss-cpu")}
    if gpu_reason is None:
        assigned["faiss-gpu"] = timed_assign("faiss-gpu")
    same = (f"labels equal on {np.mean(assigned['faiss-gpu'][1] == assigned['faiss-cpu'][1]):.4%} of rows"
            if "faiss-gpu" in assigned else "")
    b.row("kmeans", f"assign {n:,} rows to {k} centroids (flat L2)", "s", assigned["faiss-cpu"][0],
          assigned.get("faiss-gpu", (None,))[0], same)
    if torch_reason is None:
        b.reset_peak()
        assigned["torch-cuda"] = timed_assign("torch-cuda")
        t, cpu = assigned["torch-cuda"], assigned["faiss-cpu"]
        b.row("kmeans", f"torch-cuda assign {n:,} rows to {k} centroids vs FAISS CPU flat L2", "s", cpu[0], t[0],
              f"chunked matmul + argmin, host-to-device copies included; labels equal on "
              f"{np.mean(t[1] == cpu[1]):.4%} of rows, inertia ratio {t[2] / cpu[2]:.6f}; {warm}",
              gpu_mem_mib=b.peak_mib())

    def stage(backend: str) -> tuple[float, float]:
        t0 = time.perf_counter()
        r = km.kmeans(x, k, sample=sample, niter=niter, nredo=3, seed=cfg.seed, backend=backend, threads=b.threads)
        b.sync()
        return time.perf_counter() - t0, r.inertia

    stages = {"faiss-cpu": stage("faiss-cpu")}
    if gpu_reason is None:
        stages["faiss-gpu"] = stage("faiss-gpu")  # k-means++ seeding on torch's CUDA device where it has one
        # and once as before session 34: NumPy seeding, new GPU resources for every index (faiss.Kmeans(gpu=True))
        km.DEVICE_SEEDING, kept = False, km.gpu_flat_index
        km.gpu_flat_index = lambda dim: faiss.index_cpu_to_all_gpus(faiss.IndexFlatL2(dim))
        try:
            stages["faiss-gpu before"] = stage("faiss-gpu")
        finally:
            km.DEVICE_SEEDING, km.gpu_flat_index = True, kept
    what = f"build's K-means stage ({sample:,}-row sample, 3 restarts, assign all), {shape}"
    seeding = "on the GPU (torch)" if km._seeding_rows(x[:1]) is not None else "NumPy, CPU"
    note = f"k-means++ seeding included (CPU: NumPy; GPU: {seeding})"
    if "faiss-gpu" in stages:
        note += f"; inertia GPU/CPU {stages['faiss-gpu'][1] / stages['faiss-cpu'][1]:.4f}"
    b.row("kmeans", what, "s", stages["faiss-cpu"][0], stages.get("faiss-gpu", (None,))[0], note, gpu_mem_mib=None)
    if "faiss-gpu before" in stages:
        s_old = stages["faiss-gpu before"]
        b.row("kmeans", f"{what}: faiss-gpu as before session 34 (NumPy seeding, new GPU resources per index)",
              "s", stages["faiss-cpu"][0], s_old[0],
              f"inertia GPU/CPU {s_old[1] / stages['faiss-cpu'][1]:.4f}", gpu_mem_mib=None)
    # the build's stage with --k auto (the default): the elbow over the default K grid on a 20k-row sample, then
    # the chosen K on the 100k sample and every row assigned
    def auto_stage(backend: str) -> tuple[float, int]:
        t0 = time.perf_counter()
        r = km.kmeans(x, None, k_grid=list(km.DEFAULT_K_GRID), sample=sample, niter=niter, seed=cfg.seed,
                      backend=backend, threads=b.threads)
        b.sync()
        return time.perf_counter() - t0, r.k

    autos = {"faiss-cpu": auto_stage("faiss-cpu")}
    for backend, reason in (("faiss-gpu", gpu_reason), ("torch-cuda", torch_reason)):
        if reason is None:
            autos[backend] = auto_stage(backend)
    what_auto = (f"build's K-means stage with --k auto (elbow over {len(km.DEFAULT_K_GRID)} K on 20,000 rows), "
                 f"{n:,} x {d}")
    cpu_t, cpu_k = autos.pop("faiss-cpu")
    for backend, (t, k_gpu) in (autos or {"GPU": (None, None)}).items():  # one row per GPU backend timed
        b.row("kmeans", f"{what_auto}: {backend} vs faiss-cpu", "s", cpu_t, t,
              f"K chosen: CPU {cpu_k}" + (f", GPU {k_gpu}" if t else ""), gpu_mem_mib=None)
    if torch_reason is None:
        b.reset_peak()
        stages["torch-cuda"] = stage("torch-cuda")
        b.row("kmeans", f"{what}: torch-cuda vs faiss-cpu", "s", stages["faiss-cpu"][0], stages["torch-cuda"][0],
              f"km.kmeans(backend='torch-cuda') on the default CUDA device; k-means++ seeding (on the device) "
              f"included; inertia torch-cuda/FAISS-CPU {stages['torch-cuda'][1] / stages['faiss-cpu'][1]:.4f}; "
              f"{warm}", gpu_mem_mib=b.peak_mib())


def section_sampler(b: Bench) -> None:
    from bench.sampler import chung_lu, measure_sampler
    from gcad_dist.data.sampler import available_backends

    cfg = b.cfg
    fanouts = [int(f) for f in cfg.fanouts.split(",")]
    indptr, indices = chung_lu(cfg.sampler_nodes, cfg.sampler_edges, seed=cfg.seed)
    rowptr, col = torch.from_numpy(indptr), torch.from_numpy(indices)
    desc = f"{rowptr.numel() - 1:,} nodes, {col.numel() // 2:,} edges, fan-outs {cfg.fanouts}, {cfg.batch_size} seeds"
    torch.set_num_threads(b.threads)

    def best(rp, c, backend):
        runs = [measure_sampler(rp, c, backend, fanouts, cfg.batch_size, cfg.batches, seed=cfg.seed + i) for i in range(2)]
        return min(runs, key=lambda r: r["seconds"])

    cpu = best(rowptr, col, "builtin")
    gpu = mem = None
    if b.cuda:
        b.reset_peak()
        gpu = best(rowptr.to(b.gpu), col.to(b.gpu), "builtin")
        mem = b.peak_mib()
    else:
        b.skip("sampler", "builtin on CUDA", b.no_gpu_reason())
    b.row("sampler", f"builtin, ms/batch ({desc})", "ms", cpu["ms_per_batch"], gpu and gpu["ms_per_batch"],
          f"{b.threads} CPU threads; {cpu['mean_edges']:,.0f} sampled edges/batch", gpu_mem_mib=mem)
    avail = available_backends()
    for backend in ("pyg-lib", "torch-sparse"):
        if backend not in avail:
            b.skip("sampler", backend, "not installed (bash bench/gpu.sh tries the data.pyg.org wheels)")
            continue
        r = best(rowptr, col, backend)
        b.row("sampler", f"{backend} (C++, CPU) vs builtin on CUDA, ms/batch", "ms", r["ms_per_batch"],
              gpu and gpu["ms_per_batch"], "GPU column: the built-in sampler on CUDA")


def _minibatches(b: Bench):
    """Pre-sampled minibatches of the store's largest subgraph, as bench/train.py's step_comparison builds them."""
    from gcad_dist.data.neighbor_loader import SubgraphNeighborLoader
    from partitioning.store.reader import StoreReader

    cfg = b.cfg
    reader = StoreReader(b.store())
    sg = int(reader.node_counts.argmax())
    data = reader.get(sg)
    loader = SubgraphNeighborLoader(data, [int(f) for f in cfg.fanouts.split(",")], cfg.batch_size, shuffle=True,
                                    seed=cfg.seed, prefetch=0)
    batches = []
    for batch in loader:
        batches.append(batch)
        if len(batches) == cfg.step_batches:
            break
    return reader, sg, batches


def training_steps(reader, sg: int, dev: torch.device, *, hidden: int, layers: int, conv: str,
                   precision: str = "fp32", seed: int = 0):
    """The GCCAD step (pre-training's, hop-trimmed, ``precision`` autocast) and the GraphSAGE step (fp32), each
    with a fresh model and Adam as the trainer builds it (``fused`` on a GPU): ``(gccad_step, sage_step)``,
    functions of one minibatch that return without waiting for the device."""
    from torch_geometric.nn import GraphSAGE

    from gcad_dist.distributed.context import AllReduceContextSync
    from gcad_dist.model import GCCAD, GCCADConfig
    from gcad_dist.model.precision import autocast
    from gcad_dist.optim import adam

    torch.manual_seed(seed)
    gccad = GCCAD(GCCADConfig(in_dim=reader.num_features, hidden=hidden, num_layers=layers, conv=conv)).to(dev).train()
    sync = AllReduceContextSync(momentum=0.5)
    sync.set_subgraph(sg, shared=True)
    opt = adam(gccad.parameters(), dev, 1e-3)

    def gccad_step(x) -> None:
        mask = torch.zeros(x.num_nodes, dtype=torch.bool, device=dev)
        mask[: x.batch_size] = True
        with autocast(precision, dev):
            out = gccad(x.x, x.edge_index, context_mask=mask, sync=sync, num_sampled_nodes=x.num_sampled_nodes,
                        num_sampled_edges=x.num_sampled_edges)
            loss = gccad.loss(out, x.y, mask=mask, sync=sync)["total"]
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    torch.manual_seed(seed)
    sage = GraphSAGE(reader.num_features, hidden, layers, out_channels=2, dropout=0.1).to(dev).train()
    opt_s = adam(sage.parameters(), dev, 1e-3)

    def sage_step(x) -> None:
        logits = sage(x.x, x.edge_index, num_sampled_nodes_per_hop=x.num_sampled_nodes,
                      num_sampled_edges_per_hop=x.num_sampled_edges)[: x.batch_size]
        loss = torch.nn.functional.cross_entropy(logits, x.y[: x.batch_size].long())
        opt_s.zero_grad(set_to_none=True)
        loss.backward()
        opt_s.step()

    return gccad_step, sage_step


def section_step(b: Bench) -> None:
    from bench.train import _time_steps
    from gcad_dist.model.precision import bf16_supported

    cfg = b.cfg
    torch.set_num_threads(b.threads)
    reader, sg, batches = _minibatches(b)
    mean_edges = sum(x.edge_index.size(1) for x in batches) / len(batches)
    desc = f"{len(batches)} minibatches of {cfg.batch_size} seeds, mean {mean_edges:,.0f} sampled edges, hop-trimmed"
    devices = [torch.device("cpu")] + ([b.gpu] if b.cuda else [])
    if not b.cuda:
        b.skip("step", "GPU rows", b.no_gpu_reason())
    results: dict[tuple[str, str, str], tuple[float, float | None]] = {}
    for dev in devices:
        bs = [x.to(dev) for x in batches]
        for precision in ["fp32"] + (["bf16"] if bf16_supported(dev) else []):
            steps = dict(zip(("gccad", "sage"), training_steps(reader, sg, dev, hidden=cfg.hidden, layers=cfg.layers,
                                                               conv=cfg.conv, precision=precision, seed=cfg.seed)))
            for model in ("gccad", "sage") if precision == "fp32" else ("gccad",):
                def timed_step(x, step=steps[model]) -> None:
                    step(x)
                    b.sync()

                b.reset_peak()
                t = min(_time_steps(timed_step, bs) for _ in range(2))
                results[(model, precision, dev.type)] = (t, b.peak_mib() if dev.type == "cuda" else None)

    def get(model, precision, dev):
        v = results.get((model, precision, dev))
        return (1000 * v[0], v[1]) if v else (None, None)

    for model, name in (("gccad", "GCCAD"), ("sage", "GraphSAGE")):
        for precision in ("fp32", "bf16"):
            (c, _), (g, mem) = get(model, precision, "cpu"), get(model, precision, "cuda")
            if c is None and g is None:
                continue
            note = desc if (model, precision) == ("gccad", "fp32") else ""
            b.row("step", f"{name} training step, {precision}", "ms", c, g, note, gpu_mem_mib=mem)
    ratio = {}
    for dev in ("cpu", "cuda"):
        g, s = get("gccad", "fp32", dev)[0], get("sage", "fp32", dev)[0]
        ratio[dev] = g / s if g and s else None
    b.rows.append({"section": "step", "what": "GCCAD step / GraphSAGE step (fp32)", "unit": "ratio",
                   "cpu": ratio["cpu"], "gpu": ratio["cuda"], "gpu_speedup": None, "gpu_peak_mem_mib": None,
                   "note": "issue target on CPU: at most 2x (stretch 1.5x)"})
    if ("gccad", "bf16", "cpu") not in results:
        b.skip("step", "bf16 on CPU", "this CPU has no native bf16 (AVX512-BF16 / AMX)")


def section_ddp(b: Bench) -> None:
    try:
        import ray  # noqa: F401

        from gcad_dist.pretrain import PretrainConfig, run
    except ImportError as e:
        b.skip("ddp", "all", f"Ray / pretrain not importable: {e}")
        return
    cfg = b.cfg
    store = b.store()
    names = {f.name for f in fields(PretrainConfig)}
    runs = {}
    # (run, GPUs per worker, --sample-on): gpu samples on the GPU (the default there), gpu-host-sampling on the host
    plan = {"cpu": (0.0, "cpu"), "gpu": (1.0, "gpu"), "gpu-host-sampling": (1.0, "cpu")}
    targets = [r for r in cfg.ddp_runs if r == "cpu" or b.cuda]
    if not b.cuda and any(r != "cpu" for r in cfg.ddp_runs):
        b.skip("ddp", "NCCL worker on the GPU", b.no_gpu_reason())
    for name in targets:
        gpus, sample_on = plan[name]
        out = str(Path(b._tmp.name) / f"pre-{name}")
        kw = dict(store=store, out=out, workers=1, gpus_per_worker=gpus, cpus_per_worker=b.threads, epochs=1,
                  batch_size=cfg.batch_size, fanouts=cfg.fanouts, hidden=cfg.hidden, layers=cfg.layers, conv=cfg.conv,
                  sample_threshold=max(1, min(10_000, cfg.store_nodes // 10)), max_steps_per_epoch=cfg.ddp_steps,
                  min_steps_per_epoch=cfg.ddp_steps, max_failures=0, overwrite=True, seed=cfg.seed,
                  sample_on=sample_on)
        pc = PretrainConfig(**{k: v for k, v in kw.items() if k in names})
        t0 = time.perf_counter()
        try:
            s = run(pc)
            hist = json.loads((Path(out) / "metrics.json").read_text())["history"][-1]
        except Exception as e:  # noqa: BLE001 - report and go on
            log.debug("%s", traceback.format_exc())
            b.skip("ddp", f"{name} run", f"{type(e).__name__}: {e}".splitlines()[0][:300])
            continue
        runs[name] = {**hist, "wall_s": time.perf_counter() - t0, "final_loss": s.get("final_loss")}
        log.info("ddp %s: %.0f seeds/s, %.0f sampled edges/s, %.1f%% waiting for data", name,
                 runs[name].get("seeds_per_s") or 0, runs[name].get("edges_per_s") or 0,
                 100 * (runs[name].get("wait_frac") or 0))
    if not runs:
        return
    c = runs.get("cpu", {})
    steps = next(iter(runs.values())).get("steps")
    how = {"gpu": " (sampled on the GPU)", "gpu-host-sampling": " (sampled on the host, --sample-on cpu)"}
    for name in [r for r in how if r in runs] or ["cpu"]:  # one set of rows per GPU run, or the CPU's alone
        g, tag = runs.get(name, {}) if name in how else {}, how.get(name, "")
        b.row("ddp", f"Ray Train epoch, 1 worker: seed nodes/s{tag}", "seeds/s", c.get("seeds_per_s"),
              g.get("seeds_per_s"), f"NCCL on the GPU vs gloo on the CPU; {steps} steps of {cfg.batch_size} seeds, "
              f"{b.threads} CPUs per worker", higher_is_better=True)
        b.row("ddp", f"Ray Train epoch, 1 worker: sampled edges/s{tag}", "edges/s", c.get("edges_per_s"),
              g.get("edges_per_s"), "issue target on an H100: at least 20M sampled edges/s per GPU",
              higher_is_better=True)
        b.row("ddp", f"Ray Train epoch, 1 worker: epoch s (training loop){tag}", "s", c.get("time_s"),
              g.get("time_s"), "waiting for data: " + ", ".join(
                  f"{k} {100 * (runs[k].get('wait_frac') or 0):.1f}%" for k in runs if k in ("cpu", name)))
        b.row("ddp", f"Ray Train epoch, 1 worker: wall s incl. Ray start{tag}", "s", c.get("wall_s"), g.get("wall_s"))


SECTION_FN = {"kmeans": section_kmeans, "sampler": section_sampler, "step": section_step, "ddp": section_ddp}


# -- report -------------------------------------------------------------------------------------
def environment(b: Bench) -> dict:
    from gcad_dist.model.precision import bf16_supported

    env = {"python": platform.python_version(), "torch": torch.__version__, "torch_cuda": torch.version.cuda,
           "cuda_available": torch.cuda.is_available(), "cpu": platform.processor() or platform.machine(),
           "cpu_threads": b.threads, "cpu_bf16": bf16_supported("cpu")}
    if b.cuda:
        p = torch.cuda.get_device_properties(b.gpu)
        env.update(gpu=p.name, gpu_mem_gib=round(p.total_memory / 2**30, 1), gpu_bf16=bf16_supported(b.gpu))
    with contextlib.suppress(Exception):
        import faiss

        env["faiss"] = getattr(faiss, "__version__", "?")
        env["faiss_gpus"] = faiss.get_num_gpus() if hasattr(faiss, "get_num_gpus") else 0
    with contextlib.suppress(Exception):
        from gcad_dist.data.sampler import available_backends

        env["samplers"] = available_backends()
    with contextlib.suppress(Exception):
        import ray

        env["ray"] = ray.__version__
    return env


def markdown(b: Bench, env: dict) -> str:
    lines = [f"GPU: {env.get('gpu', 'none')}; torch {env['torch']} (CUDA {env['torch_cuda']}); "
             f"faiss {env.get('faiss', '-')} ({env.get('faiss_gpus', 0)} GPUs); CPU {env['cpu']}, "
             f"{env['cpu_threads']} threads" + (" (--cpu-smoke sizes)" if b.cfg.cpu_smoke else ""), "",
             "| section | measurement | unit | CPU | GPU | GPU speed-up | GPU peak MiB | note |",
             "|---|---|---|---|---|---|---|---|"]
    for r in b.rows:
        sp = f"{r['gpu_speedup']:.2f}x" if r["gpu_speedup"] else "-"
        lines.append(f"| {r['section']} | {r['what']} | {r['unit']} | {_fmt(r['cpu'])} | {_fmt(r['gpu'])} | {sp} | "
                     f"{_fmt(r['gpu_peak_mem_mib'])} | {r['note']} |")
    if b.skipped:
        lines += ["", "Skipped:", ""] + [f"* {s['section']}: {s['what']}: {s['reason']}" for s in b.skipped]
    return "\n".join(lines)


def parse_args(argv: list[str] | None) -> GpuBenchConfig:
    d = GpuBenchConfig()
    p = ArgumentParser(prog="python -m bench.gpu", description=__doc__.split("\n\n")[0],
                       formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--sections", nargs="+", choices=SECTIONS, default=d.sections, help="what to measure")
    p.add_argument("--cpu-smoke", action="store_true", help="tiny sizes (seconds on a CPU; the test runs this)")
    p.add_argument("--device", default=d.device, help="GPU device")
    p.add_argument("--threads", type=int, default=d.threads, help="CPU threads of the CPU side (0 = all cores)")
    for name in ("kmeans_rows", "kmeans_dim", "kmeans_k", "kmeans_niter", "sampler_nodes", "sampler_edges",
                 "batch_size", "batches", "store_nodes", "store_k", "step_batches", "hidden", "layers", "ddp_steps",
                 "seed"):
        p.add_argument("--" + name.replace("_", "-"), type=int, default=getattr(d, name))
    p.add_argument("--ddp-runs", nargs="+", choices=DDP_RUNS, default=d.ddp_runs,
                   help="ddp epochs to run: cpu (gloo), gpu (NCCL, minibatches sampled on the GPU), gpu-host-sampling "
                   "(NCCL, sampled on the host and copied over)")
    p.add_argument("--fanouts", default=d.fanouts, help="neighbours per hop")
    p.add_argument("--conv", default=d.conv, help="GCCAD node-update convolution")
    p.add_argument("--store", default=None, help="store for step/ddp (default: generate one of --store-nodes)")
    p.add_argument("--json", default=d.json, help="write the results here")
    a = vars(p.parse_args(argv))
    given = {t.split("=", 1)[0] for t in (argv if argv is not None else sys.argv[1:]) if t.startswith("--")}
    explicit = {k for k in a if f"--{k.replace('_', '-')}" in given}
    cfg = GpuBenchConfig(**a)
    if cfg.cpu_smoke:  # smoke sizes, except what was given explicitly
        smoke = GpuBenchConfig(**a).smoke()
        for k in asdict(cfg):
            if k not in explicit:
                setattr(cfg, k, getattr(smoke, k))
    if cfg.threads < 0 or min(cfg.kmeans_rows, cfg.kmeans_k, cfg.batch_size, cfg.batches, cfg.step_batches) < 1:
        raise UsageError("--threads must be >= 0; sizes must be >= 1")
    if cfg.kmeans_k > cfg.kmeans_rows:
        raise UsageError("--kmeans-k: must be at most --kmeans-rows")
    return cfg


def main(argv: list[str] | None = None) -> int:
    cfg = parse_args(argv)
    setup_logging()
    b = Bench(cfg)
    t0 = time.perf_counter()
    for name in cfg.sections:
        print(f"[section] {name}", flush=True)
        try:
            SECTION_FN[name](b)
        except Exception as e:  # noqa: BLE001 - one broken section must not hide the others' figures
            log.warning("section %s failed:\n%s", name, traceback.format_exc())
            b.skip(name, "section", f"failed: {type(e).__name__}: {str(e).splitlines()[0][:300] if str(e) else ''}")
    env = environment(b)
    print()
    print(markdown(b, env))
    out = {"config": asdict(cfg), "env": env, "rows": b.rows, "skipped": b.skipped,
           "seconds": round(time.perf_counter() - t0, 1)}
    Path(cfg.json).parent.mkdir(parents=True, exist_ok=True)
    Path(cfg.json).write_text(json.dumps(out, indent=2, default=str))
    print(f"\nwritten: {cfg.json}")
    b._tmp.cleanup()
    return 0


if __name__ == "__main__":
    run_cli(main)
