"""The forest view's trees with the random forest at one hop of neighbour means (before session 85) and at two
(:data:`gcad_dist.model.forest.FOREST_HOPS`, since), the boosted trees at one hop in both, fitted on the same training
nodes of the same split, in the same run; validation nodes only.

Example (BENCHMARKS.md, session 85; rule 2's table):
    python -m bench.forest_hops --data-dir DATA --datasets tolokers reddit inj_cora books --seeds 5 6 7 8 9
    python -m bench.fresh_graphs make --out G --prefix o --seed 8701 --nodes 4000 --anomaly-fraction 0.04
    python -m bench.forest_hops --data-dir G --datasets o1 o2 o3 o4 o5 o6 o7 o8 --seeds 0 1 2

For each graph and seed: ``make_split(seed)`` of the z-scored graph (``gcad_dist.train``'s input and split); both
blends (:func:`gcad_dist.model.tree_blend.fit_tree_blend` with ``forest_hops`` 1 and 2) fitted on the training nodes
and measured on the validation nodes (no test label is read). The table gives each graph's training and validation
anomalies, both blends' mean validation AUROC / AUPRC over the seeds, the change and on how many seeds the new blend
is ahead in each.
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script or with -m from the repo

from bench.tree_blend import _span  # noqa: E402
from gcad_dist.cli import ArgumentParser, UsageError, run_cli, setup_logging  # noqa: E402

log = logging.getLogger("bench.forest_hops")

ARMS = ("forest at 1 hop (before)", "forest at 2 hops (now)")


@dataclass
class ForestHopsBenchConfig:
    data_dir: str = "../shared/data"
    datasets: list[str] = field(default_factory=lambda: ["tolokers", "reddit", "inj_cora", "books"])
    seeds: list[int] = field(default_factory=lambda: [0, 1, 2])
    threads: int = 1
    verbose: bool = False


def build_parser() -> argparse.ArgumentParser:
    return tree_bench_parser("python -m bench.forest_hops", __doc__, ForestHopsBenchConfig())


def tree_bench_parser(prog: str, doc: str | None, d: ForestHopsBenchConfig) -> argparse.ArgumentParser:
    """The options of a bench that compares the forest view's trees on validation (this one's and
    ``bench.tree_columns``'), with ``d``'s defaults."""
    p = ArgumentParser(prog=prog, description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data-dir", default=d.data_dir, help="folder of the <name>.npz graphs (default: %(default)s)")
    p.add_argument("--datasets", nargs="+", default=d.datasets, help="graph names or paths (default: %(default)s)")
    p.add_argument("--seeds", nargs="+", type=int, default=d.seeds, help="split seeds (default: %(default)s)")
    p.add_argument("--threads", type=int, default=d.threads, help="threads of each fit (default: %(default)s)")
    p.add_argument("-v", "--verbose", action="store_true")
    return p


def validation_nodes(data: object, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, tuple[int, int]]:
    """(labels, training nodes, validation nodes, (training anomalies, validation anomalies)) of
    ``make_split(data, seed)``, the labelled nodes only: the split both tree benches fit and measure on."""
    import torch

    from gcad_dist.data.splits import make_split

    split = make_split(data, seed=seed)
    y = torch.as_tensor(data.y).numpy()
    train = split.train.numpy() & (y >= 0)
    val = split.val.numpy() & (y >= 0)
    return y, train, val, (int((y[train] == 1).sum()), int((y[val] == 1).sum()))


def labelled_graph(data_dir: str, name: str) -> object:
    """The z-scored graph ``name`` (a name in ``data_dir`` or a path; ``gcad_dist.quality``'s loader), refused
    without labels."""
    from gcad_dist.quality import _load, _resolve_dataset

    _, data = _load(_resolve_dataset(Path(data_dir), name))
    if getattr(data, "y", None) is None:
        raise UsageError(f"--datasets: {name} has no labels")
    return data


def measure(data: object, seed: int, threads: int) -> dict[str, tuple[float, ...]]:
    """Validation (AUROC, AUPRC) of both blends of :data:`ARMS` on ``make_split(data, seed)``; also ``"anomalies"``:
    (training anomalies, validation anomalies)."""
    from gcad_dist.metrics import auprc, auroc
    from gcad_dist.model.forest import FOREST_HOPS
    from gcad_dist.model.tree_blend import fit_tree_blend

    y, train, val, anomalies = validation_nodes(data, seed)
    yv = y[val]
    out: dict[str, tuple[float, ...]] = {"anomalies": anomalies}
    for name, hops in zip(ARMS, (1, FOREST_HOPS)):
        try:
            blend = fit_tree_blend(data.x, data.edge_index, y, train, seed=seed, threads=threads, forest_hops=hops)
        except ValueError as e:
            raise UsageError(f"seed {seed}: {e}") from None
        s = blend(data.x, data.edge_index).numpy()
        out[name] = (auroc(yv, s[val]), auprc(yv, s[val]))
    return out


def main(argv: list[str] | None = None) -> int:
    import torch

    cfg = ForestHopsBenchConfig(**vars(build_parser().parse_args(argv)))
    setup_logging(cfg.verbose)
    torch.set_num_threads(max(1, cfg.threads))
    print("| graph | seeds | training / validation anomalies | " + " | ".join(f"{m}: AUROC / AUPRC" for m in ARMS)
          + " | change | seeds ahead (AUROC, AUPRC) |")
    print("|---|---|---|" + "---|" * (len(ARMS) + 2))
    changes = []
    for name in cfg.datasets:
        data = labelled_graph(cfg.data_dir, name)
        t0 = time.perf_counter()
        runs = [measure(data, s, cfg.threads) for s in cfg.seeds]
        mean = {m: np.mean([r[m] for r in runs], axis=0) for m in ARMS}
        base, new = ARMS
        ahead = [sum(r[new][i] > r[base][i] for r in runs) for i in (0, 1)]
        change = mean[new] - mean[base]
        changes.append(change)
        n_tr, n_val = (sorted({r["anomalies"][i] for r in runs}) for i in (0, 1))
        print(f"| {name} | {len(runs)} | {_span(n_tr)} / {_span(n_val)} | "
              + " | ".join(f"{mean[m][0]:.3f} / {mean[m][1]:.3f}" for m in ARMS)
              + f" | {change[0]:+.4f} / {change[1]:+.4f} | {ahead[0]}/{len(runs)}, {ahead[1]}/{len(runs)} |",
              flush=True)
        log.info("%s: %d seeds in %.1f s", name, len(runs), time.perf_counter() - t0)
    if len(changes) > 1:
        m = np.mean(changes, axis=0)
        print(f"\nMean change over the {len(changes)} graphs: {m[0]:+.4f} AUROC, {m[1]:+.4f} AUPRC.")
    return 0


if __name__ == "__main__":
    run_cli(main)
