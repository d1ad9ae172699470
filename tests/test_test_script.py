"""launch/test.sh, the README's and CI's test command, run on a copy with a stand-in set-up and a stand-in ``python``
that logs each pytest call: three passes that partition the suite by marker, the first two on every core and the
multihost one alone; a failed pass neither stops the others nor is lost in the exit status."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def _run(tmp: Path, *args: str, workers: str | None = "2", fail_on: str = "") -> tuple[subprocess.CompletedProcess,
                                                                                        list[tuple[str, str]]]:
    """Run a copy of launch/test.sh; returns the result and each pytest call as (OMP_NUM_THREADS, arguments)."""
    (tmp / "launch").mkdir()
    shutil.copy(REPO / "launch" / "test.sh", tmp / "launch" / "test.sh")
    (tmp / "launch" / "setup.sh").write_text("echo '[setup] stand-in'\n")
    bin_dir = tmp / ".venv" / "bin"
    bin_dir.mkdir(parents=True)
    (bin_dir / "activate").write_text(f'export PATH="{bin_dir}:$PATH"\n')
    (bin_dir / "python").write_text(f"""#!/usr/bin/env bash
echo "${{OMP_NUM_THREADS-unset}}|$*" >> {tmp}/calls
case "$*" in *"{fail_on or '@never@'}"*) exit 1;; esac
exit 0
""")
    (bin_dir / "python").chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "GCAD_TEST_WORKERS")}
    if workers is not None:
        env["GCAD_TEST_WORKERS"] = workers
    r = subprocess.run(["bash", str(tmp / "launch" / "test.sh"), *args], env=env, capture_output=True, text=True,
                       timeout=60)
    calls = (tmp / "calls").read_text().splitlines() if (tmp / "calls").exists() else []
    return r, [tuple(c.split("|", 1)) for c in calls]


def test_three_passes_partition_the_suite_the_first_two_on_every_worker(tmp_path: Path) -> None:
    r, calls = _run(tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    assert [c[1].split(" -m ")[-1] for c in calls] == ["not slow and not multihost", "slow and not multihost",
                                                       "multihost"]
    (omp1, a1), (omp2, a2), (omp3, a3) = calls
    assert "-n 2 --dist loadfile" in a1 and omp1 == "1"  # one torch thread a worker
    assert "-n 2 --dist load " in a2 and omp2 == "unset"
    assert "-p no:xdist" in a3 and "-n " not in a3 and omp3 == "unset"  # the namespaces' fixed addresses: alone
    assert "0 of 3 passes failed" in r.stdout


@pytest.mark.parametrize("failing", ["not slow and not multihost", "-m multihost"])
def test_a_failed_pass_does_not_stop_the_others_and_fails_the_run(tmp_path: Path, failing: str) -> None:
    r, calls = _run(tmp_path, fail_on=failing)
    assert r.returncode == 1 and len(calls) == 3
    assert "1 of 3 passes failed" in r.stdout and "exit 1" in r.stdout


def test_one_worker_runs_every_test_one_at_a_time(tmp_path: Path) -> None:
    r, calls = _run(tmp_path, workers="1")
    assert r.returncode == 0 and len(calls) == 3
    assert all("-p no:xdist" in a and "-n " not in a and omp == "unset" for omp, a in calls)


def test_arguments_make_one_plain_pytest_run(tmp_path: Path) -> None:
    r, calls = _run(tmp_path, "-m", "not slow", "tests/test_x.py")
    assert r.returncode == 0
    assert calls == [("unset", "-m pytest -q --durations=25 -m not slow tests/test_x.py")]


@pytest.mark.parametrize("bad", ["0", "two", "-1", "2x"])
def test_a_bad_worker_count_is_one_line_before_setup(tmp_path: Path, bad: str) -> None:
    r, calls = _run(tmp_path, workers=bad)
    assert r.returncode == 2 and not calls and "[setup]" not in r.stdout
    assert r.stderr.strip().count("\n") == 0 and "GCAD_TEST_WORKERS" in r.stderr
