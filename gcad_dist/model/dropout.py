"""Dropout with a cheaper mask on CPU.

``nn.Dropout`` draws one Bernoulli sample per entry (``bernoulli_``): on a minibatch of ~22k sampled nodes x 64
that is about 25 ms per call, forward and backward, on one core, a sixth of a GCCAD step. :class:`Dropout` instead:

* with the native kernels (:mod:`gcad_dist.model.native`, CPU, any float dtype): a counter-based hash of
  (seed, row, unit) decides each entry (:func:`gcad_dist.model.native.dropout`, the native link MLP's mask), in one
  pass over ``x``; the backward recomputes it, so no mask is drawn from a generator, built or kept;
* otherwise on CPU: 64 random bits per four entries, 16-bit slices compared with round(p * 2^16)
  (:func:`gcad_dist.model.edge_update._chunk_keep_mask`, the PyTorch link MLP's mask), the scale 1 / (1 - p)
  folded into the mask, and the backward one multiplication by it. About 2x cheaper than ``bernoulli_``.

The drop probability is p to within 2^-17 either way. On other devices (and with ``FAST = False``) it is
``torch.nn.functional.dropout``. Masks follow ``torch.manual_seed`` (one seed drawn from torch's generator per call).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from . import native
from .edge_update import _chunk_keep_mask, _drop_threshold

FAST = True  # False: torch's own dropout everywhere (bench/train.py times both)


def fast_dropout(x: Tensor, p: float, training: bool = True) -> Tensor:
    """Inverted dropout of ``x`` with drop probability ``p`` (identity when not training or p == 0)."""
    if not training or p <= 0:
        return x
    if not FAST or x.device.type != "cpu" or x.dim() == 0:
        return F.dropout(x, p, training=True)
    seed = int(torch.randint(0, 2**62, (1,)).item())
    if native.enabled(x, low_precision=True):  # under bf16 autocast too: the same mask as in fp32
        return native.dropout(x, p, seed)
    cols = x.size(-1)
    rows = x.numel() // max(1, cols)
    mask = _chunk_keep_mask(rows, cols, p, seed, 0, x).view_as(x)
    return x * mask.mul_(1.0 / _drop_threshold(p)[1])


class Dropout(nn.Module):
    """Drop-in for ``nn.Dropout`` (same ``p`` attribute and state dict: none) using :func:`fast_dropout`."""

    def __init__(self, p: float = 0.5) -> None:
        super().__init__()
        if not 0.0 <= p < 1.0:
            raise ValueError(f"dropout probability must be in [0, 1), got {p}")
        self.p = p

    def forward(self, x: Tensor) -> Tensor:
        return fast_dropout(x, self.p, self.training)

    def extra_repr(self) -> str:
        return f"p={self.p}"
