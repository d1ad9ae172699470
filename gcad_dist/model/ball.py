"""The two-hop ball: which nodes make a node's local context when ``context_hops`` is 2.

The local contrast (``contrast="local"``) compares a node with the mean of its context's input projections. With
one hop (the default) the context is the node's neighbours. With two, it is its *ball*: the neighbours, and up to
``fanout`` sampled neighbours of each neighbour, each node once and never the node itself. Both are given as edges
``j -> i`` (``j`` in the context of ``i``), so :func:`gcad_dist.model.readout.neighbour_context` and the minibatch
path read either one alike.

On a whole graph the second hop is sampled here (:func:`sample_in_edges`), afresh at every training step and with a
fixed generator when scoring, and :func:`ball_mean` averages over the balls a chunk of targets at a time (a 1M-node
graph's balls have about 10^8 edges), or, where the balls cover a fair share of the graph (a dense graph: a ball of
1,000 neighbours' 10 each), by a membership matrix of a block of targets at a time (:func:`_dense_ball_sums`, session
58: the same balls, 2.8x faster on 25,000 nodes and 25M links); on a neighbour-sampled minibatch it is the sampler's
second hop (:func:`two_hop_ball` composes the two hops' edges). All vectorised: sorts, ``repeat_interleave`` and one
``unique`` per chunk.
"""

from __future__ import annotations

import torch
from torch import Tensor

from .loose_context import robust_z

#: the second hop's neighbours per neighbour (``GCCADConfig.context_fanout``'s default)
DEFAULT_FANOUT = 10
#: the generator seed of the second hop's sample when scoring (so a checkpoint scores a graph the same way twice)
SCORE_SEED = 0
#: :func:`ball_mean` takes the membership-matrix path when its targets' composed edges average at least this share of
#: the graph's nodes a target (the sorted-unique path's work grows with the composed edges, the matrix's with the
#: nodes: 4.1x faster at 12,000 nodes of mean degree 700, 2.8x at 25,000 of 1,000; at tolokers' 88 never taken)
DENSE_BALL_SHARE = 0.125
#: the membership matrix's cells (nodes x targets of a block) at most: 128 MiB of float32
DENSE_BALL_CELLS = 1 << 25


def sample_in_edges(edge_index: Tensor, num_nodes: int, fanout: int,
                    generator: torch.Generator | None = None) -> Tensor:
    """At most ``fanout`` of each node's in-edges, drawn uniformly without replacement (all of them where it has
    fewer); ``fanout < 0`` keeps every edge. [2, E'] sorted by target."""
    if fanout < 0 or edge_index.size(1) == 0:
        return edge_index
    src, dst = edge_index[0], edge_index[1]
    key = torch.rand(src.numel(), generator=generator, device="cpu").to(src.device)
    order = torch.sort(key).indices  # random order, then a stable sort by target keeps it within each target
    order = order[torch.sort(dst[order], stable=True).indices]
    dst_sorted = dst[order]
    start = torch.searchsorted(dst_sorted, dst_sorted, right=False)  # first position of each row's target
    rank = torch.arange(dst_sorted.numel(), device=src.device) - start
    keep = order[rank < fanout]
    return torch.stack([src[keep], dst[keep]])


def _by_target(outer: Tensor, num_nodes: int) -> tuple[Tensor, Tensor, Tensor]:
    """(sources sorted by target, first position of each node's in-edges, in-degree) of ``outer``."""
    order = torch.sort(outer[1], stable=True).indices
    counts = torch.bincount(outer[1], minlength=num_nodes)
    return outer[0][order], torch.cumsum(counts, 0) - counts, counts


def two_hop_ball(inner: Tensor, outer: Tensor, num_nodes: int,
                 indexed: tuple[Tensor, Tensor, Tensor] | None = None) -> Tensor:
    """Edges ``k -> i`` of the ball of every target ``i`` of ``inner``: each inner edge ``j -> i``, and ``k -> i``
    for each ``outer`` edge ``k -> j`` (``outer`` holds the in-edges of ``inner``'s sources), without ``i -> i``
    and without repeats. [2, E''] (sorted by target, then source). ``indexed``: ``outer`` already grouped by
    target (:func:`_by_target`), to reuse over chunks of ``inner``."""
    j_in, i_in = inner[0], inner[1]
    if j_in.numel() == 0:
        return inner
    k_sorted, ptr, counts = _by_target(outer, num_nodes) if indexed is None else indexed
    per = counts[j_in]  # second-hop edges reached through each inner edge
    total = int(per.sum())
    i_rep = torch.repeat_interleave(i_in, per, output_size=total)
    first = torch.repeat_interleave(ptr[j_in], per, output_size=total)
    offset = torch.arange(total, device=inner.device) - torch.repeat_interleave(torch.cumsum(per, 0) - per, per,
                                                                                output_size=total)
    k_rep = k_sorted[first + offset]
    src = torch.cat([j_in, k_rep])
    dst = torch.cat([i_in, i_rep])
    keep = src != dst
    key = torch.unique(dst[keep] * num_nodes + src[keep])  # sorted: by target, then source
    return torch.stack([key % num_nodes, torch.div(key, num_nodes, rounding_mode="floor")])


