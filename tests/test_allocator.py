"""The malloc settings of training processes (gcad_dist.allocator): a training step reuses the memory that the
previous one freed instead of faulting in fresh pages."""

from __future__ import annotations

import os
import platform
import subprocess
import sys
import textwrap

import pytest

SCRIPT = textwrap.dedent("""
    import resource, torch
    from gcad_dist.allocator import retain_freed_memory
    from gcad_dist.model import GCCAD, GCCADConfig
    applied = retain_freed_memory()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    n, e = 20_000, 60_000  # a full-batch step whose [N, h] and [E, h] blocks are MiBs each
    x, ei, y = torch.randn(n, 64), torch.randint(0, n, (2, e)), (torch.rand(n) < 0.15).long()
    m = GCCAD(GCCADConfig(in_dim=64, hidden=64, num_layers=2, conv="gin")).train()
    opt = torch.optim.Adam(m.parameters(), lr=1e-3)

    def step():
        loss = m.loss(m(x, ei), y)["total"]
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    for _ in range(3):  # warm up: the heap grows to the step's peak
        step()
    faults = []
    for _ in range(16):
        before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        step()
        faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
    print(applied, sorted(faults)[8])  # the median step's page faults
""")


def _run(env: dict) -> tuple[bool, int]:
    """(settings applied, page faults of the median step) of SCRIPT in a fresh process."""
    out = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, check=True,
                         env={**env, "PYTHONPATH": ":".join(sys.path)}).stdout.split()
    return out[0] == "True", int(out[1])


@pytest.mark.skipif(platform.system() != "Linux" or platform.libc_ver()[0] != "glibc", reason="glibc only")
def test_training_steps_reuse_freed_memory():
    env = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_") and k != "GCAD_MALLOC"}
    applied, faults = _run(env)
    assert applied
    # glibc's defaults: most steps fault in thousands of fresh 4-KiB pages (1,200-8,000 at the median measured);
    # with the settings a step reuses the memory the previous one freed (0-2 at the median). Some steps still grow
    # the heap by a block or two (1,250-7,500 pages): 0-5 of 16 in 30 runs here, and at least 4 of 8 once in CI
    # (1,250 at the median of 8). Over 16 steps the median fails only when 8 of them grow the heap.
    assert faults < 100
    # the baseline: glibc's dynamic mmap threshold can adapt to a run's allocation order and spare one run the
    # faults (seen once in CI, 2 at the median), so up to three runs are tried; one with faults shows the difference
    off_faults = []
    for _ in range(3):
        off_applied, n = _run({**env, "GCAD_MALLOC": "0"})
        assert not off_applied
        off_faults.append(n)
        if n > 500:
            break
    assert max(off_faults) > 500, off_faults


def test_user_settings_win(monkeypatch):
    from gcad_dist import allocator

    monkeypatch.setenv("MALLOC_TRIM_THRESHOLD_", "0")
    assert allocator._skip_reason() == "MALLOC_*_THRESHOLD_ set by the user"
    monkeypatch.delenv("MALLOC_TRIM_THRESHOLD_")
    monkeypatch.setenv("LD_PRELOAD", "/usr/lib/libjemalloc.so.2")
    assert allocator._skip_reason() == "another allocator is preloaded"
    monkeypatch.setenv(allocator.ENV, "0")
    allocator.retain_freed_memory.cache_clear()  # the process's own answer is computed again after the test
    try:
        assert not allocator.retain_freed_memory()
    finally:
        allocator.retain_freed_memory.cache_clear()
