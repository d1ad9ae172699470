"""Native (C++) CPU kernels of GCCAD: the per-edge link MLP and weighted sum, and the node updates' dropout.

The C++ source (``csrc/edge_kernels.cpp``) is compiled at first use with
``torch.utils.cpp_extension.load`` (g++ and ninja, ~15 s once) into torch's extension cache
(``$TORCH_EXTENSIONS_DIR``, default ``~/.cache/torch_extensions``), under a name that hashes the
source, the compiler flags, torch's version and this CPU's instruction-set flags (``-march=native``), so
a cache shared between different machines never loads a binary built for another CPU. Pre-build it
(and see whether the kernels are in use) with
``python -c "from gcad_dist.model import native; print(native.status())"``.

When the kernels are used (:func:`enabled`): CPU tensors of dtype float32 or float64, and

* ``GCAD_NATIVE`` unset, ``auto`` or ``1``: always, on any number of torch threads. With more than one thread
  (``torch.set_num_threads``) the per-edge work is split into contiguous edge ranges run on torch's OpenMP
  threads. On sparse inputs (at most as many edges as threads x nodes: a neighbour-sampled minibatch) every
  per-node sum is taken by the one thread that owns the node, over the node's edges in ascending order (the edges
  grouped by target and by source; no private copies to zero and add up), so the per-node sums are the serial
  loops' bit for bit and only the link MLP's [h, h] weight gradients are added over threads. On dense inputs (a full
  graph) per-node sums go to private copies added at the end (at most 1 GiB of copies, which caps the thread count
  on very large graphs) and differ from the serial loops by summation order only;
* ``GCAD_NATIVE=0``: never (the PyTorch kernels of :mod:`gcad_dist.model.edge_update` and
  :mod:`gcad_dist.model.aggregate`).

If the extension cannot be built or loaded (no compiler, build error) one warning is logged and the
PyTorch kernels are used for the rest of the process.

Dropout of the native link MLP: unit ``j`` of edge ``e`` is kept iff a counter-based hash of
``(seed, e, j)`` (splitmix64 of the edge, murmur3's 32-bit finaliser per unit) is at least
``round(p * 2^32)``: a Bernoulli(1 - p) mask (to within 2^-33) scaled by the exact inverse keep
probability. The forward pass keeps, for the backward, one bit per edge and hidden unit
(ReLU(z) * keep > 0; h / 8 bytes per edge, nothing else per edge), so forward and backward use the
same mask by construction and the backward needs no recomputation of the [E, h] pre-activation. The
seed is drawn from torch's generator as on the PyTorch path, so results follow ``torch.manual_seed``,
but the random stream differs from the PyTorch path's
(:func:`gcad_dist.model.edge_update._chunk_keep_mask`).
"""

from __future__ import annotations

import hashlib
import logging
import os
import platform
import threading
import time
from pathlib import Path

import torch
from torch import Tensor

log = logging.getLogger(__name__)

ENV = "GCAD_NATIVE"
SOURCE = Path(__file__).with_name("csrc") / "edge_kernels.cpp"
CFLAGS = ["-O3", "-march=native", "-fopenmp-simd"]
# at::parallel_for runs on torch's OpenMP threads only if the extension is compiled with OpenMP too (the
# runtime is torch's own libgomp, already loaded: same soname); otherwise it runs serially
OPENMP = ["-fopenmp"] if "parallel backend: OpenMP" in torch.__config__.parallel_info() else []
BLOCK = 512  # edges per block of the native link MLP: its [block, h] buffers stay in L2

__all__ = ["ENV", "BLOCK", "available", "enabled", "link_mlp", "weighted_sum", "dropout", "link_threshold", "loaded_state",
           "status"]

_lock = threading.Lock()
_state: dict[str, object] = {}  # "ops": the loaded op namespace, or "error": why it is unavailable


def _off() -> bool:
    """``GCAD_NATIVE=0`` (or false / off / no): the PyTorch kernels only. Any other value, or none, is auto."""
    return os.environ.get(ENV, "auto").strip().lower() in ("0", "false", "off", "no")


def _cpu_flags() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith(("flags", "Features")):
                return line
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _build_name() -> str:
    key = hashlib.sha256()
    for part in (SOURCE.read_bytes(), " ".join(CFLAGS + OPENMP).encode(), _cpu_flags().encode(), torch.__version__.encode()):
        key.update(part)
        key.update(b"\0")
    return f"gcad_native_{key.hexdigest()[:12]}"


def _summary(exc: Exception) -> str:
    """The first compiler error line of a failed build (else the exception's last line)."""
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    errors = [ln for ln in lines if "error:" in ln]
    return f"{type(exc).__name__}: {(errors or lines or [''])[0 if errors else -1][:300]}"


