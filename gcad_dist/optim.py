"""The optimiser that supervised training, fine-tuning and pre-training build, in one place."""

from __future__ import annotations

from collections.abc import Iterable

import torch

#: devices with a fused Adam kernel in torch (one kernel over every parameter instead of ~10 ops per tensor)
FUSED_DEVICES = ("cuda", "cpu")


def adam(params: Iterable[torch.nn.Parameter], device: torch.device, lr: float,
         weight_decay: float = 0.0) -> torch.optim.Adam:
    """Adam, fused on a GPU and on the CPU: one kernel for every parameter. A minibatch step is bound by kernel
    launches on a GPU (BENCHMARKS.md, session 12); on the CPU the per-tensor implementation spends ~10 dispatched
    ops on each of GCCAD's ~28 parameter tensors, 1.05 ms a step against 0.27 ms fused (session 22). The update
    is Adam's either way (the fused kernel differs from the per-tensor one in the last bits only); torch's
    default implementation on other devices."""
    return torch.optim.Adam(params, lr=lr, weight_decay=weight_decay,
                            fused=True if torch.device(device).type in FUSED_DEVICES else None)
