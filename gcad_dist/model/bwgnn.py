"""BWGNN: a bank of Beta-wavelet graph filters (Tang, Li, Wang and Li, "Rethinking Graph Neural Networks for
Anomaly Detection", ICML 2022), the GNN that GADBench (Tang et al., NeurIPS 2023) found strongest for supervised
graph anomaly detection among the GNNs it ran.

Anomalies shift a graph signal's spectral energy towards high frequencies, so BWGNN passes the node embeddings
through C + 1 band-pass filters at once, ``beta_i(L) h`` for i = 0..C, with L = I - D^-1/2 A D^-1/2 the normalised
Laplacian and

    beta_i(x) = (x / 2)^i (1 - x / 2)^(C - i) / B(i + 1, C + 1 - i),

the Beta distribution's density on the spectrum [0, 2] (a Bernstein basis, so the filters cover it evenly). Each
filter is a polynomial of degree C in L, so it reaches C hops. The model, as GADBench runs it: two linear layers with
ReLU, the C + 1 filters side by side, dropout, and a two-layer MLP to two logits. ``BaselineConfig.num_layers`` is C.

The polynomials' coefficients are exact integers over powers of two (:func:`beta_wavelet_coefficients`); the powers
``L^k h`` are computed once and shared by the filters, one sparse product each.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch_geometric.nn import MessagePassing
from torch_geometric.nn.conv.gcn_conv import gcn_norm
from torch_geometric.utils import spmm, to_torch_csr_tensor

from .baselines import BaselineConfig, CrossEntropyClassifier
from .generated_sources import release_generated_sources

__all__ = ["beta_wavelet_coefficients", "BetaWaveletConv", "BWGNN"]


def beta_wavelet_coefficients(order: int) -> list[list[float]]:
    """``theta[i][k]``, the coefficient of x^k in beta_i(x) (module docstring), for i, k = 0..``order``.

    (x/2)^i (1 - x/2)^(C-i) expands to sum_j comb(C-i, j) (-1)^j x^(i+j) / 2^(i+j), and 1 / B(i+1, C+1-i) is
    (C + 1) comb(C, i)."""
    if order < 1:
        raise ValueError(f"BWGNN: the wavelets' order must be at least 1, got {order}")
    theta = []
    for i in range(order + 1):
        scale = (order + 1) * math.comb(order, i)
        row = [0.0] * (order + 1)
        for j in range(order - i + 1):
            row[i + j] = scale * math.comb(order - i, j) * (-1) ** j / 2 ** (i + j)
        theta.append(row)
    return theta


class BetaWaveletConv(MessagePassing):
    """The filter bank: ``[beta_0(L) x || ... || beta_C(L) x]`` [N, (C + 1) F] for ``x`` [N, F] and ``adj_t``, the
    symmetrically normalised adjacency D^-1/2 A D^-1/2 (row = target; :meth:`normalized_adjacency`). No weights:
    the filters are fixed, as in the paper."""

    def __init__(self, order: int) -> None:
        super().__init__(aggr="add")
        self.order = order
        # fixed, derived from the order: moved with the module, not saved with its weights
        self.register_buffer("theta", torch.tensor(beta_wavelet_coefficients(order)), persistent=False)

    @staticmethod
    def normalized_adjacency(edge_index: Tensor, num_nodes: int) -> Tensor:
        """CSR ``adj_t`` of D^-1/2 A D^-1/2, D the in-degrees (a node without in-edges keeps a zero row)."""
        ei, w = gcn_norm(edge_index, None, num_nodes, add_self_loops=False)
        return to_torch_csr_tensor(ei.flip(0), w, size=(num_nodes, num_nodes))

    def forward(self, x: Tensor, adj_t: Tensor) -> Tensor:  # noqa: D102
        powers = [x]
        for _ in range(self.order):  # L^k x = L^(k-1) x - A_hat L^(k-1) x
            powers.append(powers[-1] - self.propagate(adj_t, x=powers[-1]))
        filtered = torch.einsum("ik,knf->nif", self.theta.to(x.dtype), torch.stack(powers))
        return filtered.reshape(x.size(0), -1)

    def message_and_aggregate(self, adj_t: Tensor, x: Tensor) -> Tensor:  # noqa: D102
        return spmm(adj_t, x, reduce="sum")


class BWGNN(CrossEntropyClassifier):
    """BWGNN as GADBench runs it (module docstring): Linear-ReLU-Linear-ReLU, the filter bank of order
    ``cfg.num_layers``, dropout, then Linear-ReLU-dropout-Linear to two logits. Trained as every baseline is."""

    def __init__(self, cfg: BaselineConfig) -> None:
        super().__init__(cfg)
        self.lin1 = nn.Linear(cfg.in_dim, cfg.hidden)
        self.lin2 = nn.Linear(cfg.hidden, cfg.hidden)
        self.conv = BetaWaveletConv(cfg.num_layers)
        release_generated_sources()  # PyG's generated propagate file (gcad_dist.model.generated_sources)
        self.mlp1 = nn.Linear(cfg.hidden * (cfg.num_layers + 1), cfg.hidden)
        self.head = nn.Linear(cfg.hidden, 2)

    def _build_adjacency(self, edge_index: Tensor, n: int) -> Tensor:
        return BetaWaveletConv.normalized_adjacency(edge_index, n)

    def forward(self, x: Tensor, edge_index: Tensor, batch: Tensor | None = None, **_: object) -> Tensor:
        """Logits [N, 2]. ``batch`` and other GCCAD-only arguments are accepted and ignored."""
        h = F.relu(self.lin2(F.relu(self.lin1(self._input_dropout(x)))))
        h = self.conv(h, self._adjacency(edge_index, x.size(0)))
        h = F.dropout(h, p=self.config.dropout, training=self.training)
        h = F.dropout(F.relu(self.mlp1(h)), p=self.config.dropout, training=self.training)
        return self.head(h)
