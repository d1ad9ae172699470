"""Full-batch GCCAD training step on a real graph: native (C++) and fused edge kernels against plain autograd.

Example (BENCHMARKS.md):
    python -m bench.model_step --graph ../shared/data/tolokers.npz --threads 1

Times forward + loss + backward + Adam of GCCAD on the whole graph (as ``gcad_dist.train`` does) with
each variant of the per-edge kernels (the weighted sum of :mod:`gcad_dist.model.aggregate`, the link
MLP of :mod:`gcad_dist.model.edge_update`), alternately in one run, plus an evaluation forward, and
prints a table with the ratios to the first variant:

* ``native``: the C++ kernels of :mod:`gcad_dist.model.native` (forced on, ``GCAD_NATIVE=1``; skipped
  with a warning when they cannot be built);
* ``fused``: the blocked PyTorch kernels (``GCAD_NATIVE=0``);
* ``plain``: plain autograd (gather, multiply, scatter; the reference).

``--precision fp32 bf16`` also times the step under bf16 autocast (:mod:`gcad_dist.model.precision`;
forward and loss under autocast, the edge kernels in fp32), interleaved with fp32; ``--fused-only``
drops the ``plain`` variant.

    python -m bench.model_step --graph ../shared/data/reddit.npz --threads 1 --precision fp32 bf16 --fused-only

``--threads 1 2`` times every variant on 1 and on 2 torch threads, alternately, and adds a table of speed-ups.
"""

from __future__ import annotations

import argparse
import logging
import os
import resource
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script or with -m from the repo

from gcad_dist.allocator import retain_freed_memory  # noqa: E402
from gcad_dist.cli import ArgumentParser, UsageError, run_cli, setup_logging  # noqa: E402

log = logging.getLogger("bench.model_step")


@dataclass
class ModelStepConfig:
    graph: str
    conv: str = "gin"
    hidden: int = 64
    layers: int = 2
    repeats: int = 3
    threads: tuple[int, ...] = (0,)
    precision: tuple[str, ...] = ("fp32",)
    fused_only: bool = False
    variants: tuple[str, ...] = ("native", "fused", "plain")


VARIANTS = ("native", "fused", "plain")
LABELS = {"native": "native", "fused": "fused (PyTorch)", "plain": "plain autograd"}


def _set_variant(model: torch.nn.Module, variant: str) -> None:
    import os

    import gcad_dist.model.aggregate as agg
    from gcad_dist.model import native
    from gcad_dist.model.edge_update import LinkPredictor

    fused = variant != "plain"
    os.environ[native.ENV] = "1" if variant == "native" else "0"
    agg.FUSED = fused
    for m in model.modules():
        if isinstance(m, LinkPredictor):
            m.fused = fused


