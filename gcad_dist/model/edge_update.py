"""Edge update (METHOD section 1.1): context-aware link predictor, Gumbel link remover, edge residual.

Edge ``e = (j -> i)`` with ``j = edge_index[0]`` (source) and ``i = edge_index[1]`` (target), PyG's
``source_to_target`` flow, as in the reference code. On an undirected graph both directions are
predicted separately (the MLP is not symmetric in the two ``h - q`` terms).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.distributions import RelaxedBernoulli


class LinkPredictor(nn.Module):
    """p_ij = sigmoid(MLP([|h_i - h_j|, h_i - q, h_j - q])), MLP = Linear(3h,h) -> ReLU -> Dropout -> Linear(h,1).

    With ``link_global=False`` the input is ``|h_i - h_j|`` only and the first layer is Linear(h, h).

    The first Linear is applied without materialising the [E, 3h] concatenation: its weight is
    split into three [h, h] blocks; the two ``h - q`` blocks are applied once per *node* ([N, h])
    and gathered per edge, so the per-edge matmul is [E, h] x [h, h] (identical result).
    """

    def __init__(self, hidden: int, link_global: bool = True, dropout: float = 0.1) -> None:
        super().__init__()
        self.hidden = hidden
        self.link_global = link_global
        self.lin1 = nn.Linear(3 * hidden if link_global else hidden, hidden)
        self.dropout = nn.Dropout(dropout)
        self.lin2 = nn.Linear(hidden, 1)

    def forward(self, h: Tensor, q: Tensor, edge_index: Tensor, batch: Tensor) -> Tensor:
        """Return the link logits [E] (p = sigmoid(logits))."""
        src, dst = edge_index[0], edge_index[1]
        k = self.hidden
        w = self.lin1.weight  # [h, 3h] or [h, h]
        if self.link_global:
            # per node: [h | W2 (h - q)] for the target side, [h | W3 (h - q)] for the source side,
            # so each side is one [E, 2h] gather (index_select: cheap scatter-add backward)
            rel = h - q.index_select(0, batch)  # [N, h]: distance of each node to its graph's context
            u = F.linear(rel, torch.cat([w[:, k : 2 * k], w[:, 2 * k :]], dim=0))  # [N, 2h]
            node_dst = torch.cat([h, u[:, :k]], dim=-1).index_select(0, dst)
            node_src = torch.cat([h, u[:, k:]], dim=-1).index_select(0, src)
            diff = (node_dst[:, :k] - node_src[:, :k]).abs()
            z = torch.addmm(node_dst[:, k:] + node_src[:, k:] + self.lin1.bias, diff, w[:, :k].t())
        else:
            diff = (h.index_select(0, dst) - h.index_select(0, src)).abs()
            z = F.linear(diff, w, self.lin1.bias)
        z = self.dropout(F.relu(z))
        return self.lin2(z).squeeze(-1)


def straight_through_sample(logits: Tensor, temperature: float) -> Tensor:
    """Hard 0/1 keep indicator I ~ RelaxedBernoulli(temperature, logits) with straight-through gradient.

    Forward value is exactly 0 or 1 (relaxed sample rounded at 0.5); backward uses the gradient of
    the relaxed sample.
    """
    soft = RelaxedBernoulli(
        torch.as_tensor(temperature, dtype=logits.dtype, device=logits.device),
        logits=logits,
        validate_args=False,
    ).rsample()
    hard = (soft > 0.5).to(soft.dtype)
    return hard + (soft - soft.detach())


class EdgeUpdate(nn.Module):
    """One layer's edge update: w^(l) = (alpha w^(l-1) + (1 - alpha) p) * I, alpha = sigmoid(learned scalar).

    Training: I from the straight-through relaxed Bernoulli sample. Evaluation: I = [p > 0.5]
    (deterministic). Removed edges stay in ``edge_index`` with weight 0 (every node update treats a
    zero weight as a removed edge exactly, see :mod:`gcad_dist.model.node_update`).
    """

    def __init__(
        self, hidden: int, link_global: bool = True, dropout: float = 0.1, temperature: float = 0.6
    ) -> None:
        super().__init__()
        self.predictor = LinkPredictor(hidden, link_global, dropout)
        self.temperature = temperature
        self.alpha_logit = nn.Parameter(torch.zeros(()))

    @property
    def alpha(self) -> Tensor:
        return torch.sigmoid(self.alpha_logit)

    def forward(
        self, h: Tensor, q: Tensor, edge_index: Tensor, batch: Tensor, w_prev: Tensor
    ) -> tuple[Tensor, Tensor, Tensor]:
        """Return (w [E], p [E], logits [E])."""
        logits = self.predictor(h, q, edge_index, batch)
        p = torch.sigmoid(logits)
        if self.training:
            keep = straight_through_sample(logits, self.temperature)
        else:
            keep = (logits > 0).to(p.dtype)
        alpha = self.alpha
        w = (alpha * w_prev + (1.0 - alpha) * p) * keep
        return w, p, logits
