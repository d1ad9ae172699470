"""Corruptions drawn afresh at every training step (beside the store's fixed corrupt subgraphs).

A store holds one draw of corrupt subgraphs (:mod:`partitioning.corrupt`). On a small graph an epoch
repeats the same few subgraphs hundreds of times, and a model learns *which* nodes were corrupted
rather than *what* a corruption looks like: the pre-training loss falls to ~0 within an epoch and the
model scores real anomalies at chance. A corruption redrawn at every step cannot be memorised.

:func:`swap_features` is the per-step analogue of the store's ``features`` kind (a contextual
anomaly): a node keeps its links but carries another node's features.
"""

from __future__ import annotations

import torch
from torch import Tensor


def swap_features(x: Tensor, y: Tensor, mask: Tensor | None, fraction: float,
                  generator: torch.Generator | None = None) -> tuple[Tensor, Tensor]:
    """(x', y'): ``round(fraction * #normal labelled nodes)`` of the nodes with ``y == 0`` (and in ``mask``,
    default all) get the feature row of a node drawn uniformly from all rows (never themselves) and the
    label 1. ``x`` and ``y`` are not modified. Nodes of rows without a label (y < 0) are never chosen."""
    if fraction <= 0:
        return x, y
    cand = (y == 0) if mask is None else ((y == 0) & mask)
    idx = cand.nonzero().squeeze(1)
    m = int(round(fraction * idx.numel()))
    n = x.size(0)
    if m == 0 or n < 2:
        return x, y
    pick, donor = _draw(idx, m, n, generator)
    x2, y2 = x.clone(), y.clone()
    x2[pick] = x[donor]
    y2[pick] = 1
    return x2, y2


def _draw(idx: Tensor, m: int, n: int, generator: torch.Generator | None) -> tuple[Tensor, Tensor]:
    """(m nodes drawn from ``idx`` without replacement, a donor row for each: any of the n rows but itself)."""
    pick = idx[torch.randperm(idx.numel(), generator=generator, device=idx.device)[:m]]
    # a donor other than the node itself: an offset in 1 .. n-1 from it
    donor = (pick + torch.randint(1, n, (m,), generator=generator, device=pick.device)) % n
    return pick, donor


def swap_features_members(x: Tensor, y: Tensor, mask: Tensor | None, fraction: float, members: int,
                          generator: torch.Generator | None = None) -> tuple[Tensor, Tensor]:
    """:func:`swap_features` drawn ``members`` times independently, one draw per member of an ensemble: x' [N, K, F]
    and y' [N, K], member k's input and labels in column k."""
    x2 = x.unsqueeze(1).repeat(1, members, 1)
    y2 = y.unsqueeze(1).repeat(1, members)
    if fraction <= 0:
        return x2, y2
    cand = (y == 0) if mask is None else ((y == 0) & mask)
    idx = cand.nonzero().squeeze(1)
    m = int(round(fraction * idx.numel()))
    n = x.size(0)
    if m == 0 or n < 2:
        return x2, y2
    for k in range(members):
        pick, donor = _draw(idx, m, n, generator)
        x2[pick, k] = x[donor]
        y2[pick, k] = 1
    return x2, y2
