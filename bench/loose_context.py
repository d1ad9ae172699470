"""The label-free score with and without the loose context, from the same checkpoints (session 48).
``python -m bench.loose_context``.

The local recipe scores a node against the mean of its neighbours. A fraud ring's members look alike and are most of
one another's neighbours, so that mean is partly the ring. ``pretrain --loose-context`` also scores each node against
its neighbours weighted by (1 + common neighbours)^-2, where links inside a dense group count little, and keeps the
larger of the two robust z-scores (:mod:`gcad_dist.model.loose_context`). This bench pre-trains the local recipe
(``gcad_dist.detectors.gccad_pre``, the harness's pipeline and seeds: the same checkpoints as ``gcad_dist.quality
--models gccad-pre``) and scores each checkpoint three ways: the default score, the loose-context score, and (for
reference) the two-hop ball as context (``score --context-hops 2``). Scores are saved as ``OUT/DATASET-SEED.npz``
(``plain``, ``loose``, ``ball``), so a rerun only tabulates. By default the table reads the training + validation
nodes of the harness's split of each seed (no test label); ``--on-test`` reads the test split, a report after a
choice.

    python -m bench.loose_context --datasets inj_cora books reddit tolokers --seeds 0 1 2 --out runs/loose_context
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

log = logging.getLogger("bench.loose_context")

#: the saved scores of each checkpoint, in the table's order
SCORES = ("plain", "loose", "ball")


@dataclass
class LooseContextConfig:
    """Settings of ``python -m bench.loose_context``."""

    out: str = "runs/loose_context"
    datasets: list[str] = field(default_factory=lambda: ["inj_cora", "books", "reddit", "tolokers"])
    seeds: list[int] = field(default_factory=lambda: [0, 1, 2])
    data_dir: str = "../shared/data"
    on_test: bool = False
    no_train: bool = False
    threads: int = 1
    verbose: bool = False


def score_three(loaded: Any, prepared: Any, _store: Path, device: str) -> np.ndarray:
    """[3, N]: the checkpoint's default score, its loose-context score and its two-hop-ball score (a
    ``gccad_pre.fit_score`` scorer)."""
    from gcad_dist.score import score_data

    cfg = loaded.model.config
    out = []
    for loose, hops in ((False, 1), (True, 1), (False, 2)):
        cfg.loose_context, cfg.context_hops = loose, hops
        out.append(score_data(loaded.model, prepared, device=device))
    return np.stack(out)


def run(cfg: LooseContextConfig) -> list[dict[str, Any]]:
    """Score what is missing (unless ``no_train``), then one record per (dataset, seed) with each score's AUROC /
    AUPRC on the chosen nodes."""
    from bench.labelfree_pretext import measured_nodes
    from gcad_dist.detectors import gccad_pre
    from gcad_dist.metrics import auprc, auroc
    from gcad_dist.quality import _load

    out, data_dir = Path(cfg.out), Path(cfg.data_dir)
    out.mkdir(parents=True, exist_ok=True)
    records = []
    for ds in cfg.datasets:
        path = data_dir / f"{ds}.npz"
        if not path.is_file():
            raise UsageError(f"--datasets: no {ds}.npz in {data_dir}")
        raw, _ = _load(path)
        y = raw.y.numpy().astype(np.int64)
        for seed in cfg.seeds:
            f = out / f"{ds}-{seed}.npz"
            if not f.is_file():
                if cfg.no_train:
                    raise UsageError(f"--no-train: no {f.name} in {out}")
                scores = gccad_pre.fit_score(raw, None, seed, threads=cfg.threads, scorer=score_three)
                np.savez(f, **dict(zip(SCORES, scores)))
            with np.load(f) as z:
                scores = {k: z[k] for k in SCORES}
            if scores["plain"].shape != y.shape:
                raise UsageError(f"{f}: {scores['plain'].shape[0]} scores for a graph of {y.shape[0]} nodes")
            mask = measured_nodes(raw, seed, cfg.on_test)
            records.append({"dataset": ds, "seed": seed,
                            **{k: (auroc(y[mask], v[mask]), auprc(y[mask], v[mask])) for k, v in scores.items()}})
    return records


def table(records: list[dict[str, Any]], on_test: bool = False) -> str:
    """Markdown: per dataset each score's mean AUROC / AUPRC, the loose context's change and the seeds it is ahead."""
    where = "test" if on_test else "training + validation"
    lines = [f"| graph ({where}) | seeds | default | loose context | two-hop ball | change | seeds ahead (AUROC) |",
             "|---|---|---|---|---|---|---|"]
    for ds in dict.fromkeys(r["dataset"] for r in records):
        rs = [r for r in records if r["dataset"] == ds]
        a, b, c = (np.array([r[k] for r in rs]) for k in SCORES)
        d = b - a
        lines.append(f"| {ds} | {len(rs)} | {a[:, 0].mean():.3f} / {a[:, 1].mean():.3f} | {b[:, 0].mean():.3f} / "
                     f"{b[:, 1].mean():.3f} | {c[:, 0].mean():.3f} / {c[:, 1].mean():.3f} | {d[:, 0].mean():+.4f} / "
                     f"{d[:, 1].mean():+.4f} | {int((d[:, 0] > 0).sum())}/{len(rs)} |")
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    d = LooseContextConfig()
    p = ArgumentParser(prog="python -m bench.loose_context", description=__doc__.split("\n\n")[0],
                       formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--out", default=d.out, help="folder of the saved scores (DATASET-SEED.npz)")
    p.add_argument("--datasets", nargs="+", default=d.datasets, help="graphs under --data-dir (NAME.npz)")
    p.add_argument("--seeds", nargs="+", type=int, default=d.seeds, help="the harness's seeds (split and training)")
    p.add_argument("--data-dir", default=d.data_dir, help="folder of the labelled graphs")
    p.add_argument("--on-test", action="store_true", help="measure on the test split (a report after the choice)")
    p.add_argument("--no-train", action="store_true", help="only tabulate saved scores (a missing one is an error)")
    p.add_argument("--threads", type=int, default=d.threads, help="CPU threads of each pre-training run")
    p.add_argument("-v", "--verbose", action="store_true")
    return p


def main(argv: list[str] | None = None) -> int:
    cfg = LooseContextConfig(**vars(build_parser().parse_args(argv)))
    setup_logging(cfg.verbose)
    print(table(run(cfg), cfg.on_test))
    return 0


if __name__ == "__main__":
    run_cli(main)
