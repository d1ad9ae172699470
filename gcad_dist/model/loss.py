"""GCCAD objective (METHOD section 2): context-aware contrastive loss, link loss, CE ablation.

All functions are vectorised over a batch of graphs and independent of node order.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from .context import ContextSync
from .readout import graph_sum


def contrastive_loss(
    z: Tensor,
    c: Tensor,
    y: Tensor,
    batch: Tensor,
    num_graphs: int,
    mask: Tensor,
    tau: float,
    sync: ContextSync,
) -> Tensor:
    """Context-aware contrastive loss (Eq. loss).

    z: [N, d] L2-normalised projected node embeddings; c: [G, d] L2-normalised projected contexts;
    y: [N] 0/1 (1 = anomaly); mask: bool [N] labelled nodes. With l_i = c_g . z_i / tau, each normal
    masked node i of graph g contributes ``-log(exp(l_i) / (exp(l_i) + A_g))`` where
    ``A_g = sum_{j abnormal, masked, in g} exp(l_j)``. The loss is the mean over the normal masked
    nodes of the graphs that have at least one abnormal masked node; graphs without one contribute
    no term and do not count in the mean (a batch with no such graph gives 0, not NaN).

    Per graph, ``sync.sum`` receives ``[G, 2] = [A_g * exp(-1/tau), #abnormal_g]`` (the constant
    scale exp(-1/tau) keeps every summand <= 1 for any tau). Computed in fp32 as
    ``softplus(log A_g - l_i)``, which is stable for any tau.
    """
    cos = (z.float() * c.float().index_select(0, batch)).sum(-1)
    return contrastive_loss_from_cosines(cos, y, batch, num_graphs, mask, tau, sync)


def contrastive_loss_from_cosines(
    cos: Tensor, y: Tensor, batch: Tensor, num_graphs: int, mask: Tensor, tau: float, sync: ContextSync,
) -> Tensor:
    """:func:`contrastive_loss` given each node's cosine ``cos_i`` in [-1, 1] with *its* context: the graph's
    (``c_g . z_i``) or a context of its own (the neighbourhood contrast of :mod:`gcad_dist.model.gccad`).
    The normal nodes' agreement is contrasted with every abnormal node's of the same graph."""
    shifted = cos.float() / tau - 1.0 / tau  # <= 0 since |cos| <= 1
    abnormal = (y == 1) & mask
    normal = (y == 0) & mask
    abn_f = abnormal.to(shifted.dtype)
    t = sync.sum(graph_sum(torch.stack([torch.exp(shifted) * abn_f, abn_f], dim=-1), batch, num_graphs))
    a_sum, a_count = t[:, 0], t[:, 1]
    log_a = torch.log(a_sum.clamp_min(torch.finfo(a_sum.dtype).tiny))
    term = F.softplus(log_a.index_select(0, batch) - shifted)  # = -log(exp(l_i) / (exp(l_i) + A_g))
    use = (normal & (a_count > 0)[batch]).to(term.dtype)
    return (term * use).sum() / use.sum().clamp_min(1.0)


def logistic_loss_from_cosines(cos: Tensor, y: Tensor, tau: float) -> Tensor:
    """Per-node logistic loss on the cosine with the context (beyond METHOD.md): the mean over the given nodes
    of ``BCE(cos_i / tau, 1 - y_i)``; a normal node is pulled towards its context and an abnormal one pushed
    away, each on its own, with no ranking against the graph's other nodes. 0 for no node. (Under data
    parallelism the workers' means are averaged, as for every other term: gcad_dist.distributed.grad_sync.)"""
    if cos.numel() == 0:
        return cos.new_zeros((), dtype=torch.float32)
    return F.binary_cross_entropy_with_logits(cos.float() / tau, 1.0 - y.float())


def link_targets(edge_index: Tensor, y: Tensor, mask: Tensor) -> tuple[Tensor, Tensor]:
    """(target [E] float, used [E] bool): normal-normal edges 1, normal-abnormal 0; abnormal-abnormal
    edges and edges with an endpoint outside ``mask`` are not used."""
    src, dst = edge_index[0], edge_index[1]
    ab_s, ab_d = y[src] == 1, y[dst] == 1
    no_s, no_d = y[src] == 0, y[dst] == 0
    used = mask[src] & mask[dst] & ((no_s & no_d) | (no_s & ab_d) | (ab_s & no_d))
    return (no_s & no_d).float(), used


def link_loss(edge_logits: list[Tensor], edge_index: Tensor, y: Tensor, mask: Tensor) -> Tensor:
    """Binary cross-entropy of every layer's link probabilities against :func:`link_targets`.

    Averaged over all used edges of all layers. Each layer's logits cover a prefix of ``edge_index``
    (all of it, or fewer edges in a trimmed minibatch, where every used edge, seed to seed, is in
    every prefix). 0 when no edge is used.
    """
    target, used = link_targets(edge_index, y, mask)
    used_f = used.float()
    total = edge_logits[0].new_zeros((), dtype=torch.float32)
    count = used_f.new_zeros(())
    for logits in edge_logits:  # a trimmed layer's edges are a prefix of edge_index
        e = logits.numel()
        bce = F.binary_cross_entropy_with_logits(logits.float(), target[:e], reduction="none")
        total = total + (bce * used_f[:e]).sum()
        count = count + used_f[:e].sum()
    return total / count.clamp_min(1.0)


def ce_loss(logits: Tensor, y: Tensor, mask: Tensor) -> Tensor:
    """CE ablation: mean cross-entropy of the classifier logits over the masked nodes with y in {0, 1}."""
    use = (mask & ((y == 0) | (y == 1))).float()
    ce = F.cross_entropy(logits.float(), y.clamp(0, 1), reduction="none")
    return (ce * use).sum() / use.sum().clamp_min(1.0)