def main(argv: list[str] | None = None) -> int:
    p = ArgumentParser(prog="python -m bench.model_step", description=__doc__.split("\n\n")[0],
                       formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    d = ModelStepConfig(graph="")
    p.add_argument("--graph", required=True, help="labelled graph (.npz), e.g. ../shared/data/tolokers.npz")
    p.add_argument("--conv", default=d.conv, help="GCCAD node-update convolution")
    p.add_argument("--hidden", type=int, default=d.hidden, help="hidden width")
    p.add_argument("--layers", type=int, default=d.layers, help="layers")
    p.add_argument("--repeats", type=int, default=d.repeats, help="timed steps per variant (after one warm-up)")
    p.add_argument("--threads", type=int, nargs="+", default=list(d.threads),
                   help="torch threads (0 = torch default); several values are timed alternately in one run")
    p.add_argument("--precision", nargs="+", choices=["fp32", "bf16"], default=list(d.precision),
                   help="precisions to time (bf16: autocast, see gcad_dist.model.precision)")
    p.add_argument("--variants", nargs="+", choices=VARIANTS, default=list(d.variants),
                   help="edge-kernel variants to time (the first one is the reference of the ratios)")
    p.add_argument("--fused-only", action="store_true", help="drop the plain autograd variant")
    cfg = ModelStepConfig(**vars(p.parse_args(argv)))
    setup_logging()
    retain_freed_memory()  # as gcad_dist.train runs (GCAD_MALLOC=0: glibc's defaults)
    default_threads = torch.get_num_threads()
    thread_counts = [t if t > 0 else default_threads for t in dict.fromkeys(cfg.threads)]
    from gcad_dist.model import native

    names = [v for v in dict.fromkeys(cfg.variants) if not (cfg.fused_only and v == "plain")]
    if "native" in names and not native.available():
        log.warning("native kernels unavailable: %s", native.status())
        names.remove("native")
    if not names:
        raise UsageError("--variants: nothing to time")
    from gcad_dist.model import GCCAD, GCCADConfig
    from gcad_dist.model.precision import autocast, bf16_supported
    from gcad_dist.optim import adam
    from gcad_dist.train import load_labelled

    if "bf16" in cfg.precision and not bf16_supported("cpu"):
        log.warning("this CPU has no native bf16 (AVX512-BF16 / AMX): bf16 is emulated and will be slow")

    data = load_labelled(cfg.graph)
    torch.manual_seed(0)
    model = GCCAD(GCCADConfig(in_dim=data.num_features, hidden=cfg.hidden, num_layers=cfg.layers, conv=cfg.conv))
    opt = adam(model.parameters(), torch.device("cpu"), 1e-3)  # the optimiser training builds
    mask = torch.rand(data.num_nodes) < 0.4

    prec = "fp32"

    def step() -> None:
        model.train()
        with autocast(prec, "cpu"):
            out = model(data.x, data.edge_index)
            loss = model.loss(out, data.y, mask=mask)["total"]
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    @torch.no_grad()
    def evaluate() -> None:
        model.eval()
        with autocast(prec, "cpu"):
            model.score(model(data.x, data.edge_index))

    env_before = os.environ.get(native.ENV)
    settings = [(pr, th) for pr in cfg.precision for th in thread_counts]
    variants = [(v, pr, th) for v in names for pr, th in settings]
    times: dict[tuple[str, str, str, int], list[float]] = {}
    for v, prec, th in variants:  # warm-up all
        _set_variant(model, v)
        torch.set_num_threads(th)
        step()
    for _ in range(cfg.repeats):  # alternate, so that machine load affects all alike
        for v, prec, th in variants:
            _set_variant(model, v)
            torch.set_num_threads(th)
            for kind, fn in (("train step", step), ("eval forward", evaluate)):
                t0 = time.perf_counter()
                fn()
                times.setdefault((kind, v, prec, th), []).append(time.perf_counter() - t0)
    if env_before is None:
        os.environ.pop(native.ENV, None)
    else:
        os.environ[native.ENV] = env_before
    print(f"\n{cfg.graph}: {data.num_nodes:,} nodes, {data.edge_index.size(1):,} directed edges; GCCAD conv {cfg.conv}, "
          f"hidden {cfg.hidden}, {cfg.layers} layers, torch threads {', '.join(map(str, thread_counts))}; "
          f"peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20:.2f} GiB; best of {cfg.repeats}")
    ref = names[0]
    print("\n| | precision | threads | " + " | ".join(f"{LABELS[v]} s" for v in names)
          + "".join(f" | {LABELS[v]} / {LABELS[ref]}" for v in names[1:]) + " |")
    print("|---|---|---|" + "---|" * (2 * len(names) - 1))
    for kind in ("train step", "eval forward"):
        for pr, th in settings:
            t = {v: min(times[(kind, v, pr, th)]) for v in names}
            print(f"| {kind} | {pr} | {th} | " + " | ".join(f"{t[v]:.3f}" for v in names)
                  + "".join(f" | {t[v] / t[ref]:.2f}x" for v in names[1:]) + " |")
    if len(thread_counts) > 1:  # the speed-up of each variant from the first thread count to the others
        t1 = thread_counts[0]
        print(f"\n| speed-up over {t1} thread{'s' if t1 > 1 else ''} | precision | "
              + " | ".join(f"{LABELS[v]}, {th} threads" for th in thread_counts[1:] for v in names) + " |")
        print("|---|---|" + "---|" * (len(names) * (len(thread_counts) - 1)))
        for kind in ("train step", "eval forward"):
            for pr in cfg.precision:
                print(f"| {kind} | {pr} | " + " | ".join(
                    f"{min(times[(kind, v, pr, t1)]) / min(times[(kind, v, pr, th)]):.2f}x"
                    for th in thread_counts[1:] for v in names) + " |")
    if len(cfg.precision) > 1:
        print(f"\n| {LABELS[ref]} | " + " | ".join(f"{pr} s" for pr in cfg.precision)
              + (" | fp32 / bf16 |" if {"fp32", "bf16"} <= set(cfg.precision) else " |"))
        print("|---|" + "---|" * (len(cfg.precision) + ({"fp32", "bf16"} <= set(cfg.precision))))
        for kind in ("train step", "eval forward"):
            t = {pr: min(times[(kind, ref, pr, thread_counts[0])]) for pr in cfg.precision}
            row = f"| {kind} | " + " | ".join(f"{t[pr]:.3f}" for pr in cfg.precision)
            if {"fp32", "bf16"} <= set(cfg.precision):
                row += f" | {t['fp32'] / t['bf16']:.2f}x"
            print(row + " |")
    return 0


if __name__ == "__main__":
    run_cli(main)
