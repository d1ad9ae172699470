"""Node update (METHOD section 1.2): weighted message passing, then ReLU -> LayerNorm -> Dropout.

Every conv takes edge weights ``w`` [E] (or None = all ones) and treats ``w = 0`` as a removed edge
*exactly* (the edge update keeps removed edges in ``edge_index`` with weight 0):

* ``gcn``: PyG ``GCNConv`` (symmetric normalisation with the weighted degree, self-loops weight 1).
* ``gin``: :class:`WeightedGINConv`, ``MLP((1 + eps) x_i + sum_j w_ij x_j)`` (sum aggregation; PyG's
  ``GINConv`` has no edge weights and ``GINEConv`` is for edge *features*).
* ``sage``: :class:`WeightedSAGEConv`, ``W_r x_i + W_l (sum_j w_ij x_j / #kept neighbours)``: a mean
  over the kept neighbours (w > 0) in which ``w`` acts as a soft gate, so the gradient reaches ``w``
  and w = 1 everywhere gives the plain GraphSAGE mean.
* ``gat``: :class:`WeightedGATConv`, single-head GAT whose attention is re-weighted by the edge
  weights and re-normalised: ``a_ij = w_ij exp(e_ij) / sum_k w_ik exp(e_ik)`` (self-loop weight 1).
  Removed edges get no attention mass; w = 1 everywhere gives plain GAT. (PyG's ``GATConv`` only
  feeds edge attributes into the attention logits, it cannot scale or drop messages.)

Normalisation (``norm``, :data:`NORMS`):

* ``layer``: LayerNorm, per node, so it behaves the same on one graph, a batch of graphs and a
  neighbour-sampled minibatch, in train and eval mode. It also rescales every node to the same size, so
  whatever a node's scale said (GIN's sum grows with the number of kept neighbours: a clique member's is
  several times a normal node's) is gone, and the cosine score cannot see it either.
* ``graph``: :class:`GraphScaleNorm`, one divisor for all nodes (the root mean square over the nodes and
  channels), then a per-channel affine map: nodes keep their sizes relative to each other. This is
  PairNorm's scaling (Zhao & Akoglu, ICLR 2020) without its centring. Like BatchNorm it uses the batch's
  statistic in training and a running average in evaluation, so a node's evaluation output does not depend
  on which other nodes are in its batch.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch_geometric.nn import GCNConv, MessagePassing
from torch_geometric.utils import add_self_loops, remove_self_loops, scatter

from .aggregate import weighted_sum
from .dropout import Dropout
from .generated_sources import release_generated_sources


class WeightedGINConv(MessagePassing):
    """GIN with scalar edge weights: ``nn((1 + eps) x_i + sum_{j -> i} w_ij x_j)``."""

    def __init__(self, mlp: nn.Module, eps: float = 0.0, train_eps: bool = False) -> None:
        super().__init__(aggr="add")
        self.nn = mlp
        if train_eps:
            self.eps = nn.Parameter(torch.tensor(float(eps)))
        else:
            self.register_buffer("eps", torch.tensor(float(eps)))

    def forward(self, x: Tensor, edge_index: Tensor, edge_weight: Tensor | None = None,
                num_dst: int | None = None) -> Tensor:
        """``num_dst``: compute the first ``num_dst`` nodes' outputs only (every edge must point into them)."""
        n = x.size(0) if num_dst is None else num_dst
        out = weighted_sum(x, edge_index, edge_weight, num_nodes=n)  # = self.propagate(...), without [E, d] messages
        return self.nn(out + (1 + self.eps) * x[:n])

    def message(self, x_j: Tensor, edge_weight: Tensor | None) -> Tensor:
        return x_j if edge_weight is None else x_j * edge_weight.unsqueeze(-1)


