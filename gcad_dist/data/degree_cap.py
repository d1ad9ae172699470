"""An in-degree cap for full-batch training on dense graphs: each epoch sees a fresh sample of the edges.

GCCAD's step is per-edge work (the link MLP scores every edge in every layer), so a full-batch training epoch
costs about 1.2 us an edge on one CPU thread: 1.2 s on tolokers (1.04M directed edges), 5 s on a generated graph
of 4.3M (as dense as Amazon's co-review graph), for up to 400 epochs and three ``--contrast auto`` candidates.

:class:`DegreeCap` keeps every in-edge of a node with at most ``cap`` of them and a random ``cap / degree`` share
of a busier node's in-edges, drawn afresh each epoch (GraphSAGE's neighbour sampling, DropEdge's
regularisation), so an epoch costs at most about ``cap`` edges a node. A sampled sum is rescaled to its full
size: each kept in-edge of node ``i`` carries ``degree_i / kept_i``, so a sum aggregation (GIN, GCN) sees
``degree_i`` times the mean of the sampled neighbours, the size it has at evaluation, where every edge is used.
Nodes under the cap are untouched, and a graph where no node exceeds it is trained exactly as without the cap.

Pre-training's whole-graph steps of the local contrast use it too, on steps above ``pretrain --dense-links``
(:func:`cap_dense_step`): a node's context there is the mean of its neighbours' rows, so no rescaling is needed.
There the same draw is made from the gaps between kept in-edges (:meth:`DegreeCap.draw_links`): a busy node's kept
in-edges are a Bernoulli(``cap / degree``) sample, so the gaps between them are geometric, and drawing the gaps costs
about ``cap`` random numbers a node instead of one a link (session 58: 64 ms -> 24 ms a draw on 8.4M links).
"""

from __future__ import annotations

import copy
import functools
import math
from typing import Any

import torch
from torch import Tensor

__all__ = ["DENSE_LINKS", "MAX_DEGREE", "DegreeCap", "cap_dense_step"]

#: pre-training's defaults (``pretrain --dense-links``, ``--max-degree``): whole-graph steps of more links are capped
DENSE_LINKS = 2_000_000
MAX_DEGREE = 64


