"""Corruptions drawn afresh at every training step (beside the store's fixed corrupt subgraphs).

A store holds one draw of corrupt subgraphs (:mod:`partitioning.corrupt`). On a small graph an epoch
repeats the same few subgraphs hundreds of times, and a model learns *which* nodes were corrupted
rather than *what* a corruption looks like: the pre-training loss falls to ~0 within an epoch and the
model scores real anomalies at chance. A corruption redrawn at every step cannot be memorised.

:func:`swap_features` is the per-step analogue of the store's ``features`` kind (a contextual
anomaly): a node keeps its links but carries another node's features. :func:`plant_cliques` is a structural one
(PyGOD's planted cliques of unlike nodes): groups of nodes keep their features and are joined into cliques.
:func:`push_to_tails` is a global one (what IsolationForest sees): a node keeps its links, and a few of its features
take values from the far tails of their columns.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor


def swap_features(x: Tensor, y: Tensor, mask: Tensor | None, fraction: float,
                  generator: torch.Generator | None = None) -> tuple[Tensor, Tensor]:
    """(x', y'): ``round(fraction * #normal labelled nodes)`` of the nodes with ``y == 0`` (and in ``mask``,
    default all) get the feature row of a node drawn uniformly from all rows (never themselves) and the
    label 1. ``x`` and ``y`` are not modified. Nodes of rows without a label (y < 0) are never chosen."""
    idx = _candidates(y, mask, fraction)
    if idx is None:
        return x, y
    pick, donor = _draw(idx, int(round(fraction * idx.numel())), x.size(0), generator)
    x2, y2 = x.clone(), y.clone()
    x2[pick] = x[donor]
    y2[pick] = 1
    return x2, y2


def _candidates(y: Tensor, mask: Tensor | None, fraction: float) -> Tensor | None:
    """The rows a swap may pick (normal, in ``mask``), or None when ``fraction`` of them rounds to no swap."""
    if fraction <= 0 or y.size(0) < 2:
        return None
    cand = (y == 0) if mask is None else ((y == 0) & mask)
    idx = cand.nonzero().squeeze(1)
    return idx if round(fraction * idx.numel()) > 0 else None


def _draw(idx: Tensor, m: int, n: int, generator: torch.Generator | None) -> tuple[Tensor, Tensor]:
    """(m nodes drawn from ``idx`` without replacement, a donor row for each: any of the n rows but itself)."""
    pick = idx[torch.randperm(idx.numel(), generator=generator, device=idx.device)[:m]]
    # a donor other than the node itself: an offset in 1 .. n-1 from it
    donor = (pick + torch.randint(1, n, (m,), generator=generator, device=pick.device)) % n
    return pick, donor


def draw_member_swaps(y: Tensor, mask: Tensor | None, fraction: float, members: int,
                      generator: torch.Generator | None = None) -> tuple[Tensor, Tensor, Tensor] | None:
    """:func:`swap_features` drawn ``members`` times independently, one draw per member of an ensemble, as a plan:
    (y' [N, K], pick [K, m], donor [K, m]); member k's input is ``x`` with rows ``pick[k]`` replaced by rows
    ``donor[k]`` (``GCCAD.forward(..., member_swaps=(pick, donor))`` applies it without a [N, K, F] copy), and
    column k of y' its labels. None when there is nothing to swap."""
    idx = _candidates(y, mask, fraction)
    if idx is None:
        return None
    m = int(round(fraction * idx.numel()))
    draws = [_draw(idx, m, y.size(0), generator) for _ in range(members)]
    pick, donor = torch.stack([d[0] for d in draws]), torch.stack([d[1] for d in draws])
    y2 = y.unsqueeze(1).repeat(1, members)
    y2[pick, torch.arange(members, device=y.device).unsqueeze(1)] = 1
    return y2, pick, donor


def push_to_tails(x: Tensor, y: Tensor, mask: Tensor | None, fraction: float, columns: float = 0.1,
                  tail: float = 0.01, generator: torch.Generator | None = None) -> tuple[Tensor, Tensor]:
    """(x', y'): a global-outlier corruption. ``round(fraction * #normal nodes)`` of the nodes with ``y == 0`` (and
    in ``mask``, default all) keep their links and all but ``ceil(columns * F)`` of their features (at least one
    column, drawn per node); each of those takes the value of a row drawn from the ``tail`` share (at least one
    row) of the column's sorted values at the end farther from the node's own value, so a sparse column's node
    gets its rare value. The quantiles are those of ``x``'s rows (a minibatch's, when ``x`` is one). The picked
    nodes get the label 1; ``x`` and ``y`` are not modified."""
    if not 0 < columns <= 1 or not 0 < tail <= 0.5:
        raise ValueError(f"columns must be in (0, 1] and tail in (0, 0.5], got {columns} and {tail}")
    idx = _candidates(y, mask, fraction)
    if idx is None or x.size(1) == 0:
        return x, y
    n, f = x.shape
    m = int(round(fraction * idx.numel()))
    dev = x.device
    pick = idx[torch.randperm(idx.numel(), generator=generator, device=idx.device)[:m]].to(dev)
    c = max(1, math.ceil(columns * f))
    cols = torch.rand(m, f, generator=generator, device=dev).argsort(1)[:, :c]  # [m, c], distinct per node
    t = max(1, math.ceil(tail * n))
    ranks = torch.randint(0, t, (m, c), generator=generator, device=dev)  # depth into the tail
    high = x.topk(t, 0).values[ranks, cols]  # a value from the top tail of each chosen column (t rows, not a sort)
    low = x.topk(t, 0, largest=False).values[ranks, cols]  # ... and from the bottom tail
    own = x[pick.unsqueeze(1), cols]
    new = torch.where((high - own).abs() >= (own - low).abs(), high, low)
    x2, y2 = x.clone(), y.clone()
    x2[pick.unsqueeze(1), cols] = new
    y2[pick.to(y.device)] = 1
    return x2, y2


def plant_cliques(edge_index: Tensor, y: Tensor, mask: Tensor | None, fraction: float,
                  size: tuple[int, int] = (4, 20), hop1_edges: int | None = None,
                  generator: torch.Generator | None = None) -> tuple[Tensor, Tensor, int]:
    """(edge_index', y', hop1_edges'): a structural corruption, the per-step analogue of PyGOD's planted cliques
    (unlike nodes; not a fraud ring, whose members look alike). ``round(fraction * #normal nodes)`` of the nodes
    with ``y == 0`` (and in ``mask``, default all) are split into groups of a size drawn uniformly from ``size``
    (min, max; the last group takes the rest, and a rest of one node is left out) and every pair within a group is
    joined by an edge, both directions; those nodes get the label 1. A clique member keeps its features and its own
    links, and its neighbours' mean now mixes in nodes from anywhere in the graph.

    The new edges are inserted after the first ``hop1_edges`` edges (a hop-ordered minibatch's edges into its
    seeds; default all edges, i.e. appended), so that with ``mask`` = the seeds they stay in the hop-1 block;
    ``hop1_edges'`` counts them in. ``edge_index`` and ``y`` are not modified."""
    h1 = edge_index.size(1) if hop1_edges is None else int(hop1_edges)
    lo, hi = int(size[0]), int(size[1])
    if not 2 <= lo <= hi:
        raise ValueError(f"clique size must be 2 <= min <= max, got {size}")
    idx = _candidates(y, mask, fraction)
    m = 0 if idx is None else int(round(fraction * idx.numel()))
    if m < 2:
        return edge_index, y, h1
    dev = edge_index.device
    pick = idx[torch.randperm(idx.numel(), generator=generator, device=idx.device)[:m]]
    # group sizes: enough draws to cover m, cut at m (the last group takes the rest)
    sizes = torch.randint(lo, hi + 1, (m // lo + 1,), generator=generator, device=idx.device)
    ends = sizes.cumsum(0)
    g = int((ends < m).sum()) + 1
    sizes = sizes[:g].clone()
    sizes[-1] -= int(ends[g - 1]) - m
    if int(sizes[-1]) < 2:  # a single node left over: no clique of one
        pick, sizes = pick[: m - int(sizes[-1])], sizes[:-1]
    if sizes.numel() == 0:
        return edge_index, y, h1
    pick = pick.to(dev)
    sizes = sizes.to(dev)
    starts = sizes.cumsum(0) - sizes
    gid = torch.repeat_interleave(torch.arange(sizes.numel(), device=dev), sizes)  # group of each picked node
    rep = sizes[gid]  # each member pairs with every member of its group (itself dropped below)
    src = torch.repeat_interleave(pick, rep)
    offset = torch.arange(int(rep.sum()), device=dev) - torch.repeat_interleave(rep.cumsum(0) - rep, rep)
    dst = pick[torch.repeat_interleave(starts[gid], rep) + offset]
    keep = src != dst
    new = torch.stack([src[keep], dst[keep]]).to(edge_index.dtype)
    y2 = y.clone()
    y2[pick.to(y.device)] = 1
    out = torch.cat([edge_index[:, :h1], new, edge_index[:, h1:]], dim=1)
    return out, y2, h1 + new.size(1)