class WeightedSAGEConv(MessagePassing):
    """GraphSAGE (mean) with edge weights: ``W_r x_i + W_l (sum_j w_ij x_j / #{j: w_ij > 0})``."""

    def __init__(self, in_channels: int, out_channels: int) -> None:
        super().__init__(aggr="add")
        self.lin_l = nn.Linear(in_channels, out_channels)
        self.lin_r = nn.Linear(in_channels, out_channels, bias=False)

    def forward(self, x: Tensor, edge_index: Tensor, edge_weight: Tensor | None = None,
                num_dst: int | None = None) -> Tensor:
        """``num_dst``: compute the first ``num_dst`` nodes' outputs only (every edge must point into them)."""
        n = x.size(0) if num_dst is None else num_dst
        agg = weighted_sum(x, edge_index, edge_weight, num_nodes=n)  # = self.propagate(...), without [E, d] messages
        cnt_dtype = torch.promote_types(x.dtype, torch.float32)  # exact counts under bf16 autocast too
        kept = torch.ones(edge_index.size(1), device=x.device, dtype=cnt_dtype)
        if edge_weight is not None:
            kept = (edge_weight > 0).to(cnt_dtype)
        count = scatter(kept, edge_index[1], dim=0, dim_size=n, reduce="sum")
        return self.lin_l(agg / count.clamp_min(1.0).unsqueeze(-1)) + self.lin_r(x[:n])

    def message(self, x_j: Tensor, edge_weight: Tensor | None) -> Tensor:
        return x_j if edge_weight is None else x_j * edge_weight.unsqueeze(-1)


class WeightedGATConv(MessagePassing):
    """Single-head GAT with edge weights folded into the attention normalisation.

    ``a_ij = w_ij exp(e_ij) / sum_k w_ik exp(e_ik)``, ``e_ij = LeakyReLU(att_dst . W x_i + att_src . W x_j)``,
    self-loops added with weight 1; output ``sum_j a_ij W x_j + b``.
    """

    def __init__(self, in_channels: int, out_channels: int, negative_slope: float = 0.2) -> None:
        super().__init__(aggr="add")
        self.lin = nn.Linear(in_channels, out_channels, bias=False)
        self.att_src = nn.Parameter(torch.empty(out_channels))
        self.att_dst = nn.Parameter(torch.empty(out_channels))
        self.bias = nn.Parameter(torch.zeros(out_channels))
        self.negative_slope = negative_slope
        bound = (6.0 / (out_channels + 1)) ** 0.5
        nn.init.uniform_(self.att_src, -bound, bound)
        nn.init.uniform_(self.att_dst, -bound, bound)

    def forward(self, x: Tensor, edge_index: Tensor, edge_weight: Tensor | None = None,
                num_dst: int | None = None) -> Tensor:
        """``num_dst``: return the first ``num_dst`` nodes' outputs only (computed for every node: the
        self-loops and the attention normalisation cover them all)."""
        n = x.size(0)
        if edge_weight is None:
            edge_weight = torch.ones(edge_index.size(1), device=x.device, dtype=x.dtype)
        edge_index, edge_weight = remove_self_loops(edge_index, edge_weight)
        edge_index, edge_weight = add_self_loops(edge_index, edge_weight, fill_value=1.0, num_nodes=n)
        xw = self.lin(x)
        # attention logits and their normalisation in (at least) fp32, also under bf16 autocast
        xa = xw.to(torch.promote_types(xw.dtype, torch.float32))
        a_src = (xa * self.att_src).sum(-1)
        a_dst = (xa * self.att_dst).sum(-1)
        src, dst = edge_index[0], edge_index[1]
        e = F.leaky_relu(a_src[src] + a_dst[dst], self.negative_slope)
        e_max = scatter(e.detach(), dst, dim=0, dim_size=n, reduce="max")  # shift cancels exactly
        num = edge_weight * torch.exp(e - e_max[dst])
        den = scatter(num, dst, dim=0, dim_size=n, reduce="sum")
        coef = num / den.clamp_min(1e-16)[dst]
        out = weighted_sum(xw, edge_index, coef) + self.bias  # = self.propagate(edge_index, x=xw, coef=coef)
        return out if num_dst is None else out[:num_dst]

    def message(self, x_j: Tensor, coef: Tensor) -> Tensor:
        return x_j * coef.unsqueeze(-1)


def _gin(hidden: int) -> nn.Module:
    return WeightedGINConv(nn.Sequential(nn.Linear(hidden, hidden), nn.ReLU(), nn.Linear(hidden, hidden)))