def ball_mean(h: Tensor, edge_index: Tensor, num_nodes: int, fanout: int = DEFAULT_FANOUT,
              generator: torch.Generator | None = None, max_pairs: int = 1 << 23,
              targets: Tensor | None = None, dense: bool | None = None) -> tuple[Tensor, Tensor]:
    """(the mean of ``h`` [N, d] over every node's two-hop ball, 0 where the ball is empty; the ball's size [N]), as
    ``neighbour_context`` over the edges of ``two_hop_ball(edge_index, sample_in_edges(...))`` gives, without
    holding every ball at once: the targets are taken in chunks of at most about ``max_pairs`` composed edges (a
    1M-node graph's balls have about 10^8), so memory stays bounded when scoring a large graph. ``targets`` (node
    ids): only their balls (the other rows 0, size 0); the second hop is sampled as for all, so their rows are the
    same as without ``targets``. ``dense``: the membership-matrix path (:func:`_dense_ball_sums`) or not; None =
    where the composed edges average :data:`DENSE_BALL_SHARE` of the nodes a target. Both give the same balls."""
    from .aggregate import weighted_sum

    outer = sample_in_edges(edge_index, num_nodes, fanout, generator)
    indexed = _by_target(outer, num_nodes)
    if targets is not None:
        wanted = torch.zeros(num_nodes, dtype=torch.bool, device=edge_index.device)
        wanted[targets] = True
        edge_index = edge_index[:, wanted[edge_index[1]]]
    order = torch.sort(edge_index[1], stable=True).indices
    inner = edge_index[:, order]
    cost = torch.cumsum(indexed[2][inner[0]] + 1, 0)  # composed edges up to each inner edge (targets contiguous)
    if dense is None:
        dense = inner.size(1) > 0 and int(cost[-1]) >= DENSE_BALL_SHARE * num_nodes * int(
            torch.unique_consecutive(inner[1]).numel())
    if dense:
        total, size = _dense_ball_sums(h, inner, outer, num_nodes)
        return total / size.clamp_min(1).to(total.dtype).unsqueeze(-1), size
    total = torch.zeros(num_nodes, h.size(1), dtype=h.dtype, device=h.device)
    size = torch.zeros(num_nodes, dtype=torch.long, device=h.device)
    start, e = 0, inner.size(1)
    while start < e:
        stop = int(torch.searchsorted(cost, cost[start] - 1 + max_pairs, right=True))
        stop = max(stop, start + 1)
        if stop < e:  # end the chunk at a target's last edge, so that each ball is whole in one chunk
            stop = int(torch.searchsorted(inner[1], inner[1][stop - 1], right=True))
        ball = two_hop_ball(inner[:, start:stop], outer, num_nodes, indexed)
        total = total + weighted_sum(h, ball, None, num_nodes)
        size += torch.bincount(ball[1], minlength=num_nodes)
        start = stop
    return total / size.clamp_min(1).to(total.dtype).unsqueeze(-1), size


