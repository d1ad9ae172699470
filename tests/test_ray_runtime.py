"""gcad_dist.distributed.ray_runtime: a private local Ray is stopped without leaving its temp dir behind."""

from __future__ import annotations

import os
import tempfile

import pytest


@pytest.mark.slow
def test_local_ray_temp_dir_is_removed_when_stopped(monkeypatch) -> None:
    """start_ray starts Ray in this process with a temp dir of its own (sessions, logs, sockets), which is also its
    workers' TMPDIR; stop_ray shuts Ray down and deletes that dir, so runs leave no /tmp/ray-* folder, nor the
    pymp-* folders of killed workers, behind. This process's own temporary folder does not change."""
    import ray

    from gcad_dist.distributed import ray_runtime

    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    if ray.is_initialized():
        pytest.skip("Ray is already up in this process")
    before = tempfile.gettempdir()
    assert ray_runtime.start_ray(None, num_cpus=1, dashboard=False)
    temp = ray_runtime._temp_dir
    try:
        assert temp and os.path.isdir(temp) and os.listdir(temp)  # Ray wrote its session there

        @ray.remote
        def worker_temp() -> str:  # a worker's multiprocessing temp dir (pymp-*), as torch and Ray Train make them
            import multiprocessing.util

            return multiprocessing.util.get_temp_dir()

        pymp = ray.get(worker_temp.remote())
        assert os.path.isdir(pymp) and os.path.dirname(pymp) == temp  # inside the instance's temp dir
    finally:
        ray_runtime.stop_ray()
    assert not ray.is_initialized()
    assert not os.path.exists(temp) and not os.path.exists(pymp)
    assert tempfile.gettempdir() == before and os.environ.get("TMPDIR") != temp  # this process's own is unchanged
    ray_runtime.stop_ray()  # a second stop is harmless
