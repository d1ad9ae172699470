"""How per-graph context sums are combined: the seam between the model and distributed training.

The GCCAD model never divides a per-graph sum by a per-graph normaliser directly. It hands the
partial sums to a :class:`ContextSync` first. On one process (the default) that is the identity,
so the model is exactly METHOD.md sections 1-2. In distributed pre-training on a large subgraph
(METHOD.md section 5) several workers hold different seed nodes of the same subgraph; their
``ContextSync`` all-reduces the sums, so each gets the context of the union of their batches,
and may blend it with a persistent per-subgraph, per-layer memory.

The model calls, in this order and the same number of times on every rank (so that collective
calls line up):

* ``sum(t)`` for the initial context: ``t = cat([sum_i h_i, count])`` per graph;
* for each layer ``l``: ``sum(t)`` with ``t = cat([sum_i exp(s_i) h_i, sum_i exp(s_i)])`` per graph,
  then ``memory(l, q)`` on the resulting context ``q`` [num_graphs, hidden];
* in the contrastive loss: ``sum(t)`` with ``t`` the per-graph sum over abnormal nodes of
  ``exp(q . h_j / tau)`` (and any per-graph counts the loss needs).
"""

from __future__ import annotations

from torch import Tensor


class ContextSync:
    """Identity combiner: one process, full graphs. Subclass for distributed training."""

    def sum(self, t: Tensor) -> Tensor:
        """Return the sum of ``t`` over all workers that share these graphs (identity here)."""
        return t

    def memory(self, layer: int, q: Tensor) -> Tensor:
        """Return the context to use for ``layer`` given this step's context ``q`` (identity here)."""
        return q


IDENTITY = ContextSync()
