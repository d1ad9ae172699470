"""The label-free score with a two-scale context, from the same checkpoints (session 47; tried, not adopted).
``python -m bench.two_scale_context``.

The local recipe scores a node against the mean of its neighbours (its 1-hop context). A fraud ring's members look
alike and are most of one another's neighbours, so that context is partly the ring itself; the two-hop ball reaches
past it. This bench pre-trains the local recipe (``gcad_dist.detectors.gccad_pre``, the harness's pipeline and
seeds) and scores the same checkpoint twice: with the neighbours as context (the default score) and with the two-hop
ball (``context_hops`` 2 at scoring time only). Both are made neutral to degree as the default is. The two-scale
score is the sum of their robust z-scores (:func:`two_scale`). Scores are saved as ``OUT/DATASET-SEED.npz`` (``s1``,
``s2``, before the detrend), so a rerun only tabulates. By default the table reads the training + validation nodes of
the harness's split of each seed (no test label); ``--on-test`` reads the test split, a report after a choice.

    python -m bench.two_scale_context --datasets inj_cora books reddit tolokers --seeds 0 1 2 --out runs/two_scale
"""

from __future__ import annotations

import logging
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script or with -m from the repo

from bench.labelfree_pretext import SavedScoresConfig  # noqa: E402
from gcad_dist.cli import run_cli  # noqa: E402

log = logging.getLogger("bench.two_scale_context")


@dataclass
class TwoScaleConfig(SavedScoresConfig):
    """Settings of ``python -m bench.two_scale_context``."""

    out: str = "runs/two_scale"


def robust_z(scores: np.ndarray, has: np.ndarray) -> np.ndarray:
    """(scores - median) / (1.4826 MAD) over the nodes ``has`` (with neighbours); the others 0, the median."""
    med = float(np.median(scores[has]))
    mad = float(np.median(np.abs(scores[has] - med))) * 1.4826
    z = (scores - med) / max(mad, 1e-12)
    return np.where(has, z, 0.0)


def two_scale(s1: np.ndarray, s2: np.ndarray, degree: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(1-hop, 2-hop, two-scale) scores from the raw 1-hop and two-hop-ball scores: each made neutral to degree as the
    model does (:func:`bench.degree_detrend.detrended`), then the sum of their robust z-scores."""
    from bench.degree_detrend import detrended

    has = np.asarray(degree) > 0
    d1 = detrended(s1, degree).astype(np.float64)
    d2 = detrended(s2, degree).astype(np.float64)
    return d1, d2, robust_z(d1, has) + robust_z(d2, has)


def score_both(data: Any, seed: int, threads: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """Pre-train the local recipe on ``data`` (:func:`gcad_dist.detectors.gccad_pre.fit_score`, as ``gcad_dist.quality
    --models gccad-pre``) and score the checkpoint with the 1-hop and with the two-hop-ball context, both before the
    detrend."""
    from gcad_dist.detectors import gccad_pre
    from gcad_dist.score import score_data

    def score(loaded: Any, prepared: Any, _store: Path, dev: str) -> np.ndarray:
        model = loaded.model
        model.config.degree_detrend = False  # raw scores: the detrend is applied in two_scale
        model.config.ball_switch = False  # each context on its own (the switch is the local recipe's since session 49)
        s1 = score_data(model, prepared, device=dev)
        model.config.context_hops = 2
        s2 = score_data(model, prepared, device=dev)
        return np.stack([s1, s2])

    both = gccad_pre.fit_score(data, None, seed, threads=threads, scorer=score, pre_ball_switch=False,
                               pre_feature_view=False)
    return both[0], both[1]


def run(cfg: TwoScaleConfig) -> list[dict[str, Any]]:
    """Score what is missing (unless ``no_train``), then one record per (dataset, seed) with the three scores'
    AUROC / AUPRC on the chosen nodes."""
    from bench.labelfree_pretext import measured_nodes, saved_scores
    from gcad_dist.metrics import auprc, auroc

    records = []
    for ds, raw, seed, z in saved_scores(cfg, ("s1", "s2"), lambda g, s, t: score_both(g, s, t)):
        y = raw.y.numpy().astype(np.int64)
        deg = np.bincount(raw.edge_index[1].numpy(), minlength=raw.num_nodes)
        mask = measured_nodes(raw, seed, cfg.on_test)
        scores = dict(zip(("1-hop", "2-hop", "two-scale"), two_scale(z["s1"], z["s2"], deg)))
        records.append({"dataset": ds, "seed": seed,
                        **{k: (auroc(y[mask], v[mask]), auprc(y[mask], v[mask])) for k, v in scores.items()}})
    return records


def table(records: list[dict[str, Any]], on_test: bool = False) -> str:
    """Markdown: per dataset the three scores' mean AUROC / AUPRC, the two-scale change and the seeds it is ahead."""
    where = "test" if on_test else "training + validation"
    lines = [f"| graph ({where}) | seeds | 1-hop (default) | 2-hop ball | two-scale | change | seeds ahead (AUROC) |",
             "|---|---|---|---|---|---|---|"]
    for ds in dict.fromkeys(r["dataset"] for r in records):
        rs = [r for r in records if r["dataset"] == ds]
        a, b, c = (np.array([r[k] for r in rs]) for k in ("1-hop", "2-hop", "two-scale"))
        d = c - a
        lines.append(f"| {ds} | {len(rs)} | {a[:, 0].mean():.3f} / {a[:, 1].mean():.3f} | {b[:, 0].mean():.3f} / "
                     f"{b[:, 1].mean():.3f} | {c[:, 0].mean():.3f} / {c[:, 1].mean():.3f} | {d[:, 0].mean():+.4f} / "
                     f"{d[:, 1].mean():+.4f} | {int((d[:, 0] > 0).sum())}/{len(rs)} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    from bench.labelfree_pretext import saved_scores_main

    return saved_scores_main("python -m bench.two_scale_context", __doc__, TwoScaleConfig, run, table, argv)


if __name__ == "__main__":
    run_cli(main)
