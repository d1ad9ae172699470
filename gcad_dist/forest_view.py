"""The forest view of supervised GCCAD: trees on the node's and its neighbours' features, blended by rank where
validation does not lean towards GCCAD alone.

On graphs whose anomalies are told by their own attributes (GADBench's fraud graphs), tree ensembles on
``[x, mean of the neighbours' x, degree]`` (RF-Graph, XGB-Graph) lead every GNN (the forest here also reads the mean
of those means over the neighbours, a second hop, as GADBench's RF-Graph does: since session 85); on graphs whose
anomalies disagree with their context GCCAD leads them. ``gcad_dist.train --forest auto`` fits both on the same
training nodes. The "forest" is a random forest and gradient-boosted trees with their ranks averaged
(:class:`gcad_dist.model.tree_blend.TreeBlend`; a random forest alone before session 66, whose checkpoints still
score). The forest joins
where validation holds at least 10 anomalies and a paired Poisson bootstrap over the validation nodes
(:func:`gcad_dist.selection.compare_auprc`, :func:`gcad_dist.selection.p_better_auroc`) finds GCCAD better with a
probability below :data:`JOIN_BELOW` (0.8) in AUPRC and in AUROC. GCCAD is judged by its cross-fitted validation
scores (:class:`gcad_dist.selection.CrossFit`), so that its own epoch choice on validation does not flatter it against
the forest, which chose nothing there. Joined, the score is the mean of both scores' ranks
(:class:`gcad_dist.model.rank_blend.RankBlend`: the ranks are read off each score's distribution over the training
graph, so a checkpoint scores new graphs alike), unless the same bootstrap finds the forest alone better than that
blend in validation AUPRC with probability >= :data:`gcad_dist.selection.SWITCH_CONFIDENCE` (0.95): then the forest
alone scores (weights 0 and 1; the checkpoint still holds GCCAD, which ``gcad_dist.finetune`` starts from). That is the
case of labels set by a rule over a few attributes, where a tree's splits are sharp and any share of a smooth score
blurs them (``bench/rule_labels.py``). No test label is read. BENCHMARKS.md, sessions 61, 62 and 66.
"""

from __future__ import annotations

import logging
import time
from dataclasses import replace
from typing import Any

import numpy as np
import torch

__all__ = ["FOREST_COLUMNS", "FOREST_MODES", "FOREST_RULE", "JOIN_BELOW", "add_forest_view", "describe_choice"]

log = logging.getLogger(__name__)

FOREST_MODES = ("auto", "off")
#: ``--forest-columns``: the trees' inputs before session 90 (``none``), or also the local-inconsistency columns
#: (``local``, the commands' default since session 90: :data:`gcad_dist.model.forest.LOCAL_COLUMNS`, neighbour cosine
#: and the local kNN distance; session 89: +0.126 validation AUROC of the trees over eight fresh generated graphs,
#: inj_cora +0.080, tolokers and reddit level; session 90, end to end: +0.0017 / +0.0088 test AUROC / AUPRC over nine
#: fresh generated graphs, the shared graphs level, BENCHMARKS.md). :func:`add_forest_view`'s own default stays
#: ``local=False``, the function as before. Its ``labels`` (the trees also read GCCAD's neighbour-label inputs) is not
#: a value here: session 96's rule rejected it end to end (``bench.forest_columns --arms local labels``)
FOREST_COLUMNS = ("none", "local")
#: the forest joins iff the paired bootstrap's P(GCCAD better) is below this in validation AUPRC and in AUROC
JOIN_BELOW = 0.8


def _rule(min_anomalies: int | None = None, local: bool = False, labels: bool = False) -> str:
    from gcad_dist.model.forest import FOREST_HOPS, LOCAL_COLUMNS
    from gcad_dist.selection import MIN_POSITIVES, SWITCH_CONFIDENCE

    least = MIN_POSITIVES if min_anomalies is None else min_anomalies
    read = [*(LOCAL_COLUMNS if local else ()), *(["the neighbour-label inputs"] if labels else [])]
    return (f"RF-Graph ({FOREST_HOPS} hops of neighbour means) and gradient-boosted trees (1 hop)"
            + (f", both also reading {' and '.join(read)}," if read else "")
            + f" on the training nodes, their ranks averaged; joins iff >= "
            f"{least} validation anomalies and the paired bootstrap over them finds P(GCCAD's cross-fitted "
            f"validation AUPRC higher) < {JOIN_BELOW} and P(its AUROC higher) < {JOIN_BELOW}; joined: the mean of both "
            f"scores' ranks, or the forest alone where P(its validation AUPRC higher than the blend's) >= "
            f"{SWITCH_CONFIDENCE}" + (f" (and >= {MIN_POSITIVES} validation anomalies)" if least < MIN_POSITIVES
                                      else ""))


