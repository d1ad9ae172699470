"""Models of different kinds scored together by rank: the (weighted) mean of each member's empirical CDF.

Two detectors' scores can live on scales that a z-score does not reconcile: a cosine distance against a forest's
vote share, half of whose nodes tie at 0. Their ranks can be averaged. For a checkpoint that scores new graphs as
training scored the labelled one, each member's rank is read off the empirical CDF of its scores over the training
graph's nodes (no label read), kept as at most :data:`MAX_KNOTS` knots and interpolated linearly between them:
on the training graph that is each node's mid-rank / N at the knots, and between knots the order of the scores is
kept. Scores beyond the training range keep their order too (a vanishing slope past the ends).

Like :class:`~gcad_dist.model.candidate_ensemble.CandidateEnsemble`, the module passes its forward arguments to every
member, returns their outputs as a list, and :meth:`RankBlend.score` combines them.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import Tensor

__all__ = ["MAX_KNOTS", "EmpiricalCDF", "RankBlend", "cdf_knots"]

MAX_KNOTS = 4097  # knots of a member's empirical CDF kept in a checkpoint
_TAIL = 1e-6  # slope scale past the ends of the training range (order kept, values within 1e-6 of 0 and 1)


def cdf_knots(scores: Any, max_knots: int = MAX_KNOTS) -> tuple[np.ndarray, np.ndarray]:
    """(values, cdf): the distinct finite scores (at most ``max_knots``, evenly spaced in rank, the smallest and
    largest kept) and their mid-rank empirical CDF, ``(#below + #equal / 2) / n``."""
    s = np.asarray(scores, dtype=np.float64).ravel()
    s = np.sort(s[np.isfinite(s)])
    if s.size == 0:
        raise ValueError("an empirical CDF needs at least one finite score")
    values, first, counts = np.unique(s, return_index=True, return_counts=True)
    cdf = (first + counts / 2.0) / s.size
    if values.size > max_knots:
        keep = np.unique(np.round(np.linspace(0, values.size - 1, max_knots)).astype(np.int64))
        values, cdf = values[keep], cdf[keep]
    return values, cdf


class EmpiricalCDF(torch.nn.Module):
    """A monotone map of scores to [0, 1]: piecewise linear through the knots (:func:`cdf_knots`)."""

    def __init__(self, values: Any, cdf: Any) -> None:
        super().__init__()
        v = torch.as_tensor(np.asarray(values, dtype=np.float64))
        c = torch.as_tensor(np.asarray(cdf, dtype=np.float64))
        if v.ndim != 1 or v.shape != c.shape or v.numel() == 0:
            raise ValueError(f"knots: two 1-D arrays of the same non-zero length needed, got {tuple(v.shape)}, "
                             f"{tuple(c.shape)}")
        if v.numel() > 1 and not bool((v[1:] > v[:-1]).all()):
            raise ValueError("knot values must be strictly increasing")
        self.register_buffer("values", v)
        self.register_buffer("cdf", c)

    @classmethod
    def fit(cls, scores: Any, max_knots: int = MAX_KNOTS) -> "EmpiricalCDF":
        """The empirical CDF of ``scores`` (every node of the training graph)."""
        return cls(*cdf_knots(scores, max_knots))

    def forward(self, s: Tensor) -> Tensor:
        v, c = self.values, self.cdf
        x = s.detach().to(v.device, torch.float64)
        k = v.numel()
        span = float(v[-1] - v[0]) if k > 1 else 1.0
        span = span if span > 0 else 1.0
        if k == 1:
            out = torch.full_like(x, float(c[0])) + _TAIL * torch.tanh((x - v[0]) / span)
        else:
            hi = torch.searchsorted(v, x).clamp(1, k - 1)  # x in (v[hi - 1], v[hi]]
            lo = hi - 1
            t = ((x - v[lo]) / (v[hi] - v[lo])).clamp(0.0, 1.0)
            out = c[lo] + t * (c[hi] - c[lo])
            # past the ends: the end's value plus a vanishing, order-keeping slope
            out = torch.where(x < v[0], c[0] - _TAIL * torch.tanh((v[0] - x) / span), out)
            out = torch.where(x > v[-1], c[-1] + _TAIL * torch.tanh((x - v[-1]) / span), out)
        out = torch.where(torch.isnan(x), torch.full_like(x, 0.5), out)
        return out.to(device=s.device, dtype=torch.float32)


class RankBlend(torch.nn.Module):
    """Members of any kind (each with ``forward`` and ``score``), scored by the weighted mean of their scores'
    empirical CDFs over the training graph.

    Args:
        members: the models, the primary first (the model a checkpoint's top level describes).
        cdfs: one :class:`EmpiricalCDF` per member, fitted on its scores of every training-graph node.
        weights: one non-negative weight per member (normalised to sum 1; default: equal). A member of weight 0 is
            kept (a checkpoint still describes it) but neither run nor scored.
    """

    def __init__(self, members: list[torch.nn.Module], cdfs: list[EmpiricalCDF],
                 weights: list[float] | None = None) -> None:
        super().__init__()
        if len(members) < 1 or len(members) != len(cdfs):
            raise ValueError(f"one CDF per member needed: {len(members)} members, {len(cdfs)} CDFs")
        w = np.ones(len(members)) if weights is None else np.asarray(weights, dtype=np.float64)
        if w.shape != (len(members),) or not np.all(np.isfinite(w)) or np.any(w < 0) or w.sum() <= 0:
            raise ValueError(f"one non-negative weight per member, with a positive sum, needed; got {weights}")
        self.members = torch.nn.ModuleList(members)
        self.cdfs = torch.nn.ModuleList(cdfs)
        self.register_buffer("weights", torch.as_tensor(w / w.sum()))

    def forward(self, *args: Any, **kwargs: Any) -> list[Any]:
        return [m(*args, **kwargs) if w > 0 else None for m, w in zip(self.members, self.weights.tolist())]

    def combine(self, ranks: list[Tensor | None]) -> Tensor:
        """The weighted mean of the members' ranks (their CDF values; ``None`` where a member's weight is 0) [N]."""
        parts = [w * r.double() for r, w in zip(ranks, self.weights.tolist()) if w > 0]
        return torch.stack(parts).sum(0).float()

    def score(self, outs: list[Any]) -> Tensor:
        """Weighted mean over the members of their score's empirical CDF [N]."""
        return self.combine([cdf(m.score(o).float()) if w > 0 else None
                             for m, cdf, o, w in zip(self.members, self.cdfs, outs, self.weights.tolist())])
