"""Graph update (METHOD section 1.3): per-graph context readouts, vectorised over a batch of graphs.

Every per-graph sum is formed with ``index_add_`` over the nodes in ``context_mask`` (other nodes
are multiplied by 0) and handed to ``sync.sum`` *before* any division, so that distributed workers
holding different nodes of the same graph can all-reduce it (see :mod:`gcad_dist.model.context`).

* ``memory`` (default): s_i = cos(h_i, m_g), q_g = sum_i exp(s_i) h_i / sum_i exp(s_i)
  (= softmax-weighted mean); ``sync.sum`` gets ``cat([sum exp(s) h, sum exp(s)])`` [G, h+1].
* ``mean``: ``sync.sum`` gets ``cat([sum h, count])`` [G, h+1].
* ``sum``: ``sync.sum`` gets ``sum h`` [G, h].
* ``max``: local per-graph max over the masked nodes, *no* ``sync.sum`` call (a sum all-reduce
  cannot combine maxima; with several workers on one graph each uses its own local max).

A graph with no masked node gets the context 0.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch_geometric.utils import scatter

from .context import ContextSync

READOUTS = ("memory", "mean", "sum", "max")


def graph_sum(src: Tensor, batch: Tensor, num_graphs: int) -> Tensor:
    """Per-graph sum of the rows of ``src`` [N, k] -> [G, k], accumulated in at least fp32 (a bf16
    ``src`` under autocast gets an fp32 sum: a bf16 accumulator over thousands of nodes drifts)."""
    acc = torch.promote_types(src.dtype, torch.float32)
    return src.new_zeros((num_graphs, src.size(1)), dtype=acc).index_add_(0, batch, src.to(acc))


def _mask_weight(h: Tensor, context_mask: Tensor | None) -> Tensor:
    if context_mask is None:
        return h.new_ones(h.size(0))
    return context_mask.to(h.dtype)


def mean_context(
    h: Tensor, batch: Tensor, num_graphs: int, context_mask: Tensor | None, sync: ContextSync
) -> Tensor:
    """Per-graph mean of ``h`` over the masked nodes, through ``sync.sum(cat([sum h, count]))``."""
    m = _mask_weight(h, context_mask).unsqueeze(-1)
    t = sync.sum(graph_sum(torch.cat([h * m, m], dim=-1), batch, num_graphs))
    return t[:, :-1] / t[:, -1:].clamp_min(1.0)


def memory_context(
    h: Tensor, memory: Tensor, batch: Tensor, num_graphs: int, context_mask: Tensor | None, sync: ContextSync
) -> Tensor:
    """Memory-based attention readout: q_g = sum_i softmax_i(cos(h_i, m_g)) h_i over the graph's masked nodes.

    Computed as (sum exp(s_i) h_i) / (sum exp(s_i)); s_i is a cosine, so exp(s_i) lies in
    [1/e, e] and needs no max-shift (and the sums can be all-reduced as they are).
    """
    s = F.cosine_similarity(h, memory.index_select(0, batch), dim=-1)
    e = torch.exp(s) * _mask_weight(h, context_mask)
    t = sync.sum(graph_sum(torch.cat([h * e.unsqueeze(-1), e.unsqueeze(-1)], dim=-1), batch, num_graphs))
    return t[:, :-1] / t[:, -1:].clamp_min(1e-12)


def sum_context(
    h: Tensor, batch: Tensor, num_graphs: int, context_mask: Tensor | None, sync: ContextSync
) -> Tensor:
    """Per-graph sum of ``h`` over the masked nodes, through ``sync.sum``."""
    return sync.sum(graph_sum(h * _mask_weight(h, context_mask).unsqueeze(-1), batch, num_graphs))


def max_context(h: Tensor, batch: Tensor, num_graphs: int, context_mask: Tensor | None) -> Tensor:
    """Per-graph elementwise max of ``h`` over the masked nodes (local only; 0 for empty graphs)."""
    if context_mask is not None:
        h, batch = h[context_mask], batch[context_mask]
    return scatter(h, batch, dim=0, dim_size=num_graphs, reduce="max")


class Readout(nn.Module):
    """One layer's graph update: new context q^(l) from h^(l) and the memory m = q^(l-1)."""

    def __init__(self, kind: str = "memory") -> None:
        super().__init__()
        if kind not in READOUTS:
            raise ValueError(f"unknown readout {kind!r}; choose from {READOUTS}")
        self.kind = kind

    def forward(
        self,
        h: Tensor,
        memory: Tensor,
        batch: Tensor,
        num_graphs: int,
        context_mask: Tensor | None,
        sync: ContextSync,
    ) -> Tensor:
        if self.kind == "memory":
            return memory_context(h, memory, batch, num_graphs, context_mask, sync)
        if self.kind == "mean":
            return mean_context(h, batch, num_graphs, context_mask, sync)
        if self.kind == "sum":
            return sum_context(h, batch, num_graphs, context_mask, sync)
        return max_context(h, batch, num_graphs, context_mask)


def neighbour_context(h: Tensor, edge_index: Tensor, num_nodes: int | None = None,
                      edge_weight: Tensor | None = None) -> Tensor:
    """Local context of every node: the mean of its in-neighbours' rows of ``h`` ([N, h]; 0 for a node
    without neighbours), or with ``edge_weight`` [E] (> 0) their weighted mean. Edges ``j -> i`` with
    ``j = edge_index[0]``; self-loops count as neighbours."""
    from .aggregate import weighted_sum

    n = h.size(0) if num_nodes is None else num_nodes
    total = weighted_sum(h, edge_index, edge_weight, n)
    if edge_weight is None:
        deg = torch.bincount(edge_index[1], minlength=n).clamp_min(1).to(total.dtype)
    else:
        deg = torch.zeros(n, dtype=total.dtype, device=total.device).index_add_(
            0, edge_index[1], edge_weight.to(total.dtype)).clamp_min(1e-12)
    return total / deg.unsqueeze(-1)
