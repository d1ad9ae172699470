"""The optimiser that supervised training, fine-tuning and pre-training build, in one place."""

from __future__ import annotations

from collections.abc import Iterable

import torch


def adam(params: Iterable[torch.nn.Parameter], device: torch.device, lr: float,
         weight_decay: float = 0.0) -> torch.optim.Adam:
    """Adam, fused on a GPU: one kernel for every parameter, where the minibatch step is bound by kernel launches
    (BENCHMARKS.md, session 12); torch's default implementation elsewhere."""
    return torch.optim.Adam(params, lr=lr, weight_decay=weight_decay, fused=device.type == "cuda" or None)