#: a build lock older than this is a dead build's (a build takes ~15 s to 2 min): removed, with a warning
STALE_LOCK_SECONDS = 600.0


def clear_stale_lock(build_dir: Path, max_age: float = STALE_LOCK_SECONDS) -> bool:
    """Remove ``build_dir/lock`` when it is older than ``max_age`` seconds; True if removed. torch's extension loader
    waits for that file to go away with no time limit, and a build killed mid-way (Ctrl-C, a killed job) leaves it
    behind: every later run would then wait forever, at no CPU, without a word (session 65)."""
    lock = Path(build_dir) / "lock"
    try:
        age = time.time() - lock.stat().st_mtime
    except OSError:
        return False
    if age <= max_age:
        return False
    log.warning("removing %s, left %.0f s ago by a native-kernel build that did not finish (killed?)", lock, age)
    try:
        lock.unlink()
    except OSError as exc:
        log.warning("could not remove %s (%s): remove it by hand if runs hang at start", lock, exc)
        return False
    return True


def _load():
    """The op namespace ``torch.ops.gcad_native`` (building the extension if needed), or None."""
    if "ops" in _state or "error" in _state:
        return _state.get("ops")
    with _lock:
        if "ops" in _state or "error" in _state:
            return _state.get("ops")
        try:
            from torch.utils.cpp_extension import _get_build_directory, load

            name = _build_name()
            clear_stale_lock(Path(_get_build_directory(name, verbose=False)))
            # copies: torch's loader appends its own libraries to the lists it is given
            load(name=name, sources=[str(SOURCE)], extra_cflags=CFLAGS + OPENMP, extra_ldflags=list(OPENMP),
                 is_python_module=False,
                 verbose=False)
            _state["ops"] = torch.ops.gcad_native
            _state["name"] = name
        except Exception as exc:  # noqa: BLE001 - any build/load failure means: use the PyTorch kernels
            _state["error"] = _summary(exc)
            log.warning("native edge kernels unavailable, using the PyTorch kernels (%s)", _state["error"])
    return _state.get("ops")


def available() -> bool:
    """Whether the native kernels are built and loaded (builds them on first call unless ``GCAD_NATIVE=0``)."""
    return not _off() and _load() is not None


def enabled(*tensors: Tensor, low_precision: bool = False) -> bool:
    """Whether to run the native kernels on ``tensors`` (see the module docstring); ``low_precision``: bf16 and fp16
    tensors too (the dropout, whose mask is then the same in every precision)."""
    if _off():
        return False
    t0 = tensors[0]
    dtypes = (torch.float32, torch.float64) + ((torch.bfloat16, torch.float16) if low_precision else ())
    if t0.device.type != "cpu" or t0.dtype not in dtypes:
        return False
    if any(t.device.type != "cpu" for t in tensors[1:]):
        return False
    return _load() is not None


def link_threshold(p: float) -> tuple[int, float]:
    """(uint32 threshold, 1 / keep probability) of the native dropout with drop probability ``p``:
    unit kept iff its 32-bit hash >= threshold; threshold 0 means no dropout (scale 1)."""
    if p <= 0:
        return 0, 1.0
    if p >= 1:
        raise ValueError(f"dropout probability must be < 1, got {p}")
    thr = min(round(p * 2**32), 2**32 - 1)
    return thr, (1.0 / (1.0 - thr / 2**32)) if thr > 0 else 1.0


class _LinkMLP(torch.autograd.Function):
    """The native link MLP (same contract as :class:`gcad_dist.model.edge_update._LinkMLP`). Keeps for
    the backward pass, besides the inputs, one bit per edge and hidden unit (ReLU(z) * keep > 0), h / 8
    bytes per edge, and only when a gradient is needed."""

    @staticmethod
    def forward(ctx, h, ud, us, w1, w2, src, dst, drop: float, seed: int, block: int):  # noqa: D102
        thr, scale = link_threshold(drop)
        w2s = (w2 * scale).contiguous()
        save = any(ctx.needs_input_grad[:5])
        out, bits = _state["ops"].link_mlp_forward(h, ud, us, w1, w2s, src, dst, thr, seed, block, save)
        ctx.save_for_backward(h, ud, us, w1, w2s, src, dst, bits)
        ctx.scale, ctx.block = scale, block
        return out

    @staticmethod
    def backward(ctx, g_out):  # noqa: D102
        h, ud, us, w1, w2s, src, dst, bits = ctx.saved_tensors
        need = ctx.needs_input_grad[:5]
        grads = _state["ops"].link_mlp_backward(
            g_out.to(h.dtype).contiguous(), h, ud, us, w1, w2s, ctx.scale, src, dst, bits, ctx.block,
            need[0], need[1] and ud is not None, need[2] and us is not None, need[3], need[4])
        g_h, g_ud, g_us, g_w1, g_w2 = (g if n else None for g, n in zip(grads, need))
        if ud is None:
            g_ud = None
        if us is None:
            g_us = None
        return g_h, g_ud, g_us, g_w1, g_w2, None, None, None, None, None


