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

    Every worker passes the same parameters in the same order. A parameter without a gradient counts as zeros in the
    buffer (so the buffers of all workers have one size) and keeps no gradient where no worker gave it one."""
    world = dist.get_world_size(group) if dist.is_available() and dist.is_initialized() else 1
    if world == 1 or not params:
        return
    grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in params]
    used = [torch.full((1,), float(p.grad is not None), dtype=grads[0].dtype, device=grads[0].device) for p in params]
    flat = _flatten_dense_tensors(grads + used)  # one collective: the gradients, then who gave one
    dist.all_reduce(flat, group=group)
    means = _unflatten_dense_tensors(flat / world, grads)
    counts = flat[-len(params):].tolist()
    for p, g, mean, n in zip(params, grads, means, counts):
        if p.grad is not None:
            g.copy_(mean)
        elif n > 0:  # another worker's gradient reached a parameter this one did not use
            p.grad = mean.clone()
