"""A snapshot ensemble: several states of one training run, scored together.

Full-batch training picks its epoch by validation AUPRC, which on a few dozen validation anomalies is noisy:
the single best evaluation is partly luck, and the states a few evaluations away score as well on new nodes.
:func:`gcad_dist.supervised.fit_supervised` therefore keeps the ``snapshots`` evaluations with the best
validation AUPRC and scores every node with the mean of their scores (BENCHMARKS.md, session 13: on split
halves of validation, +0.003 to +0.03 AUROC for GCCAD and the GNN baselines alike).

:class:`SnapshotEnsemble` holds those states as one module, so that a checkpoint scores new nodes exactly as
training scored the labelled ones. It takes the members' forward arguments and returns their outputs as a
list; :meth:`SnapshotEnsemble.score` averages the members' scores, like a member's own ``score``.
"""

from __future__ import annotations

import copy
from typing import Any

import torch
from torch import Tensor

__all__ = ["SnapshotEnsemble", "base_model", "leaf_models", "member_states", "primary_member"]


class SnapshotEnsemble(torch.nn.Module):
    """Members of one architecture with different weights; the score is the mean of theirs.

    Args:
        model: the architecture (its weights are not used: each member is a copy loaded with a state).
        states: one ``state_dict`` per member, the first being the best single state.
    """

    def __init__(self, model: torch.nn.Module, states: list[dict[str, Tensor]]) -> None:
        super().__init__()
        if not states:
            raise ValueError("a snapshot ensemble needs at least one state")
        device = next(model.parameters()).device
        members = []
        for state in states:
            # rebuilt from the config rather than deep-copied: a model may cache graph structures (the
            # baselines' sparse adjacency) that are neither copyable nor meant to be shared
            m = type(model)(model.config) if hasattr(model, "config") else copy.deepcopy(model)
            m.load_state_dict(state)
            members.append(m.to(device))
        self.members = torch.nn.ModuleList(members)

    def forward(self, *args: Any, **kwargs: Any) -> list[Any]:
        return [m(*args, **kwargs) for m in self.members]

    def score(self, outs: list[Any]) -> Tensor:
        """Mean of the members' anomaly scores [N]."""
        return torch.stack([m.score(o).float() for m, o in zip(self.members, outs)]).mean(0)


def base_model(model: torch.nn.Module) -> torch.nn.Module:
    """The model itself, or an ensemble's first (best single, or primary) member, down to a plain model: what to
    type-check or fine-tune. Covers :class:`SnapshotEnsemble`,
    :class:`~gcad_dist.model.candidate_ensemble.CandidateEnsemble` and :class:`~gcad_dist.model.rank_blend.RankBlend`
    (whose first member is the GCCAD model beside the forest); a candidate ensemble's isolation forest is passed over
    unless it is the only member."""
    from gcad_dist.model.candidate_ensemble import CandidateEnsemble
    from gcad_dist.model.rank_blend import RankBlend

    while isinstance(model, (SnapshotEnsemble, CandidateEnsemble, RankBlend)):
        model = primary_member(model.members) or model.members[0]
    return model


def primary_member(members: Any) -> torch.nn.Module | None:
    """The first of ``members`` that is a GCCAD model, not a scorer without one (``gcad_dist.finetune``'s isolation
    forest or exemplar scorer: a ``member_kind``), or None when no member is."""
    return next((m for m in members if getattr(m, "member_kind", None) is None), None)


def leaf_models(model: torch.nn.Module) -> list[torch.nn.Module]:
    """Every plain model inside ``model``: the members of its snapshot and candidate ensembles, at any depth, or
    ``model`` itself."""
    from gcad_dist.model.candidate_ensemble import CandidateEnsemble

    if isinstance(model, (SnapshotEnsemble, CandidateEnsemble)):
        return [leaf for m in model.members for leaf in leaf_models(m)]
    return [model]


def member_states(model: torch.nn.Module) -> list[dict[str, Tensor]]:
    """An ensemble's member states (the best first); a plain model's own state alone."""
    members = model.members if isinstance(model, SnapshotEnsemble) else [model]
    return [m.state_dict() for m in members]
