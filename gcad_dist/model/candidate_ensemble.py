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

Members may read differently normalised features (``gcad_dist.finetune``: the pre-trained members read the store's
normalisation, the model trained from scratch ``gcad_dist.train``'s z-scores). The ensemble then reads one wide input,
``[block 0 | block 1 | ... | label-input columns]``, each block the graph's ``width`` raw features under one
normalisation (the checkpoint's ``extra["input_blocks"]`` names them; ``gcad_dist.score.prepare_data`` builds them),
and member ``i`` reads its block ``blocks[i]`` and the label-input columns (:func:`member_input`).

A member may also carry the label-free views of its checkpoint (``views[i]``: :mod:`gcad_dist.label_free_views`;
``gcad_dist.finetune``'s zero-shot candidate, scored as ``gcad_dist.score`` scores the pre-trained checkpoint). It
then also reads the raw features, an input block of their own (``views[i]["block"]``), and the links, and its score
is its contrast with the views applied, over the nodes scored together, before the standardisation.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np
import torch
from torch import Tensor

__all__ = ["CandidateEnsemble", "flat_ensemble", "member_input", "standardisation", "standardised_mean", "VIEW_KEYS"]

#: a member's views record: the raw features' input block and which views are on
VIEW_KEYS = ("block", "feature_view", "signature_view")


def standardisation(scores: Any) -> tuple[float, float]:
    """(mean, std) of a member's scores over every node, the std floored so that a constant score stays finite."""
    s = np.asarray(scores, dtype=np.float64)
    s = s[np.isfinite(s)]
    if s.size == 0:
        return 0.0, 1.0
    std = float(s.std())
    return float(s.mean()), std if std > 1e-12 else 1.0


def standardised_scores(scores: list[Any]) -> tuple[np.ndarray, list[tuple[float, float]]]:
    """Each member's scores standardised by its :func:`standardisation` (float64 [C, N]), and those (mean, std)."""
    stats = [standardisation(s) for s in scores]
    return np.stack([(np.asarray(s, dtype=np.float64) - mu) / sd for s, (mu, sd) in zip(scores, stats)]), stats


def standardised_mean(scores: list[Any], weights: list[float] | None = None
                      ) -> tuple[np.ndarray, list[tuple[float, float]]]:
    """The members' scores combined as :meth:`CandidateEnsemble.score` combines them (float32 [N]), and each
    member's :func:`standardisation` (mean, std), the statistics a :class:`CandidateEnsemble` is built with.
    ``weights`` (>= 0, not all 0): a weighted mean of the standardised scores (:func:`flat_ensemble`'s ``weights``);
    None: the plain mean."""
    z, stats = standardised_scores(scores)
    w = _normalised(weights, len(scores))
    return (w @ z).astype(np.float32), stats


def _normalised(weights: list[float] | None, n: int) -> np.ndarray:
    """``weights`` as an array summing to 1 (None: equal); raises ValueError on a wrong length, a negative weight
    or all zeros."""
    if weights is None:
        return np.full(n, 1.0 / n)
    w = np.asarray(weights, dtype=np.float64)
    if w.shape != (n,) or not np.isfinite(w).all() or (w < 0).any() or w.sum() <= 0:
        raise ValueError(f"one finite weight >= 0 per part needed, not all 0: {n} parts, weights {weights}")
    return w / w.sum()


def member_input(x: Tensor, block: int, width: int, label_columns: int = 0) -> Tensor:
    """The columns of a wide input ``x`` = ``[block 0 | block 1 | ... | label_columns]`` (each block ``width``
    columns) that a member reading ``block`` was trained on: its block, then the label-input columns."""
    part = x[:, block * width:(block + 1) * width]
    if not label_columns:
        return part
    return torch.cat([part, x[:, x.shape[1] - label_columns:]], dim=1)


class _Viewed(NamedTuple):
    """A viewed member's forward output with what its views read: the raw features and the links."""

    out: Any
    x_raw: Tensor
    edge_index: Tensor


def _check_views(views: list[dict[str, Any] | None] | None, n: int) -> list[dict[str, Any] | None] | None:
    """``views`` validated (one record or None per member, each with :data:`VIEW_KEYS`) and normalised; None when no
    member has views."""
    if views is None or not any(views):
        return None
    if len(views) != n or any(v is not None and (not isinstance(v, dict) or set(v) != set(VIEW_KEYS)
                                                 or int(v["block"]) < 0) for v in views):
        raise ValueError(f"one views record (keys {', '.join(VIEW_KEYS)}, block >= 0) or None per member needed: "
                         f"{n} members, views {views}")
    return [None if v is None else {"block": int(v["block"]), "feature_view": bool(v["feature_view"]),
                                    "signature_view": bool(v["signature_view"])} for v in views]


class CandidateEnsemble(torch.nn.Module):
    """Models of different architectures; the score is the mean of their standardised scores.

    Args:
        members: the models (each may be a :class:`~gcad_dist.model.snapshots.SnapshotEnsemble`), the primary first.
        means, stds: each member's score mean and standard deviation over the training graph's nodes.
        blocks: each member's input block (:func:`member_input`), or None: every member reads the whole input.
        width: the columns of one block (the graph's raw feature count); needed with ``blocks``.
        label_columns: the label-input columns after the blocks, which every member reads.
        views: per member, None or its label-free views (``{"block": the raw features' input block, "feature_view":
            bool, "signature_view": bool}``), applied to its score before the standardisation; needs ``blocks``.
    """

    def __init__(self, members: list[torch.nn.Module], means: list[float], stds: list[float],
                 blocks: list[int] | None = None, width: int = 0, label_columns: int = 0,
                 views: list[dict[str, Any] | None] | None = None) -> None:
        super().__init__()
        if not members or len(members) != len(means) or len(members) != len(stds):
            raise ValueError(f"one mean and one std per member needed: {len(members)} members, "
                             f"{len(means)} means, {len(stds)} stds")
        if not all(s > 0 for s in stds):
            raise ValueError(f"member score stds must be > 0, got {stds}")
        if blocks is not None and (len(blocks) != len(members) or width < 1 or min(blocks) < 0):
            raise ValueError(f"one input block >= 0 per member and a block width >= 1 needed: {len(members)} "
                             f"members, blocks {blocks}, width {width}")
        self.members = torch.nn.ModuleList(members)
        self.register_buffer("means", torch.tensor(means, dtype=torch.float32))
        self.register_buffer("stds", torch.tensor(stds, dtype=torch.float32))
        self.views = _check_views(views, len(members))
        if self.views is not None and blocks is None:
            raise ValueError("members with views read the raw features as an input block: blocks needed")
        self.blocks = None if blocks is None else [int(b) for b in blocks]
        self.width, self.label_columns = int(width), int(label_columns)

    def forward(self, x: Any, *args: Any, **kwargs: Any) -> list[Any]:
        if self.blocks is None:
            return [m(x, *args, **kwargs) for m in self.members]
        outs = [m(member_input(x, b, self.width, self.label_columns), *args, **kwargs)
                for m, b in zip(self.members, self.blocks)]
        if self.views is None:
            return outs
        edge_index = args[0] if args else kwargs["edge_index"]
        return [o if v is None else _Viewed(o, member_input(x, v["block"], self.width), edge_index)
                for o, v in zip(outs, self.views)]

    def member_score(self, i: int, out: Any) -> Tensor:
        """Member ``i``'s score [N] of its forward output, with its views where it carries them (before the
        standardisation)."""
        if not isinstance(out, _Viewed):
            return self.members[i].score(out).float()
        from gcad_dist.label_free_views import apply_views

        s = self.members[i].score(out.out).float()
        v = self.views[i]
        viewed, _, _ = apply_views(s.detach().cpu().numpy(), out.x_raw.detach().cpu().numpy(), out.edge_index.cpu(),
                                   int(s.shape[0]), v["feature_view"], v["signature_view"])
        return torch.as_tensor(viewed, dtype=torch.float32, device=s.device)

    def score(self, outs: list[Any]) -> Tensor:
        """Mean over the members of ``(score - mean) / std`` [N]."""
        z = [(self.member_score(i, o) - self.means[i]) / self.stds[i] for i, o in enumerate(outs)]
        return torch.stack(z).mean(0)


def flat_ensemble(parts: list[tuple[torch.nn.Module, float, float]], blocks: list[int] | None = None,
                  width: int = 0, label_columns: int = 0, weights: list[float] | None = None,
                  views: list[dict[str, Any] | None] | None = None) -> CandidateEnsemble:
    """One flat :class:`CandidateEnsemble` scoring as the mean of ``(score_j - mean_j) / std_j`` over ``parts`` =
    (module, mean_j, std_j), where a module may itself be a :class:`CandidateEnsemble` (a kept model that is
    ``--contrast auto``'s average): its members join the flat list with composed statistics, so a checkpoint keeps one
    level. Exact: member i of part j (n_j members, its own mean_ji, std_ji) enters the mean over all L members with
    mean ``mean_ji + mean_j std_ji`` and std ``std_ji std_j n_j K / L`` (K parts); a plain part with ``mean_j`` and
    ``std_j K / L``. ``blocks``: each part's input block (every member of a part reads its part's block;
    :class:`CandidateEnsemble`), with the block ``width`` and the ``label_columns``; None: one input for all.
    ``weights``: the parts' weights (>= 0; :func:`standardised_mean`'s), folded into the stds: part j's std becomes
    ``std_j / (K w_j)`` with the weights summing to 1, so that the mean over the parts is the weighted one (the
    checkpoint format is unchanged); a part of weight 0 must not be passed. ``views``: each part's label-free views
    record or None (:class:`CandidateEnsemble`'s ``views``; only a part that is a single model may carry them)."""
    if blocks is not None and len(blocks) != len(parts):
        raise ValueError(f"one input block per part needed: {len(parts)} parts, blocks {blocks}")
    views = _check_views(views, len(parts))
    if views is not None and any(v is not None and isinstance(m, CandidateEnsemble) for (m, _, _), v in zip(parts, views)):
        raise ValueError("only a part that is a single model can carry label-free views")
    if weights is not None:
        w = _normalised(weights, len(parts))
        if (w <= 0).any():
            raise ValueError(f"a part of weight 0 cannot join an ensemble: weights {weights}")
        parts = [(m, mu, sd / (len(parts) * wj)) for (m, mu, sd), wj in zip(parts, w.tolist())]
    leaves: list[tuple[torch.nn.Module, float, float, int]] = []  # (member, mean, std before K / L, block)
    leaf_views: list[dict[str, Any] | None] = []
    for j, (module, mu, sd) in enumerate(parts):
        block = 0 if blocks is None else int(blocks[j])
        if isinstance(module, CandidateEnsemble):
            if module.blocks is not None:
                raise ValueError("a part whose members read input blocks of their own cannot join a flat ensemble")
            n = len(module.members)
            for m, mu_i, sd_i in zip(module.members, module.means.tolist(), module.stds.tolist()):
                leaves.append((m, mu_i + mu * sd_i, sd_i * sd * n, block))
                leaf_views.append(None)
        else:
            leaves.append((module, float(mu), float(sd), block))
            leaf_views.append(None if views is None else views[j])
    k, n_leaves = len(parts), len(leaves)
    return CandidateEnsemble([m for m, _, _, _ in leaves], [mu for _, mu, _, _ in leaves],
                             [sd * k / n_leaves for _, _, sd, _ in leaves],
                             blocks=None if blocks is None else [b for _, _, _, b in leaves], width=width,
                             label_columns=label_columns, views=leaf_views if views is not None else None)
