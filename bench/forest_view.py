"""Cost of supervised GCCAD's forest view (:mod:`gcad_dist.forest_view`): fitting RF-Graph, and scoring every node
with the checkpoint's torch forest (:class:`gcad_dist.model.forest.ForestScorer`) against scikit-learn's own
``predict_proba`` on the same features, the baseline, in the same run.

Example (BENCHMARKS.md, session 61):
    python -m partitioning.synthetic --nodes 1000000 --avg-degree 20 --out big1m.npz
    python -m bench.forest_view --graph big1m.npz --repeats 2

The forest is fitted on a seeded 40% of the labelled nodes (``gcad_dist.train``'s training share). Each step runs
``--repeats`` times, alternately, on ``--threads`` threads; the table gives the median wall seconds and the ratio to
scikit-learn's scoring, then how far the two scorings differ (they should agree to float32 rounding) and the
process's peak memory.
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
from gcad_dist.cli import ArgumentParser, UsageError, run_cli, setup_logging  # noqa: E402

log = logging.getLogger("bench.forest_view")


@dataclass
class ForestViewBenchConfig:
    graph: str = ""
    repeats: int = 2
    train_share: float = 0.4
    threads: int = 1
    verbose: bool = False


def build_parser() -> argparse.ArgumentParser:
    d = ForestViewBenchConfig()
    p = ArgumentParser(prog="python -m bench.forest_view", description=__doc__,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    add_common_arguments(p, d)
    p.add_argument("--train-share", type=float, default=d.train_share,
                   help="share of the labelled nodes the forest is fitted on (default: %(default)s)")
    return p


def main(argv: list[str] | None = None) -> int:
    import torch

    from gcad_dist.model.forest import ForestScorer, fit_sklearn_forest, graph_features
    from gcad_dist.model.rank_blend import EmpiricalCDF

    cfg = ForestViewBenchConfig(**vars(build_parser().parse_args(argv)))
    setup_logging(cfg.verbose)
    if not 0 < cfg.train_share < 1:
        raise UsageError(f"--train-share: must be in (0, 1), got {cfg.train_share}")
    g, data = load_labelled_graph(cfg.graph, cfg.repeats, cfg.threads, "the forest is fitted on them")
    y = torch.as_tensor(np.asarray(g.y))
    labelled = np.flatnonzero(y.numpy() >= 0)
    train = torch.zeros(y.numel(), dtype=torch.bool)
    pick = np.random.default_rng(0).permutation(labelled)[: int(cfg.train_share * labelled.size)]
    train[torch.as_tensor(pick)] = True
    x = torch.as_tensor(data.x).float()
    t = time.perf_counter()
    sk = fit_sklearn_forest(x, data.edge_index, y, train, seed=0, threads=cfg.threads)
    fit_s = time.perf_counter() - t
    forest = ForestScorer.from_sklearn(sk, x.shape[1])
    times: dict[str, list[float]] = {"scikit-learn predict_proba (baseline)": [], "torch forest (checkpoint)": [],
                                     "rank of the forest's score": []}
    got = want = None
    for _ in range(cfg.repeats):
        t = time.perf_counter()
        want = sk.predict_proba(graph_features(x, data.edge_index).numpy())[:, 1]
        times["scikit-learn predict_proba (baseline)"].append(time.perf_counter() - t)
        t = time.perf_counter()
        got = forest.score(forest(x, data.edge_index))
        times["torch forest (checkpoint)"].append(time.perf_counter() - t)
        t = time.perf_counter()
        EmpiricalCDF.fit(got.numpy())(got)
        times["rank of the forest's score"].append(time.perf_counter() - t)
    base = statistics.median(times["scikit-learn predict_proba (baseline)"])
    print(f"{cfg.graph}: {x.shape[0]:,} nodes, {data.edge_index.shape[1]:,} links, {x.shape[1]} features, "
          f"{cfg.threads} thread(s), median of {cfg.repeats}; forest fitted on {int(train.sum()):,} nodes in "
          f"{fit_s:.2f} s ({forest.extra_repr()})")
    print("| step | wall s | vs scikit-learn |\n|---|---|---|")
    for name, ts in times.items():
        print(f"| {name} | {statistics.median(ts):.2f} | {statistics.median(ts) / base:.2f}x |")
    print(f"max |torch - scikit-learn| {np.abs(got.numpy() - want).max():.2e}; peak RSS "
          f"{resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6:.2f} GB")
    return 0


if __name__ == "__main__":
    run_cli(main)
