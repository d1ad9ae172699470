"""GCCAD and GraphSAGE training steps on a GPU against the minibatch size, with a kernel profile.

    python -m bench.gpu_step                          # 1M-node generated store, batches of 1024, 4096, 16384
    python -m bench.gpu_step --batch-sizes 4096 --profile 4096 --store-nodes 200000

Why: on a GPU the hop-trimmed GCCAD step is bound by kernel launches and Python, not by the device (an
H100 ran about 800 kernels a step, busy 5 ms of 25-30 ms; BENCHMARKS.md, session 12). This prints, for each
batch size, the step time and the sampled edges per second of both models on the same minibatches (the
ratio is the issue's figure), then for ``--profile`` one batch size: kernel launches per step, the number
of host-device synchronisations in a step (``torch.cuda.set_sync_debug_mode``), and torch's profiler
table by device time. Both optimisers are Adam as the trainer builds it (``fused`` on a GPU). Step
times are medians over ``--repeats`` passes of ``--step-batches`` minibatches, after two warm-up steps.
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script or with -m from the repo

from gcad_dist.cli import ArgumentParser, UsageError, run_cli, setup_logging  # noqa: E402

log = logging.getLogger("bench.gpu_step")


@dataclass
class GpuStepConfig:
    batch_sizes: list[int] = field(default_factory=lambda: [1024, 4096, 16384])
    profile: int = 4096  # batch size to profile (0 = none)
    store: str | None = None
    store_nodes: int = 1_000_000
    step_batches: int = 6
    repeats: int = 3
    hidden: int = 64
    layers: int = 2
    conv: str = "gin"
    fanouts: str = "10,5"
    device: str = "cuda"
    threads: int = 0


def _median_ms(step, batches, repeats: int) -> float:
    for x in batches[:2]:
        step(x)
    torch.cuda.synchronize()
    ts = []
    for _ in range(repeats):
        for x in batches:
            t0 = time.perf_counter()
            step(x)
            torch.cuda.synchronize()
            ts.append(time.perf_counter() - t0)
    ts.sort()
    return 1000 * ts[len(ts) // 2]


def _profile(step, batches) -> None:
    from torch.profiler import ProfilerActivity, profile

    step(batches[0])
    torch.cuda.synchronize()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            step(batches[1 % len(batches)])
        finally:
            torch.cuda.set_sync_debug_mode("default")
    syncs = [str(w.message).splitlines()[0] for w in caught if "synchroniz" in str(w.message)]
    n = min(3, len(batches))
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for x in batches[:n]:
            step(x)
        torch.cuda.synchronize()
    ka = prof.key_averages()
    kernels = sum(e.count for e in ka if getattr(e.device_type, "name", "") == "CUDA")
    print(f"GCCAD step, profiled: {kernels / n:.0f} kernel launches and {len(syncs)} host-device "
          f"synchronisations per step")
    for s in sorted(set(syncs)):
        print(f"  sync: {s}")
    print(ka.table(sort_by="cuda_time_total", row_limit=20, max_name_column_width=60))


def run(cfg: GpuStepConfig) -> list[dict]:
    from bench.gpu import Bench, GpuBenchConfig, _minibatches, training_steps

    if not (cfg.device.startswith("cuda") and torch.cuda.is_available()):
        raise UsageError(f"--device {cfg.device}: torch sees no CUDA GPU here (this benchmark is GPU-only)")
    dev = torch.device(cfg.device)
    b = Bench(GpuBenchConfig(store=cfg.store, store_nodes=cfg.store_nodes, threads=cfg.threads,
                             step_batches=cfg.step_batches, fanouts=cfg.fanouts))
    rows = []
    for bs in cfg.batch_sizes:
        b.cfg.batch_size = bs
        reader, sg, batches = _minibatches(b)
        batches = [x.to(dev) for x in batches]
        edges = sum(x.edge_index.size(1) for x in batches) / len(batches)
        gccad_step, sage_step = training_steps(reader, sg, dev, hidden=cfg.hidden, layers=cfg.layers, conv=cfg.conv)
        for name, step in (("GCCAD", gccad_step), ("GraphSAGE", sage_step)):
            ms = _median_ms(step, batches, cfg.repeats)
            rows.append({"batch": bs, "model": name, "edges": edges, "ms": ms, "medges_s": edges / ms / 1e3})
            log.info("batch %d %s: %.2f ms, %.2f M edges/s", bs, name, ms, edges / ms / 1e3)
        if bs == cfg.profile:
            _profile(gccad_step, batches)
    print(f"\n{torch.cuda.get_device_name(dev)}; torch {torch.__version__}\n")
    print("| seeds / batch | model | sampled edges / batch | ms / step | M sampled edges / s | GCCAD / GraphSAGE |")
    print("|---|---|---|---|---|---|")
    for i, r in enumerate(rows):
        ratio = f"{r['ms'] / rows[i + 1]['ms']:.2f}x" if r["model"] == "GCCAD" else ""
        print(f"| {r['batch']} | {r['model']} | {r['edges']:,.0f} | {r['ms']:.2f} | {r['medges_s']:.2f} | {ratio} |")
    b._tmp.cleanup()
    return rows


def parse_args(argv: list[str] | None) -> GpuStepConfig:
    d = GpuStepConfig()
    p = ArgumentParser(prog="python -m bench.gpu_step", description=__doc__.split("\n\n")[0],
                       formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--batch-sizes", type=int, nargs="+", default=d.batch_sizes, help="seed nodes per minibatch")
    p.add_argument("--profile", type=int, default=d.profile, help="batch size to profile (0 = none)")
    p.add_argument("--store", default=None, help="store (default: generate one of --store-nodes)")
    for name in ("store_nodes", "step_batches", "repeats", "hidden", "layers", "threads"):
        p.add_argument("--" + name.replace("_", "-"), type=int, default=getattr(d, name))
    p.add_argument("--conv", default=d.conv, help="GCCAD node-update convolution")
    p.add_argument("--fanouts", default=d.fanouts, help="neighbours per hop")
    p.add_argument("--device", default=d.device, help="CUDA device")
    cfg = GpuStepConfig(**vars(p.parse_args(argv)))
    if min(cfg.batch_sizes + [cfg.step_batches, cfg.repeats]) < 1:
        raise UsageError("--batch-sizes, --step-batches and --repeats must be >= 1")
    return cfg


def main(argv: list[str] | None = None) -> int:
    cfg = parse_args(argv)
    setup_logging()
    run(cfg)
    return 0


if __name__ == "__main__":
    run_cli(main)
