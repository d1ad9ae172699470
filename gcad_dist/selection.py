"""Choosing between trained candidates on validation, only when the validation evidence is clear.

``gcad_dist.train --contrast auto`` trains the paper's model and one alternative with the same seed and
split. Keeping whichever has the higher validation AUPRC switches on noise when the two are close: with a
few dozen validation anomalies, gaps of 0.01 AUPRC come and go between seeds. The rule here keeps the
default candidate unless a paired bootstrap over the validation nodes says the alternative is better with
high confidence, over at least :data:`MIN_POSITIVES` validation anomalies (with one or two, every resample that
holds them agrees, and the bootstrap's confidence says nothing about anomalies it has not seen).

The bootstrap is a Poisson bootstrap: each resample weighs every validation node by an independent
Poisson(1) count, so one sort per candidate serves all resamples, and the weighted average precision
(sklearn's step definition, ties evaluated once per distinct score) is computed for all resamples at once.
No test label is read: callers pass validation labels and scores only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from gcad_dist.metrics import _np

__all__ = ["SWITCH_CONFIDENCE", "MIN_POSITIVES", "SWITCH_RULE", "KEEP_RULE", "BootstrapComparison", "bootstrap_auprc",
           "compare_auprc", "p_better_auroc", "validation_folds", "CrossFit", "REJOIN_CONFIDENCE", "rejoin"]

SWITCH_CONFIDENCE = 0.95  # an alternative replaces the default when P(better AUPRC) >= this
#: with fewer validation anomalies than this the default is kept: a bootstrap over one or two anomalies says
#: "always better" whenever they rank higher, which is no evidence about the anomalies not seen
MIN_POSITIVES = 10
#: the rule in words (run keys of gcad_dist.quality and metrics.json name it)
SWITCH_RULE = f"bootstrap p >= {SWITCH_CONFIDENCE}, >= {MIN_POSITIVES} val anomalies"
# gcad_dist.train --contrast auto since session 18: keep every candidate the bootstrap cannot place clearly below the
# best one, and score with the mean of the kept candidates' standardised scores (session 7-17: keep one, SWITCH_RULE)
KEEP_RULE = f"keep unless the best is better by {SWITCH_RULE}; mean of standardised scores"
#: gcad_dist.finetune --rejoin (session 74): a candidate the keep rule dropped rejoins the kept ones when a paired
#: bootstrap finds their mean with it better on validation AUPRC with at least this confidence
REJOIN_CONFIDENCE = 0.8
_BLOCK_ELEMENTS = 1 << 23  # resamples x nodes per block (64 MiB of float64)


def _weighted_ap(y_sorted: np.ndarray, group_end: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Average precision for each row of weights ``w`` [B, n], nodes already sorted by descending score.

    ``group_end[i]`` is the last position of the tie group of position ``i``: precision is read there, as
    sklearn evaluates it once per distinct threshold.
    """
    wy = w * y_sorted
    tp = np.cumsum(wy, axis=1)
    seen = np.cumsum(w, axis=1)
    prec = tp[:, group_end] / np.maximum(seen[:, group_end], 1e-12)
    pos = wy.sum(1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(pos > 0, (wy * prec).sum(1) / pos, np.nan)


def _weighted_auroc(y_sorted: np.ndarray, group_start: np.ndarray, group_end: np.ndarray,
                    w: np.ndarray) -> np.ndarray:
    """AUROC for each row of weights ``w`` [B, n], nodes already sorted by descending score: each anomaly counts the
    normal weight below its tie group, plus half the normal weight inside it (sklearn's tie rule)."""
    wn = w * (1.0 - y_sorted)
    cn = np.cumsum(wn, axis=1)
    total_n = cn[:, -1:]
    upto_end = cn[:, group_end]
    before_start = np.where(group_start > 0, cn[:, np.maximum(group_start - 1, 0)], 0.0)
    wp = w * y_sorted
    num = (wp * ((total_n - upto_end) + 0.5 * (upto_end - before_start))).sum(1)
    den = wp.sum(1) * total_n[:, 0]
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(den > 0, num / den, np.nan)


def bootstrap_auprc(y: Any, scores: list[Any], n_boot: int = 1000, seed: int = 0,
                    include_observed: bool = True, metric: str = "auprc") -> np.ndarray:
    """AUPRC (or, with ``metric="auroc"``, AUROC) of each candidate's ``scores`` under the same ``n_boot`` Poisson
    resamples of the nodes (the same resamples for either metric, given the same seed).

    Returns [n_candidates, n_boot (+1)]; with ``include_observed`` the first column is the plain figure
    (all weights 1). Resamples are shared between candidates, so differences are paired.
    """
    if metric not in ("auprc", "auroc"):
        raise ValueError(f"metric: auprc or auroc, got {metric!r}")
    y = _np(y).astype(np.float64).ravel()
    if y.size == 0:
        raise ValueError("no validation nodes to compare on")
    rng = np.random.default_rng(seed)
    rows = int(n_boot) + (1 if include_observed else 0)
    out = np.empty((len(scores), rows), dtype=np.float64)
    block = max(1, _BLOCK_ELEMENTS // y.size)
    orders, ys, ends, starts = [], [], [], []
    for s in scores:
        s = _np(s).astype(np.float64).ravel()
        if s.shape != y.shape:
            raise ValueError(f"labels {y.shape} and scores {s.shape} differ in length")
        order = np.argsort(-s, kind="stable")
        so = s[order]
        last = np.r_[so[1:] != so[:-1], True]
        idx = np.arange(y.size)
        end = np.flip(np.minimum.accumulate(np.flip(np.where(last, idx, y.size))))
        first = np.r_[True, so[1:] != so[:-1]]
        start = np.maximum.accumulate(np.where(first, idx, 0))
        orders.append(order)
        ys.append(y[order])
        ends.append(end)
        starts.append(start)
    for start in range(0, rows, block):
        stop = min(rows, start + block)
        w = rng.poisson(1.0, size=(stop - start, y.size)).astype(np.float64)
        if include_observed and start == 0:
            w[0] = 1.0
        for c in range(len(scores)):
            wc = w[:, orders[c]]
            out[c, start:stop] = (_weighted_ap(ys[c], ends[c], wc) if metric == "auprc"
                                  else _weighted_auroc(ys[c], starts[c], ends[c], wc))
    return out


@dataclass
class BootstrapComparison:
    """Paired comparison of an alternative against the default on validation AUPRC."""

    default_auprc: float
    alternative_auprc: float
    p_alternative_better: float  # share of resamples where the alternative's AUPRC is strictly higher
    diff_low: float  # 5th percentile of (alternative - default) over resamples
    diff_high: float  # 95th percentile
    n_boot: int
    positives: int  # validation anomalies

    @property
    def switch(self) -> bool:
        """Whether the alternative should replace the default: P(better) >= :data:`SWITCH_CONFIDENCE` over
        at least :data:`MIN_POSITIVES` validation anomalies."""
        return self.positives >= MIN_POSITIVES and self.p_alternative_better >= SWITCH_CONFIDENCE

    def as_dict(self) -> dict[str, float]:
        return {"default_auprc": self.default_auprc, "alternative_auprc": self.alternative_auprc,
                "p_alternative_better": self.p_alternative_better, "diff_low": self.diff_low,
                "diff_high": self.diff_high, "n_boot": self.n_boot, "positives": self.positives,
                "switch": self.switch}


def compare_auprc(y: Any, default_scores: Any, alternative_scores: Any, n_boot: int = 1000,
                  seed: int = 0) -> BootstrapComparison:
    """Paired Poisson bootstrap of validation AUPRC: how sure is it that the alternative is better?"""
    positives = int((_np(y) == 1).sum())
    ap = bootstrap_auprc(y, [default_scores, alternative_scores], n_boot=n_boot, seed=seed)
    diff = ap[1, 1:] - ap[0, 1:]
    diff = diff[np.isfinite(diff)]
    if diff.size == 0:
        return BootstrapComparison(float(ap[0, 0]), float(ap[1, 0]), 0.0, float("nan"), float("nan"), 0, positives)
    return BootstrapComparison(
        default_auprc=float(ap[0, 0]), alternative_auprc=float(ap[1, 0]),
        p_alternative_better=float((diff > 0).mean()),
        diff_low=float(np.quantile(diff, 0.05)), diff_high=float(np.quantile(diff, 0.95)), n_boot=int(diff.size),
        positives=positives)


def p_better_auroc(y: Any, default_scores: Any, alternative_scores: Any, n_boot: int = 1000,
                   seed: int = 0) -> tuple[float, float, float]:
    """Paired Poisson bootstrap of validation AUROC (the resamples :func:`compare_auprc` draws with the same seed):
    (default AUROC, alternative AUROC, share of resamples where the alternative's is strictly higher)."""
    a = bootstrap_auprc(y, [default_scores, alternative_scores], n_boot=n_boot, seed=seed, metric="auroc")
    diff = a[1, 1:] - a[0, 1:]
    diff = diff[np.isfinite(diff)]
    return float(a[0, 0]), float(a[1, 0]), float((diff > 0).mean()) if diff.size else 0.0


def validation_folds(y: Any, val_mask: Any, seed: int = 0) -> np.ndarray | None:
    """Stratified random halves of the labelled validation nodes: int8 [N], 0 or 1 on validation nodes (the anomalies
    and the normal nodes each dealt alternately after a seeded shuffle), -1 elsewhere. None when a half would hold no
    anomaly or no normal node (fewer than two of either)."""
    y = _np(y).ravel()
    vm = _np(val_mask).astype(bool).ravel() & (y >= 0)
    folds = np.full(y.shape[0], -1, dtype=np.int8)
    rng = np.random.default_rng(seed)
    for cls in (1, 0):
        idx = rng.permutation(np.flatnonzero(vm & (y == cls)))
        if idx.size < 2:
            return None
        folds[idx] = np.arange(idx.size) % 2
    return folds


def _standardised(s: np.ndarray) -> np.ndarray:
    """``s`` standardised as a candidate ensemble standardises its members (float32)."""
    from gcad_dist.model.candidate_ensemble import standardisation

    mu, sd = standardisation(s)
    return ((np.asarray(s, dtype=np.float64) - mu) / sd).astype(np.float32)


class CrossFit:
    """Validation scores of a fit whose evaluations were chosen on validation, without the choice's optimism.

    A fit keeps its ``k`` best evaluations by validation AUPRC and scores with their mean, so its validation AUPRC is
    biased upwards against a candidate that chose nothing on validation (the pre-trained model unchanged). Here each
    half of the validation nodes (:func:`validation_folds`) keeps its own ``k`` best evaluations, ranked on that half
    alone; :meth:`scores` gives every node the fit's standardised scores, except that each half's nodes get the
    standardised mean of the evaluations chosen on the *other* half. Judged on validation, those scores were chosen
    on no node they are judged on. Reads validation labels only.
    """

    def __init__(self, y: Any, folds: np.ndarray, k: int) -> None:
        self.y = _np(y).ravel()
        self.folds = np.asarray(folds)
        self.k = int(k)
        # per half: the k best evaluations on that half, best first: (AUPRC on the half, epoch, standardised scores)
        self.top: list[list[tuple[float, int, np.ndarray]]] = [[], []]

    def update(self, epoch: int, scores: Any) -> None:
        """Offer one evaluation (scores of every node) to both halves."""
        from gcad_dist.metrics import auprc

        s = _np(scores).ravel()
        z = None
        for h in (0, 1):
            m = self.folds == h
            ap = auprc(self.y[m], s[m])
            ap = -np.inf if not np.isfinite(ap) else float(ap)
            top = self.top[h]
            if len(top) < self.k or ap > top[-1][0]:  # ties keep the earlier evaluation, as fit_supervised does
                z = _standardised(s) if z is None else z
                top.append((ap, int(epoch), z))
                top.sort(key=lambda t: (-t[0], t[1]))
                del top[self.k:]

    def scores(self, full: Any) -> np.ndarray:
        """``full`` (the fit's scores of every node) standardised, each validation half's nodes replaced by the
        standardised mean of the evaluations chosen on the other half (unchanged where that half chose none)."""
        out = _standardised(_np(full).ravel())
        for h in (0, 1):
            if self.top[h]:
                other = self.folds == 1 - h
                out[other] = _standardised(np.mean([t[2] for t in self.top[h]], axis=0))[other]
        return out

    def state(self) -> dict[str, Any]:
        """Tensors and plain data only (a ``weights_only`` checkpoint can hold it)."""
        import torch

        return {"k": self.k, "folds": torch.from_numpy(self.folds.astype(np.int8)),
                "top": [[(ap, ep, torch.from_numpy(z)) for ap, ep, z in t] for t in self.top]}

    def load(self, state: dict[str, Any]) -> None:
        """Continue from :meth:`state` (a resumed fit); the folds must be the same."""
        if not np.array_equal(state["folds"].numpy(), self.folds) or int(state["k"]) != self.k:
            raise ValueError("the saved cross-fit state belongs to other validation halves")
        self.top = [[(float(ap), int(ep), z.numpy()) for ap, ep, z in t] for t in state["top"]]


def rejoin(y: Any, z: Any, weights: Any, seed: int = 0, confidence: float = REJOIN_CONFIDENCE,
           n_boot: int = 1000) -> tuple[np.ndarray, list[dict[str, float]]]:
    """Let dropped candidates rejoin a weighted ensemble where they make it better, as an ensemble.

    A keep rule that judges each candidate alone against the best one drops candidates that are weaker alone but
    rank other anomalies than the kept ones (a graph whose anomalies are of several kinds): their mean with the kept
    ones can rank the validation anomalies far better than the kept ones do. Repeatedly, of the candidates of
    weight 0, the one whose addition raises the ensemble's validation AUPRC most joins with an equal share (weight
    ``1 / (k + 1)`` beside ``k`` kept ones, theirs scaled by ``k / (k + 1)``), iff a paired bootstrap over the
    validation nodes (:func:`compare_auprc`) finds the ensemble with it better with probability >= ``confidence``;
    it stops when none qualifies.

    ``y`` [V]: the validation labels (0/1); ``z`` [C, V]: each candidate's standardised scores of the validation
    nodes; ``weights`` [C]: the kept candidates' weights (summing to 1; 0 for a dropped one). Returns the new weights
    and one record per candidate that rejoined (its index, the ensemble's AUPRC before and after, P(better)).
    """
    y = _np(y)
    z = np.asarray(z, dtype=np.float64)
    w = np.asarray(weights, dtype=np.float64).copy()
    if z.ndim != 2 or z.shape[0] != w.shape[0] or z.shape[1] != y.shape[0]:
        raise ValueError(f"rejoin: scores {z.shape} do not match {w.shape[0]} weights and {y.shape[0]} labels")
    steps: list[dict[str, float]] = []
    while (w == 0).any() and (w > 0).any():
        k = int((w > 0).sum())
        current = w @ z
        best = None
        for i in np.flatnonzero(w == 0):
            trial = w * (k / (k + 1))
            trial[i] = 1.0 / (k + 1)
            cmp = compare_auprc(y, current, trial @ z, n_boot=n_boot, seed=seed)
            if (cmp.alternative_auprc > cmp.default_auprc and cmp.p_alternative_better >= confidence
                    and (best is None or cmp.alternative_auprc > best[1].alternative_auprc)):
                best = (int(i), cmp, trial)
        if best is None:
            break
        i, cmp, w = best
        steps.append({"candidate": i, "auprc_before": cmp.default_auprc, "auprc_after": cmp.alternative_auprc,
                      "p_better": cmp.p_alternative_better})
    return w, steps
