"""The labelled anomalies as exemplars: a node scored by its likeness to the nearest known anomaly.

A fraud team with one or two confirmed cases asks first for "more like these". With a training anomaly or two a
fitted model learns little (``gcad_dist.finetune`` at 10% of a small graph's labels: one training anomaly), but where
the anomalies share a signature in a few attributes (camouflaged fraud, a ring's common traits) the nearest known
anomaly finds them: each node's largest cosine similarity to the labelled training anomalies, on the raw features
z-scored over every node. No fit, and nothing chosen on validation. ``gcad_dist.finetune --exemplar auto`` offers it
as one more candidate with 1-9 kept training anomalies, where validation finds it above chance (:func:`above_chance`;
BENCHMARKS.md, session 78).

The module holds the z-score's column means and standard deviations and the exemplars (z-scored, unit length) as
buffers, so a written checkpoint scores any graph with the same columns as it scored the training graph. It reads the
first ``in_features`` columns of its input (the raw features: its own input block of a
:class:`~gcad_dist.model.candidate_ensemble.CandidateEnsemble`) and no link. Vectorised: one [N, A] product a block
of rows.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

__all__ = ["ExemplarScorer", "fit_exemplars", "above_chance", "chance_bar", "ONE_SIDED_Z"]

#: the one-sided 5% point of the standard normal: :func:`above_chance`'s bar
ONE_SIDED_Z = 1.6448536269514722
#: rows scored at once (an [ROWS, A] block of similarities)
ROWS = 65_536


class ExemplarScorer(nn.Module):
    """Each row's largest cosine similarity, in (-1, 1], to a set of exemplar rows, both z-scored by fixed column
    statistics.

    Buffers: ``mean`` and ``std`` [F] (the z-score; a constant column has std 1) and ``exemplars`` [A, F] (z-scored,
    unit length). ``forward(x, ...)`` returns the score of every row [N] (float32); :meth:`score` is the identity, so
    the module is scored like GCCAD's models (``model.score(model(x, edge_index))``). A row of all column means (zero
    after the z-score) scores 0.
    """

    #: how ``model.pt`` names such a member of a candidate ensemble (:mod:`gcad_dist.checkpoint`)
    member_kind = "exemplar"

    def __init__(self, mean: Tensor, std: Tensor, exemplars: Tensor) -> None:
        super().__init__()
        mean, std, exemplars = (torch.as_tensor(t, dtype=torch.float32) for t in (mean, std, exemplars))
        if mean.ndim != 1 or std.shape != mean.shape or exemplars.ndim != 2 or exemplars.shape[1] != mean.shape[0]:
            raise ValueError(f"exemplars [A, F] with a mean and a std of F columns needed, got {tuple(exemplars.shape)}, "
                             f"{tuple(mean.shape)}, {tuple(std.shape)}")
        if exemplars.shape[0] < 1:
            raise ValueError("at least one exemplar is needed")
        if not bool(torch.isfinite(exemplars).all()) or not bool((std > 0).all()):
            raise ValueError("exemplars must be finite and every column's std > 0")
        self.register_buffer("mean", mean)
        self.register_buffer("std", std)
        self.register_buffer("exemplars", exemplars)

    @property
    def in_features(self) -> int:
        return int(self.mean.shape[0])

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> "ExemplarScorer":
        """The module whose ``state_dict()`` is ``state``."""
        need = {"mean", "std", "exemplars"}
        if not need <= set(state):
            raise ValueError(f"not an exemplar scorer's state (missing {', '.join(sorted(need - set(state)))})")
        return cls(state["mean"], state["std"], state["exemplars"])

    def forward(self, x: Tensor, *args: Any, **kwargs: Any) -> Tensor:
        if x.shape[1] < self.in_features:
            raise ValueError(f"the exemplar scorer reads {self.in_features} columns, the input has {x.shape[1]}")
        e = self.exemplars.to(x.device)
        mean, std = self.mean.to(x.device), self.std.to(x.device)
        out = []
        for lo in range(0, x.shape[0], ROWS):
            z = (x[lo:lo + ROWS, :self.in_features].detach().float() - mean) / std
            z = z / z.norm(dim=1, keepdim=True).clamp_min(1e-12)
            out.append((z @ e.T).amax(dim=1))
        return torch.cat(out) if out else x.new_zeros(0, dtype=torch.float32)

    def score(self, out: Tensor) -> Tensor:
        """The forward output itself (higher = more like a known anomaly) [N]."""
        return out

    def extra_repr(self) -> str:
        return f"exemplars={self.exemplars.shape[0]}, in_features={self.in_features}"


def fit_exemplars(x: Any, anomalies: Any) -> ExemplarScorer:
    """The scorer of the rows of ``x`` [N, F] (raw features) marked by the boolean mask ``anomalies`` [N] (the labelled
    training anomalies), with the z-score's statistics over every row of ``x`` (no label read beyond the mask)."""
    xs = torch.as_tensor(np.asarray(x.detach().cpu() if torch.is_tensor(x) else x), dtype=torch.float64)
    mask = torch.as_tensor(np.asarray(anomalies.cpu() if torch.is_tensor(anomalies) else anomalies), dtype=torch.bool)
    if xs.ndim != 2 or xs.shape[0] < 1 or xs.shape[1] < 1 or mask.shape != (xs.shape[0],):
        raise ValueError(f"rows of features and one mask entry per row needed, got {tuple(xs.shape)} and "
                         f"{tuple(mask.shape)}")
    if not bool(mask.any()):
        raise ValueError("no labelled anomaly to take as an exemplar")
    mean = xs.mean(0)
    std = xs.std(0, unbiased=False)
    std = torch.where(std > 0, std, torch.ones_like(std))
    z = (xs[mask] - mean) / std
    z = z / z.norm(dim=1, keepdim=True).clamp_min(1e-12)
    return ExemplarScorer(mean.float(), std.float(), z.float())


def chance_bar(positives: int, negatives: int, z: float = ONE_SIDED_Z) -> float:
    """The AUROC above which a score ranks ``positives`` against ``negatives`` better than chance at one-sided level
    ``z`` (default 5%), by the normal approximation of the Mann-Whitney statistic under the null:
    ``0.5 + z * sqrt((n1 + n0 + 1) / (12 n1 n0))``; inf with no positive or no negative."""
    if positives < 1 or negatives < 1:
        return math.inf
    return 0.5 + z * math.sqrt((positives + negatives + 1) / (12.0 * positives * negatives))


def above_chance(y: Any, scores: Any) -> tuple[bool, float, float]:
    """(whether ``scores`` rank the anomalies of ``y`` (1 = anomaly, 0 = normal, others ignored) above
    :func:`chance_bar`, their AUROC, the bar)."""
    from gcad_dist.metrics import auroc

    y = np.asarray(y).ravel()
    s = np.asarray(scores, dtype=np.float64).ravel()
    known = (y == 0) | (y == 1)
    n1, n0 = int((y[known] == 1).sum()), int((y[known] == 0).sum())
    bar = chance_bar(n1, n0)
    if not math.isfinite(bar):
        return False, float("nan"), bar
    a = auroc(y[known], s[known])
    return bool(a > bar), float(a), bar
