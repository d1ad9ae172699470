"""The cluster launcher configs (ray_cluster.yaml, launch/ray_cluster.onprem.yaml) pass Ray's own
validation (the steps `ray up` runs: prepare_config -> validate_config) and say what we rely on."""

from __future__ import annotations

import copy
import re
import shutil
import subprocess
from pathlib import Path

import pytest

yaml = pytest.importorskip("yaml")
pytest.importorskip("jsonschema")
util = pytest.importorskip("ray.autoscaler._private.util")

REPO = Path(__file__).resolve().parents[1]
CONFIGS = {"aws": REPO / "ray_cluster.yaml", "onprem": REPO / "launch" / "ray_cluster.onprem.yaml"}


def _prepared(name: str) -> tuple[dict, dict]:
    raw = yaml.safe_load(CONFIGS[name].read_text())
    prepared = util.prepare_config(copy.deepcopy(raw))
    util.validate_config(prepared)
    return raw, prepared


def _all_commands(cfg: dict) -> list[str]:
    keys = ("initialization_commands", "head_setup_commands", "worker_setup_commands",
            "head_start_ray_commands", "worker_start_ray_commands")
    return [c for k in keys for c in cfg.get(k, [])]


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_config_passes_ray_validation(name: str) -> None:
    raw, prepared = _prepared(name)
    assert prepared["head_node_type"] in prepared["available_node_types"]
    # The project itself is shipped to the nodes and the auth token with it.
    assert "." in raw["file_mounts"].values()
    assert "~/.ray/auth_token" in raw["file_mounts"]


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_setup_installs_project_with_pinned_torch_and_matching_ray(name: str) -> None:
    import ray

    _, prepared = _prepared(name)
    for node_kind in ("head_setup_commands", "worker_setup_commands"):
        cmds = "\n".join(prepared[node_kind])
        assert re.search(r'pip install[^\n]*-e "\.\[[^\]]*gpu[^\]]*sampling[^\]]*\]"', cmds), node_kind
        torch_pin = re.search(r"torch==(\d+\.\d+\.\d+) --index-url https://download\.pytorch\.org/whl/(cu\d+)", cmds)
        assert torch_pin, f"{node_kind}: torch is not installed pinned from the CUDA index"
        version, cuda = torch_pin.groups()
        # pyg-lib / torch-sparse wheels must come from the page of exactly that torch + CUDA build.
        pyg_pages = set(re.findall(r"data\.pyg\.org/whl/torch-([\d.]+)\+(cu\d+)\.html", cmds))
        assert pyg_pages == {(version, cuda)}, pyg_pages
        assert re.search(r"pip install[^\n]*pyg-lib", cmds)
        # The cluster's Ray must be the client's Ray (job submission / ray up protocol).
        assert f'"ray[default,train]=={ray.__version__}"' in cmds


def test_gpu_extra_is_metas_faiss_gpu_wheel() -> None:
    """The `gpu` extra is Meta's official faiss-gpu wheel (PyPI, 1.15.1+, CUDA 12), not the third-party
    faiss-gpu-cu12."""
    import tomllib

    from packaging.requirements import Requirement

    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    (req,) = (Requirement(r) for r in extras["gpu"])
    assert req.name == "faiss-gpu"
    assert req.specifier.contains("1.15.1") and not req.specifier.contains("1.14.3")


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_setup_replaces_other_faiss_builds_before_installing_the_gpu_extra(name: str) -> None:
    _, prepared = _prepared(name)
    for node_kind in ("head_setup_commands", "worker_setup_commands"):
        cmds = prepared[node_kind]
        assert not any(re.search(r"pip install[^\n]*faiss-gpu-cu12", c) for c in cmds), node_kind
        uninstall = next(i for i, c in enumerate(cmds) if re.search(r"pip uninstall[^\n]*faiss-cpu[^\n]*faiss-gpu-cu12", c))
        install = next(i for i, c in enumerate(cmds) if re.search(r'pip install[^\n]*-e "\.\[[^\]]*gpu', c))
        assert uninstall < install, node_kind


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_dashboard_on_loopback_and_token_auth(name: str) -> None:
    _, prepared = _prepared(name)
    head = "\n".join(prepared["head_start_ray_commands"])
    assert "ray start --head" in head
    assert "--dashboard-host=127.0.0.1" in head
    assert "0.0.0.0" not in "\n".join(_all_commands(prepared))
    workers = "\n".join(prepared["worker_start_ray_commands"])
    assert "--address=$RAY_HEAD_IP:6379" in workers
    for cmds in (head, workers):
        assert "RAY_AUTH_MODE=token" in cmds and "NCCL_SOCKET_IFNAME" in cmds


@pytest.mark.skipif(shutil.which("bash") is None, reason="no bash")
@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_every_command_is_valid_bash(name: str) -> None:
    _, prepared = _prepared(name)
    for cmd in _all_commands(prepared):
        r = subprocess.run(["bash", "-n", "-c", cmd], capture_output=True, text=True)
        assert r.returncode == 0, f"{cmd!r}: {r.stderr}"


def test_aws_has_gpu_worker_type() -> None:
    _, prepared = _prepared("aws")
    types = prepared["available_node_types"]
    head = prepared["head_node_type"]
    gpu_types = {k: v for k, v in types.items() if k != head and v.get("resources", {}).get("GPU", 0) >= 1}
    assert gpu_types, "no GPU worker node type"
    assert any(v["max_workers"] >= 1 for v in gpu_types.values())
    assert sum(v["min_workers"] for v in types.values()) <= prepared["max_workers"]
    for v in gpu_types.values():
        assert re.match(r"(g5|g6|g6e|p4d|p4de|p5)\.", v["node_config"]["InstanceType"])
    # The EFS mount is in the common setup, so every node gets the shared store path.
    assert any("/mnt/shared" in c for c in prepared["worker_setup_commands"])


def test_onprem_lists_hosts() -> None:
    raw, prepared = _prepared("onprem")
    assert raw["provider"]["type"] == "local"
    assert raw["provider"]["head_ip"] and raw["provider"]["worker_ips"]
    (node_type,) = prepared["available_node_types"].values()
    assert node_type["max_workers"] == len(raw["provider"]["worker_ips"])


def test_validation_rejects_a_broken_config() -> None:
    """The check above has teeth: an unquoted 'a: b' in a command turns it into a mapping."""
    raw = yaml.safe_load(CONFIGS["aws"].read_text())
    raw["setup_commands"].append(yaml.safe_load("- echo warning: oops")[0])
    import jsonschema

    with pytest.raises(jsonschema.ValidationError):
        util.validate_config(util.prepare_config(raw))