def _dense_ball_sums(h: Tensor, inner: Tensor, outer: Tensor, num_nodes: int) -> tuple[Tensor, Tensor]:
    """(the sum of ``h`` [N, d] over every target's two-hop ball, the ball's size [N]) by membership: for a block of
    targets, ``A[j, t]`` = 1 for an ``inner`` edge ``j -> t`` (sorted by target), then the nodes two hops away are
    ``B^T A > 0`` with ``B^T[k, j]`` = 1 for an ``outer`` edge ``k -> j``; each ball is those and the neighbours,
    without the target, each node once, as :func:`two_hop_ball` makes it. Blocks of at most
    :data:`DENSE_BALL_CELLS` nodes x targets."""
    n, dev = num_nodes, h.device
    bt = torch.sparse_coo_tensor(outer, torch.ones(outer.size(1), device=dev), (n, n),
                                 check_invariants=False).coalesce()
    work = torch.float64 if h.dtype == torch.float64 else torch.float32  # sums of up to n rows: not in half precision
    total = torch.zeros(n, h.size(1), dtype=work, device=dev)
    size = torch.zeros(n, dtype=torch.long, device=dev)
    tgt, counts = torch.unique_consecutive(inner[1], return_counts=True)
    ends = torch.cumsum(counts, 0)
    block = max(1, DENSE_BALL_CELLS // max(n, 1))
    hw = h.to(work)
    for b0 in range(0, tgt.numel(), block):
        b1 = min(b0 + block, tgt.numel())
        e0, e1 = (int(ends[b0 - 1]) if b0 else 0), int(ends[b1 - 1])
        local = torch.repeat_interleave(torch.arange(b1 - b0, device=dev), counts[b0:b1])
        a = torch.zeros(n, b1 - b0, device=dev)
        a[inner[0, e0:e1], local] = 1.0
        member = (torch.sparse.mm(bt, a) > 0) | (a > 0)
        member[tgt[b0:b1], torch.arange(b1 - b0, device=dev)] = False  # never the target itself
        total[tgt[b0:b1]] = member.to(work).t() @ hw
        size[tgt[b0:b1]] = member.sum(0)
    return total.to(h.dtype), size


#: the ball switch (:func:`ball_reveals_group`): a node stands out at robust z above ``SWITCH_Z``; the ball is used when
#: it makes at least ``SWITCH_SHARE`` more of the nodes stand out than the neighbours do, and at least ``SWITCH_RATIO``
#: times as many. Session 48 asked for 2% and twice as many, and missed a weibo-like graph; session 49 set 1% and 1.15x
#: in the gap between 19 graphs with and without alike groups, then judged them on 14 graphs made afterwards
#: (BENCHMARKS.md, sessions 48 and 49)
SWITCH_Z, SWITCH_SHARE, SWITCH_RATIO = 3.0, 0.01, 1.15
#: on a graph of more nodes than this, the switch decides on this many of them, drawn at random with a fixed seed, and
#: computes every node's ball only when it chooses the ball (the shares' standard error at 200k nodes is under 0.1%)
SWITCH_SAMPLE = 200_000


def switch_sample(num_nodes: int, device: torch.device | str = "cpu") -> Tensor | None:
    """The sorted node ids the ball switch decides on: ``SWITCH_SAMPLE`` of them drawn without replacement by a fixed
    generator on a larger graph, None (every node) otherwise."""
    if num_nodes <= SWITCH_SAMPLE:
        return None
    gen = torch.Generator().manual_seed(SCORE_SEED + 1)
    return torch.sort(torch.randperm(num_nodes, generator=gen)[:SWITCH_SAMPLE]).values.to(device)


def ball_reveals_group(plain: Tensor, ball: Tensor, has: Tensor) -> tuple[bool, float, float]:
    """Whether to score with the two-hop ball rather than the neighbours: (decision, share of the nodes ``has`` that
    stand out with the neighbours as context, share with the ball). A node stands out when its robust z-score
    (:func:`gcad_dist.model.loose_context.robust_z`) is above :data:`SWITCH_Z`. The ball is used when it makes a group
    of at least :data:`SWITCH_SHARE` more of the nodes stand out, and :data:`SWITCH_RATIO` times as many: what alike
    anomalies that are most of one another's neighbours do (fraud rings, bursts of alike accounts), since a mean over
    their neighbours is then mostly themselves. No label is read."""
    if not bool(has.any()):
        return False, 0.0, 0.0
    t1 = float((robust_z(plain, has)[has] > SWITCH_Z).double().mean())
    t2 = float((robust_z(ball, has)[has] > SWITCH_Z).double().mean())
    return (t2 - t1 >= SWITCH_SHARE and t2 >= SWITCH_RATIO * t1), t1, t2


def switch_phrase(use: bool, stand_out_neighbours: float, stand_out_ball: float) -> str:
    """The ball switch's choice in words, with both shares (:func:`ball_reveals_group`)."""
    return (f"{100 * stand_out_neighbours:.1f}% of the nodes stand out (robust z > {SWITCH_Z:g}) against their "
            f"neighbours, {100 * stand_out_ball:.1f}% against their two-hop ball: "
            + ("scored with the ball (a group the neighbours hide, such as fraud rings)" if use
               else "scored with the neighbours"))
