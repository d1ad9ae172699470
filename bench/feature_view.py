"""The label-free score with and without the feature view, from the same checkpoints. ``python -m bench.feature_view``.

The local recipe contrasts each node with its context; since session 50 its score adds an isolation forest on the raw
features where the forest corroborates the contrast's top 1% of nodes (:mod:`gcad_dist.feature_view`,
``pretrain --feature-view``). This bench pre-trains the local recipe (``gcad_dist.detectors.gccad_pre``, the
harness's pipeline and seeds: the same checkpoints as ``gcad_dist.quality --models gccad-pre``; the view changes
scoring only) and tabulates, per graph: the contrast's score alone (the default before session 50, ball switch
included), the forest alone, their fusion (the sum of robust z-scores), and the view (the fusion where the
corroboration reaches :data:`gcad_dist.feature_view.CORROBORATION` or the links' feature assortativity is below
:data:`gcad_dist.feature_view.ASSORTATIVITY`, else the contrast's score), with both measures and the seeds where the
view joined. A second table gives, per run, label-free statistics of the two scores (:func:`shape_statistics`,
session 64's screen for a switch that would tell graphs where the forest should score from those where the contrast
should: none separated them). Scores are saved as ``OUT/DATASET-SEED.npz`` (``contrast``,
``forest``), so a rerun only tabulates. By default the table reads the training + validation nodes of the harness's
split of each seed (no test label); ``--on-test`` reads the test split, a report after a choice.

    python -m bench.feature_view --datasets inj_cora books reddit tolokers --seeds 0 1 2 --out runs/feature_view
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

log = logging.getLogger("bench.feature_view")

#: the saved scores of each checkpoint
SCORES = ("contrast", "forest")


@dataclass
class FeatureViewConfig(SavedScoresConfig):
    """Settings of ``python -m bench.feature_view``."""

    out: str = "runs/feature_view"


def run(cfg: FeatureViewConfig) -> list[dict[str, Any]]:
    """Score what is missing (unless ``no_train``), then one record per (dataset, seed): each score's AUROC / AUPRC on
    the chosen nodes, the corroboration and whether the view joined."""
    import torch

    from bench.labelfree_pretext import measured_nodes, saved_scores
    from gcad_dist.detectors import gccad_pre
    from gcad_dist.feature_view import corroboration, feature_assortativity, forest_scores, fused, joins
    from gcad_dist.metrics import auprc, auroc
    from gcad_dist.score import score_data

    def fit(raw: Any, seed: int, threads: int) -> np.ndarray:
        def contrast(loaded: Any, prepared: Any, _store: Path, device: str) -> np.ndarray:
            return score_data(loaded.model, prepared, device=device)  # the model's score: the view is added below

        s = gccad_pre.fit_score(raw, None, seed, threads=threads, scorer=contrast)
        return np.stack([s, forest_scores(raw.x.numpy(), threads=threads)])

    records = []
    for ds, raw, seed, scores in saved_scores(cfg, SCORES, fit):
        y = raw.y.numpy().astype(np.int64)
        has = (torch.bincount(raw.edge_index[1], minlength=raw.num_nodes) > 0).numpy()
        c, _ = corroboration(scores["contrast"], scores["forest"])
        a = float("nan") if np.isnan(c) else feature_assortativity(raw.x.numpy(), raw.edge_index)
        use = joins(c, a)  # as apply_feature_view (a graph too small for c: no view)
        scores["fused"] = fused(scores["contrast"], scores["forest"], has)
        scores["view"] = scores["fused"] if use else scores["contrast"]
        mask = measured_nodes(raw, seed, cfg.on_test)
        records.append({"dataset": ds, "seed": seed, "corroboration": c, "assortativity": a, "used": use,
                        "statistics": shape_statistics(scores["contrast"], scores["forest"], has),
                        **{k: (auroc(y[mask], v[mask]), auprc(y[mask], v[mask])) for k, v in scores.items()}})
    return records


#: :func:`shape_statistics`' keys and their column headers
STATISTICS = {"spearman": "Spearman(contrast, forest)", "tail_contrast": "robust z > 3: contrast",
              "tail_forest": "robust z > 3: forest", "skew_contrast": "skew: contrast", "skew_forest": "skew: forest",
              "contrast_on_forest_top": "contrast's median robust z on the forest's top 1%",
              "forest_on_contrast_top": "forest's median robust z on the contrast's top 1%"}


def shape_statistics(contrast: np.ndarray, forest: np.ndarray, has: np.ndarray) -> dict[str, float]:
    """Label-free statistics of the two scores of one run (keys of :data:`STATISTICS`): their rank correlation, the
    share of nodes above a robust z of 3 in each, each one's skew, and each one's median robust z over the other's top
    1% of nodes (at least 10). Robust z as the fusion's (:func:`gcad_dist.model.loose_context.robust_z`; the contrast
    over the nodes with neighbours)."""
    import torch
    from scipy.stats import skew, spearmanr

    from gcad_dist.model.loose_context import robust_z

    c = robust_z(torch.as_tensor(contrast, dtype=torch.float64), torch.from_numpy(np.asarray(has, dtype=bool))).numpy()
    f = robust_z(torch.as_tensor(forest, dtype=torch.float64), torch.ones(len(forest), dtype=torch.bool)).numpy()
    k = max(10, len(c) // 100)
    top_c, top_f = np.argsort(-c, kind="stable")[:k], np.argsort(-f, kind="stable")[:k]
    return {"spearman": float(spearmanr(contrast, forest).statistic), "tail_contrast": float((c > 3).mean()),
            "tail_forest": float((f > 3).mean()), "skew_contrast": float(skew(contrast)),
            "skew_forest": float(skew(forest)), "contrast_on_forest_top": float(np.median(c[top_f])),
            "forest_on_contrast_top": float(np.median(f[top_c]))}


def table(records: list[dict[str, Any]], on_test: bool = False) -> str:
    """Markdown: per dataset each score's mean AUROC / AUPRC, the mean corroboration, and the view's AUROC change
    against the contrast's score with the seeds where it joined."""
    where = "test" if on_test else "training + validation"
    lines = [f"| graph ({where}) | seeds | contrast | forest | fused | **view** | corroboration | assortativity | "
             "view: change (joined) |", "|---|---|---|---|---|---|---|---|---|"]
    for ds in dict.fromkeys(r["dataset"] for r in records):
        rs = [r for r in records if r["dataset"] == ds]
        v = {k: np.array([r[k] for r in rs]) for k in ("contrast", "forest", "fused", "view")}
        cells = " | ".join(f"{a[:, 0].mean():.3f} / {a[:, 1].mean():.3f}" for a in v.values())
        corr_cell, assort_cell = (
            "n/a" if np.isnan(m).all() else f"{np.nanmean(m):.3f}"
            for m in (np.array([r.get(k, np.nan) for r in rs], dtype=float) for k in ("corroboration", "assortativity")))
        d = v["view"][:, 0] - v["contrast"][:, 0]
        lines.append(f"| {ds} | {len(rs)} | {cells} | {corr_cell} | {assort_cell} | {d.mean():+.4f} "
                     f"({sum(r['used'] for r in rs)}/{len(rs)}) |")
    stats = [r for r in records if "statistics" in r]
    if stats:  # per run: the scores' label-free statistics beside the AUROC of each
        lines += ["", "| graph, seed | contrast | forest | fused | " + " | ".join(STATISTICS.values()) + " |",
                  "|---|---|---|---|" + "---|" * len(STATISTICS)]
        for r in stats:
            aurocs = [f"{r[k][0]:.3f}" for k in ("contrast", "forest", "fused")]
            lines.append(f"| {r['dataset']}, {r['seed']} | " + " | ".join(aurocs + [
                f"{r['statistics'][k]:.3f}" for k in STATISTICS]) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    from bench.labelfree_pretext import saved_scores_main

    return saved_scores_main("python -m bench.feature_view", __doc__, FeatureViewConfig, run, table, argv)


if __name__ == "__main__":
    run_cli(main)
