"""Supervised baselines: MLP, GCN, GIN, GraphSAGE, GAT and BWGNN node classifiers (cross-entropy).

MLP, GCN, GIN, GraphSAGE and GAT have GCCAD's shape by default: an input projection ``Linear(d_in, hidden)``,
``num_layers`` layers of width ``hidden`` (each followed by ReLU, LayerNorm, dropout) and a linear head to two
classes. BWGNN, the bank of Beta-wavelet filters that GADBench recommends for graph anomaly detection, keeps its
authors' shape (:mod:`gcad_dist.model.bwgnn`). The anomaly score is the softmax probability of class 1.

GCN, GIN and GraphSAGE aggregate with a sparse CSR adjacency (``torch.sparse`` SpMM, built once per
``edge_index`` and cached), which is several times faster on CPU than gather/scatter over edges and
gives the same result; GAT uses ``edge_index`` directly.

They share GCCAD's training interface (``forward`` -> output, ``loss(out, y, mask)`` ->
``{"total": ...}``, ``score(out)`` -> [N]) so one training loop serves all models.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch_geometric.nn import GATConv, GCNConv, GINConv, SAGEConv
from torch_geometric.utils import to_torch_csr_tensor

from .generated_sources import release_generated_sources
from .node_update import make_norm

__all__ = ["BASELINES", "BaselineConfig", "CrossEntropyClassifier", "BaselineClassifier", "build_baseline"]

BASELINES = ("mlp", "gcn", "gin", "sage", "gat", "bwgnn")


@dataclass
class BaselineConfig:
    """Settings of a baseline classifier."""

    in_dim: int
    kind: str = "gcn"  # one of BASELINES
    hidden: int = 64
    num_layers: int = 2  # BWGNN: the order of its Beta wavelets (each filter reaches this many hops)
    dropout: float = 0.1
    input_dropout: float = 0.0  # dropout on the input features during training (gcad_dist.train --input-dropout)
    heads: int = 4  # GAT attention heads (concatenated; hidden must be divisible by heads)
    norm: str = "layer"  # "layer" | "graph" (gcad_dist.model.node_update.NORMS); BWGNN has no norm layers


def _layer(kind: str, hidden: int, heads: int) -> nn.Module:
    layer = _new_layer(kind, hidden, heads)
    release_generated_sources()  # PyG's generated propagate file (gcad_dist.model.generated_sources)
    return layer


def _new_layer(kind: str, hidden: int, heads: int) -> nn.Module:
    if kind == "mlp":
        return nn.Linear(hidden, hidden)
    if kind == "gcn":
        return GCNConv(hidden, hidden, cached=False)
    if kind == "gin":
        return GINConv(nn.Sequential(nn.Linear(hidden, hidden), nn.ReLU(), nn.Linear(hidden, hidden)), train_eps=True)
    if kind == "sage":
        return SAGEConv(hidden, hidden, aggr="mean")
    if kind == "gat":
        if hidden % heads:
            raise ValueError(f"GAT: hidden={hidden} is not divisible by heads={heads}")
        return GATConv(hidden, hidden // heads, heads=heads, concat=True)
    raise ValueError(f"unknown baseline {kind!r} (choose from {', '.join(BASELINES)})")


class CrossEntropyClassifier(nn.Module):
    """What every baseline shares: two logits trained by (class-weighted) cross-entropy, the probability of class 1
    as the anomaly score, and a sparse adjacency built once per ``edge_index``. Subclasses build the layers and
    ``forward``; :func:`gcad_dist.supervised.fit_supervised` trains any of them the same way."""

    def __init__(self, cfg: BaselineConfig) -> None:
        super().__init__()
        self.config = cfg
        self._adj_src: Tensor | None = None  # the edge_index the cached adjacency was built from
        self._adj_key: tuple | None = None
        self._adj_t: Tensor | None = None

    def _adjacency(self, edge_index: Tensor, n: int) -> Tensor:
        """Sparse CSR ``adj_t`` (row = target, PyG convention) of ``edge_index`` (:meth:`_build_adjacency`), cached
        for that very tensor.

        The cache holds the tensor itself and its version counter: a new tensor that happens to reuse a freed
        one's memory, or an in-place edit, rebuilds it (a key of the data pointer alone would not)."""
        key = (edge_index._version, n)
        if self._adj_src is not edge_index or self._adj_key != key:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", UserWarning)  # "sparse CSR support is in beta"
                self._adj_t = self._build_adjacency(edge_index, n)
            self._adj_src, self._adj_key = edge_index, key
        return self._adj_t

    def _build_adjacency(self, edge_index: Tensor, n: int) -> Tensor:
        """The unweighted adjacency: entry (dst, src) = 1 for each edge."""
        return to_torch_csr_tensor(edge_index.flip(0), size=(n, n))

    def _input_dropout(self, x: Tensor) -> Tensor:
        if self.training and self.config.input_dropout > 0:
            return F.dropout(x, self.config.input_dropout, training=True)
        return x

    def loss(self, out: Tensor, y: Tensor, mask: Tensor | None = None, weight: Tensor | None = None,
             **_: object) -> dict[str, Tensor]:
        """Cross-entropy on the ``mask`` nodes (optional class ``weight`` [2])."""
        if mask is not None:
            out, y = out[mask], y[mask]
        return {"total": F.cross_entropy(out, y.long(), weight=weight)}

    def score(self, out: Tensor) -> Tensor:
        """Anomaly score: probability of class 1."""
        return torch.softmax(out, dim=-1)[:, 1]


class BaselineClassifier(CrossEntropyClassifier):
    """Node classifier: projection -> ``num_layers`` x (layer, ReLU, norm, dropout) -> Linear(hidden, 2)."""

    def __init__(self, cfg: BaselineConfig) -> None:
        super().__init__(cfg)
        self.proj = nn.Linear(cfg.in_dim, cfg.hidden)
        self.layers = nn.ModuleList(_layer(cfg.kind, cfg.hidden, cfg.heads) for _ in range(cfg.num_layers))
        self.norms = nn.ModuleList(make_norm(cfg.norm, cfg.hidden) for _ in range(cfg.num_layers))
        self.head = nn.Linear(cfg.hidden, 2)

    def forward(self, x: Tensor, edge_index: Tensor, batch: Tensor | None = None, **_: object) -> Tensor:
        """Logits [N, 2]. ``batch`` and other GCCAD-only arguments are accepted and ignored."""
        h = self.proj(self._input_dropout(x))
        kind = self.config.kind
        graph = edge_index
        if kind in ("gcn", "gin", "sage") and not edge_index.is_sparse and edge_index.layout == torch.strided:
            graph = self._adjacency(edge_index, x.size(0))
        for layer, norm in zip(self.layers, self.norms):
            h = layer(h) if kind == "mlp" else layer(h, graph)
            h = F.dropout(norm(F.relu(h)), p=self.config.dropout, training=self.training)
        return self.head(h)


def build_baseline(cfg: BaselineConfig) -> CrossEntropyClassifier:
    """Construct the baseline named by ``cfg.kind``."""
    if cfg.kind not in BASELINES:
        raise ValueError(f"unknown baseline {cfg.kind!r} (choose from {', '.join(BASELINES)})")
    if cfg.kind == "bwgnn":
        from .bwgnn import BWGNN

        return BWGNN(cfg)
    return BaselineClassifier(cfg)
