"""Global context across data-parallel workers (METHOD.md section 5).

When several workers train on different seed nodes of the same large subgraph, each sees only a
minibatch; the GCCAD graph update needs the context of the whole subgraph. The model hands every
per-graph partial sum to a :class:`~gcad_dist.model.context.ContextSync` before dividing; here
``sum`` is a differentiable all-reduce over the workers sharing the subgraph, so every worker gets
the context of the union of their minibatches, and ``memory`` blends it with a persistent
per-subgraph, per-layer buffer (an exponential moving average across steps).

With one worker (or no process group) and momentum 0 this is exactly the identity.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch import Tensor

from gcad_dist.model.context import ContextSync


class _AllReduceSum(torch.autograd.Function):
    """Differentiable sum over a process group: the gradient of every input is the sum of the
    gradients of the output on all workers (each worker's loss depends on every worker's input)."""

    @staticmethod
    def forward(ctx, t: Tensor, group) -> Tensor:  # type: ignore[override]
        ctx.group = group
        out = t.detach().clone().contiguous()
        dist.all_reduce(out, op=dist.ReduceOp.SUM, group=group)
        return out

    @staticmethod
    def backward(ctx, grad: Tensor):  # type: ignore[override]
        g = grad.detach().clone().contiguous()
        dist.all_reduce(g, op=dist.ReduceOp.SUM, group=ctx.group)
        return g, None


class AllReduceContextSync(ContextSync):
    """All-reduce context sums across a process group; EMA memory per (subgraph, layer).

    Args:
        group: the process group of the workers that share the current subgraph (``None`` = the
            default group, i.e. all workers). Use a dedicated group (``dist.new_group()``) so that
            these collectives never interleave with DDP's gradient buckets on the same communicator.
        momentum: β of the memory. The context used at layer ``l`` is ``β·buffer + (1-β)·q`` (the
            gradient flows through ``q`` only) and the buffer becomes that value, detached.
            ``β = 0`` disables the memory (identity).
        enabled: when False, ``sum`` is the identity (graph-level data parallelism: every worker has
            whole graphs of its own). Toggle per step with :meth:`set_subgraph`.
    """

    def __init__(self, group: dist.ProcessGroup | None = None, momentum: float = 0.0, enabled: bool = True) -> None:
        if not 0.0 <= momentum < 1.0:
            raise ValueError(f"momentum must be in [0, 1), got {momentum}")
        self.group = group
        self.momentum = float(momentum)
        self.enabled = enabled
        self.key: int | None = None
        self.buffers: dict[tuple[int, int], Tensor] = {}

    # -- which subgraph are we on ------------------------------------------------------------
    def set_subgraph(self, key: int | None, shared: bool = True) -> None:
        """Declare the subgraph of the next steps (``key``; ``None`` = no memory) and whether the
        workers of ``group`` share it (``shared``: all-reduce) or each has its own graphs (identity)."""
        self.key = key
        self.enabled = shared

    @property
    def world_size(self) -> int:
        if not (dist.is_available() and dist.is_initialized()):
            return 1
        return dist.get_world_size(self.group)

    # -- the ContextSync interface ------------------------------------------------------------
    def sum(self, t: Tensor) -> Tensor:
        """Sum of ``t`` over the workers sharing this subgraph; differentiable (the backward pass
        all-reduces the gradients, so each worker's parameters see every worker's loss)."""
        if not self.enabled or self.world_size == 1:
            return t
        return _AllReduceSum.apply(t, self.group)

    def memory(self, layer: int, q: Tensor) -> Tensor:
        """``β·buffer + (1-β)·q`` for the current subgraph and ``layer``; the buffer is updated."""
        if self.momentum == 0.0 or self.key is None:
            return q
        k = (int(self.key), int(layer))
        buf = self.buffers.get(k)
        if buf is None or buf.shape != q.shape:
            out = q
        else:
            buf = buf.to(device=q.device, dtype=q.dtype)
            out = self.momentum * buf + (1.0 - self.momentum) * q
        self.buffers[k] = out.detach()
        return out

    # -- checkpoints ---------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Tensor]:
        """Memory buffers as ``{"<subgraph>:<layer>": tensor}`` on the CPU."""
        return {f"{s}:{l}": b.detach().cpu() for (s, l), b in self.buffers.items()}

    def load_state_dict(self, state: dict[str, Tensor]) -> None:
        """Restore buffers written by :meth:`state_dict`."""
        self.buffers = {}
        for name, b in state.items():
            s, l = name.split(":")
            self.buffers[(int(s), int(l))] = b.clone()
