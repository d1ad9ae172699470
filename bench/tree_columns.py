"""The forest view's trees with local-inconsistency columns: the blend without them (``--forest-columns none``, the
default before session 90) against the same blend reading two more columns per node, computed from the z-scored features without a label (``--forest-columns local``,
:data:`gcad_dist.model.forest.LOCAL_COLUMNS`): neighbour cosine (``1 - cos(x_i, mean of the neighbours' x)``, the
``nbr-cosine`` detector's score) and the local kNN distance (the distance to the 2nd most alike neighbour,
``local-knn``'s); a third arm adds the kNN distance too (the 5th nearest node in feature space, ``knn``'s: global, and
minutes at 1M nodes), as a passthrough column. Fitted on the same training nodes of the same split, in the same run;
validation nodes only.

Trees split one column at a time: a node whose features disagree with its neighbours' mean in a direction no single
column shows is invisible to them, and GCCAD's contrast sees it. The columns hand the trees that contrast as a number
(BENCHMARKS.md, session 89).

Example (BENCHMARKS.md, session 89):
    python -m bench.tree_columns --data-dir DATA --datasets tolokers reddit inj_cora books --seeds 5 6 7 8 9
    python -m bench.fresh_graphs make --out G --prefix t --seed 8931 --nodes 4000 --anomaly-fraction 0.04
    python -m bench.tree_columns --data-dir G --datasets t1 t2 t3 t4 t5 t6 t7 t8 --seeds 0 1 2

For each graph and seed: ``make_split(seed)`` of the z-scored graph (``gcad_dist.train``'s input and split); each blend
(:func:`gcad_dist.model.tree_blend.fit_tree_blend`, with ``local`` for the new arms) fitted on the training nodes and
measured on the validation nodes (no test label is read). The table gives each graph's training and validation
anomalies, each arm's mean validation AUROC / AUPRC over the seeds, each new arm's change against the blend without
the columns and on how many seeds it is ahead in each.
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script or with -m from the repo

from bench.forest_hops import ForestHopsBenchConfig, labelled_graph, tree_bench_parser, validation_nodes  # noqa: E402
from bench.tree_blend import _span  # noqa: E402
from gcad_dist.cli import UsageError, run_cli, setup_logging  # noqa: E402

log = logging.getLogger("bench.tree_columns")

#: arm name -> (``fit_tree_blend``'s ``local``, the label-free detectors whose scores it passes through)
ARMS: dict[str, tuple[bool, tuple[str, ...]]] = {
    "without (none)": (False, ()),
    "+ neighbour cosine, local kNN": (True, ()),
    "+ those and kNN": (True, ("knn",)),
}


@dataclass
class TreeColumnsBenchConfig(ForestHopsBenchConfig):
    """Settings of ``python -m bench.tree_columns`` (``bench.forest_hops``' own)."""


def build_parser() -> argparse.ArgumentParser:
    return tree_bench_parser("python -m bench.tree_columns", __doc__, TreeColumnsBenchConfig())


def label_free_columns(data: object, names: tuple[str, ...], threads: int = 1) -> np.ndarray:
    """The scores of the label-free detectors ``names`` on ``data`` (its features as they are), float32 [N, len]."""
    from gcad_dist.detectors import fit_score

    cols = [fit_score(n, data, None, 0, threads=threads) for n in names]
    return np.stack(cols, axis=1).astype(np.float32) if cols else np.zeros((int(data.num_nodes), 0), np.float32)


def measure(data: object, seed: int, threads: int, columns: dict[str, np.ndarray]) -> dict[str, tuple[float, ...]]:
    """Validation (AUROC, AUPRC) of each arm of :data:`ARMS` on ``make_split(data, seed)`` (``columns``: each
    detector's scores, computed once per graph); also ``"anomalies"``: (training anomalies, validation anomalies)."""
    import torch

    from gcad_dist.metrics import auprc, auroc
    from gcad_dist.model.tree_blend import fit_tree_blend

    y, train, val, anomalies = validation_nodes(data, seed)
    yv = y[val]
    out: dict[str, tuple[float, ...]] = {"anomalies": anomalies}
    for arm, (local, names) in ARMS.items():
        extra = torch.from_numpy(np.stack([columns[n] for n in names], 1)) if names else None
        x = data.x if extra is None else torch.cat([data.x, extra.to(data.x.dtype)], dim=1)
        try:
            blend = fit_tree_blend(x, data.edge_index, y, train, seed=seed, threads=threads, passthrough=len(names),
                                   local=local)
        except ValueError as e:
            raise UsageError(f"seed {seed}: {e}") from None
        s = blend(x, data.edge_index).numpy()
        out[arm] = (auroc(yv, s[val]), auprc(yv, s[val]))
    return out


def main(argv: list[str] | None = None) -> int:
    import torch

    cfg = TreeColumnsBenchConfig(**vars(build_parser().parse_args(argv)))
    setup_logging(cfg.verbose)
    torch.set_num_threads(max(1, cfg.threads))
    base, *new = ARMS
    print("| graph | seeds | training / validation anomalies | "
          + " | ".join(f"{m}: AUROC / AUPRC" for m in ARMS)
          + " | " + " | ".join(f"{m}: change, seeds ahead (AUROC, AUPRC)" for m in new) + " |")
    print("|---|---|---|" + "---|" * (len(ARMS) + len(new)))
    changes: dict[str, list[np.ndarray]] = {m: [] for m in new}
    for name in cfg.datasets:
        data = labelled_graph(cfg.data_dir, name)
        t0 = time.perf_counter()
        wanted = sorted({n for _, names in ARMS.values() for n in names})
        columns = dict(zip(wanted, label_free_columns(data, tuple(wanted), cfg.threads).T))
        runs = [measure(data, s, cfg.threads, columns) for s in cfg.seeds]
        mean = {m: np.mean([r[m] for r in runs], axis=0) for m in ARMS}
        cells = []
        for m in new:
            ahead = [sum(r[m][i] > r[base][i] for r in runs) for i in (0, 1)]
            change = mean[m] - mean[base]
            changes[m].append(change)
            cells.append(f"{change[0]:+.4f} / {change[1]:+.4f}, {ahead[0]}/{len(runs)}, {ahead[1]}/{len(runs)}")
        n_tr, n_val = (sorted({r["anomalies"][i] for r in runs}) for i in (0, 1))
        print(f"| {name} | {len(runs)} | {_span(n_tr)} / {_span(n_val)} | "
              + " | ".join(f"{mean[m][0]:.3f} / {mean[m][1]:.3f}" for m in ARMS) + " | " + " | ".join(cells) + " |",
              flush=True)
        log.info("%s: %d seeds in %.1f s", name, len(runs), time.perf_counter() - t0)
    if len(cfg.datasets) > 1:
        for m in new:
            c = np.mean(changes[m], axis=0)
            print(f"\nMean change over the {len(changes[m])} graphs, {m}: {c[0]:+.4f} AUROC, {c[1]:+.4f} AUPRC.")
    return 0


if __name__ == "__main__":
    run_cli(main)
