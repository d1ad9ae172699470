"""Cost of supervised GCCAD's forest view (:mod:`gcad_dist.forest_view`): fitting its trees (RF-Graph and the boosted
trees), and scoring every node with the checkpoint's torch trees (:class:`gcad_dist.model.forest.ForestScorer`,
:class:`gcad_dist.model.boosted_trees.BoostedTreesScorer`, both blended: :class:`gcad_dist.model.tree_blend.TreeBlend`)
against scikit-learn's own ``predict_proba`` / ``decision_function`` on the same features, in the same run.

Example (BENCHMARKS.md, session 61):
    python -m partitioning.synthetic --nodes 1000000 --avg-degree 20 --out big1m.npz
    python -m bench.forest_view --graph big1m.npz --repeats 2

``--hops 1`` fits the random forest on one hop of neighbour means, as before session 85 (the default: the forest view's
own, two), for the cost of each on the same machine (BENCHMARKS.md, session 86). The forest is fitted on a seeded 40%
of the labelled nodes (``gcad_dist.train``'s training share). Each step runs
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
    hops: int = 0  # 0: the forest view's own (gcad_dist.model.forest.FOREST_HOPS)
    verbose: bool = False


def build_parser() -> argparse.ArgumentParser:
    d = ForestViewBenchConfig()
    p = ArgumentParser(prog="python -m bench.forest_view", description=__doc__,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    add_common_arguments(p, d)
    p.add_argument("--train-share", type=float, default=d.train_share,
                   help="share of the labelled nodes the forest is fitted on (default: %(default)s)")
    p.add_argument("--hops", type=int, default=d.hops,
                   help="hops of neighbour means the random forest reads (default: the forest view's own, "
                        "FOREST_HOPS; 1: the forest before session 85); the boosted trees read one")
    return p


def main(argv: list[str] | None = None) -> int:
    import torch

    from gcad_dist.model.boosted_trees import BoostedTreesScorer, fit_sklearn_boosted_trees
    from gcad_dist.model.forest import FOREST_HOPS, ForestScorer, feature_columns, fit_sklearn_forest, graph_features
    from gcad_dist.model.rank_blend import EmpiricalCDF
    from gcad_dist.model.tree_blend import TreeBlend

    cfg = ForestViewBenchConfig(**vars(build_parser().parse_args(argv)))
    setup_logging(cfg.verbose)
    if not 0 < cfg.train_share < 1:
        raise UsageError(f"--train-share: must be in (0, 1), got {cfg.train_share}")
    if cfg.hops < 0:
        raise UsageError(f"--hops: must be at least 1 (or 0: the forest view's own, {FOREST_HOPS}), got {cfg.hops}")
    hops = cfg.hops or FOREST_HOPS
    g, data = load_labelled_graph(cfg.graph, cfg.repeats, cfg.threads, "the forest is fitted on them")
    y = torch.as_tensor(np.asarray(g.y))
    labelled = np.flatnonzero(y.numpy() >= 0)
    train = torch.zeros(y.numel(), dtype=torch.bool)
    pick = np.random.default_rng(0).permutation(labelled)[: int(cfg.train_share * labelled.size)]
    train[torch.as_tensor(pick)] = True
    x = torch.as_tensor(data.x).float()
    feats = graph_features(x, data.edge_index, hops=hops)  # the boosted trees read its one-hop prefix
    one_hop = feats[:, :feature_columns(x.shape[1])]
    t = time.perf_counter()
    sk = fit_sklearn_forest(x, data.edge_index, y, train, seed=0, threads=cfg.threads, feats=feats.numpy(), hops=hops)
    fit_s = time.perf_counter() - t
    t = time.perf_counter()
    skb = fit_sklearn_boosted_trees(x, data.edge_index, y, train, seed=0, threads=cfg.threads, feats=one_hop.numpy())
    fit_b = time.perf_counter() - t
    forest = ForestScorer.from_sklearn(sk, x.shape[1], hops=hops)
    boosted = BoostedTreesScorer.from_sklearn(skb, x.shape[1])
    blend = TreeBlend(forest, boosted, [EmpiricalCDF.fit(forest(x, data.edge_index).numpy()),
                                        EmpiricalCDF.fit(boosted(x, data.edge_index).numpy())])
    base_rf, base_hgb = "forest: scikit-learn predict_proba (baseline)", "boosted: scikit-learn decision_function"
    times: dict[str, list[float]] = {base_rf: [], "forest: torch (checkpoint)": [], base_hgb: [],
                                     "boosted: torch (checkpoint)": [], "both, ranks averaged: torch (checkpoint)": [],
                                     "rank of the forest view's score": []}
    got = want = got_b = want_b = None
    for _ in range(cfg.repeats):
        t = time.perf_counter()
        want = sk.predict_proba(graph_features(x, data.edge_index, hops=hops).numpy())[:, 1]
        times[base_rf].append(time.perf_counter() - t)
        t = time.perf_counter()
        got = forest.score(forest(x, data.edge_index))
        times["forest: torch (checkpoint)"].append(time.perf_counter() - t)
        t = time.perf_counter()
        want_b = skb.decision_function(graph_features(x, data.edge_index).numpy().astype(np.float64))
        times[base_hgb].append(time.perf_counter() - t)
        t = time.perf_counter()
        got_b = boosted.score(boosted(x, data.edge_index))
        times["boosted: torch (checkpoint)"].append(time.perf_counter() - t)
        t = time.perf_counter()
        both = blend(x, data.edge_index)
        times["both, ranks averaged: torch (checkpoint)"].append(time.perf_counter() - t)
        t = time.perf_counter()
        EmpiricalCDF.fit(both.numpy())(both)
        times["rank of the forest view's score"].append(time.perf_counter() - t)
    base = statistics.median(times[base_rf])
    print(f"{cfg.graph}: {x.shape[0]:,} nodes, {data.edge_index.shape[1]:,} links, {x.shape[1]} features, "
          f"{cfg.threads} thread(s), median of {cfg.repeats}; fitted on {int(train.sum()):,} nodes: the forest in "
          f"{fit_s:.2f} s ({forest.extra_repr()}), the boosted trees in {fit_b:.2f} s ({boosted.extra_repr()})")
    print("| step | wall s | vs the forest's scikit-learn scoring |\n|---|---|---|")
    for name, ts in times.items():
        print(f"| {name} | {statistics.median(ts):.2f} | {statistics.median(ts) / base:.2f}x |")
    print(f"max |torch - scikit-learn|: forest {np.abs(got.numpy() - want).max():.2e}, boosted "
          f"{np.abs(got_b.numpy() - want_b).max():.2e}; peak RSS "
          f"{resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6:.2f} GB")
    return 0


if __name__ == "__main__":
    run_cli(main)
