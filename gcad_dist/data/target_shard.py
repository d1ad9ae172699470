"""A whole graph trained by several workers at once, each on a disjoint share of its target nodes.

A whole-graph store (``partitioning.build --k 1``) holds one subgraph. Trained whole by ``W`` workers, every worker
used to train every node at every step, so that extra workers added nothing. The local recipe's loss is a mean of
per-node terms, each of which reads the node's own row and the mean of its in-neighbours' rows. So each worker
takes a fixed share of about ``N / W`` target nodes (:func:`gcad_dist.data.sharding.seed_share`): it projects every
node (a neighbour may be anywhere), averages the contexts of its own targets only (their in-links: about ``E / W``
of the links) and puts only their terms in its loss. The workers' gradients are averaged
(:func:`gcad_dist.distributed.grad_sync.average_gradients`); weighted by
``W * n_rank / n`` (:attr:`TargetShard.weight`), their mean is the gradient of the whole step's mean exactly, so a
step of ``W`` workers is the one step of one worker, at about ``1 / W`` of its cost in links.

The swaps stay drawn over every node, on each worker its own draw: a target's label and its neighbours' swaps then
follow the same law as on one worker. A dense step's cap (:func:`gcad_dist.data.degree_cap.cap_dense_step`) is
drawn on the share's links: a target keeps every in-link there, so its kept count follows the same law too.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from .sharding import seed_share


class TargetShard:
    """Worker ``rank`` of ``world``'s share of a whole graph's target nodes: ``mine`` (bool [N]) and ``edge_index``
    (the in-links of those nodes, in their order in the graph's ``edge_index``)."""

    def __init__(self, edge_index: Tensor, num_nodes: int, rank: int, world: int, seed: int = 0) -> None:
        if not 0 <= rank < world:
            raise ValueError(f"rank {rank} outside a world of {world}")
        share = torch.from_numpy(seed_share(int(num_nodes), 0, rank, world, seed))
        self.mine = torch.zeros(int(num_nodes), dtype=torch.bool, device=edge_index.device)
        self.mine[share.to(edge_index.device)] = True
        self.edge_index = edge_index[:, self.mine[edge_index[1]]]
        self.num_nodes, self.world, self.total_links = int(num_nodes), int(world), int(edge_index.size(1))
        self.size = int(share.numel())  # the share's node count, kept: a whole graph's steps have no other mask

    def loss_mask(self, mask: Tensor | None) -> Tensor:
        """The step's loss mask restricted to this share (``mask`` None: every node)."""
        return self.mine if mask is None else mask & self.mine

    def count(self, own: Tensor, mask: Tensor | None = None) -> int:
        """Nodes in ``own`` (:meth:`loss_mask` of ``mask``): the share's size without a mask, read from no tensor (a
        whole-graph step's count costs a GPU no wait)."""
        return self.size if mask is None else int(own.sum())

    def weight(self, mask: Tensor | None, own: Tensor) -> float:
        """``W * n_rank / n``: the factor on this worker's mean loss (over ``own``, its part of ``mask``) that makes the
        mean of the workers' gradients the gradient of the mean over all of ``mask`` (1 where shares are equal)."""
        total = self.num_nodes if mask is None else int(mask.sum())
        return self.world * self.count(own, mask) / max(1, total)


def shard_for(cache: dict[Any, TargetShard], edge_index: Tensor, num_nodes: int, rank: int, world: int,
              seed: int = 0, key: Any = None) -> TargetShard:
    """The cached :class:`TargetShard` of subgraph ``key`` (one kept at a time: a whole-graph store has one)."""
    k = (key, int(edge_index.size(1)), int(num_nodes))
    shard = cache.get(k)
    if shard is None:
        cache.clear()
        shard = cache[k] = TargetShard(edge_index, num_nodes, rank, world, seed)
    return shard
