"""Known labels as inputs (the "label trick"): what a node's neighbours are known to be.

Fraud teams call it guilt by association: a node linked to known anomalies is more likely one itself, and members of
a ring share their neighbours. A supervised fit can use the training labels that way, as two input columns per node,
``[log(1 + k), k / in-degree]`` where ``k`` counts the node's in-neighbours labelled anomalous in the training split.
A node's own label never enters its own columns; but message passing would bring it back after two hops (``i -> j ->
i``), so training uses the masked trick of Wang et al. ("Bag of Tricks for Node Classification with Graph Neural
Networks", 2021): at every epoch a random half of the training anomalies lends its labels to the inputs and the loss
is taken on every other training node. The columns count anomalies only, so a normal node's label never enters them
and nothing is gained by taking normal nodes out of the loss (sessions 31-32 lent half of each class; session 33 keeps
every normal node in the loss, :data:`LENDS`). Evaluation and scoring use every training label. Validation and test
labels never enter the inputs.
"""

from __future__ import annotations

import copy
from typing import Any

import torch
from torch import Tensor

__all__ = ["LABEL_COLUMNS", "neighbour_label_features", "with_label_inputs", "LabelInputSampler"]

#: input columns appended by :func:`with_label_inputs` (the last columns of ``x``)
LABEL_COLUMNS = 2
#: share of the training anomalies whose labels are inputs in a training epoch (the loss takes the others)
INPUT_RATE = 0.5
#: which training nodes a training epoch lends (settings records: sessions 31-32 lent each class, a record without it)
LENDS = "anomalies"


def neighbour_label_features(edge_index: Tensor, num_nodes: int, anomalous: Tensor,
                             in_degree: Tensor | None = None) -> Tensor:
    """``[log(1 + k), k / in-degree]`` [N, 2] with ``k`` a node's in-neighbours (sources of its in-edges) for which
    ``anomalous`` is true; a node without in-edges gets zeros. ``in_degree`` (float [N]) spares recounting it when
    the same graph is read again (:class:`LabelInputSampler`, every epoch)."""
    src, dst = edge_index[0], edge_index[1]
    w = anomalous.to(torch.float32)[src]
    count = torch.zeros(num_nodes, dtype=torch.float32, device=edge_index.device).index_add_(0, dst, w)
    deg = _in_degree(edge_index, num_nodes) if in_degree is None else in_degree
    return torch.stack([torch.log1p(count), count / deg.clamp(min=1)], dim=1)


def _in_degree(edge_index: Tensor, num_nodes: int) -> Tensor:
    return torch.bincount(edge_index[1], minlength=num_nodes).to(torch.float32)


def _known_anomalies(y: Tensor, train_mask: Tensor) -> Tensor:
    return torch.as_tensor(train_mask, dtype=torch.bool, device=y.device) & (y == 1)


def with_label_inputs(data: Any, train_mask: Tensor) -> Any:
    """A shallow copy of ``data`` whose ``x`` has :data:`LABEL_COLUMNS` more columns: the neighbour-label features of
    the anomalies labelled in ``train_mask`` (no other label is read); ``label_input_columns`` marks them."""
    out = copy.copy(data)
    feats = neighbour_label_features(data.edge_index, int(data.num_nodes), _known_anomalies(data.y, train_mask))
    out.x = torch.cat([data.x, feats.to(data.x.dtype)], dim=1)
    out.label_input_columns = LABEL_COLUMNS  # the mark fit_supervised(label_inputs=True) checks
    return out


class LabelInputSampler:
    """The training side of the trick: :meth:`sample` draws which training anomalies lend their labels this epoch (a
    ``rate`` of them, rounded down: a single training anomaly always stays in the loss) and returns the epoch's features
    and the loss mask (every other training node, all the normal ones included). ``generator`` is its own stream
    (seeded ``seed + 7919``)."""

    def __init__(self, edge_index: Tensor, num_nodes: int, y: Tensor, train_mask: Tensor, seed: int,
                 rate: float = INPUT_RATE) -> None:
        if not 0.0 < rate < 1.0:
            raise ValueError(f"label input rate must be in (0, 1), got {rate}")
        self.edge_index, self.num_nodes, self.rate = edge_index, num_nodes, rate
        self.train_mask = torch.as_tensor(train_mask, dtype=torch.bool, device=y.device)
        self.anomalous = _known_anomalies(y, self.train_mask)
        self.train_anomalies = torch.nonzero(self.anomalous.cpu()).flatten()
        self.in_degree = _in_degree(edge_index, num_nodes)
        self.generator = torch.Generator(device="cpu").manual_seed(seed + 7_919)

    def sample(self) -> tuple[Tensor, Tensor]:
        """(features [N, 2] from a random ``rate`` of the training anomalies, loss mask [N] = the other training
        nodes)."""
        lend = torch.zeros(self.num_nodes, dtype=torch.bool)
        members = self.train_anomalies
        k = int(self.rate * members.numel())  # floor: a single training anomaly stays in the loss
        lend[members[torch.randperm(members.numel(), generator=self.generator)[:k]]] = True
        lend = lend.to(self.train_mask.device)
        feats = neighbour_label_features(self.edge_index, self.num_nodes, self.anomalous & lend, self.in_degree)
        return feats, self.train_mask & ~lend
