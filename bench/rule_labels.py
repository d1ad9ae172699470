"""A generated graph whose labels come from a business rule: the case where tree ensembles lead (GADBench's
Amazon, YelpChi, T-Finance), built to measure supervised GCCAD's forest view (:mod:`gcad_dist.forest_view`) there.

The graph is :mod:`partitioning.synthetic`'s (communities, power-law degrees, Gaussian features) without planted
anomalies. ``--count-columns`` of its columns are replaced by heavy-tailed counts (log-normal, partly shared within
a community so that the links follow them a little), and a node is an anomaly iff an axis-aligned rule holds:

    (count0 above its q0 quantile AND count1 above its q1 quantile) OR count2 above its q2 quantile

with the quantiles set so that about ``--anomaly-fraction`` of the nodes are anomalies; ``--label-noise`` of the
labels are then flipped among the anomalies and as many normal nodes. The anomalies keep their links and every other
column: nothing in them is unusual except the rule, which a tree learns from a few splits and a smooth model only
approximates.

Example (BENCHMARKS.md, session 62): the graph, then the quality harness with the forest view and without it:
    python -m bench.rule_labels --out rule1.npz --seed 1
    python -m gcad_dist.quality --datasets rule1.npz --seeds 3 --models gccad trees sage --out runs/rule
    python -m gcad_dist.quality --datasets rule1.npz --seeds 3 --models gccad --forest off --out runs/rule_off
"""

from __future__ import annotations

import argparse
import logging
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script or with -m from the repo

from gcad_dist.cli import ArgumentParser, UsageError, run_cli, setup_logging  # noqa: E402

log = logging.getLogger("bench.rule_labels")


@dataclass
class RuleLabelsConfig:
    out: str = ""
    nodes: int = 10_000
    features: int = 32
    count_columns: int = 6
    anomaly_fraction: float = 0.04
    label_noise: float = 0.05
    community_share: float = 0.3
    seed: int = 0
    verbose: bool = False


def rule_labels(counts: np.ndarray, anomaly_fraction: float) -> np.ndarray:
    """bool [N]: the rule over the first three columns of ``counts`` [N, >= 3]; the conjunction and the single
    threshold each take about half of ``anomaly_fraction``."""
    half = anomaly_fraction / 2.0
    q1 = 0.6  # count1 above its 60th percentile: 40% of the nodes
    q0 = 1.0 - half / (1.0 - q1)
    q2 = 1.0 - half
    t0, t1, t2 = (np.quantile(counts[:, j], q) for j, q in enumerate((q0, q1, q2)))
    return ((counts[:, 0] > t0) & (counts[:, 1] > t1)) | (counts[:, 2] > t2)


def make_rule_graph(cfg: RuleLabelsConfig):
    """(graph, anomaly_type) where graph is a :class:`partitioning.graph.Graph` with y from the rule."""
    from partitioning.synthetic import SyntheticConfig, synthesize

    s = synthesize(SyntheticConfig(nodes=cfg.nodes, features=cfg.features, anomaly_fraction=0.0, seed=cfg.seed))
    g, community = s.graph, s.community
    rng = np.random.default_rng([cfg.seed, 62])
    k = cfg.count_columns
    shared = rng.normal(size=(int(community.max()) + 1, k))[community]
    z = np.sqrt(cfg.community_share) * shared + np.sqrt(1.0 - cfg.community_share) * rng.normal(size=(cfg.nodes, k))
    counts = np.floor(np.exp(1.2 * z + 1.0)).astype(np.float32)  # heavy-tailed, integer-valued
    x = g.x.copy()
    x[:, :k] = counts
    y = rule_labels(counts, cfg.anomaly_fraction)
    flips = int(round(cfg.label_noise * y.sum()))
    if flips:
        y[rng.choice(np.flatnonzero(y), flips, replace=False)] = False
        y[rng.choice(np.flatnonzero(~y), flips, replace=False)] = True
    g.x = x
    g.y = y.astype(np.int8)
    return g


def build_parser() -> argparse.ArgumentParser:
    d = RuleLabelsConfig()
    p = ArgumentParser(prog="python -m bench.rule_labels", description=__doc__,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True, help="output .npz graph file")
    p.add_argument("--nodes", type=int, default=d.nodes, help="nodes (default: %(default)s)")
    p.add_argument("--features", type=int, default=d.features, help="feature columns (default: %(default)s)")
    p.add_argument("--count-columns", type=int, default=d.count_columns,
                   help="columns replaced by heavy-tailed counts; the rule reads the first three (default: %(default)s)")
    p.add_argument("--anomaly-fraction", type=float, default=d.anomaly_fraction,
                   help="share of the nodes the rule marks (default: %(default)s)")
    p.add_argument("--label-noise", type=float, default=d.label_noise,
                   help="share of the anomalies' labels swapped with normal nodes' (default: %(default)s)")
    p.add_argument("--community-share", type=float, default=d.community_share,
                   help="variance share of the counts shared within a community (default: %(default)s)")
    p.add_argument("--seed", type=int, default=d.seed, help="random seed (default: %(default)s)")
    p.add_argument("-v", "--verbose", action="store_true")
    return p


def main(argv: list[str] | None = None) -> int:
    from partitioning.io import save_npz

    args = build_parser().parse_args(argv)
    cfg = RuleLabelsConfig(**vars(args))
    setup_logging(cfg.verbose)
    if not 3 <= cfg.count_columns <= cfg.features:
        raise UsageError(f"--count-columns: must be between 3 and --features ({cfg.features}), got {cfg.count_columns}")
    if not 0.0 < cfg.anomaly_fraction <= 0.2:
        raise UsageError(f"--anomaly-fraction: must be in (0, 0.2], got {cfg.anomaly_fraction}")
    if not 0.0 <= cfg.label_noise < 0.5:
        raise UsageError(f"--label-noise: must be in [0, 0.5), got {cfg.label_noise}")
    if not 0.0 <= cfg.community_share <= 1.0:
        raise UsageError(f"--community-share: must be in [0, 1], got {cfg.community_share}")
    g = make_rule_graph(cfg)
    save_npz(g, cfg.out)
    log.info("wrote %s: %d nodes, %d anomalies (%.1f%%)", cfg.out, g.num_nodes, int(g.y.sum()), 100 * g.y.mean())
    return 0


if __name__ == "__main__":
    run_cli(main)
