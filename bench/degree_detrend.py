"""The label-free score with and without its degree trend, from the same saved scores (session 46).
``python -m bench.degree_detrend``.

``bench.labelfree_pretext --variants B=pre_degree_detrend:0`` saves each ``gccad-pre`` fit's scores without the
detrend (``OUT/B/DATASET-SEED.npy``). The detrended score is a function of those scores and the graph's in-degrees
(:func:`gcad_dist.model.degree_trend.remove_degree_trend`, what the model applies with ``degree_detrend``), so both
columns here come from the same pre-training runs. By default it reads the training + validation nodes of the harness's
split of each seed (``bench.labelfree_pretext``'s measure, no test label); ``--on-test`` reads the test split instead,
a report after a choice. ``--by-kind`` adds AUROC per planted kind for generated graphs (their ``anomaly_type``).

    python -m bench.labelfree_pretext --datasets inj_cora books reddit tolokers --variants B=pre_degree_detrend:0 --out runs/lfp
    python -m bench.degree_detrend --scores runs/lfp --datasets inj_cora books reddit tolokers
"""

from __future__ import annotations

import argparse
import logging
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script or with -m from the repo

from gcad_dist.cli import ArgumentParser, UsageError, run_cli, setup_logging  # noqa: E402

log = logging.getLogger("bench.degree_detrend")


@dataclass
class DetrendConfig:
    """Settings of ``python -m bench.degree_detrend``."""

    scores: str = "runs/labelfree_pretext"
    variant: str = "B"
    datasets: list[str] = field(default_factory=lambda: ["inj_cora", "books", "reddit", "tolokers"])
    data_dir: str = "../shared/data"
    on_test: bool = False
    by_kind: bool = False
    verbose: bool = False


def detrended(scores: np.ndarray, degree: np.ndarray) -> np.ndarray:
    """``scores`` as the model scores with ``degree_detrend`` (:func:`gcad_dist.model.degree_trend.neutral_to_degree`:
    the trend removed, lone nodes at the others' median)."""
    import torch

    from gcad_dist.model.degree_trend import neutral_to_degree

    return neutral_to_degree(torch.from_numpy(np.asarray(scores, dtype=np.float32)),
                             torch.from_numpy(np.asarray(degree, dtype=np.int64))).numpy()


def compare(cfg: DetrendConfig) -> list[dict[str, Any]]:
    """One record per (dataset, seed): both scores' AUROC / AUPRC on the chosen nodes, the slope, per-kind AUROC."""
    from bench.labelfree_pretext import measured_nodes
    from gcad_dist.metrics import auprc, auroc
    from gcad_dist.model.degree_trend import degree_slope
    from gcad_dist.quality import _load

    import torch

    root, data_dir = Path(cfg.scores) / cfg.variant, Path(cfg.data_dir)
    records = []
    for ds in cfg.datasets:
        path = data_dir / f"{ds}.npz"
        if not path.is_file():
            raise UsageError(f"--datasets: no {ds}.npz in {data_dir}")
        files = sorted(root.glob(f"{ds}-*.npy"), key=lambda f: int(f.stem.rsplit("-", 1)[1]))
        if not files:
            raise UsageError(f"no {ds}-SEED.npy under {root} (run bench.labelfree_pretext --variants "
                             f"{cfg.variant}=pre_degree_detrend:0 first)")
        raw, _ = _load(path)
        y = raw.y.numpy().astype(np.int64)
        deg = np.bincount(raw.edge_index[1].numpy(), minlength=raw.num_nodes)
        kinds = None
        if cfg.by_kind:
            with np.load(path) as z:
                kinds = z["anomaly_type"] if "anomaly_type" in z.files else None
        for f in files:
            seed = int(f.stem.rsplit("-", 1)[1])
            s = np.load(f)
            if s.shape != y.shape:
                raise UsageError(f"{f}: {s.shape[0]} scores for a graph of {y.shape[0]} nodes")
            mask = measured_nodes(raw, seed, cfg.on_test)
            d = detrended(s, deg)
            r: dict[str, Any] = {"dataset": ds, "seed": seed,
                                 "slope": degree_slope(torch.from_numpy(s), torch.from_numpy(deg)),
                                 "score": (auroc(y[mask], s[mask]), auprc(y[mask], s[mask])),
                                 "detrended": (auroc(y[mask], d[mask]), auprc(y[mask], d[mask])), "kinds": {}}
            if kinds is not None:
                for k in np.unique(kinds[y == 1]):
                    m = mask & ((y == 0) | (kinds == k))
                    r["kinds"][int(k)] = (auroc(y[m], s[m]), auroc(y[m], d[m]))
            records.append(r)
    return records


def table(records: list[dict[str, Any]], on_test: bool = False) -> str:
    """Markdown: per dataset, both scores' means, the paired change and the seeds ahead; then per kind."""
    where = "test" if on_test else "training + validation"
    lines = [f"| graph ({where}) | seeds | score | detrended | change | seeds ahead (AUROC) | slope |",
             "|---|---|---|---|---|---|---|"]
    kinds = []
    for ds in dict.fromkeys(r["dataset"] for r in records):
        rs = [r for r in records if r["dataset"] == ds]
        a, b = np.array([r["score"] for r in rs]), np.array([r["detrended"] for r in rs])
        d = b - a
        lines.append(f"| {ds} | {len(rs)} | {a[:, 0].mean():.3f} / {a[:, 1].mean():.3f} | {b[:, 0].mean():.3f} / "
                     f"{b[:, 1].mean():.3f} | {d[:, 0].mean():+.4f} / {d[:, 1].mean():+.4f} | "
                     f"{int((d[:, 0] > 0).sum())}/{len(rs)} | {np.mean([r['slope'] for r in rs]):+.4f} |")
        for k in sorted({k for r in rs for k in r["kinds"]}):
            v = np.array([r["kinds"][k] for r in rs if k in r["kinds"]])
            kinds.append(f"| {ds} | {k} | {v[:, 0].mean():.3f} | {v[:, 1].mean():.3f} |")
    if kinds:
        lines += ["", "| graph | planted kind | score AUROC | detrended AUROC |", "|---|---|---|---|", *kinds]
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    d = DetrendConfig()
    p = ArgumentParser(prog="python -m bench.degree_detrend", description=__doc__.split("\n\n")[0],
                       formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--scores", default=d.scores, help="bench.labelfree_pretext's --out folder")
    p.add_argument("--variant", default=d.variant, help="the variant whose scores were saved without the detrend")
    p.add_argument("--datasets", nargs="+", default=d.datasets, help="graphs under --data-dir (NAME.npz)")
    p.add_argument("--data-dir", default=d.data_dir, help="folder of the labelled graphs")
    p.add_argument("--on-test", action="store_true", help="measure on the test split (a report after the choice)")
    p.add_argument("--by-kind", action="store_true", help="also AUROC per planted kind (generated graphs' anomaly_type)")
    p.add_argument("-v", "--verbose", action="store_true")
    return p


def main(argv: list[str] | None = None) -> int:
    cfg = DetrendConfig(**vars(build_parser().parse_args(argv)))
    setup_logging(cfg.verbose)
    print(table(compare(cfg), cfg.on_test))
    return 0


if __name__ == "__main__":
    run_cli(main)
