"""gcad_dist.distributed.ray_runtime: a private local Ray is stopped without leaving its temp dir behind."""

from __future__ import annotations

import os

import pytest


@pytest.mark.slow
def test_local_ray_temp_dir_is_removed_when_stopped(monkeypatch) -> None:
    """start_ray starts Ray in this process with a temp dir of its own (sessions, logs, sockets); stop_ray shuts
    Ray down and deletes that dir, so runs leave no /tmp/ray-* folder behind."""
    import ray

    from gcad_dist.distributed import ray_runtime

    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    if ray.is_initialized():
        pytest.skip("Ray is already up in this process")
    assert ray_runtime.start_ray(None, num_cpus=1, dashboard=False)
    temp = ray_runtime._temp_dir
    try:
        assert temp and os.path.isdir(temp) and os.listdir(temp)  # Ray wrote its session there
        assert ray.get(ray.remote(lambda: 2).remote()) == 2
    finally:
        ray_runtime.stop_ray()
    assert not ray.is_initialized()
    assert not os.path.exists(temp)
    ray_runtime.stop_ray()  # a second stop is harmless
