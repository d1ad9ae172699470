"""The loose context: a node's neighbours weighted by how loosely they are tied to it, and the score that uses it.

A fraud ring's members look alike and link to one another, so most of a member's neighbours are the ring itself and
the mean over its neighbours (the local contrast's context) is partly the ring: the member agrees with it. A link
inside a dense group has many common neighbours; a member's other links have few. Weighting neighbour ``j`` of ``i``
by ``(1 + CN_ij) ** -power`` (:func:`embedded_link_weights`) makes a context of the node's loosely tied neighbours.
Groups of *unlike* nodes linked together (PyGOD's planted cliques) are the opposite case: the plain mean sees them and
the loose context hides them. :func:`larger_z` keeps both: each score is put on a robust z scale over the nodes with
neighbours, and a node takes the larger of its two (``GCCADConfig.loose_context``; BENCHMARKS.md, session 48).

Common neighbours are counted exactly on the undirected simple view of the graph (self-loops and repeats dropped):
each edge's lower-degree end's neighbours are looked up in the other end's neighbour list (one ``searchsorted`` over
the sorted edge keys), a bounded chunk of lookups at a time, so that memory stays bounded on a large graph. Work: the
sum over edges of the lower end degree, as in triangle counting. All vectorised.
"""

from __future__ import annotations

import torch
from torch import Tensor

#: ``(1 + CN) ** -POWER``: the weight of a neighbour with ``CN`` common neighbours (:func:`embedded_link_weights`)
POWER = 2.0


def common_neighbours(edge_index: Tensor, num_nodes: int, max_lookups: int = 1 << 24) -> Tensor:
    """[E] the number of common neighbours of the two ends of each edge of ``edge_index`` [2, E] (long), counted on
    the graph's undirected simple view; an edge whose ends are equal (a self-loop) gets 0."""
    if edge_index.size(1) == 0:
        return torch.zeros(0, dtype=torch.long, device=edge_index.device)
    src, dst = edge_index[0], edge_index[1]
    both = torch.cat([torch.stack([src, dst]), torch.stack([dst, src])], dim=1)
    both = both[:, both[0] != both[1]]
    keys = torch.unique(both[0] * num_nodes + both[1])  # sorted: by row, then column
    row, col = torch.div(keys, num_nodes, rounding_mode="floor"), keys % num_nodes
    deg = torch.bincount(row, minlength=num_nodes)
    ptr = torch.cumsum(deg, 0) - deg
    # each edge: expand the lower-degree end's neighbours, look each up among the other end's
    small_is_src = deg[src] <= deg[dst]
    a = torch.where(small_is_src, src, dst)
    b = torch.where(small_is_src, dst, src)
    per = torch.where(a == b, torch.zeros_like(deg[a]), deg[a])
    out = torch.zeros(src.numel(), dtype=torch.long, device=src.device)
    cost = torch.cumsum(per, 0)
    start, e = 0, src.numel()
    while start < e:
        base = int(cost[start - 1]) if start > 0 else 0
        stop = max(int(torch.searchsorted(cost, base + max_lookups, right=True)), start + 1)
        p = per[start:stop]
        total = int(p.sum())
        if total:
            edge = torch.repeat_interleave(torch.arange(start, stop, device=src.device), p, output_size=total)
            offset = torch.arange(total, device=src.device) - torch.repeat_interleave(torch.cumsum(p, 0) - p, p,
                                                                                      output_size=total)
            k = col[ptr[a[edge]] + offset]
            want = b[edge] * num_nodes + k
            pos = torch.searchsorted(keys, want).clamp_max(keys.numel() - 1)
            hit = (keys[pos] == want).long()
            out.index_add_(0, edge, hit)
        start = stop
    return out


def embedded_link_weights(edge_index: Tensor, num_nodes: int, power: float = POWER) -> Tensor:
    """[E] float weights ``(1 + CN) ** -power`` of the edges ``j -> i`` of ``edge_index``: a neighbour that shares
    many neighbours with the node (a link inside a dense group) counts little in its context."""
    cn = common_neighbours(edge_index, num_nodes)
    return (1.0 + cn.double()).pow(-power).float()


def robust_z(scores: Tensor, has: Tensor) -> Tensor:
    """(scores - median) / (1.4826 MAD), median and MAD over the nodes ``has``; the other nodes 0 (the median).
    float64 [N]."""
    s = scores.double()
    if not bool(has.any()):
        return torch.zeros_like(s)
    med = s[has].median()
    mad = float((s[has] - med).abs().median()) * 1.4826
    return torch.where(has, (s - med) / max(mad, 1e-12), torch.zeros_like(s))


def larger_z(plain: Tensor, loose: Tensor, has: Tensor) -> Tensor:
    """The loose-context score: per node the larger of the robust z-scores (:func:`robust_z`) of ``plain`` (the
    score against the neighbours' mean) and ``loose`` (against the loose context); ``plain``'s dtype."""
    return torch.maximum(robust_z(plain, has), robust_z(loose, has)).to(plain.dtype)
