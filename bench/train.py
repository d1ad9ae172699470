"""Distributed pre-training throughput on a store: workers, GCCAD vs GraphSAGE, samplers, data waits.

Example (the BENCHMARKS.md figures; the store from a generated 1M-node graph):
    python -m partitioning.build --graph /tmp/h1big.npz --out /tmp/big.zarr --k 20
    python -m bench.train --store /tmp/big.zarr --workers 1 2 --steps 30

Measures, in one run:

1. ``python -m gcad_dist.pretrain`` (Ray Train) for each ``--workers`` value, ``--steps`` steps of one
   epoch: seed nodes/s and sampled edges/s over all workers, and the share of the epoch each worker
   spent waiting for its next batch (data loading and sampling not hidden by the prefetch thread);
2. on the same pre-sampled minibatches of the largest subgraph (one process): the time of a GCCAD
   training step (forward, loss, backward, Adam) against a plain GraphSAGE step (PyG ``GraphSAGE`` of
   the same width and depth, linear head, cross-entropy on the same labels), each with every layer on
   all sampled hops and hop-trimmed (PyG ``trim_to_layer``), paired by minibatch (the models back to back on
   each one; a ratio is the median of the minibatches' ratios), with the malloc settings of the
   training processes (:mod:`gcad_dist.allocator`, both models alike); GCCAD with the native (C++)
   edge kernels of :mod:`gcad_dist.model.native` (when they can be built) and the CPU dropout of
   :mod:`gcad_dist.model.dropout`, against the session-5 step (PyTorch kernels, torch's dropout);
3. the neighbour samplers on that subgraph's CSR (``bench/sampler.measure_sampler``): the built-in one
   against torch-sparse (and pyg-lib) when installed.

Prints a table (stdout) and writes it as JSON with ``--json``.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script or with -m from the repo

from gcad_dist.cli import ArgumentParser, UsageError, run_cli, setup_logging  # noqa: E402

log = logging.getLogger("bench.train")


@dataclass
class TrainBenchConfig:
    store: str
    workers: list[int] = field(default_factory=lambda: [1, 2])
    steps: int = 30
    batch_size: int = 1024
    fanouts: str = "10,5"
    hidden: int = 64
    layers: int = 2
    conv: str = "gin"
    sample_threshold: int = 10_000  # below the store's subgraph sizes: every step neighbour-sampled
    step_batches: int = 10
    cpus_per_worker: int = 1
    json: str | None = None
    skip_ray: bool = False


def _time_steps(step_fn, batches, repeats: int = 1) -> float:
    """Median seconds of ``step_fn(batch)`` over the batches (after one warm-up step)."""
    step_fn(batches[0])
    times = []
    for _ in range(repeats):
        for b in batches:
            t0 = time.perf_counter()
            step_fn(b)
            times.append(time.perf_counter() - t0)
    times.sort()
    return times[len(times) // 2]


def _paired_times(step_fns: dict[str, Callable[[Any], None]], batches: list, repeats: int = 1) -> dict[str, list[float]]:
    """Seconds of every ``step_fns[name](batch)`` on every minibatch, ``repeats`` passes over ``batches``; on each
    minibatch the functions run back to back, their order rotated by one from one minibatch to the next (one warm-up
    step each first). Entry i of every list is the same minibatch and pass."""
    names = list(step_fns)
    for name in names:
        step_fns[name](batches[0])
    times: dict[str, list[float]] = {name: [] for name in names}
    i = 0
    for _ in range(repeats):
        for b in batches:
            for name in names[i % len(names):] + names[: i % len(names)]:
                t0 = time.perf_counter()
                step_fns[name](b)
                times[name].append(time.perf_counter() - t0)
            i += 1
    return times


def _median_ratio(a: list[float], b: list[float]) -> float:
    """The median over paired entries of a[i] / b[i]."""
    return statistics.median(x / y for x, y in zip(a, b))


def step_comparison(cfg: TrainBenchConfig) -> dict:
    """GCCAD vs GraphSAGE training step on the same minibatches of the store's largest subgraph,
    and the samplers on its CSR."""
    from torch_geometric.nn import GraphSAGE

    from bench.sampler import measure_sampler
    from gcad_dist.allocator import retain_freed_memory
    from gcad_dist.data.neighbor_loader import SubgraphNeighborLoader
    from gcad_dist.data.sampler import available_backends
    from gcad_dist.distributed.context import AllReduceContextSync
    from gcad_dist.model import GCCAD, GCCADConfig, dropout, native
    from gcad_dist.optim import adam
    from partitioning.store.reader import StoreReader

    retain_freed_memory()  # as the training processes run (both models alike)
    reader = StoreReader(cfg.store)
    sg = int(reader.node_counts.argmax())
    data = reader.get(sg)
    fanouts = [int(f) for f in cfg.fanouts.split(",")]
    loader = SubgraphNeighborLoader(data, fanouts, cfg.batch_size, shuffle=True, seed=0, prefetch=0)
    batches = []
    for b in loader:
        batches.append(b)
        if len(batches) == cfg.step_batches:
            break
    log.info("subgraph %d: %d nodes, %d CSR entries; %d minibatches of %d seeds, mean %.0f sampled edges",
             sg, data.num_nodes, data.edge_index.size(1), len(batches), cfg.batch_size,
             sum(b.edge_index.size(1) for b in batches) / len(batches))

    torch.manual_seed(0)
    gccad = GCCAD(GCCADConfig(in_dim=reader.num_features, hidden=cfg.hidden, num_layers=cfg.layers, conv=cfg.conv))
    sync = AllReduceContextSync(momentum=0.5)  # one process: the all-reduce is the identity, memory on
    sync.set_subgraph(sg, shared=True)
    cpu = torch.device("cpu")
    opt_g = adam(gccad.parameters(), cpu, 1e-3)  # the optimiser training builds, for both models

    def gccad_step(b, trim: bool) -> None:
        mask = torch.zeros(b.num_nodes, dtype=torch.bool)
        mask[: b.batch_size] = True
        kw = {"num_sampled_nodes": b.num_sampled_nodes, "num_sampled_edges": b.num_sampled_edges} if trim else {}
        out = gccad(b.x, b.edge_index, context_mask=mask, sync=sync, **kw)
        loss = gccad.loss(out, b.y, mask=mask, sync=sync)["total"]
        opt_g.zero_grad(set_to_none=True)
        loss.backward()
        opt_g.step()

    sage = GraphSAGE(reader.num_features, cfg.hidden, cfg.layers, out_channels=2, dropout=0.1)
    opt_s = adam(sage.parameters(), cpu, 1e-3)

    def sage_step(b, trim: bool) -> None:
        kw = {"num_sampled_nodes_per_hop": b.num_sampled_nodes, "num_sampled_edges_per_hop": b.num_sampled_edges} if trim else {}
        logits = sage(b.x, b.edge_index, **kw)[: b.batch_size]
        loss = torch.nn.functional.cross_entropy(logits, b.y[: b.batch_size])
        opt_s.zero_grad(set_to_none=True)
        loss.backward()
        opt_s.step()

    def with_kernels(value: str, fn):
        """``fn`` with GCAD_NATIVE set to ``value``: 1 = native kernels and the fast dropout (as training runs),
        0 = the PyTorch kernels and torch's dropout (the session-5 step)."""
        def run(b, trim: bool) -> None:
            before = os.environ.get(native.ENV)
            os.environ[native.ENV] = value
            dropout.FAST = value == "1"  # the session-5 step: PyTorch kernels and torch's dropout
            try:
                fn(b, trim)
            finally:
                dropout.FAST = True
                if before is None:
                    os.environ.pop(native.ENV, None)
                else:
                    os.environ[native.ENV] = before
        return run

    models = [("gccad_pytorch", with_kernels("0", gccad_step)), ("sage", sage_step)]
    use_native = native.available()
    if use_native:
        models.insert(0, ("gccad_native", with_kernels("1", gccad_step)))
    else:
        log.warning("%s: GCCAD timed with the PyTorch kernels only", native.status())
    gccad.train()
    sage.train()
    # Paired by minibatch: the models run back to back on each minibatch (their order rotated from one minibatch to
    # the next), so that a slow spell of this machine hits all of them alike; a ratio is the median of the
    # minibatches' ratios, a step time the median step.
    steps = []
    for trim in (False, True):
        times = _paired_times({name: (lambda b, fn=fn: fn(b, trim)) for name, fn in models}, batches, repeats=2)
        ms = {name: 1000 * statistics.median(t) for name, t in times.items()}
        g_name = "gccad_native" if use_native else "gccad_pytorch"  # the GCCAD step as training runs it
        r = {"layers": "hop-trimmed" if trim else "untrimmed", "gccad_pytorch_step_ms": ms["gccad_pytorch"],
             "sage_step_ms": ms["sage"], "gccad_step_ms": ms[g_name],
             "gccad_over_sage": _median_ratio(times[g_name], times["sage"]),
             "gccad_pytorch_over_sage": _median_ratio(times["gccad_pytorch"], times["sage"])}
        if use_native:
            r["gccad_native_step_ms"] = ms["gccad_native"]
        steps.append(r)

    rowptr, col = loader.rowptr, loader.col
    samplers = []
    for backend in available_backends():
        r = measure_sampler(rowptr, col, backend, fanouts, cfg.batch_size, n_batches=cfg.step_batches)
        samplers.append({k: r[k] for k in ("backend", "seeds_per_s", "edges_per_s", "ms_per_batch",
                                           "cpu_ms_per_batch", "mean_edges")})
    return {"subgraph": sg, "subgraph_nodes": int(data.num_nodes), "steps": steps, "samplers": samplers,
            "mean_sampled_edges": sum(b.edge_index.size(1) for b in batches) / len(batches),
            "native_kernels": use_native}