def link_mlp(h: Tensor, ud: Tensor | None, us: Tensor | None, w1: Tensor, w2: Tensor, src: Tensor, dst: Tensor,
             drop: float, seed: int, block: int | None = None) -> Tensor:
    """logits_e = w2 . Dropout_p(ReLU(W1 |h[dst] - h[src]| + ud[dst] + us[src])), [E], without the output
    bias; ``ud`` is [N, h], one [h] vector for every edge, or None, ``us`` [N, h] or None; dropout from
    ``seed`` (module docstring). Differentiable in h, ud, us, w1, w2. Check :func:`enabled` first."""
    c = lambda t: None if t is None else t.contiguous()  # noqa: E731
    return _LinkMLP.apply(h.contiguous(), c(ud), c(us), w1.contiguous(), w2.contiguous(), src.contiguous(),
                          dst.contiguous(), float(drop), int(seed), int(block or BLOCK))


class _WeightedSum(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: Tensor, w: Tensor, src: Tensor, dst: Tensor, num_nodes: int):  # noqa: D102
        ctx.save_for_backward(x, w, src, dst)
        return _state["ops"].weighted_sum_forward(x, w, src, dst, num_nodes)

    @staticmethod
    def backward(ctx, g_out: Tensor):  # noqa: D102
        x, w, src, dst = ctx.saved_tensors
        need_x, need_w = ctx.needs_input_grad[:2]
        g_x, g_w = _state["ops"].weighted_sum_backward(g_out.to(x.dtype).contiguous(), x, w, src, dst, need_x, need_w)
        return (g_x if need_x else None), (g_w if need_w else None), None, None, None


def weighted_sum(x: Tensor, w: Tensor, src: Tensor, dst: Tensor, num_nodes: int) -> Tensor:
    """``out[i] = sum over edges e = (j -> i) of w[e] x[j]``, [num_nodes, d]; differentiable in x and w.
    An edge of weight exactly 0 is skipped (the PyTorch kernel adds 0 * x[j], which differs only where
    x[j] is not finite). Check :func:`enabled` first."""
    return _WeightedSum.apply(x.contiguous(), w.to(x.dtype).contiguous(), src.contiguous(), dst.contiguous(),
                              int(num_nodes))


class _HashDropout(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: Tensor, threshold: int, seed: int, scale: float):  # noqa: D102
        ctx.args = (threshold, seed, scale)
        return _state["ops"].hash_dropout(x, threshold, seed, scale)

    @staticmethod
    def backward(ctx, g_out: Tensor):  # noqa: D102
        return _state["ops"].hash_dropout(g_out.contiguous(), *ctx.args), None, None, None


def dropout(x: Tensor, p: float, seed: int) -> Tensor:
    """Inverted dropout of ``x`` with drop probability ``p``: entry (r, j) of the rows of its last dimension is kept
    iff the link MLP's counter-based hash of ``(seed, r, j)`` is at least ``round(p * 2^32)`` (module docstring), and
    scaled by the exact inverse keep probability. One pass forward; the backward recomputes the mask from the seed,
    so no mask is drawn from a generator or kept. Check :func:`enabled` first."""
    thr, scale = link_threshold(p)
    return _HashDropout.apply(x.contiguous(), thr, int(seed), scale)


def loaded_state() -> str:
    """What this process has done with the native kernels, without building or loading them: ``off`` (``GCAD_NATIVE=0``),
    ``loaded <build name>``, ``unavailable: <why>`` or ``not loaded`` (nothing in this process has used them yet)."""
    if _off():
        return "off"
    if "ops" in _state:
        return f"loaded {_state['name']}"
    if "error" in _state:
        return f"unavailable: {_state['error']}"
    return "not loaded"


def status() -> str:
    """One line: whether the native kernels are in use, and why not."""
    if _off():
        return f"native edge kernels: off ({ENV}=0)"
    if _load() is None:
        return f"native edge kernels: unavailable ({_state['error']})"
    threads = torch.get_num_threads()
    how = "OpenMP" if OPENMP else "serial: this torch has no OpenMP backend"
    return f"native edge kernels: in use ({threads} torch thread{'s' if threads > 1 else ''}, {how})"
