"""Fused weighted sum aggregation ``out_i = sum_{e = (j -> i)} w_e x_j``, in cache-sized edge blocks.

PyG's ``propagate`` materialises the [E, d] message tensor, and autograd keeps it (and the gathered
``x_j``) for the backward pass: on a graph of a million edges that is gigabytes of memory traffic per
layer. :func:`weighted_sum` computes the same sum (and its gradients for ``x`` and ``w``) block by
block with ``index_select`` / ``index_add_``, storing nothing per edge. It runs on CPU and GPU tensors
alike (on CPU, the native C++ kernel of :mod:`gcad_dist.model.native` when that is available); the
node updates of :mod:`gcad_dist.model.node_update` use it as their aggregation. Under autocast it
runs in fp32 (inputs cast, autocast off; :mod:`gcad_dist.model.precision`): a bf16 accumulator
would lose a high-degree node's small messages.
"""

from __future__ import annotations

import torch
from torch import Tensor

from . import native
from .precision import fp32_kernel

EDGE_CHUNK = 32_768  # edges per block on a CPU: [block, d] temporaries stay in cache
# On a GPU a minibatch is one block: there kernel launches, not cache misses, bound the step (an H100 ran
# about 1,000 launches per hop-trimmed step in blocks of 32k edges; BENCHMARKS.md, session 12).
GPU_EDGE_CHUNK = 1 << 20
FUSED = True  # False: plain gather-multiply-scatter with autograd (the reference; bench/model_step.py)

__all__ = ["weighted_sum", "edge_chunk", "EDGE_CHUNK", "GPU_EDGE_CHUNK"]


def edge_chunk(t: Tensor, cpu_chunk: int) -> int:
    """Edges per block of a fused edge kernel over ``t``'s device: ``cpu_chunk`` on a CPU, one block on a GPU."""
    return cpu_chunk if t.is_cpu else GPU_EDGE_CHUNK


class _WeightedSum(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: Tensor, w: Tensor, src: Tensor, dst: Tensor, num_nodes: int, chunk: int):  # noqa: D102
        out = x.new_zeros(num_nodes, x.size(1))
        e = src.numel()
        for lo in range(0, e, chunk):
            hi = min(lo + chunk, e)
            out.index_add_(0, dst[lo:hi], x.index_select(0, src[lo:hi]).mul_(w[lo:hi, None]))
        ctx.save_for_backward(x, w, src, dst)
        ctx.chunk = chunk
        return out

    @staticmethod
    def backward(ctx, g_out: Tensor):  # noqa: D102
        x, w, src, dst = ctx.saved_tensors
        need_x, need_w = ctx.needs_input_grad[:2]
        g_x = torch.zeros_like(x) if need_x else None
        g_w = torch.empty_like(w) if need_w else None
        e, chunk = src.numel(), ctx.chunk
        g_out = g_out.contiguous()
        for lo in range(0, e, chunk):
            hi = min(lo + chunk, e)
            s = src[lo:hi]
            gd = g_out.index_select(0, dst[lo:hi])  # dL/dmessage of each edge
            if g_w is not None:
                torch.sum(gd * x.index_select(0, s), dim=-1, out=g_w[lo:hi])
            if g_x is not None:
                g_x.index_add_(0, s, gd.mul_(w[lo:hi, None]))
        return g_x, g_w, None, None, None, None


def weighted_sum(x: Tensor, edge_index: Tensor, edge_weight: Tensor | None, num_nodes: int | None = None) -> Tensor:
    """``out[i] = sum over edges (j -> i) of edge_weight[e] * x[j]`` ([num_nodes, d]); differentiable in
    ``x`` and ``edge_weight``. ``edge_weight=None`` means all ones."""
    n = x.size(0) if num_nodes is None else num_nodes
    src, dst = edge_index[0], edge_index[1]
    with fp32_kernel(x.device.type) as autocast_on:
        if autocast_on:  # fp32 sums under autocast; the output is fp32 (autograd casts the gradients back)
            x = x.float()
            edge_weight = None if edge_weight is None else edge_weight.float()
        if edge_weight is None:
            edge_weight = torch.ones(src.numel(), dtype=x.dtype, device=x.device)
        if not FUSED:
            msg = x.index_select(0, src) * edge_weight.to(x.dtype).unsqueeze(-1)
            return x.new_zeros(n, x.size(1)).index_add(0, dst, msg)
        if native.enabled(x, src):
            return native.weighted_sum(x, edge_weight, src, dst, n)
        return _WeightedSum.apply(x, edge_weight.to(x.dtype), src, dst, n, edge_chunk(x, EDGE_CHUNK))
