"""Mixed precision: bf16 autocast for the GCCAD step, with the per-edge kernels and every sum in fp32.

``precision="bf16"`` runs the forward pass (and the loss) under ``torch.autocast(device, bfloat16)``:
the dense layers (input projection, GIN MLPs, the node-level part of the link MLP, the heads) compute
in bf16, the backward pass follows autocast's casts. What stays in fp32, by design:

* the fused edge kernels (:mod:`gcad_dist.model.aggregate`, the link MLP of
  :mod:`gcad_dist.model.edge_update`): their inputs are cast to fp32 and they run with autocast off
  (:func:`fp32_kernel`), forward and backward. They accumulate over edges with ``index_add_`` (a
  node's messages, and the weight gradients summed over up to millions of edges); a bf16 accumulator
  keeps 8 significant bits, so a node of degree ~300 would stop adding its small messages at all;
  and the link logits decide which edges are kept, where a bf16 rounding flips decisions near 0;
* per-graph sums (the contexts, :func:`gcad_dist.model.readout.graph_sum`), the GAT attention
  normalisation and the SAGE neighbour counts;
* the losses and the score (they cast to fp32 already).

The optimizer, the parameters and the gradients stay fp32 (autocast casts weights per op), so no
loss scaling is needed for bf16 (its exponent range is fp32's).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator

import torch

log = logging.getLogger(__name__)

PRECISIONS = ("fp32", "bf16")

__all__ = ["PRECISIONS", "autocast_enabled", "fp32_kernel", "bf16_supported", "resolve_precision", "autocast"]


def autocast_enabled(device_type: str) -> bool:
    """Whether autocast is on for ``device_type`` ("cpu", "cuda", ...) in this thread."""
    try:
        return bool(torch.is_autocast_enabled(device_type))
    except TypeError:  # torch < 2.4: no device argument
        if device_type == "cpu":
            return bool(torch.is_autocast_cpu_enabled())
        return device_type == "cuda" and bool(torch.is_autocast_enabled())


@contextlib.contextmanager
def fp32_kernel(device_type: str) -> Iterator[bool]:
    """Autocast off for ``device_type`` inside; yields whether it was on (then cast the inputs to fp32)."""
    if not autocast_enabled(device_type):
        yield False
        return
    with torch.autocast(device_type, enabled=False):
        yield True


def bf16_supported(device: torch.device | str) -> bool:
    """bf16 autocast is worth running on ``device``: a CUDA GPU with bf16 (Ampere or later), or a CPU
    with native bf16 instructions (AVX512-BF16 / AMX; elsewhere oneDNN emulates it, slowly)."""
    device = torch.device(device)
    if device.type == "cuda":
        return torch.cuda.is_available() and torch.cuda.is_bf16_supported()
    if device.type == "cpu":
        try:
            return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
        except (AttributeError, RuntimeError):  # pragma: no cover - builds without oneDNN
            return False
    return False


def resolve_precision(precision: str, device: torch.device | str) -> str:
    """Validate ``precision`` (one of :data:`PRECISIONS`); "bf16" on a device without bf16 support
    falls back to "fp32" with a warning. Returns the precision that will be used."""
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {PRECISIONS}, got {precision!r}")
    if precision == "bf16" and not bf16_supported(device):
        log.warning("bf16 requested but %s has no native bf16 support: training in fp32", device)
        return "fp32"
    return precision


def autocast(precision: str, device: torch.device | str) -> contextlib.AbstractContextManager:
    """The autocast context of ``precision`` on ``device`` (a no-op for "fp32"). Wrap the forward pass
    and the loss, not ``backward()`` or the optimizer step."""
    if precision == "fp32":
        return contextlib.nullcontext()
    if precision != "bf16":
        raise ValueError(f"precision must be one of {PRECISIONS}, got {precision!r}")
    return torch.autocast(torch.device(device).type, dtype=torch.bfloat16)
