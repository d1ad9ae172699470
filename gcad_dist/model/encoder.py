"""GCCAD encoder f_GNN (METHOD section 1): input projection, then L x (edge -> node -> graph update).

Order of :class:`~gcad_dist.model.context.ContextSync` calls (identical on every rank):
``sum`` for q^(0) (mean of the projected features); then for each layer ``l = 0 .. L-1`` (0-based)
the readout's ``sum`` (none for the ``max`` readout) followed by ``memory(l, q)``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import Tensor, nn

from .context import ContextSync
from .edge_update import EdgeUpdate
from .node_update import SUM_CONVS, TRIMMABLE, NodeUpdate
from .readout import Readout, mean_context

if TYPE_CHECKING:
    from .gccad import GCCADConfig


def check_seed_mask(context_mask: Tensor | None, seeds: int) -> None:
    """A hop-trimmed minibatch computes its seeds' outputs only: a context mask beyond them is a usage error.
    Checked on CPU only: on a GPU the check would be a host synchronisation in every step."""
    if context_mask is not None and context_mask.is_cpu and bool(context_mask[seeds:].any()):
        raise ValueError("hop trimming needs a context mask over the seeds only (the first num_sampled_nodes[0] "
                         "nodes): the other nodes' embeddings are not computed")


def check_edges_into(edge_index: Tensor, n: int, what: str) -> None:
    """Every edge of a hop-trimmed minibatch's ``what`` must point into its first ``n`` nodes. The native CPU kernels
    trust these bounds, so they are checked on CPU (on a GPU, indexing checks them: no sync here)."""
    if edge_index.is_cpu and edge_index.size(1) and int(edge_index[1].max()) >= n:
        raise ValueError(f"num_sampled_nodes / num_sampled_edges do not match the minibatch: an edge of {what} points "
                         f"past the first {n} nodes (nodes and edges must be ordered by hop, as the neighbour loaders "
                         "yield them)")


class GCCADEncoder(nn.Module):
    """Input projection Linear(in_dim, hidden) and ``num_layers`` GCCAD layers."""

    def __init__(self, config: GCCADConfig) -> None:
        super().__init__()
        self.config = config
        hid = config.hidden
        self.input_proj = nn.Linear(config.in_dim, hid)
        self.edge_updates = nn.ModuleList(
            [
                EdgeUpdate(hid, config.link_global, config.dropout, config.gumbel_temperature,
                           getattr(config, "link_eval", "threshold"))
                for _ in range(config.num_layers)
            ]
            if config.edge_update
            else []
        )
        self.node_updates = nn.ModuleList(
            [NodeUpdate(config.conv, hid, config.dropout, config.norm) for _ in range(config.num_layers)]
        )
        self.readouts = nn.ModuleList([Readout(config.readout) for _ in range(config.num_layers)])

    def forward(
        self,
        x: Tensor,
        edge_index: Tensor,
        batch: Tensor,
        num_graphs: int,
        edge_weight: Tensor | None,
        context_mask: Tensor | None,
        sync: ContextSync,
        num_sampled_nodes: list[int] | None = None,
        num_sampled_edges: list[int] | None = None,
        edge_scale: Tensor | None = None,
    ) -> tuple[Tensor, Tensor, list[Tensor], list[Tensor], Tensor | None, Tensor]:
        """Return (h^(L) [N', hidden], q^(L) [G, hidden], per-layer p [E_l], per-layer logits [E_l], w^(L),
        h^(0) [N, hidden]) where h^(0) is the input projection of every node (its own features only). With
        ``jump="cat"`` the first two are [N', (L + 1) hidden] and [G, (L + 1) hidden]: every layer's embedding
        and context, the input projection's included.

        With ``num_sampled_nodes`` / ``num_sampled_edges`` of a neighbour-sampled minibatch (nodes and
        edges ordered by hop, as the loaders yield them) and as many hops as layers, layer ``l`` runs
        only on the edges of hops ``< L - l`` and the nodes of hops ``<= L - l`` (PyG's
        ``trim_to_layer``): the seeds' outputs are unchanged, the later layers touch a fraction of
        the edges; each layer also computes its node update, norm, dropout and readout for the nodes the
        next layer reads only (after the last layer: the seeds). The context and loss masks must then
        cover seeds only; N' and E_l shrink per layer (edge tensors stay prefixes of ``edge_index``),
        and ``h^(L)`` has one row per seed. Not applied with conv ``gcn``, whose
        normalisation depends on the source nodes' degrees.

        ``edge_scale`` [E]: a factor on each edge's message in the sum aggregations (gin, gcn; ignored by sage
        and gat), beside the link remover's weight: a degree-capped sample's ``degree / kept`` of the target
        (:class:`gcad_dist.data.degree_cap.DegreeCap`). The edge update and its link loss do not see it.
        """
        h = h0 = self.input_proj(x)
        w = edge_weight
        scale = edge_scale if self.config.conv in SUM_CONVS else None
        if self.config.edge_update and w is None:
            w = torch.ones(edge_index.size(1), dtype=h.dtype, device=h.device)
        trim = (num_sampled_nodes is not None and num_sampled_edges is not None and self.config.conv in TRIMMABLE
                and len(num_sampled_edges) == self.config.num_layers and len(num_sampled_nodes) == len(num_sampled_edges) + 1)
        if trim:
            check_seed_mask(context_mask, num_sampled_nodes[0])
        # the readouts sum over the masked nodes only: with hop trimming those are among the seeds, so each
        # readout reads the seeds' rows (the same sums, without [N, h] passes over the other hops)
        n_ctx = num_sampled_nodes[0] if trim and context_mask is not None else None
        ctx_mask = None if context_mask is None else context_mask[:n_ctx]
        q = mean_context(h[:n_ctx], batch[:n_ctx], num_graphs, ctx_mask, sync)
        probs: list[Tensor] = []
        logits: list[Tensor] = []
        jump = self.config.jump != "last"
        hs, qs = [h0], [q]
        for layer in range(self.config.num_layers):
            if trim and layer > 0:  # the edges of the hops still needed (h, batch, mask: trimmed below)
                e_keep = sum(num_sampled_edges[: self.config.num_layers - layer])
                edge_index = edge_index[:, :e_keep]
                w = None if w is None else w[:e_keep]
                scale = None if scale is None else scale[:e_keep]
            n_out = None
            if trim:  # outputs only for the nodes the next layer reads (the seeds after the last layer)
                n_out = sum(num_sampled_nodes[: self.config.num_layers - layer])
                check_edges_into(edge_index, n_out, f"layer {layer}")
            if self.config.edge_update:
                source = None
                predictor = self.edge_updates[layer].predictor
                if layer == 0 and x.size(1) <= h.size(1) and predictor.folds_source_term(h, q, n_out):
                    # h = input_proj(x): the source term straight from x, one product fewer in the backward
                    source = predictor.source_term_through(self.input_proj, x)
                w, p, lg = self.edge_updates[layer](h, q, edge_index, batch, w, num_dst=n_out, source_term=source)
                probs.append(p)
                logits.append(lg)
            if trim:
                batch = batch[:n_out]
            agg_w = w if scale is None else (scale if w is None else w * scale)
            h = self.node_updates[layer](h, edge_index, agg_w, num_dst=n_out)
            q = self.readouts[layer](h[:n_ctx], q, batch[:n_ctx], num_graphs, ctx_mask, sync)
            q = sync.memory(layer, q)
            if jump:
                hs.append(h)
                qs.append(q)
        if jump:  # jumping knowledge, concatenation: h^(0) .. h^(L) of each output node and q^(0) .. q^(L)
            h = torch.cat([t[: h.size(0)] for t in hs], dim=-1)
            q = torch.cat(qs, dim=-1)
        return h, q, probs, logits, w, h0
