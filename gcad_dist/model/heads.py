"""Output heads: the contrastive projection head g and the CE-ablation classifier."""

from __future__ import annotations

from torch import Tensor, nn


class ProjectionHead(nn.Module):
    """g = Linear -> ReLU -> Linear (hidden -> hidden), shared by node embeddings and contexts."""

    def __init__(self, hidden: int, in_dim: int | None = None) -> None:
        super().__init__()
        in_dim = hidden if in_dim is None else in_dim
        self.net = nn.Sequential(nn.Linear(in_dim, hidden), nn.ReLU(), nn.Linear(hidden, hidden))

    def forward(self, h: Tensor) -> Tensor:
        return self.net(h)


class ClassifierHead(nn.Module):
    """CE ablation: Linear -> ReLU -> Dropout -> Linear(hidden, 2), logits [N, 2] (class 1 = anomaly)."""

    def __init__(self, hidden: int, dropout: float = 0.1, in_dim: int | None = None) -> None:
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(hidden if in_dim is None else in_dim, hidden), nn.ReLU(), nn.Dropout(dropout), nn.Linear(hidden, 2)
        )

    def forward(self, h: Tensor) -> Tensor:
        return self.net(h)
