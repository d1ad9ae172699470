"""The forest view of supervised GCCAD: a random forest on the node's and its neighbours' features, blended by rank
where validation cannot place it below GCCAD.

On graphs whose anomalies are told by their own attributes (GADBench's fraud graphs), random forests on
``[x, mean of the neighbours' x, degree]`` (RF-Graph) lead every GNN; on graphs whose anomalies disagree with their
context GCCAD leads them. ``gcad_dist.train`` (``--forest auto``, the default for the full model) fits both on the
same training nodes, and keeps the forest unless a paired bootstrap over the validation nodes finds GCCAD's
validation AUPRC higher with confidence >= 0.95 over >= 10 validation anomalies (the rule by which ``--contrast
auto`` keeps its candidates, :func:`gcad_dist.selection.compare_auprc`). GCCAD is judged by its cross-fitted
validation scores (:class:`gcad_dist.selection.CrossFit`), so its own epoch choice on validation does not flatter it
against the forest, which chose nothing there. Kept, the score is the mean of both scores' ranks
(:class:`gcad_dist.model.rank_blend.RankBlend`, the ranks read off each score's distribution over the training graph,
so a checkpoint scores new graphs alike). No test label is read. BENCHMARKS.md, session 61.
"""

from __future__ import annotations

import logging
import time
from dataclasses import replace
from typing import Any

import numpy as np
import torch

__all__ = ["FOREST_MODES", "FOREST_RULE", "add_forest_view"]

log = logging.getLogger(__name__)

FOREST_MODES = ("auto", "off")


def _rule() -> str:
    from gcad_dist.selection import SWITCH_RULE

    return (f"RF-Graph on the training nodes, dropped iff GCCAD's cross-fitted validation AUPRC is higher by paired "
            f"bootstrap ({SWITCH_RULE}); kept: the mean of both scores' ranks")


FOREST_RULE = _rule()


def add_forest_view(res: Any, model: torch.nn.Module, data: Any, split: Any, seed: int,
                    threads: int = 1) -> tuple[Any, torch.nn.Module, dict[str, Any]]:
    """Fit the forest on ``split.train``, judge it against GCCAD's fit ``res`` on ``split.val``, and return (fit,
    model, record): where it is kept, the fit's scores and metrics are the rank blend's and the model a
    :class:`~gcad_dist.model.rank_blend.RankBlend` of ``model`` and the forest; else ``res`` and ``model`` unchanged.
    The record (JSON-ready) says what was measured and chosen."""
    from gcad_dist.metrics import auprc, evaluate
    from gcad_dist.model.forest import fit_forest
    from gcad_dist.model.rank_blend import EmpiricalCDF, RankBlend
    from gcad_dist.selection import MIN_POSITIVES, compare_auprc

    record: dict[str, Any] = {"rule": FOREST_RULE}
    y = torch.as_tensor(data.y).cpu().numpy()
    if getattr(data, "graph_id", None) is not None or res.selection_scores is None:
        record.update(kept=False, reason="many small graphs: a node forest does not apply" if getattr(
            data, "graph_id", None) is not None else "the fit has no cross-fitted validation scores to judge it by")
        log.info("forest view: not tried (%s)", record["reason"])
        return res, model, record
    t0 = time.perf_counter()
    label_columns = int(getattr(data, "label_input_columns", 0) or 0)
    in_features = int(data.x.shape[1]) - label_columns
    train = torch.as_tensor(split.train).cpu().numpy() & (y >= 0)
    try:
        forest = fit_forest(data.x, data.edge_index, y, train, seed=seed, threads=threads, in_features=in_features)
    except ValueError as e:
        record.update(kept=False, reason=str(e))
        log.info("forest view: not tried (%s)", e)
        return res, model, record
    forest_scores = forest.score(forest(data.x, data.edge_index)).numpy().astype(np.float64)
    vm = torch.as_tensor(split.val).cpu().numpy() & (y >= 0)
    yv = y[vm]
    gccad_val = np.asarray(res.selection_scores, dtype=np.float64)[vm]
    positives = int((yv == 1).sum())
    cmp = compare_auprc(yv, forest_scores[vm], gccad_val, seed=seed)  # alternative = GCCAD: is it clearly better?
    dropped = bool(cmp.switch) and positives >= MIN_POSITIVES
    record.update({
        "val_auprc": {"gccad (cross-fitted)": cmp.alternative_auprc, "forest": cmp.default_auprc},
        "forest_val_auroc": evaluate(y, forest_scores, None, vm)["auroc"],
        "p_gccad_better": cmp.p_alternative_better, "positives": positives, "kept": not dropped,
        "seconds": round(time.perf_counter() - t0, 3)})
    if positives < MIN_POSITIVES:
        record["too_few_validation_anomalies"] = positives
    verdict = "dropped" if dropped else "kept: scores = mean of both ranks"
    log.info("forest view: val AUPRC GCCAD %.4f (cross-fitted), forest %.4f, P(GCCAD better) %.3f over %d "
             "validation anomalies -> %s (%.1f s)", cmp.alternative_auprc, cmp.default_auprc,
             cmp.p_alternative_better, positives, verdict, record["seconds"])
    if dropped:
        return res, model, record
    cdfs = [EmpiricalCDF.fit(res.scores), EmpiricalCDF.fit(forest_scores)]
    blend = RankBlend([model, forest], cdfs)

    forest_rank = cdfs[1](torch.as_tensor(forest_scores))

    def blended(gccad: Any, cdf: EmpiricalCDF) -> np.ndarray:
        return torch.stack([cdf(torch.as_tensor(np.asarray(gccad, dtype=np.float64))), forest_rank]).mean(0).numpy()

    scores = blended(res.scores, cdfs[0])
    # the cross-fitted scores (standardised, each validation half chosen on the other) ranked on their own
    selection = blended(res.selection_scores, EmpiricalCDF.fit(res.selection_scores))
    val = evaluate(y, scores, None, vm)
    test = evaluate(y, scores, None, torch.as_tensor(split.test).cpu().numpy())
    record["val_auprc"]["blend (cross-fitted)"] = auprc(yv, selection[vm])
    res = replace(res, val=val, test=test, scores=scores, best_scores=None, selection_scores=selection,
                  extra={**res.extra, "forest_view": True})
    return res, blend, record
