"""Full-batch GCCAD training step on a real graph: fused, blocked edge kernels against plain autograd.

Example (BENCHMARKS.md):
    python -m bench.model_step --graph ../shared/data/tolokers.npz --threads 1

Times forward + loss + backward + Adam of GCCAD on the whole graph (as ``gcad_dist.train`` does) with
the fused kernels (:mod:`gcad_dist.model.aggregate`, the link MLP of
:mod:`gcad_dist.model.edge_update`) and with the plain autograd versions they replace, alternately in
one run, plus an evaluation forward, and prints a table with the ratio. ``--precision fp32 bf16`` also
times the step under bf16 autocast (:mod:`gcad_dist.model.precision`; forward and loss under autocast,
the edge kernels in fp32), interleaved with fp32; ``--fused-only`` skips the plain autograd variant.

    python -m bench.model_step --graph ../shared/data/reddit.npz --threads 1 --precision fp32 bf16 --fused-only
"""

from __future__ import annotations

import argparse
import logging
import resource
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script or with -m from the repo

from gcad_dist.cli import run_cli, setup_logging  # noqa: E402

log = logging.getLogger("bench.model_step")


@dataclass
class ModelStepConfig:
    graph: str
    conv: str = "gin"
    hidden: int = 64
    layers: int = 2
    repeats: int = 3
    threads: int = 0
    precision: tuple[str, ...] = ("fp32",)
    fused_only: bool = False


def _set_fused(model: torch.nn.Module, fused: bool) -> None:
    import gcad_dist.model.aggregate as agg
    from gcad_dist.model.edge_update import LinkPredictor

    agg.FUSED = fused
    for m in model.modules():
        if isinstance(m, LinkPredictor):
            m.fused = fused


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.model_step", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    d = ModelStepConfig(graph="")
    p.add_argument("--graph", required=True, help="labelled graph (.npz), e.g. ../shared/data/tolokers.npz")
    p.add_argument("--conv", default=d.conv, help="GCCAD node-update convolution")
    p.add_argument("--hidden", type=int, default=d.hidden, help="hidden width")
    p.add_argument("--layers", type=int, default=d.layers, help="layers")
    p.add_argument("--repeats", type=int, default=d.repeats, help="timed steps per variant (after one warm-up)")
    p.add_argument("--threads", type=int, default=d.threads, help="torch threads (0 = torch default)")
    p.add_argument("--precision", nargs="+", choices=["fp32", "bf16"], default=list(d.precision),
                   help="precisions to time (bf16: autocast, see gcad_dist.model.precision)")
    p.add_argument("--fused-only", action="store_true", help="time the fused kernels only (no plain autograd)")
    cfg = ModelStepConfig(**vars(p.parse_args(argv)))
    setup_logging()
    if cfg.threads > 0:
        torch.set_num_threads(cfg.threads)
    from gcad_dist.model import GCCAD, GCCADConfig
    from gcad_dist.model.precision import autocast, bf16_supported
    from gcad_dist.train import load_labelled

    if "bf16" in cfg.precision and not bf16_supported("cpu"):
        log.warning("this CPU has no native bf16 (AVX512-BF16 / AMX): bf16 is emulated and will be slow")

    data = load_labelled(cfg.graph)
    torch.manual_seed(0)
    model = GCCAD(GCCADConfig(in_dim=data.num_features, hidden=cfg.hidden, num_layers=cfg.layers, conv=cfg.conv))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
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

    variants = [(f, pr) for f in ((True,) if cfg.fused_only else (True, False)) for pr in cfg.precision]
    times: dict[tuple[str, bool, str], list[float]] = {}
    for fused, prec in variants:  # warm-up all
        _set_fused(model, fused)
        step()
    for _ in range(cfg.repeats):  # alternate, so that machine load affects all alike
        for fused, prec in variants:
            _set_fused(model, fused)
            for kind, fn in (("train step", step), ("eval forward", evaluate)):
                t0 = time.perf_counter()
                fn()
                times.setdefault((kind, fused, prec), []).append(time.perf_counter() - t0)
    _set_fused(model, True)
    print(f"\n{cfg.graph}: {data.num_nodes:,} nodes, {data.edge_index.size(1):,} directed edges; GCCAD conv {cfg.conv}, "
          f"hidden {cfg.hidden}, {cfg.layers} layers, torch threads {torch.get_num_threads()}; "
          f"peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20:.2f} GiB; best of {cfg.repeats}")
    if not cfg.fused_only:
        print("\n| | precision | fused s | plain autograd s | plain / fused |\n|---|---|---|---|---|")
        for kind in ("train step", "eval forward"):
            for pr in cfg.precision:
                f, pl = min(times[(kind, True, pr)]), min(times[(kind, False, pr)])
                print(f"| {kind} | {pr} | {f:.3f} | {pl:.3f} | {pl / f:.2f}x |")
    if len(cfg.precision) > 1 or cfg.fused_only:
        print("\n| fused | " + " | ".join(f"{pr} s" for pr in cfg.precision)
              + (" | fp32 / bf16 |" if {"fp32", "bf16"} <= set(cfg.precision) else " |"))
        print("|---|" + "---|" * (len(cfg.precision) + ({"fp32", "bf16"} <= set(cfg.precision))))
        for kind in ("train step", "eval forward"):
            t = {pr: min(times[(kind, True, pr)]) for pr in cfg.precision}
            row = f"| {kind} | " + " | ".join(f"{t[pr]:.3f}" for pr in cfg.precision)
            if {"fp32", "bf16"} <= set(cfg.precision):
                row += f" | {t['fp32'] / t['bf16']:.2f}x"
            print(row + " |")
    return 0


if __name__ == "__main__":
    run_cli(main)