class DegreeCap:
    """Per-epoch edge sampler of ``edge_index`` [2, E] (``edge_index[1]`` = the target) with at most about ``cap``
    in-edges a node. :attr:`active` is False when no node has more than ``cap`` in-edges (then :meth:`sample`
    returns the data unchanged)."""

    def __init__(self, edge_index: Tensor, num_nodes: int, cap: int) -> None:
        if cap < 1:
            raise ValueError(f"cap must be >= 1, got {cap}")
        self.cap = int(cap)
        self.num_nodes = int(num_nodes)
        dst = edge_index[1]
        self.degree = torch.bincount(dst, minlength=self.num_nodes)
        self.active = bool(edge_index.size(1)) and int(self.degree.max()) > self.cap
        self._dst = dst
        self.num_edges = int(edge_index.size(1))
        self._layout: dict[str, Tensor] | None = None  # draw_links' layout of the links, made on its first draw

    @functools.cached_property
    def keep_prob(self) -> Tensor:
        """Keep probability of each edge [E]: 1 below the cap, cap / degree(target) above it (made on first use:
        :meth:`draw_links` does not need it)."""
        deg = self.degree.to(torch.float32).clamp_min(1.0)
        return (self.cap / deg).clamp_max(1.0)[self._dst]

    @property
    def expected_share(self) -> float:
        """Expected share of the edges that an epoch uses."""
        return float(self.keep_prob.mean()) if self.num_edges else 1.0

    def sample_edges(self, edge_index: Tensor, generator: torch.Generator) -> tuple[Tensor, Tensor, Tensor]:
        """One epoch's draw: (kept edge ids [E'], the kept edges [2, E'], the scale of each kept edge [E'],
        ``degree / kept in-edges`` of its target; 1 for a node under the cap)."""
        u = torch.rand(self.num_edges, generator=generator, device=self.keep_prob.device)
        ids = torch.nonzero(u < self.keep_prob).squeeze(1)
        sub = edge_index[:, ids]
        kept = torch.bincount(sub[1], minlength=self.num_nodes).clamp_min(1)
        scale = (self.degree.to(torch.float32) / kept.to(torch.float32))[sub[1]]
        return ids, sub, scale

    def sample(self, data: Any, generator: torch.Generator) -> Any:
        """A shallow copy of ``data`` with this epoch's edges (``edge_index``, ``edge_weight`` if any) and their
        ``edge_scale``; ``data`` itself when the cap is not active."""
        if not self.active:
            return data
        ids, sub, scale = self.sample_edges(data.edge_index, generator)
        out = copy.copy(data)
        out.edge_index = sub
        ew = getattr(data, "edge_weight", None)
        if ew is not None:
            out.edge_weight = ew[ids]
        out.edge_scale = scale.to(data.x.dtype if data.x.is_floating_point() else torch.float32)
        return out

    #: :meth:`draw_links` draws ``cap + GAP_SIGMAS * sqrt(cap) + 8`` gaps a busy node: its kept count is
    #: Binomial(degree, cap / degree), mean ``cap`` and sd below ``sqrt(cap)``, so a draw needs more (and then keeps
    #: a few of that node's links fewer) with a probability under 1e-9 a node
    GAP_SIGMAS = 6

    def _gap_layout(self, edge_index: Tensor) -> dict[str, Tensor]:
        """The links as :meth:`draw_links` reads them, made once: the in-edges of the nodes under the cap
        (``under`` [2, U]), the busy nodes (``busy``), their degree and first in-edge in target order (``degree``,
        ``start``), ``log(1 - cap / degree)`` (``log_q``, [B, 1]) and every link's source in target order (``src``)."""
        if self._layout is None:
            dst = edge_index[1]
            order = torch.sort(dst, stable=True).indices  # link ids grouped by target
            start = torch.cumsum(self.degree, 0) - self.degree
            busy = torch.nonzero(self.degree > self.cap).squeeze(1)
            deg = self.degree[busy]
            # a draw's positions (at most gaps drawn x (degree + 1)) fit int32 on all but huge hubs
            small = (int(deg.max()) + 1) * self._width() < 2**31 if busy.numel() else True
            self._layout = {
                "under": edge_index[:, order[self.degree[dst[order]] <= self.cap]],
                "busy": busy, "degree": deg.to(torch.int32 if small else torch.int64).unsqueeze(1),
                "start": start[busy].unsqueeze(1),
                "log_q": torch.log1p(-self.cap / deg.to(torch.float64)).to(torch.float32).unsqueeze(1),
                "src": edge_index[0][order],
            }
        return self._layout

    def _width(self) -> int:
        """Gaps drawn a busy node (:data:`GAP_SIGMAS`)."""
        return self.cap + math.ceil(self.GAP_SIGMAS * math.sqrt(self.cap)) + 8

    def draw_links(self, edge_index: Tensor, generator: torch.Generator | None = None) -> Tensor:
        """One draw of the kept links [2, E']: in distribution :meth:`sample_edges`' draw (every in-edge of a node under
        the cap, each in-edge of a busy node with probability ``cap / degree``), made from the geometric gaps between
        a busy node's kept in-edges, so it costs about ``cap`` random numbers a busy node instead of one a link. The
        links under the cap come first, then the busy nodes' kept in-edges, grouped by target."""
        lay = self._gap_layout(edge_index)
        deg = lay["degree"]
        u = torch.rand((deg.size(0), self._width()), generator=generator, device=deg.device)
        # the gap to the next kept in-edge ~ Geometric(p) on 1, 2, ...: floor(log(1 - u) / log(1 - p)) + 1, capped at
        # degree + 1 (a gap past the node's last in-edge ends its draw) so that the positions cannot overflow
        gaps = torch.floor(torch.log1p(-u) / lay["log_q"]).clamp_max_(deg.to(torch.float32)).to(deg.dtype).add_(1)
        pos = torch.cumsum(gaps, dim=1, dtype=deg.dtype).sub_(1)  # the kept in-edges' positions among the node's
        kept = pos < deg
        flat = torch.nonzero(kept.view(-1)).squeeze(1)
        at = (pos.to(torch.int64) + lay["start"]).view(-1)[flat]  # their positions in target order
        dst = torch.repeat_interleave(lay["busy"], kept.sum(1))
        return torch.cat([lay["under"], torch.stack([lay["src"][at], dst])], dim=1)


def cap_dense_step(edge_index: Tensor, num_nodes: int, cap: int, dense_links: int,
                   cache: dict[Any, DegreeCap] | None = None, key: Any = None) -> Tensor:
    """A whole-graph pre-training step's links: ``edge_index`` itself when it holds at most ``dense_links`` links or
    ``cap`` is 0, else a fresh :class:`DegreeCap` draw of at most about ``cap`` in-edges a node
    (:meth:`DegreeCap.draw_links`: grouped by target).
    ``cache`` (keyed by ``key`` and the link count) keeps the cap and its layout of the links between steps."""
    if cap <= 0 or edge_index.size(1) <= dense_links:
        return edge_index
    k = (key, int(edge_index.size(1)), int(num_nodes))
    dc = cache.get(k) if cache is not None else None
    if dc is None:
        dc = DegreeCap(edge_index, num_nodes, cap)
        if cache is not None:
            cache.clear()  # one subgraph's at a time: a dense whole graph is the case this is for
            cache[k] = dc
    return dc.draw_links(edge_index) if dc.active else edge_index
