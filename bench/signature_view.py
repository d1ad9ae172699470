"""Cost of the label-free score's signature view (:mod:`gcad_dist.signature_view`) against its feature view's isolation
forest (:func:`gcad_dist.feature_view.forest_scores`), the scoring step it follows, on one graph in the same run.

Example (BENCHMARKS.md, session 60):
    python -m partitioning.synthetic --nodes 1000000 --avg-degree 20 --out big1m.npz
    python -m bench.signature_view --graph big1m.npz --repeats 2

The score given to the view is the graph's labels plus Gaussian noise (``--signal``), so that its top nodes are
partly the planted anomalies, as a contrast's are; what the view costs does not depend on the score much. Each step
runs ``--repeats`` times, alternately, on ``--threads`` threads; the table gives the median wall seconds, the ratio
to the forest, the view's fit and choice, and the process's peak memory.
"""

from __future__ import annotations

import argparse
import logging
import resource
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script or with -m from the repo

from bench.labelled_graph import add_common_arguments, load_labelled_graph  # noqa: E402
from gcad_dist.cli import ArgumentParser, run_cli, setup_logging  # noqa: E402

log = logging.getLogger("bench.signature_view")


@dataclass
class SignatureViewBenchConfig:
    graph: str = ""
    repeats: int = 2
    signal: float = 2.0
    threads: int = 1
    verbose: bool = False


def build_parser() -> argparse.ArgumentParser:
    d = SignatureViewBenchConfig()
    p = ArgumentParser(prog="python -m bench.signature_view", description=__doc__,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    add_common_arguments(p, d)
    p.add_argument("--signal", type=float, default=d.signal,
                   help="added to the planted anomalies' noise score (default: %(default)s)")
    return p


def main(argv: list[str] | None = None) -> int:
    from gcad_dist.feature_view import forest_scores
    from gcad_dist.signature_view import apply_signature_view

    cfg = SignatureViewBenchConfig(**vars(build_parser().parse_args(argv)))
    setup_logging(cfg.verbose)
    g, data = load_labelled_graph(cfg.graph, cfg.repeats, cfg.threads, "the score is made from them")
    x = g.x
    y = np.asarray(g.y)
    scores = np.random.default_rng(0).normal(size=x.shape[0]) + cfg.signal * (y == 1)
    times: dict[str, list[float]] = {"isolation forest (baseline)": [], "signature view": []}
    info: dict = {}
    for _ in range(cfg.repeats):
        t = time.perf_counter()
        forest_scores(x, threads=cfg.threads)
        times["isolation forest (baseline)"].append(time.perf_counter() - t)
        t = time.perf_counter()
        _, info = apply_signature_view(scores, x, data.edge_index)
        times["signature view"].append(time.perf_counter() - t)
    base = statistics.median(times["isolation forest (baseline)"])
    print(f"{cfg.graph}: {x.shape[0]:,} nodes, {data.edge_index.shape[1]:,} links, {x.shape[1]} features, "
          f"{cfg.threads} thread(s), median of {cfg.repeats}")
    print(f"| step | wall s | vs forest |\n|---|---|---|")
    for name, ts in times.items():
        print(f"| {name} | {statistics.median(ts):.2f} | {statistics.median(ts) / base:.2f}x |")
    print(f"signature view: fit {info.get('fit')}, used {info.get('used')}; peak RSS "
          f"{resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6:.2f} GB")
    return 0


if __name__ == "__main__":
    run_cli(main)
