"""What the label-free feature view's two scores cost: the isolation forest against the kNN distance. ``python -m
bench.knn_view``.

Since session 88 the feature view adds each node's distance to its 5th nearest node in feature space
(:func:`gcad_dist.feature_view.knn_scores`) where the links say nothing about the features, and the isolation forest
(:func:`gcad_dist.feature_view.forest_scores`) where it corroborates the contrast. This bench times both on the same
features, one after the other in one process, with the forest as the baseline of the ratio: Gaussian features of
``--nodes`` rows (the generator's feature count by default), or the features of ``--graph``.

    python -m bench.knn_view --nodes 100000 1000000 --threads 1
    python -m bench.knn_view --graph g.npz --threads 4
"""

from __future__ import annotations

import logging
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script or with -m from the repo

from gcad_dist.cli import ArgumentParser, DefaultsHelpFormatter, run_cli, setup_logging  # noqa: E402

log = logging.getLogger("bench.knn_view")


@dataclass
class KnnViewConfig:
    """Settings of ``python -m bench.knn_view``."""

    nodes: list[int] = field(default_factory=lambda: [100_000])
    features: int = 64
    graph: str | None = None
    threads: int = 1
    seed: int = 0


def measure(x: np.ndarray, threads: int) -> dict[str, Any]:
    """Seconds of the forest's and the kNN distance's scores of every row of ``x``."""
    from gcad_dist.feature_view import KNN_REFERENCE, forest_scores, knn_scores

    t0 = time.perf_counter()
    forest_scores(x, threads=threads)
    t1 = time.perf_counter()
    knn_scores(x, threads=threads)
    t2 = time.perf_counter()
    return {"rows": x.shape[0], "columns": x.shape[1], "reference": min(x.shape[0], KNN_REFERENCE),
            "forest_s": t1 - t0, "knn_s": t2 - t1}


def table(records: list[dict[str, Any]]) -> str:
    """Markdown: per input, both scores' seconds and the kNN distance's time as a multiple of the forest's."""
    lines = ["| rows | columns | reference rows | isolation forest s (baseline) | kNN distance s | ratio |",
             "|---|---|---|---|---|---|"]
    for r in records:
        lines.append(f"| {r['rows']:,} | {r['columns']} | {r['reference']:,} | {r['forest_s']:.1f} | {r['knn_s']:.1f} | "
                     f"{r['knn_s'] / max(r['forest_s'], 1e-9):.1f}x |")
    return "\n".join(lines)


def run(cfg: KnnViewConfig) -> list[dict[str, Any]]:
    """One record per input (``--graph``, or each of ``--nodes``)."""
    import torch

    torch.set_num_threads(cfg.threads)
    if cfg.graph:
        from partitioning.io import load_graph

        inputs = [np.asarray(load_graph(cfg.graph).x, dtype=np.float32)]
    else:
        rng = np.random.default_rng(cfg.seed)
        inputs = [rng.normal(size=(n, cfg.features)).astype(np.float32) for n in cfg.nodes]
    records = []
    for x in inputs:
        records.append(measure(x, cfg.threads))
        log.info("%s rows: forest %.1f s, knn %.1f s", f"{x.shape[0]:,}", records[-1]["forest_s"], records[-1]["knn_s"])
    return records


def main(argv: list[str] | None = None) -> int:
    d = KnnViewConfig()
    p = ArgumentParser(prog="python -m bench.knn_view", description=__doc__.split("\n\n")[1],
                       formatter_class=DefaultsHelpFormatter)
    p.add_argument("--nodes", type=int, nargs="+", default=d.nodes, help="rows of Gaussian features, one run each")
    p.add_argument("--features", type=int, default=d.features, help="columns of the Gaussian features")
    p.add_argument("--graph", default=d.graph, help="time the features of this graph file instead (.npz)")
    p.add_argument("--threads", type=int, default=d.threads, help="threads of both scores")
    p.add_argument("--seed", type=int, default=d.seed, help="seed of the Gaussian features")
    p.add_argument("-v", "--verbose", action="store_true")
    a = p.parse_args(argv)
    setup_logging(a.verbose)
    if any(n < 10 for n in a.nodes) or a.features < 1 or a.threads < 1:
        p.error("--nodes needs at least 10 rows each, --features and --threads at least 1")
    cfg = KnnViewConfig(nodes=a.nodes, features=a.features, graph=a.graph, threads=a.threads, seed=a.seed)
    print(table(run(cfg)))
    return 0


if __name__ == "__main__":
    sys.exit(run_cli(main))
