"""launch/submit.sh with a stand-in ``ray`` on PATH: a submission that Ray's job API refuses because the head's job
agent is not up yet is retried; any other failure, and the job's own exit status, pass through at once."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
AGENT_DOWN = ("RuntimeError: Request failed with status code 500: No available agent to submit job, please try "
              "again later..")


def _fake_ray(tmp: Path, outcomes: list[tuple[int, str]]) -> dict[str, str]:
    """A ``ray`` that answers the n-th call with outcomes[n] = (exit status, stderr line) and logs its arguments."""
    bin_dir = tmp / "bin"
    bin_dir.mkdir()
    lines = "\n".join(f'  {i}) echo "{msg}" >&2; exit {rc};;' for i, (rc, msg) in enumerate(outcomes, 1))
    script = f"""#!/usr/bin/env bash
n=$(( $(cat {tmp}/calls 2>/dev/null || echo 0) + 1 )); echo $n > {tmp}/calls
echo "$@" >> {tmp}/args
echo "job output on stdout"
case $n in
{lines}
esac
"""
    (bin_dir / "ray").write_text(script)
    (bin_dir / "ray").chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "GCAD_RAY_DIR": str(tmp / "nocluster"),
           "GCAD_RAY_ADDRESS": "http://127.0.0.1:1"}
    env["VIRTUAL_ENV"] = str(tmp)  # submit.sh then leaves PATH as it is (no .venv with the real ray)
    return env


def _submit(tmp: Path, outcomes: list[tuple[int, str]], tries: int = 3) -> tuple[subprocess.CompletedProcess, int]:
    env = {**_fake_ray(tmp, outcomes), "GCAD_SUBMIT_TRIES": str(tries), "GCAD_SUBMIT_RETRY_SECONDS": "0"}
    r = subprocess.run(["bash", "launch/submit.sh", "--store", "/x.zarr"], cwd=REPO, env=env, capture_output=True,
                       text=True, timeout=120)
    return r, int((tmp / "calls").read_text())


def test_agent_not_up_is_retried_then_the_job_runs(tmp_path):
    r, calls = _submit(tmp_path, [(1, AGENT_DOWN), (1, AGENT_DOWN), (0, "Job 'raysubmit_1' succeeded")])
    assert r.returncode == 0 and calls == 3, r.stderr
    assert r.stderr.count("job agent is not up yet") == 2
    assert "succeeded" in r.stderr and "job output on stdout" in r.stdout
    args = (tmp_path / "args").read_text().splitlines()
    assert all("-- python -m gcad_dist.pretrain --store /x.zarr" in a for a in args)


def test_retries_are_bounded_and_other_failures_pass_through(tmp_path):
    (tmp_path / "a").mkdir()
    r, calls = _submit(tmp_path / "a", [(1, AGENT_DOWN)] * 5, tries=2)
    assert r.returncode == 1 and calls == 2
    (tmp_path / "b").mkdir()
    r, calls = _submit(tmp_path / "b", [(3, "Job 'raysubmit_2' failed"), (0, "never reached")])
    assert r.returncode == 3 and calls == 1 and "job agent" not in r.stderr
