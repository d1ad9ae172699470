"""Producing batches on a CUDA side stream in a prefetch thread, and handing them to the training stream.

Without it, a prefetch thread that samples on the GPU issues its kernels on the device's default stream,
behind the training step's, and each of its host synchronisations (the sampler's ``nonzero``, a ``.item()``)
waits for the whole queued step. With it, the thread works on a stream of its own
(``with side.context():``), and every batch goes through :meth:`SideStream.send` (records an event after the
batch's last kernel) and :meth:`SideStream.receive` in the consumer (its stream waits for that event, and
each tensor is marked as used there with ``Tensor.record_stream``, so the caching allocator does not give
its memory back to the side stream while the step still reads it). The pattern of PyTorch's pinned-memory
and CUDA prefetchers.

On a CPU device, or with ``GCAD_SIDE_STREAM=0`` (to compare, in benchmarks), every method is a no-op.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import Any

import torch
from torch import Tensor

ENV = "GCAD_SIDE_STREAM"


def _tensors(item: Any) -> Iterator[Tensor]:
    if isinstance(item, Tensor):
        yield item
    elif hasattr(item, "tensors"):  # TrainBatch
        yield from item.tensors()
    elif hasattr(item, "items"):  # PyG Data / dict
        for _, v in item.items():
            if isinstance(v, Tensor):
                yield v


class SideStream:
    """A CUDA stream for a producer thread on ``device`` (none on a CPU device or with ``GCAD_SIDE_STREAM=0``)."""

    def __init__(self, device: torch.device | str) -> None:
        self.device = torch.device(device)
        enabled = self.device.type == "cuda" and os.environ.get(ENV, "1") != "0"
        self.stream = torch.cuda.Stream(self.device) if enabled else None

    @property
    def enabled(self) -> bool:
        return self.stream is not None

    def context(self) -> contextlib.AbstractContextManager:
        """Make the side stream current (in the producer thread)."""
        return torch.cuda.stream(self.stream) if self.stream is not None else contextlib.nullcontext()

    def send(self, item: Any) -> Any:
        """``item`` with an event recorded on the side stream after its kernels (producer side)."""
        if self.stream is None:
            return item
        event = torch.cuda.Event()
        event.record(self.stream)
        return _Handed(item, event)

    def receive(self, handed: Any) -> Any:
        """The item, safe to use on the consumer's current stream (consumer side)."""
        if not isinstance(handed, _Handed):
            return handed
        current = torch.cuda.current_stream(self.device)
        current.wait_event(handed.event)
        for t in _tensors(handed.item):
            if t.is_cuda:
                t.record_stream(current)
        return handed.item


class _Handed:
    __slots__ = ("item", "event")

    def __init__(self, item: Any, event: torch.cuda.Event) -> None:
        self.item, self.event = item, event
