"""The label-free views a checkpoint records, applied to its contrast scores.

A label-free checkpoint (``gcad_dist.pretrain``'s local recipe) records two views that ``gcad_dist.score`` adds to
the contrast of each node with its context, both fitted on the graph being scored and reading no label:

- the feature view (``feature_view``; :func:`gcad_dist.feature_view.apply_feature_view`): an isolation forest on
  the raw features, fused where it corroborates the contrast's top nodes; where the links say nothing about the
  features, each node's distance to its 5th nearest node in feature space instead;
- the signature view (``signature_view``; :func:`gcad_dist.signature_view.apply_signature_view`): the scores' top
  nodes learnt by a cross-fitted linear classifier of the raw features and the links, its rank added where it tells
  them apart.

:func:`apply_views` applies them in that order. ``gcad_dist.score`` calls it for a checkpoint's model, and a
:class:`~gcad_dist.model.candidate_ensemble.CandidateEnsemble` calls it for a member that carries its views
(``gcad_dist.finetune``'s zero-shot candidate), so that both score alike. Both views have fixed seeds: a graph is
scored the same way twice.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

__all__ = ["apply_views", "recorded_views"]


def recorded_views(model: torch.nn.Module) -> dict[str, bool]:
    """``{"feature_view": bool, "signature_view": bool}``: the views ``model``'s config records (both False for a
    model without them, e.g. an ensemble or a supervised model)."""
    cfg = getattr(model, "config", None)
    return {"feature_view": bool(getattr(cfg, "feature_view", False)),
            "signature_view": bool(getattr(cfg, "signature_view", False))}


def apply_views(scores: np.ndarray, x_raw: np.ndarray, edge_index: Any, num_nodes: int, feature_view: bool,
                signature_view: bool, feature_always: bool = False, signature_always: bool = False,
                threads: int | None = None) -> tuple[np.ndarray, dict[str, Any] | None, dict[str, Any] | None]:
    """``scores`` [N] with the views that are on: the feature view, then the signature view; and their records (None
    where a view is off). ``x_raw`` [N, F]: the raw features; ``edge_index`` [2, E]: the links of the graph scored
    (they say which nodes have a context); ``*_always``: add the view whatever its test says. ``threads``: the
    forest's (default: torch's)."""
    view = signature = None
    if feature_view:
        from gcad_dist.feature_view import apply_feature_view

        ei = torch.as_tensor(edge_index)
        has = (torch.bincount(ei[1], minlength=num_nodes) > 0).cpu().numpy()
        scores, view = apply_feature_view(scores, np.asarray(x_raw), has,
                                          threads=threads or torch.get_num_threads(), always=feature_always,
                                          edge_index=ei)
    if signature_view:
        from gcad_dist.signature_view import apply_signature_view

        scores, signature = apply_signature_view(scores, np.asarray(x_raw), torch.as_tensor(edge_index),
                                                 always=signature_always)
    return scores, view, signature
