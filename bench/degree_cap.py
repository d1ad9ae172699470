"""Full-batch supervised GCCAD epoch with and without the in-degree cap (``gcad_dist.train --max-degree``).

Example (BENCHMARKS.md):
    python -m bench.degree_cap --graph ../shared/data/tolokers.npz --caps 0 64 32 --threads 1
    python -m partitioning.synthetic --out /tmp/dense.npz --nodes 12000 --avg-degree 360 --features 32 --seed 5
    python -m bench.degree_cap --graph /tmp/dense.npz --caps 0 64 32 --threads 1

Times what one epoch of :func:`gcad_dist.supervised.fit_supervised` does for GCCAD (default model settings, the
graph contrast): the cap's edge sample (when the cap is on), forward, loss, backward and Adam; and the
evaluation forward on every edge, which the cap leaves as it is. The caps run alternately in one process, every
one on its own model from the same start, so machine load affects them alike; the table gives the median epoch,
the edges an epoch used, and the ratio to the first cap listed (the baseline, ``0`` = every edge).
"""

from __future__ import annotations

import argparse
import logging
import resource
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script or with -m from the repo

from gcad_dist.allocator import retain_freed_memory  # noqa: E402
from gcad_dist.cli import ArgumentParser, UsageError, run_cli, setup_logging  # noqa: E402

log = logging.getLogger("bench.degree_cap")


@dataclass
class DegreeCapBenchConfig:
    """Settings of ``python -m bench.degree_cap``."""

    graph: str
    caps: list[int] = field(default_factory=lambda: [0, 64, 32])
    repeats: int = 5
    threads: int = 1


def main(argv: list[str] | None = None) -> int:
    p = ArgumentParser(prog="python -m bench.degree_cap", description=__doc__.split("\n\n")[0],
                       formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    d = DegreeCapBenchConfig(graph="")
    p.add_argument("--graph", required=True, help="labelled graph (.npz, .pt or folder)")
    p.add_argument("--caps", type=int, nargs="+", default=d.caps,
                   help="in-degree caps to time (0 = every edge); the first is the reference of the ratios")
    p.add_argument("--repeats", type=int, default=d.repeats, help="timed epochs per cap (after one warm-up)")
    p.add_argument("--threads", type=int, default=d.threads, help="torch threads")
    cfg = DegreeCapBenchConfig(**vars(p.parse_args(argv)))
    if any(c < 0 for c in cfg.caps):
        raise UsageError(f"--caps: must be >= 0, got {cfg.caps}")
    if cfg.repeats < 1:
        raise UsageError(f"--repeats: must be >= 1, got {cfg.repeats}")
    setup_logging()
    retain_freed_memory()
    torch.set_num_threads(cfg.threads)
    from gcad_dist.data.degree_cap import DegreeCap
    from gcad_dist.model import GCCAD, GCCADConfig, native
    from gcad_dist.optim import adam
    from gcad_dist.supervised import _forward
    from gcad_dist.train import load_labelled

    native.available()
    data = load_labelled(cfg.graph)
    mask = torch.rand(data.num_nodes, generator=torch.Generator().manual_seed(0)) < 0.4
    y = data.y.long().clamp_min(0)
    runs = []
    for c in dict.fromkeys(cfg.caps):
        torch.manual_seed(0)
        model = GCCAD(GCCADConfig(in_dim=data.num_features, contrast="graph", jump="cat"))
        cap = DegreeCap(data.edge_index, data.num_nodes, c) if c else None
        runs.append((c, model, adam(model.parameters(), torch.device("cpu"), 1e-3),
                     cap if cap is not None and cap.active else None, torch.Generator().manual_seed(1)))

    times: dict[tuple[int, str], list[float]] = {}
    edges: dict[int, list[int]] = {}
    for rep in range(cfg.repeats + 1):  # the first round warms up
        for c, model, opt, cap, gen in runs:
            t0 = time.perf_counter()
            model.train()
            batch = data if cap is None else cap.sample(data, gen)
            out = model.loss(_forward(model, batch, None, None), y, mask=mask)["total"]
            opt.zero_grad(set_to_none=True)
            out.backward()
            opt.step()
            t1 = time.perf_counter()
            model.eval()
            with torch.no_grad():
                model.score(_forward(model, data, None, None))
            t2 = time.perf_counter()
            if rep:
                times.setdefault((c, "train"), []).append(t1 - t0)
                times.setdefault((c, "eval"), []).append(t2 - t1)
                edges.setdefault(c, []).append(batch.edge_index.size(1))

    ref = runs[0][0]
    print(f"\n{cfg.graph}: {data.num_nodes:,} nodes, {data.edge_index.size(1):,} directed edges, "
          f"{data.num_features} features; GCCAD (gin, hidden 64, 2 layers, graph contrast), {cfg.threads} torch "
          f"thread(s); median of {cfg.repeats} epochs; peak RSS "
          f"{resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20:.2f} GiB")
    print(f"\n| in-degree cap | edges an epoch | training epoch s | / cap {ref or 'none'} | evaluation s |")
    print("|---|---|---|---|---|")
    t_ref = statistics.median(times[(ref, "train")])
    for c, *_ in runs:
        t = statistics.median(times[(c, "train")])
        e = statistics.median(edges[c])
        print(f"| {c or 'none'} | {e:,.0f} ({e / data.edge_index.size(1):.0%}) | {t:.3f} | {t / t_ref:.2f}x | "
              f"{statistics.median(times[(c, 'eval')]):.3f} |")
    return 0


if __name__ == "__main__":
    run_cli(main)
