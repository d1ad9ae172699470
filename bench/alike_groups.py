"""The label-free score with session 48's contexts for groups of alike anomalies, from the same checkpoints.
``python -m bench.alike_groups``.

The local recipe scores a node against the mean of its neighbours. A fraud ring's members look alike and are most of
one another's neighbours, so that mean is partly the ring. ``pretrain --loose-context`` also scores each node against
its neighbours weighted by (1 + common neighbours)^-2, where links inside a dense group count little, and keeps the
larger of the two robust z-scores (:mod:`gcad_dist.model.loose_context`). This bench pre-trains the local recipe
(``gcad_dist.detectors.gccad_pre``, the harness's pipeline and seeds: the same checkpoints as ``gcad_dist.quality
--models gccad-pre``; the switch below changes scoring only) and scores each checkpoint three ways: against its
neighbours (the default score before session 49), against its loose context, and against its two-hop ball
(``score --context-hops 2``). A fourth column is the ball switch (``pretrain --ball-switch``, the local recipe's
default since session 49; ``score --context-hops auto``): the ball's score where
:func:`gcad_dist.model.ball.ball_reveals_group` says the ball makes a group stand out that the neighbours hide, else
the neighbours'; the table marks the seeds where it chose the ball. Scores are saved as ``OUT/DATASET-SEED.npz``
(``plain``, ``loose``, ``ball``), so a rerun only tabulates. By default the table reads the training + validation
nodes of the harness's split of each seed (no test label); ``--on-test`` reads the test split, a report after a
choice.

    python -m bench.alike_groups --datasets inj_cora books reddit tolokers --seeds 0 1 2 --out runs/alike_groups
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

log = logging.getLogger("bench.alike_groups")

#: the saved scores of each checkpoint, in the table's order
SCORES = ("plain", "loose", "ball")


@dataclass
class AlikeGroupsConfig(SavedScoresConfig):
    """Settings of ``python -m bench.alike_groups``."""

    out: str = "runs/alike_groups"


def score_three(loaded: Any, prepared: Any, _store: Path, device: str) -> np.ndarray:
    """[3, N]: the checkpoint's score against its neighbours, its loose-context score and its two-hop-ball score (a
    ``gccad_pre.fit_score`` scorer)."""
    from gcad_dist.score import score_data

    cfg = loaded.model.config
    cfg.ball_switch = False  # each context on its own; the switch is tabulated from the first and third
    out = []
    for loose, hops in ((False, 1), (True, 1), (False, 2)):
        cfg.loose_context, cfg.context_hops = loose, hops
        out.append(score_data(loaded.model, prepared, device=device))
    return np.stack(out)


def run(cfg: AlikeGroupsConfig) -> list[dict[str, Any]]:
    """Score what is missing (unless ``no_train``), then one record per (dataset, seed) with each score's AUROC /
    AUPRC on the chosen nodes, and whether the ball switch chose the ball."""
    import torch

    from bench.labelfree_pretext import measured_nodes, saved_scores
    from gcad_dist.detectors import gccad_pre
    from gcad_dist.metrics import auprc, auroc
    from gcad_dist.model.ball import ball_reveals_group

    def fit(raw: Any, seed: int, threads: int) -> np.ndarray:
        return gccad_pre.fit_score(raw, None, seed, threads=threads, scorer=score_three, pre_ball_switch=False,
                                   pre_feature_view=False)

    records = []
    for ds, raw, seed, scores in saved_scores(cfg, SCORES, fit):
        y = raw.y.numpy().astype(np.int64)
        has = torch.bincount(raw.edge_index[1], minlength=raw.num_nodes) > 0
        use, _, _ = ball_reveals_group(torch.from_numpy(scores["plain"]), torch.from_numpy(scores["ball"]), has)
        scores["switch"] = scores["ball"] if use else scores["plain"]
        mask = measured_nodes(raw, seed, cfg.on_test)
        records.append({"dataset": ds, "seed": seed, "ball_chosen": use,
                        **{k: (auroc(y[mask], v[mask]), auprc(y[mask], v[mask])) for k, v in scores.items()}})
    return records


def table(records: list[dict[str, Any]], on_test: bool = False) -> str:
    """Markdown: per dataset each score's mean AUROC / AUPRC, the loose context's and the switch's AUROC change against
    the neighbours' score, and on how many seeds the switch chose the ball (the switch is the default)."""
    where = "test" if on_test else "training + validation"
    lines = [f"| graph ({where}) | seeds | neighbours | loose context | two-hop ball | ball switch | loose: change "
             "(seeds ahead) | switch: change (ball chosen) |", "|---|---|---|---|---|---|---|---|"]
    for ds in dict.fromkeys(r["dataset"] for r in records):
        rs = [r for r in records if r["dataset"] == ds]
        a, b, c, w = (np.array([r[k] for r in rs]) for k in (*SCORES, "switch"))
        cells = " | ".join(f"{v[:, 0].mean():.3f} / {v[:, 1].mean():.3f}" for v in (a, b, c, w))
        d = b[:, 0] - a[:, 0]
        chosen = sum(bool(r["ball_chosen"]) for r in rs)
        lines.append(f"| {ds} | {len(rs)} | {cells} | {d.mean():+.4f} ({int((d > 0).sum())}/{len(rs)}) | "
                     f"{(w[:, 0] - a[:, 0]).mean():+.4f} ({chosen}/{len(rs)}) |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    from bench.labelfree_pretext import saved_scores_main

    return saved_scores_main("python -m bench.alike_groups", __doc__, AlikeGroupsConfig, run, table, argv)


if __name__ == "__main__":
    run_cli(main)
