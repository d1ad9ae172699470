"""gcad_dist.provenance: the environment record that train, finetune and score write to their metrics."""

from __future__ import annotations

import json
import subprocess

import pytest
import torch

from gcad_dist import provenance
from gcad_dist.model import native


def test_environment_is_json_and_names_what_is_installed(monkeypatch):
    monkeypatch.setattr(native, "_state", {})  # a process that has not used the native kernels
    monkeypatch.delenv(native.ENV, raising=False)
    env = provenance.environment("cpu")
    json.dumps(env)  # JSON-ready
    assert env["packages"]["torch"] == torch.__version__
    assert "not-a-package-xyz" not in provenance.package_versions(("torch", "not-a-package-xyz"))
    assert env["torch_threads"] == torch.get_num_threads() and env["cpu"]
    assert env["native_kernels"] == "not loaded" and native._state == {}  # recorded, not built or loaded
    assert "gpu" not in env


def test_native_state_is_reported_as_set(monkeypatch):
    monkeypatch.setenv(native.ENV, "0")
    assert provenance.environment()["native_kernels"] == "off"
    monkeypatch.delenv(native.ENV)
    monkeypatch.setattr(native, "_state", {"error": "RuntimeError: no compiler"})
    assert provenance.environment()["native_kernels"] == "unavailable: RuntimeError: no compiler"


def test_source_revision_is_the_checkouts_commit_or_none(monkeypatch):
    provenance.source_revision.cache_clear()
    rev = provenance.source_revision()
    root = provenance.Path(provenance.__file__).resolve().parents[1]
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True,
                              check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        head = None
    if head is None:
        assert rev is None
    else:
        assert rev is not None and rev.split("+")[0] == head
    # git missing or failing: None, not an error
    provenance.source_revision.cache_clear()

    def no_git(*a, **kw):
        raise FileNotFoundError("git")

    monkeypatch.setattr(provenance.subprocess, "run", no_git)
    assert provenance.source_revision() is None
    provenance.source_revision.cache_clear()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_a_cuda_device_is_named():
    env = provenance.environment("cuda")
    assert env["gpu"] == torch.cuda.get_device_name(0) and env["cuda"] == torch.version.cuda
