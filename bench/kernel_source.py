"""Full-batch GCCAD training step with two (or more) versions of the native kernels' source, alternated.

Example (BENCHMARKS.md, session 25):
    git show 4b1faef:gcad_dist/model/csrc/edge_kernels.cpp > /tmp/edge_kernels_old.cpp
    python -m bench.kernel_source --graph ../shared/data/tolokers.npz \\
        --sources /tmp/edge_kernels_old.cpp gcad_dist/model/csrc/edge_kernels.cpp --rounds 3

The extension registers one op namespace per process, so each source runs in a process of its own (built into
torch's extension cache under a name that hashes the source), one after the other in every round, so that drifts of
the machine's speed affect the versions alike. Each process times what ``gcad_dist.train`` does in an epoch, at the
in-degree caps given (0 = every edge; the default cap 64): the cap's edge sample, forward, loss, backward and Adam
(median of ``--steps`` after one warm-up step), and an evaluation forward on every edge. The table gives the median
over rounds and the ratio to the first source (the baseline).
"""

from __future__ import annotations

import argparse
import json
import logging
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script or with -m from the repo

from gcad_dist.cli import ArgumentParser, UsageError, run_cli, setup_logging  # noqa: E402

log = logging.getLogger("bench.kernel_source")


@dataclass
class KernelSourceBenchConfig:
    """Settings of ``python -m bench.kernel_source``."""

    graph: str
    sources: list[str] = field(default_factory=list)
    caps: list[int] = field(default_factory=lambda: [0, 64])
    rounds: int = 3
    steps: int = 4
    threads: int = 1


def _measure(source: str, graph: str, caps: list[int], steps: int, threads: int) -> dict[str, list[float]]:
    """In this process: the kernels built from ``source``, then {cap: [training step s, evaluation s]}."""
    import torch

    from gcad_dist.allocator import retain_freed_memory
    from gcad_dist.model import native

    retain_freed_memory()
    torch.set_num_threads(threads)
    native.SOURCE = Path(source).resolve()
    if not native.available():
        raise UsageError(f"--sources: {source} did not build ({native.status()})")
    from gcad_dist.data.degree_cap import DegreeCap
    from gcad_dist.model import GCCAD, GCCADConfig
    from gcad_dist.optim import adam
    from gcad_dist.supervised import _forward
    from gcad_dist.train import load_labelled

    data = load_labelled(graph)
    mask = torch.rand(data.num_nodes, generator=torch.Generator().manual_seed(0)) < 0.4
    y = data.y.long().clamp_min(0)
    out = {}
    for c in caps:
        torch.manual_seed(0)
        model = GCCAD(GCCADConfig(in_dim=data.num_features, contrast="graph", jump="cat"))
        cap = DegreeCap(data.edge_index, data.num_nodes, c) if c else None
        opt = adam(model.parameters(), torch.device("cpu"), 1e-3)
        gen = torch.Generator().manual_seed(1)
        train_s, eval_s = [], []
        for i in range(steps + 1):  # the first step warms up
            t0 = time.perf_counter()
            model.train()
            batch = data if cap is None else cap.sample(data, gen)
            loss = model.loss(_forward(model, batch, None, None), y, mask=mask)["total"]
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            t1 = time.perf_counter()
            model.eval()
            with torch.no_grad():
                model.score(_forward(model, data, None, None))
            if i:
                train_s.append(t1 - t0)
                eval_s.append(time.perf_counter() - t1)
        out[str(c)] = [statistics.median(train_s), statistics.median(eval_s)]
    return out


def main(argv: list[str] | None = None) -> int:
    p = ArgumentParser(prog="python -m bench.kernel_source", description=__doc__.split("\n\n")[0],
                       formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    d = KernelSourceBenchConfig(graph="")
    p.add_argument("--graph", required=True, help="labelled graph (.npz, .pt or folder)")
    p.add_argument("--sources", nargs="+", required=True,
                   help="edge_kernels.cpp versions to compare; the first is the reference of the ratios")
    p.add_argument("--caps", type=int, nargs="+", default=d.caps, help="in-degree caps to time (0 = every edge)")
    p.add_argument("--rounds", type=int, default=d.rounds, help="rounds, each running every source once")
    p.add_argument("--steps", type=int, default=d.steps, help="timed steps per cap in a process (after a warm-up)")
    p.add_argument("--threads", type=int, default=d.threads, help="torch threads")
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)  # one source's measurement, as JSON
    args = vars(p.parse_args(argv))
    child = args.pop("child")
    cfg = KernelSourceBenchConfig(**args)
    for s in cfg.sources:
        if not Path(s).is_file():
            raise UsageError(f"--sources: no such file: {s}")
    if min(cfg.rounds, cfg.steps, cfg.threads) < 1 or any(c < 0 for c in cfg.caps):
        raise UsageError("--rounds, --steps and --threads must be >= 1, --caps >= 0")
    if child:
        print(json.dumps(_measure(cfg.sources[0], cfg.graph, cfg.caps, cfg.steps, cfg.threads)))
        return 0
    setup_logging()
    runs: dict[str, list[dict[str, list[float]]]] = {s: [] for s in cfg.sources}
    for r in range(cfg.rounds):
        for s in cfg.sources:
            cmd = [sys.executable, "-m", "bench.kernel_source", "--child", "--graph", cfg.graph, "--sources", s,
                   "--caps", *map(str, cfg.caps), "--steps", str(cfg.steps), "--threads", str(cfg.threads)]
            res = subprocess.run(cmd, capture_output=True, text=True, cwd=Path(__file__).resolve().parents[1])
            if res.returncode != 0:
                raise UsageError(f"{s}: measurement failed: {(res.stderr.strip().splitlines() or ['?'])[-1]}")
            runs[s].append(json.loads(res.stdout.strip().splitlines()[-1]))
            log.info("round %d/%d: %s done", r + 1, cfg.rounds, s)
    ref = cfg.sources[0]
    print(f"\n{cfg.graph}: GCCAD (gin, hidden 64, 2 layers, graph contrast), {cfg.threads} torch thread(s); "
          f"median over {cfg.rounds} rounds of the median of {cfg.steps} steps")
    print("\n| source | cap | training step s | / first source | evaluation s | / first source |")
    print("|---|---|---|---|---|---|")
    med = {(s, c, k): statistics.median(run[str(c)][k] for run in runs[s])
           for s in cfg.sources for c in cfg.caps for k in (0, 1)}
    for c in cfg.caps:
        for s in cfg.sources:
            print(f"| {s} | {c or 'none'} | {med[(s, c, 0)]:.3f} | {med[(s, c, 0)] / med[(ref, c, 0)]:.2f}x | "
                  f"{med[(s, c, 1)]:.3f} | {med[(s, c, 1)] / med[(ref, c, 1)]:.2f}x |")
    return 0


if __name__ == "__main__":
    run_cli(main)