CONVS = {
    "gcn": lambda hidden: GCNConv(hidden, hidden),
    "gin": _gin,
    "sage": lambda hidden: WeightedSAGEConv(hidden, hidden),
    "gat": lambda hidden: WeightedGATConv(hidden, hidden),
}


#: convs whose output at a node depends only on that node's in-edges, so later layers of a
#: neighbour-sampled minibatch may drop the hops that cannot reach the seeds (GCN's symmetric
#: normalisation also uses the source nodes' degrees, which trimming would change)
TRIMMABLE = frozenset({"gin", "sage", "gat"})
# convs whose aggregation is a (weighted) sum, so that a sampled neighbourhood is rescaled to its full size
# (:class:`gcad_dist.data.degree_cap.DegreeCap`); sage and gat normalise over the neighbours they are given
SUM_CONVS = frozenset({"gin", "gcn"})


def make_conv(name: str, hidden: int) -> nn.Module:
    """Build the weighted conv called ``name`` (one of :data:`CONVS`) mapping hidden -> hidden."""
    if name not in CONVS:
        raise ValueError(f"unknown conv {name!r}; choose from {sorted(CONVS)}")
    conv = CONVS[name](hidden)
    release_generated_sources()  # PyG's generated propagate file, deleted now: a killed process runs no exit hook
    return conv


class GraphScaleNorm(nn.Module):
    """``x / rms(x) * weight + bias``, with one root mean square over all rows and channels of the batch.

    Training divides by the batch's RMS and updates ``running_rms`` (exponential average, ``momentum``);
    evaluation divides by ``running_rms``. Relative node scales survive, unlike LayerNorm's per-row rescale.
    """

    def __init__(self, hidden: int, momentum: float = 0.1, eps: float = 1e-6) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden))
        self.bias = nn.Parameter(torch.zeros(hidden))
        self.momentum, self.eps = momentum, eps
        self.register_buffer("running_rms", torch.ones(()))
        self.register_buffer("tracked", torch.zeros((), dtype=torch.long))

    def forward(self, x: Tensor) -> Tensor:
        if self.training and x.shape[0] > 0:
            rms = x.float().pow(2).mean().add(self.eps).sqrt()
            with torch.no_grad():
                # the first batch sets the average (BatchNorm starts from 1 and needs many steps to forget it);
                # a tensor weight, so no host sync on a GPU
                m = torch.where(self.tracked == 0, 1.0, self.momentum).to(self.running_rms.dtype)
                self.running_rms.lerp_(rms.detach(), m)
                self.tracked += 1
        else:
            rms = self.running_rms
        return (x / rms.to(x.dtype)) * self.weight + self.bias


#: node-update normalisations (see the module docstring)
NORMS = ("layer", "graph")


def make_norm(name: str, hidden: int) -> nn.Module:
    """The normalisation called ``name`` (one of :data:`NORMS`) over ``hidden`` channels."""
    if name == "layer":
        return nn.LayerNorm(hidden)
    if name == "graph":
        return GraphScaleNorm(hidden)
    raise ValueError(f"unknown norm {name!r}; choose from {NORMS}")


class NodeUpdate(nn.Module):
    """conv(h, edge_index, w) -> ReLU -> norm (LayerNorm, or :class:`GraphScaleNorm`) -> Dropout.

    ``num_dst`` (hop-trimmed minibatches, convs in :data:`TRIMMABLE`): only the first ``num_dst`` nodes'
    outputs are computed, the nodes the next layer (or the loss) still reads. Every edge must point into
    them. All of them skip the other nodes' norm and dropout, GIN and GraphSAGE also their MLP / linear maps."""

    def __init__(self, conv: str, hidden: int, dropout: float = 0.1, norm: str = "layer") -> None:
        super().__init__()
        self.conv = make_conv(conv, hidden)
        self.norm = make_norm(norm, hidden)
        self.dropout = Dropout(dropout)

    def forward(self, h: Tensor, edge_index: Tensor, edge_weight: Tensor | None = None,
                num_dst: int | None = None) -> Tensor:
        # num_dst only comes with TRIMMABLE convs, all of which take it (PyG's GCNConv does not)
        h = self.conv(h, edge_index, edge_weight) if num_dst is None else self.conv(h, edge_index, edge_weight, num_dst)
        return self.dropout(self.norm(F.relu(h)))