FOREST_RULE = _rule()


def describe_choice(record: dict[str, Any]) -> str:
    """What :func:`add_forest_view`'s ``record`` chose, in words (the CLIs' summary lines)."""
    return {"blend": "joined (ranks averaged)",
            "forest": "joined: the forest alone scores (validation places it clearly above the blend)"
            }.get(record.get("choice"), "not joined")


def add_forest_view(res: Any, model: torch.nn.Module, data: Any, split: Any, seed: int,
                    threads: int = 1, in_features: int | None = None,
                    min_anomalies: int | None = None, local: bool = False,
                    labels: bool = False) -> tuple[Any, torch.nn.Module, dict[str, Any]]:
    """Fit the forest on ``split.train`` (the nodes GCCAD trained on), judge it against GCCAD's fit ``res`` on
    ``split.val``, and return (fit,
    model, record): where it is kept, the fit's scores and metrics are the rank blend's and the model a
    :class:`~gcad_dist.model.rank_blend.RankBlend` of ``model`` and the forest; else ``res`` and ``model`` unchanged.
    The record (JSON-ready) says what was measured and chosen. ``in_features``: the leading columns of ``data.x``
    the forest reads (default: all but the label-input columns; the first input block of a model whose members read
    several, :class:`~gcad_dist.model.candidate_ensemble.CandidateEnsemble`). ``min_anomalies``: the fewest validation
    anomalies the join test is run on (default :data:`gcad_dist.selection.MIN_POSITIVES`; ``gcad_dist.train
    --forest-min-anomalies``, session 77); below ``MIN_POSITIVES`` a joined forest always blends, never scores alone.
    ``local``: the trees also read :data:`gcad_dist.model.forest.LOCAL_COLUMNS` (``--forest-columns local``).
    ``labels``: where ``data`` has label-input columns (its last ``label_input_columns``), both trees also read them
    as they are (one hop: a node's own label never enters its own columns). Not a CLI value: session 96 measured it
    end to end (``bench.forest_columns --arms local labels``: -0.0002 / -0.0037 test AUROC / AUPRC over eight fresh
    graphs, though the trees alone gained) and rejected it; kept so that the bench reproduces those figures."""
    from gcad_dist.metrics import auprc, evaluate
    from gcad_dist.model.rank_blend import EmpiricalCDF, RankBlend
    from gcad_dist.model.tree_blend import fit_scored_tree_blend
    from gcad_dist.selection import MIN_POSITIVES, SWITCH_CONFIDENCE, compare_auprc, p_better_auroc

    min_anomalies = MIN_POSITIVES if min_anomalies is None else int(min_anomalies)
    if min_anomalies < 1:
        raise ValueError(f"min_anomalies must be at least 1, got {min_anomalies}")
    label_columns = int(getattr(data, "label_input_columns", 0) or 0)
    labels = labels and label_columns > 0
    record: dict[str, Any] = {"rule": _rule(min_anomalies, local, labels)}
    if local or labels:
        record["columns"] = "labels" if labels else "local"
    y = torch.as_tensor(data.y).cpu().numpy()
    if getattr(data, "graph_id", None) is not None or res.selection_scores is None:
        record.update(kept=False, reason="many small graphs: a node forest does not apply" if getattr(
            data, "graph_id", None) is not None else "the fit has no cross-fitted validation scores to judge it by")
        log.info("forest view: not tried (%s)", record["reason"])
        return res, model, record
    t0 = time.perf_counter()
    in_features = int(data.x.shape[1]) - label_columns if in_features is None else int(in_features)
    train = torch.as_tensor(split.train).cpu().numpy() & (y >= 0)
    try:
        forest, forest_scores = fit_scored_tree_blend(data.x, data.edge_index, y, train, seed=seed, threads=threads,
                                                      in_features=in_features, local=local,
                                                      passthrough=label_columns if labels else 0)
    except ValueError as e:
        record.update(kept=False, reason=str(e))
        log.info("forest view: not tried (%s)", e)
        return res, model, record
    forest_scores = forest.score(forest_scores).numpy().astype(np.float64)  # its forward on data, from the fit's pass
    vm = torch.as_tensor(split.val).cpu().numpy() & (y >= 0)
    yv = y[vm]
    gccad_val = np.asarray(res.selection_scores, dtype=np.float64)[vm]
    positives = int((yv == 1).sum())
    joined, p_pr, p_roc = False, float("nan"), float("nan")
    record.update(positives=positives, forest_val_auroc=evaluate(y, forest_scores, None, vm)["auroc"],
                  train_nodes=int(train.sum()), train_anomalies=int((y[train] == 1).sum()))
    if positives >= min_anomalies and (yv == 0).any():  # with fewer, GCCAD alone
        cmp = compare_auprc(yv, forest_scores[vm], gccad_val, seed=seed)  # alternative = GCCAD
        roc_forest, roc_gccad, p_roc = p_better_auroc(yv, forest_scores[vm], gccad_val, seed=seed)
        p_pr = cmp.p_alternative_better
        joined = cmp.n_boot > 0 and p_pr < JOIN_BELOW and p_roc < JOIN_BELOW  # no usable resample: GCCAD alone
        record.update(val_auprc={"gccad (cross-fitted)": cmp.alternative_auprc, "forest": cmp.default_auprc},
                      val_auroc={"gccad (cross-fitted)": roc_gccad, "forest": roc_forest})
    else:
        record["too_few_validation_anomalies"] = positives
    record.update(p_gccad_better_auprc=p_pr, p_gccad_better_auroc=p_roc, kept=joined, choice="blend" if joined
                  else "gccad", seconds=round(time.perf_counter() - t0, 3))
    log.info("forest view: %s -> %s (%.1f s)", f"P(GCCAD better) AUPRC {p_pr:.3f}, AUROC {p_roc:.3f} over {positives} "
             f"validation anomalies" if "val_auroc" in record else
             f"{positives} validation anomalies, fewer than {min_anomalies}",
             "joined: scores = mean of both ranks" if joined else "GCCAD alone", record["seconds"])
    if not joined:
        return res, model, record
    cdfs = [EmpiricalCDF.fit(res.scores), EmpiricalCDF.fit(forest_scores)]
    forest_rank = cdfs[1](torch.as_tensor(forest_scores))
    half = RankBlend([model, forest], cdfs)

    def blended(gccad: Any, cdf: EmpiricalCDF) -> np.ndarray:
        return half.combine([cdf(torch.as_tensor(np.asarray(gccad, dtype=np.float64))), forest_rank]).numpy()

    # the cross-fitted scores (standardised, each validation half chosen on the other) ranked on their own
    selection = blended(res.selection_scores, EmpiricalCDF.fit(res.selection_scores))
    record["val_auprc"]["blend (cross-fitted)"] = auprc(yv, selection[vm])
    # the forest alone where validation finds it clearly above the blend (the keep rule's switch level)
    lead = compare_auprc(yv, selection[vm], forest_scores[vm], seed=seed)  # alternative = the forest alone
    # below MIN_POSITIVES validation anomalies (--forest-min-anomalies) a joined forest blends, never scores alone
    alone = lead.p_alternative_better >= SWITCH_CONFIDENCE and positives >= MIN_POSITIVES
    record.update(p_forest_better_than_blend_auprc=lead.p_alternative_better, choice="forest" if alone else "blend",
                  weights=[0.0, 1.0] if alone else [0.5, 0.5])
    log.info("forest view: P(the forest alone better than the blend) AUPRC %.3f -> %s", lead.p_alternative_better,
             "the forest alone scores" if alone else "the blend scores")
    if alone:
        blend = RankBlend([model, forest], cdfs, weights=[0.0, 1.0])
        scores, selection = forest_rank.numpy(), forest_scores
    else:
        blend, scores = half, blended(res.scores, cdfs[0])
    val = evaluate(y, scores, None, vm)
    test = evaluate(y, scores, None, torch.as_tensor(split.test).cpu().numpy())
    # what GCCAD alone scored, for the record (the choice above read validation only)
    record["gccad_alone"] = {"val": res.val, "test": res.test}
    res = replace(res, val=val, test=test, scores=scores, best_scores=None, selection_scores=selection,
                  extra={**res.extra, "forest_view": True})
    record["seconds"] = round(time.perf_counter() - t0, 3)
    return res, blend, record
