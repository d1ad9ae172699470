"""bench/gpu.sh + bench/gpu.py run end to end at --cpu-smoke sizes (here without a GPU: every GPU row is
skipped with a reason), write the Markdown table and the JSON, and survive a failing section."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.skipif(shutil.which("bash") is None, reason="no bash")
def test_gpu_sh_cpu_smoke(tmp_path):
    env = {**os.environ, "OUT": str(tmp_path), "PYTHON": sys.executable, "OMP_NUM_THREADS": "1"}
    r = subprocess.run(["bash", "bench/gpu.sh", "--no-install", "--cpu-smoke", "--threads", "1",
                        "--sections", "kmeans", "sampler", "step"], cwd=REPO, env=env, capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "| section | measurement | unit | CPU | GPU | GPU speed-up | GPU peak MiB | note |" in r.stdout
    out = json.loads((tmp_path / "gpu_bench.json").read_text())
    sections = {row["section"] for row in out["rows"]}
    assert {"kmeans", "sampler", "step"} <= sections
    assert all(row["cpu"] is not None for row in out["rows"] if row["unit"] != "ratio")
    assert any(row["what"].startswith("GCCAD training step, fp32") for row in out["rows"])
    assert out["config"]["cpu_smoke"] and out["config"]["kmeans_rows"] == 3000
    import torch

    if not torch.cuda.is_available():  # every GPU figure is skipped with a printed reason, none is made up
        assert all(row["gpu"] is None for row in out["rows"])
        assert {s["section"] for s in out["skipped"]} >= {"kmeans", "sampler", "step"}
        assert "[skip] step: GPU rows: torch sees no CUDA GPU" in r.stdout


def test_failing_section_is_reported_and_the_rest_runs(tmp_path, monkeypatch, capsys):
    sys.path.insert(0, str(REPO))
    from bench import gpu

    def broken(b):
        raise RuntimeError("boom")

    monkeypatch.setitem(gpu.SECTION_FN, "kmeans", broken)
    monkeypatch.setitem(gpu.SECTION_FN, "sampler", lambda b: b.row("sampler", "x", "ms", 2.0, 1.0))
    assert gpu.main(["--cpu-smoke", "--sections", "kmeans", "sampler", "--json", str(tmp_path / "r.json")]) == 0
    out = json.loads((tmp_path / "r.json").read_text())
    assert out["skipped"][0]["section"] == "kmeans" and "boom" in out["skipped"][0]["reason"]
    assert out["rows"][0]["gpu_speedup"] == pytest.approx(2.0)
    assert "| sampler | x | ms |" in capsys.readouterr().out


def test_smoke_sizes_keep_explicit_options():
    sys.path.insert(0, str(REPO))
    from bench import gpu

    cfg = gpu.parse_args(["--cpu-smoke", "--batch-size", "64", "--kmeans-k=3"])
    assert cfg.batch_size == 64 and cfg.kmeans_k == 3 and cfg.kmeans_rows == 3000
    assert gpu.parse_args([]).kmeans_rows == 1_000_000


@pytest.mark.slow
def test_gpu_bench_ddp_section_cpu_smoke(tmp_path):
    """The Ray Train epoch (gloo on the CPU here; NCCL where a GPU is) through gcad_dist.pretrain.run."""
    sys.path.insert(0, str(REPO))
    from bench import gpu

    assert gpu.main(["--cpu-smoke", "--threads", "1", "--sections", "ddp", "--json", str(tmp_path / "r.json")]) == 0
    out = json.loads((tmp_path / "r.json").read_text())
    rows = {row["what"]: row for row in out["rows"]}
    assert rows["Ray Train epoch, 1 worker: seed nodes/s"]["cpu"] > 0, out


def test_gpu_step_needs_a_gpu_and_checks_its_sizes():
    """bench/gpu_step.py is GPU-only: without CUDA a usage error, not a trace; sizes are checked first."""
    import torch

    from bench import gpu_step
    from gcad_dist.cli import UsageError

    with pytest.raises(UsageError, match="--batch-sizes"):
        gpu_step.parse_args(["--batch-sizes", "0"])
    cfg = gpu_step.parse_args(["--batch-sizes", "64", "--store-nodes", "500", "--profile", "64"])
    assert cfg.batch_sizes == [64] and cfg.profile == 64
    if torch.cuda.is_available():  # the GPU host runs it at tiny sizes
        rows = gpu_step.run(cfg)
        assert {r["model"] for r in rows} == {"GCCAD", "GraphSAGE"} and all(r["ms"] > 0 for r in rows)
    else:
        with pytest.raises(UsageError, match="no CUDA GPU"):
            gpu_step.run(cfg)


@pytest.mark.parametrize("script", sorted(p.name for p in (Path(__file__).resolve().parents[1] / "bench").glob("*.sh")))
def test_bench_shell_scripts_parse(script):
    """Every bench/*.sh is valid bash; the offline GPU host's one-call scripts source the shared set-up."""
    bench = Path(__file__).resolve().parents[1] / "bench"
    if shutil.which("bash") is None:
        pytest.skip("no bash")
    r = subprocess.run(["bash", "-n", str(bench / script)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    if script in ("gpu_offline.sh", "gpu_labelfree.sh"):
        assert 'source "$(dirname "$0")/gpu_site.sh"' in (bench / script).read_text()
