"""Output heads: the contrastive projection head g, its ensemble form, and the CE-ablation classifier."""

from __future__ import annotations

import torch
from torch import Tensor, nn


class ProjectionHead(nn.Module):
    """g = Linear -> ReLU -> Linear (hidden -> hidden), shared by node embeddings and contexts."""

    def __init__(self, hidden: int, in_dim: int | None = None) -> None:
        super().__init__()
        in_dim = hidden if in_dim is None else in_dim
        self.net = nn.Sequential(nn.Linear(in_dim, hidden), nn.ReLU(), nn.Linear(hidden, hidden))

    def forward(self, h: Tensor) -> Tensor:
        return self.net(h)


class EnsembleProjectionHead(nn.Module):
    """K independent projection heads, head k reading block k of the input: [N, K * hidden] -> [N, K, hidden].

    The K (input block, head) pairs are K models trained side by side on the same minibatches; their scores
    are averaged (an ensemble in one model, one checkpoint, one pass). Computed as two batched products."""

    def __init__(self, hidden: int, members: int) -> None:
        super().__init__()
        self.members, self.hidden = members, hidden
        heads = [ProjectionHead(hidden) for _ in range(members)]  # each initialised as a single model's head
        self.w1 = nn.Parameter(torch.stack([g.net[0].weight.t() for g in heads]).detach().clone())  # [K, h, h]
        self.b1 = nn.Parameter(torch.stack([g.net[0].bias for g in heads]).detach().clone().unsqueeze(1))  # [K, 1, h]
        self.w2 = nn.Parameter(torch.stack([g.net[2].weight.t() for g in heads]).detach().clone())
        self.b2 = nn.Parameter(torch.stack([g.net[2].bias for g in heads]).detach().clone().unsqueeze(1))

    def forward(self, h: Tensor) -> Tensor:
        blocks = h.reshape(h.size(0), self.members, self.hidden).transpose(0, 1)  # [K, N, h]
        z = torch.relu(torch.baddbmm(self.b1, blocks, self.w1))
        return torch.baddbmm(self.b2, z, self.w2).transpose(0, 1)  # [N, K, h]


class ClassifierHead(nn.Module):
    """CE ablation: Linear -> ReLU -> Dropout -> Linear(hidden, 2), logits [N, 2] (class 1 = anomaly)."""

    def __init__(self, hidden: int, dropout: float = 0.1, in_dim: int | None = None) -> None:
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(hidden if in_dim is None else in_dim, hidden), nn.ReLU(), nn.Dropout(dropout), nn.Linear(hidden, 2)
        )

    def forward(self, h: Tensor) -> Tensor:
        return self.net(h)
