"""An ensemble of the candidates that validation cannot tell apart: several architectures, scored together.

``gcad_dist.train --contrast auto`` fits a few candidates (contrasts and norms) from the same seed. Which one is
best depends on the graph, and on a few dozen validation anomalies the choice is partly luck. So the run keeps
every candidate whose validation AUPRC is not clearly below the best one's and scores with the mean of their
scores (BENCHMARKS.md, session 18).

The members' scores live on different scales (a cosine distance in different spaces), so each is standardised
first: ``(s_i - mean_i) / std_i``, with ``mean_i`` and ``std_i`` fixed at fit time over every node of the training
graph (no label is read). A checkpoint keeps them, so that it scores new nodes and graphs exactly as training
scored the labelled ones. Like :class:`~gcad_dist.model.snapshots.SnapshotEnsemble`, the module takes the
members' forward arguments, returns their outputs as a list, and :meth:`CandidateEnsemble.score` combines them.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import Tensor

__all__ = ["CandidateEnsemble", "flat_ensemble", "standardisation", "standardised_mean"]


def standardisation(scores: Any) -> tuple[float, float]:
    """(mean, std) of a member's scores over every node, the std floored so that a constant score stays finite."""
    s = np.asarray(scores, dtype=np.float64)
    s = s[np.isfinite(s)]
    if s.size == 0:
        return 0.0, 1.0
    std = float(s.std())
    return float(s.mean()), std if std > 1e-12 else 1.0


def standardised_mean(scores: list[Any]) -> tuple[np.ndarray, list[tuple[float, float]]]:
    """The members' scores combined as :meth:`CandidateEnsemble.score` combines them (float32 [N]), and each
    member's :func:`standardisation` (mean, std), the statistics a :class:`CandidateEnsemble` is built with."""
    stats = [standardisation(s) for s in scores]
    combined = np.mean([(np.asarray(s) - mu) / sd for s, (mu, sd) in zip(scores, stats)], axis=0)
    return combined.astype(np.float32), stats


class CandidateEnsemble(torch.nn.Module):
    """Models of different architectures; the score is the mean of their standardised scores.

    Args:
        members: the models (each may be a :class:`~gcad_dist.model.snapshots.SnapshotEnsemble`), the primary first.
        means, stds: each member's score mean and standard deviation over the training graph's nodes.
    """

    def __init__(self, members: list[torch.nn.Module], means: list[float], stds: list[float]) -> None:
        super().__init__()
        if not members or len(members) != len(means) or len(members) != len(stds):
            raise ValueError(f"one mean and one std per member needed: {len(members)} members, "
                             f"{len(means)} means, {len(stds)} stds")
        if not all(s > 0 for s in stds):
            raise ValueError(f"member score stds must be > 0, got {stds}")
        self.members = torch.nn.ModuleList(members)
        self.register_buffer("means", torch.tensor(means, dtype=torch.float32))
        self.register_buffer("stds", torch.tensor(stds, dtype=torch.float32))

    def forward(self, *args: Any, **kwargs: Any) -> list[Any]:
        return [m(*args, **kwargs) for m in self.members]

    def score(self, outs: list[Any]) -> Tensor:
        """Mean over the members of ``(score - mean) / std`` [N]."""
        z = [(m.score(o).float() - self.means[i]) / self.stds[i] for i, (m, o) in enumerate(zip(self.members, outs))]
        return torch.stack(z).mean(0)


def flat_ensemble(parts: list[tuple[torch.nn.Module, float, float]]) -> CandidateEnsemble:
    """One flat :class:`CandidateEnsemble` scoring as the mean of ``(score_j - mean_j) / std_j`` over ``parts`` =
    (module, mean_j, std_j), where a module may itself be a :class:`CandidateEnsemble` (a kept model that is
    ``--contrast auto``'s average): its members join the flat list with composed statistics, so a checkpoint keeps one
    level. Exact: member i of part j (n_j members, its own mean_ji, std_ji) enters the mean over all L members with
    mean ``mean_ji + mean_j std_ji`` and std ``std_ji std_j n_j K / L`` (K parts); a plain part with ``mean_j`` and
    ``std_j K / L``."""
    leaves: list[tuple[torch.nn.Module, float, float]] = []  # (member, mean, std before the K / L factor)
    for module, mu, sd in parts:
        if isinstance(module, CandidateEnsemble):
            n = len(module.members)
            for m, mu_i, sd_i in zip(module.members, module.means.tolist(), module.stds.tolist()):
                leaves.append((m, mu_i + mu * sd_i, sd_i * sd * n))
        else:
            leaves.append((module, float(mu), float(sd)))
    k, n_leaves = len(parts), len(leaves)
    return CandidateEnsemble([m for m, _, _ in leaves], [mu for _, mu, _ in leaves],
                             [sd * k / n_leaves for _, _, sd in leaves])
