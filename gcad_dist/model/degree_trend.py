"""A label-free score made neutral to degree: the trend of the scores over log(1 + in-degree) removed.

The local contrast scores a node by 1 - cos(g(h0_i), g(mean of its neighbours' h0)). How far that lands from a
node's own projection depends on how many neighbours are averaged: a mean over many is smoother, so on real graphs
the score of a normal node drifts with its degree (on inj_cora it falls, on reddit it rises). A node is then judged
partly by its degree rather than by how much it disagrees with its neighbours. :func:`remove_degree_trend` fits one
least-squares line of the scores on log(1 + degree) over the nodes with neighbours and subtracts its slope, so that
each node is compared with nodes of any degree on the same footing (BENCHMARKS.md, session 46). No label is read.
"""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["remove_degree_trend", "degree_slope", "neutral_to_degree"]


def _slope(scores: Tensor, has: Tensor, ld: Tensor) -> float:
    """Least-squares slope of ``scores[has]`` on ``ld[has]`` (log(1 + degree)); 0.0 when no line can be fitted."""
    if int(has.sum()) < 3:
        return 0.0
    x = ld[has] - ld[has].mean()
    denom = float((x * x).sum())
    if denom <= 0.0:
        return 0.0
    s = scores[has].double()
    return float((x * (s - s.mean())).sum()) / denom


def degree_slope(scores: Tensor, degree: Tensor) -> float:
    """The least-squares slope of ``scores`` on log(1 + ``degree``) over the nodes with ``degree > 0``; 0.0 when
    fewer than three such nodes or a single degree leave no line to fit."""
    return _slope(scores, degree > 0, torch.log1p(degree.double()))


def remove_degree_trend(scores: Tensor, degree: Tensor) -> Tensor:
    """``scores`` [N] minus slope x (log(1 + degree) - its mean over the nodes with neighbours): the line's level is
    kept, its tilt removed (:func:`degree_slope`). Nodes without neighbours are left as they are (the caller scores
    them at the median). Same dtype and device as ``scores``."""
    has, ld = degree > 0, torch.log1p(degree.double())
    b = _slope(scores, has, ld)
    if b == 0.0:
        return scores
    out = scores.double() - b * (ld - ld[has].mean())
    return torch.where(has, out, scores.double()).to(scores.dtype)


def neutral_to_degree(scores: Tensor, degree: Tensor, detrend: bool = True) -> Tensor:
    """The local contrast's final score: with ``detrend`` the trend removed (:func:`remove_degree_trend`), then each
    node without neighbours set to the median of the others' scores (it has no context to contrast with; neither
    flagged nor cleared, BENCHMARKS.md session 21). What ``GCCAD.score`` returns for the local contrast."""
    if detrend:
        scores = remove_degree_trend(scores, degree)
    alone = degree == 0
    if bool(alone.any()) and not bool(alone.all()):
        scores = scores.masked_fill(alone, float(scores[~alone].median()))
    return scores