def ray_runs(cfg: TrainBenchConfig) -> list[dict]:
    """One short pre-training epoch per worker count, through the real CLI code path."""
    from gcad_dist.pretrain import PretrainConfig, run

    rows = []
    for w in cfg.workers:
        with tempfile.TemporaryDirectory(prefix="bench-train-") as out:
            pc = PretrainConfig(
                store=cfg.store, out=out, workers=w, cpus_per_worker=cfg.cpus_per_worker, epochs=1,
                batch_size=cfg.batch_size, fanouts=cfg.fanouts, hidden=cfg.hidden, layers=cfg.layers,
                conv=cfg.conv, sample_threshold=cfg.sample_threshold, max_steps_per_epoch=cfg.steps,
                max_failures=0,
            )
            s = run(pc)
            hist = json.loads((Path(out) / "metrics.json").read_text())["history"][-1]
        rows.append({"workers": w, "steps": hist["steps"], "seeds_per_s": hist["seeds_per_s"],
                     "edges_per_s": hist["edges_per_s"], "wait_frac": hist["wait_frac"],
                     "epoch_s": hist["time_s"], "loss": s["final_loss"]})
    return rows


def main(argv: list[str] | None = None) -> int:
    p = ArgumentParser(prog="python -m bench.train", description=__doc__.split("\n\n")[0],
                       formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    d = TrainBenchConfig(store="")
    p.add_argument("--store", required=True, help="store built by python -m partitioning.build")
    p.add_argument("--workers", type=int, nargs="+", default=d.workers, help="worker counts to run")
    p.add_argument("--steps", type=int, default=d.steps, help="training steps per worker count")
    p.add_argument("--batch-size", type=int, default=d.batch_size, help="seed nodes per worker per step")
    p.add_argument("--fanouts", default=d.fanouts, help="neighbours per hop")
    p.add_argument("--hidden", type=int, default=d.hidden, help="hidden width (GCCAD and GraphSAGE)")
    p.add_argument("--layers", type=int, default=d.layers, help="layers (GCCAD and GraphSAGE)")
    p.add_argument("--conv", default=d.conv, help="GCCAD node-update convolution")
    p.add_argument("--sample-threshold", type=int, default=d.sample_threshold,
                   help="subgraphs above this many nodes are neighbour-sampled")
    p.add_argument("--step-batches", type=int, default=d.step_batches,
                   help="minibatches timed for the GCCAD/GraphSAGE and sampler comparisons")
    p.add_argument("--cpus-per-worker", type=int, default=d.cpus_per_worker, help="CPUs per Ray worker")
    p.add_argument("--json", default=None, help="also write the results here")
    p.add_argument("--skip-ray", action="store_true", help="only the single-process comparisons")
    cfg = TrainBenchConfig(**vars(p.parse_args(argv)))
    setup_logging()
    from partitioning.store.reader import StoreReader

    StoreReader(cfg.store)  # one-line error on a bad store
    if any(w < 1 for w in cfg.workers) or cfg.steps < 1:
        raise UsageError("--workers/--steps: must be >= 1")
    comp = step_comparison(cfg)
    rows = [] if cfg.skip_ray else ray_runs(cfg)

    print(f"\nstore {cfg.store}; batch {cfg.batch_size} seeds/worker, fanouts {cfg.fanouts}, "
          f"hidden {cfg.hidden}, {cfg.layers} layers, torch threads {torch.get_num_threads()}")
    if rows:
        print("\n| workers | steps | seed nodes/s | sampled edges/s | waiting for data | epoch s |")
        print("|---|---|---|---|---|---|")
        for r in rows:
            print(f"| {r['workers']} | {r['steps']} | {r['seeds_per_s']:,.0f} | {r['edges_per_s']:,.0f} | "
                  f"{100 * r['wait_frac']:.1f}% | {r['epoch_s']:.1f} |")
    print(f"\nTraining step on the same minibatches (mean {comp['mean_sampled_edges']:,.0f} sampled edges):")
    if comp["native_kernels"]:
        print("\n| layers | GCCAD native ms/step | GCCAD PyTorch kernels ms/step | GraphSAGE ms/step | "
              "GCCAD native / GraphSAGE | GCCAD PyTorch / GraphSAGE |\n|---|---|---|---|---|---|")
        for r in comp["steps"]:
            print(f"| {r['layers']} | {r['gccad_native_step_ms']:.1f} | {r['gccad_pytorch_step_ms']:.1f} | "
                  f"{r['sage_step_ms']:.1f} | {r['gccad_over_sage']:.2f}x | {r['gccad_pytorch_over_sage']:.2f}x |")
    else:
        print("\n| layers | GCCAD ms/step (PyTorch kernels) | GraphSAGE ms/step | GCCAD / GraphSAGE |\n|---|---|---|---|")
        for r in comp["steps"]:
            print(f"| {r['layers']} | {r['gccad_step_ms']:.1f} | {r['sage_step_ms']:.1f} | {r['gccad_over_sage']:.2f}x |")
    u, t = comp["steps"]
    print(f"hop trimming: GCCAD {u['gccad_step_ms'] / t['gccad_step_ms']:.2f}x, "
          f"GraphSAGE {u['sage_step_ms'] / t['sage_step_ms']:.2f}x faster")
    print("\n| sampler | seed nodes/s | sampled edges/s | ms/batch | CPU ms/batch |")
    print("|---|---|---|---|---|")
    for s in comp["samplers"]:
        print(f"| {s['backend']} | {s['seeds_per_s']:,.0f} | {s['edges_per_s']:,.0f} | {s['ms_per_batch']:.1f} | "
              f"{s['cpu_ms_per_batch']:.1f} |")
    if cfg.json:
        Path(cfg.json).write_text(json.dumps({"config": asdict(cfg), "runs": rows, "steps": comp}, indent=2))
    return 0


if __name__ == "__main__":
    run_cli(main)
