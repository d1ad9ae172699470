"""Where a run's figures came from: the software, the machine and the kernel path, recorded in its metrics.

A GCCAD run is reproducible to the bit on one machine and build, but any last-bit difference (another build of the
environment, the PyTorch kernels instead of the native ones) gives another run of the same seed, about as far from it
as another seed (BENCHMARKS.md, session 92). Sessions 90-91 could not tell what an earlier build had differed in,
because no run recorded it. :func:`environment` is that record: ``gcad_dist.train`` and ``gcad_dist.finetune``
(and so ``gcad_dist.quality``'s runs) and ``gcad_dist.score`` write it to their metrics as ``environment``, the
environment of the process that computed the figures. ``gcad_dist.pretrain`` does not: on a cluster its workers'
environments need not be its driver's, and its figures are the scores ``gcad_dist.score`` computes.

It reads installed versions from package metadata (nothing is imported for it), and builds or loads nothing.
"""

from __future__ import annotations

import contextlib
import os
import platform
import subprocess
from functools import lru_cache
from importlib import metadata
from pathlib import Path
from typing import Any

import torch

__all__ = ["PACKAGES", "environment", "package_versions", "source_revision"]

#: distribution names whose installed versions are recorded (those not installed are left out)
PACKAGES = ("torch", "torch-geometric", "pyg-lib", "torch-sparse", "torch-scatter", "numpy", "scipy", "scikit-learn",
            "zarr", "ray", "faiss-cpu", "faiss-gpu", "faiss-gpu-cu12", "pygod", "pyod")


def package_versions(names: tuple[str, ...] = PACKAGES) -> dict[str, str]:
    """``{distribution: installed version}`` for each of ``names`` that is installed."""
    out: dict[str, str] = {}
    for name in names:
        with contextlib.suppress(metadata.PackageNotFoundError):
            out[name] = metadata.version(name)
    return out


def _cpu_model() -> str:
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


@lru_cache(maxsize=1)
def source_revision() -> str | None:
    """The git commit of this source tree, with ``+dirty`` if tracked files differ from it; None outside a checkout
    (an installed package, a Ray job's uploaded copy) or without git."""
    root = Path(__file__).resolve().parents[1]
    if not (root / ".git").exists():
        return None
    try:
        run = dict(cwd=root, capture_output=True, text=True, timeout=10, check=True)
        head = subprocess.run(["git", "rev-parse", "HEAD"], **run).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], **run).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return head + ("+dirty" if dirty else "") if head else None


def environment(device: str | torch.device | None = None) -> dict[str, Any]:
    """The run's provenance: Python and package versions, the source revision, the CPU, torch's threads and CPU
    kernel level, the native kernels' state in this process (:func:`gcad_dist.model.native.loaded_state`) and, for
    a CUDA ``device`` (``auto``: CUDA where there is one), the GPU and CUDA version. JSON-ready."""
    from gcad_dist import __version__
    from gcad_dist.model import native

    env: dict[str, Any] = {
        "gcad_dist": __version__, "source": source_revision(), "python": platform.python_version(),
        "packages": package_versions(), "cpu": _cpu_model(), "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(), "native_kernels": native.loaded_state(),
    }
    with contextlib.suppress(Exception):  # torch >= 2.1
        env["torch_cpu_capability"] = torch.backends.cpu.get_cpu_capability()
    from gcad_dist.supervised import resolve_device

    dev = None if device is None else resolve_device(str(device))
    if dev is not None and dev.type == "cuda" and torch.cuda.is_available():
        env["gpu"] = torch.cuda.get_device_name(dev)
        env["cuda"] = torch.version.cuda
    return env
