"""glibc malloc settings for training processes: keep freed memory for the next step.

A training step allocates and frees the same large blocks every step ([N, h] activations, gradients, zeroed
per-node sums). glibc serves a block above its mmap threshold (128 KiB, adapting up to 32 MiB) with a fresh
``mmap`` and gives freed heap tops back to the OS above its trim threshold, so each step touches new pages:
on a K-means part's minibatch of the generated 1M-node graph (19k nodes, 30k edges, hidden 64) that is
1,200-3,500 page faults and 3-6 ms of system time per step of 40-90 ms (``BENCHMARKS.md``, session 22).
:func:`retain_freed_memory` raises both thresholds once per process (``mallopt``), as PyTorch's CPU tuning guide
gets by preloading jemalloc or tcmalloc: blocks up to ``MMAP_THRESHOLD`` come from the heap and freed memory stays
with the process up to ``TRIM_THRESHOLD``. The price is that the process keeps its peak heap; it is meant for
training and scoring processes, which run at that peak every step anyway.

Nothing is changed when the C library is not glibc, when the user set ``MALLOC_MMAP_THRESHOLD_`` or
``MALLOC_TRIM_THRESHOLD_`` (their choice wins), when another allocator is preloaded (``LD_PRELOAD`` naming
jemalloc or tcmalloc), or with ``GCAD_MALLOC=0``.
"""

from __future__ import annotations

import ctypes
import functools
import logging
import os
import platform

log = logging.getLogger(__name__)

ENV = "GCAD_MALLOC"
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3  # glibc's <malloc.h>
MMAP_THRESHOLD = 32 << 20  # glibc's largest mmap threshold on 64-bit (HEAP_MAX / 2)
TRIM_THRESHOLD = 1 << 30

__all__ = ["ENV", "retain_freed_memory"]


def _skip_reason() -> str | None:
    if os.environ.get(ENV, "1").strip().lower() in ("0", "false", "off", "no"):
        return f"{ENV}=0"
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return "not glibc"
    if any(v in os.environ for v in ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_")):
        return "MALLOC_*_THRESHOLD_ set by the user"
    if any(a in os.environ.get("LD_PRELOAD", "") for a in ("jemalloc", "tcmalloc")):
        return "another allocator is preloaded"
    return None


@functools.cache  # once per process (a second mallopt would be harmless)
def retain_freed_memory() -> bool:
    """Raise glibc's mmap and trim thresholds for this process to MMAP_THRESHOLD and TRIM_THRESHOLD; whether they
    are now in effect."""
    reason = _skip_reason()
    ok = False
    if reason is None:
        try:
            libc = ctypes.CDLL(None)
            ok = bool(libc.mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(
                libc.mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD))
            reason = None if ok else "mallopt refused the values"
        except (OSError, AttributeError) as exc:
            reason = f"mallopt unavailable ({exc})"
    log.debug("malloc thresholds %s", "raised" if ok else f"unchanged: {reason}")
    return ok
