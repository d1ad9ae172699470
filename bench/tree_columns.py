"""The forest view's trees with local-inconsistency columns: the blend without them (``--forest-columns none``, the
default before session 90) against the same blend reading two more columns per node, computed from the z-scored features without a label (``--forest-columns local``,
:data:`gcad_dist.model.forest.LOCAL_COLUMNS`): neighbour cosine (``1 - cos(x_i, mean of the neighbours' x)``, the
``nbr-cosine`` detector's score) and the local kNN distance (the distance to the 2nd most alike neighbour,
``local-knn``'s); a third arm adds the kNN distance too (the 5th nearest node in feature space, ``knn``'s: global, and
minutes at 1M nodes), as a passthrough column; a fourth (``labels``, session 96; not in the default ``--arms``) the
local columns and GCCAD's two neighbour-label columns, built from the split's training anomalies. Fitted on the same
training nodes of the same split, in the same run; validation nodes only.

Trees split one column at a time: a node whose features disagree with its neighbours' mean in a direction no single
column shows is invisible to them, and GCCAD's contrast sees it. The columns hand the trees that contrast as a number
(BENCHMARKS.md, session 89).

Example (BENCHMARKS.md, session 89):
    python -m bench.tree_columns --data-dir DATA --datasets tolokers reddit inj_cora books --seeds 5 6 7 8 9
    python -m bench.fresh_graphs make --out G --prefix t --seed 8931 --nodes 4000 --anomaly-fraction 0.04
    python -m bench.tree_columns --data-dir G --datasets t1 t2 t3 t4 t5 t6 t7 t8 --seeds 0 1 2
    python -m bench.tree_columns --data-dir DATA --datasets tolokers reddit inj_cora books --seeds 0 1 2 3 4 \
        --arms local labels          # session 96: the label columns against the product's local columns

For each graph and seed: ``make_split(seed)`` of the z-scored graph (``gcad_dist.train``'s input and split); each blend
(:func:`gcad_dist.model.tree_blend.fit_tree_blend`, with ``local`` for the new arms) fitted on the training nodes and
measured on the validation nodes (no test label is read). The table gives each graph's training and validation
anomalies, each arm's mean validation AUROC / AUPRC over the seeds, each later arm's change against the first of
``--arms`` and on how many seeds it is ahead in each.
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script or with -m from the repo

from bench.forest_hops import ForestHopsBenchConfig, labelled_graph, tree_bench_parser, validation_nodes  # noqa: E402
from bench.tree_blend import _span  # noqa: E402
from gcad_dist.cli import UsageError, run_cli, setup_logging  # noqa: E402

log = logging.getLogger("bench.tree_columns")

#: the name in :data:`ARMS` of the neighbour-label columns: ``[log(1 + k), k / in-degree]`` with ``k`` the node's
#: in-neighbours labelled anomalous in the split's training nodes
#: (:func:`gcad_dist.data.label_inputs.neighbour_label_features`, GCCAD's label inputs; one hop, so a node's own label
#: never enters its columns), passed through where the split holds at least ``gcad_dist.train``'s
#: ``LABEL_INPUTS_MIN_ANOMALIES`` training anomalies, GCCAD's own rule (with fewer the arm reads no label)
LABELS = "labels"
#: arm key (``--arms``) -> (its name in the table, ``fit_tree_blend``'s ``local``, the label-free detectors whose
#: scores it passes through, :data:`LABELS` for the neighbour-label columns)
ARMS: dict[str, tuple[str, bool, tuple[str, ...]]] = {
    "none": ("without (none)", False, ()),
    "local": ("+ neighbour cosine, local kNN", True, ()),
    "knn": ("+ those and kNN", True, ("knn",)),
    "labels": ("+ neighbour cosine, local kNN, label columns", True, (LABELS,)),
}
DEFAULT_ARMS = ["none", "local", "knn"]


@dataclass
class TreeColumnsBenchConfig(ForestHopsBenchConfig):
    """Settings of ``python -m bench.tree_columns`` (``bench.forest_hops``' own, and the arms)."""

    arms: list[str] = field(default_factory=lambda: list(DEFAULT_ARMS))


def build_parser() -> argparse.ArgumentParser:
    d = TreeColumnsBenchConfig()
    p = tree_bench_parser("python -m bench.tree_columns", __doc__, d)
    p.add_argument("--arms", nargs="+", default=d.arms, choices=list(ARMS), metavar="ARM",
                   help=f"the blends compared, the first the reference of the change columns: "
                   f"{'; '.join(f'{k} = {v[0]}' for k, v in ARMS.items())} (default: %(default)s)")
    return p


def label_free_columns(data: object, names: tuple[str, ...], threads: int = 1) -> np.ndarray:
    """The scores of the label-free detectors ``names`` on ``data`` (its features as they are), float32 [N, len]."""
    from gcad_dist.detectors import fit_score

    cols = [fit_score(n, data, None, 0, threads=threads) for n in names]
    return np.stack(cols, axis=1).astype(np.float32) if cols else np.zeros((int(data.num_nodes), 0), np.float32)


def label_columns(data: object, y: np.ndarray, train: np.ndarray, train_anomalies: int) -> "torch.Tensor | None":
    """The :data:`LABELS` columns of ``data`` from the anomalies among the ``train`` nodes (float32 [N, 2]), or None
    below ``gcad_dist.train``'s ``LABEL_INPUTS_MIN_ANOMALIES`` training anomalies (GCCAD's rule)."""
    import torch

    from gcad_dist.data.label_inputs import neighbour_label_features
    from gcad_dist.train import LABEL_INPUTS_MIN_ANOMALIES

    if train_anomalies < LABEL_INPUTS_MIN_ANOMALIES:
        return None
    known = torch.from_numpy(np.asarray(train) & (np.asarray(y) == 1))
    return neighbour_label_features(data.edge_index, int(data.num_nodes), known)


def measure(data: object, seed: int, threads: int, columns: dict[str, np.ndarray],
            arms: list[str] | None = None) -> dict[str, tuple[float, ...]]:
    """Validation (AUROC, AUPRC) of each arm of :data:`ARMS` named in ``arms`` (default: all) on ``make_split(data,
    seed)`` (``columns``: each detector's scores, computed once per graph; the label columns are the split's own);
    also ``"anomalies"``: (training anomalies, validation anomalies)."""
    import torch

    from gcad_dist.metrics import auprc, auroc
    from gcad_dist.model.tree_blend import fit_tree_blend

    y, train, val, anomalies = validation_nodes(data, seed)
    yv = y[val]
    out: dict[str, tuple[float, ...]] = {"anomalies": anomalies}
    for arm in list(ARMS) if arms is None else arms:
        _, local, wanted = ARMS[arm]
        names = [n for n in wanted if n != LABELS]
        extra = torch.from_numpy(np.stack([columns[n] for n in names], 1)) if names else None
        if LABELS in wanted and (labels := label_columns(data, y, train, anomalies[0])) is not None:
            extra = labels if extra is None else torch.cat([extra, labels], dim=1)
        x = data.x if extra is None else torch.cat([data.x, extra.to(data.x.dtype)], dim=1)
        try:
            blend = fit_tree_blend(x, data.edge_index, y, train, seed=seed, threads=threads,
                                   passthrough=x.shape[1] - data.x.shape[1], local=local)
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
    if len(set(cfg.arms)) != len(cfg.arms):
        raise UsageError(f"--arms: each arm once, got {' '.join(cfg.arms)}")
    base, *new = cfg.arms
    title = {k: v[0] for k, v in ARMS.items()}
    print("| graph | seeds | training / validation anomalies | "
          + " | ".join(f"{title[m]}: AUROC / AUPRC" for m in cfg.arms)
          + "".join(f" | {title[m]}: change, seeds ahead (AUROC, AUPRC)" for m in new) + " |")
    print("|---|---|---|" + "---|" * (len(cfg.arms) + len(new)))
    changes: dict[str, list[np.ndarray]] = {m: [] for m in new}
    for name in cfg.datasets:
        data = labelled_graph(cfg.data_dir, name)
        t0 = time.perf_counter()
        wanted = sorted({n for m in cfg.arms for n in ARMS[m][2]} - {LABELS})
        columns = dict(zip(wanted, label_free_columns(data, tuple(wanted), cfg.threads).T))
        runs = [measure(data, s, cfg.threads, columns, cfg.arms) for s in cfg.seeds]
        mean = {m: np.mean([r[m] for r in runs], axis=0) for m in cfg.arms}
        cells = []
        for m in new:
            ahead = [sum(r[m][i] > r[base][i] for r in runs) for i in (0, 1)]
            change = mean[m] - mean[base]
            changes[m].append(change)
            cells.append(f"{change[0]:+.4f} / {change[1]:+.4f}, {ahead[0]}/{len(runs)}, {ahead[1]}/{len(runs)}")
        n_tr, n_val = (sorted({r["anomalies"][i] for r in runs}) for i in (0, 1))
        print(f"| {name} | {len(runs)} | {_span(n_tr)} / {_span(n_val)} | "
              + " | ".join(f"{mean[m][0]:.3f} / {mean[m][1]:.3f}" for m in cfg.arms) + "".join(f" | {c}" for c in cells)
              + " |", flush=True)
        log.info("%s: %d seeds in %.1f s", name, len(runs), time.perf_counter() - t0)
    if len(cfg.datasets) > 1:
        for m in new:
            c = np.mean(changes[m], axis=0)
            print(f"\nMean change over the {len(changes[m])} graphs, {title[m]}: {c[0]:+.4f} AUROC, {c[1]:+.4f} AUPRC.")
    return 0


if __name__ == "__main__":
    run_cli(main)
