"""The workers' gradients averaged by hand, for a model whose loss is not computed from its ``forward`` outputs alone.

DDP averages gradients from hooks that it arms in ``forward`` for the parameters that the forward outputs reach.
The local recipe's loss applies the projection head *after* ``forward`` (:meth:`gcad_dist.model.GCCAD.loss`), and its
forward skips the GCCAD layers. Wrapped in DDP (``static_graph=True``, what pre-training did until session 59) such a
model's gradients were never averaged: each worker trained its own model on its own share and rank 0's was saved
(measured with two gloo processes: the gradients differed after every backward). :func:`average_gradients` makes
the step explicit: one all-reduce of every gradient, flattened into one buffer, after ``backward``.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.distributed as dist
from torch._utils import _flatten_dense_tensors, _unflatten_dense_tensors


def average_gradients(params: Sequence[torch.nn.Parameter], group: dist.ProcessGroup | None = None) -> None:
    """Replace each gradient of ``params`` by its mean over the workers of ``group`` (the default group: all).

    Every worker passes the same parameters in the same order: one all-reduce of one flat buffer, and no read on the
    host (a GPU step is not made to wait). A parameter without a gradient counts as zeros, and gets the mean too: a
    zero gradient where no worker used it, which leaves an Adam update with zero moments at zero."""
    world = dist.get_world_size(group) if dist.is_available() and dist.is_initialized() else 1
    if world == 1 or not params:
        return
    grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in params]
    flat = _flatten_dense_tensors(grads)
    dist.all_reduce(flat, group=group)
    flat /= world
    for p, g, mean in zip(params, grads, _unflatten_dense_tensors(flat, grads)):
        if p.grad is None:
            p.grad = mean
        else:
            g.copy_(mean)
