"""Two "hosts" on one machine: network namespaces joined by a veth pair (launch/netns_cluster.sh), a Ray
head in one, a Ray worker node in the other, a 2-worker pre-training job submitted with ``ray job
submit`` (one worker per host), and then host b lost mid-epoch, after a checkpoint:

* killed (every process of its namespace SIGKILLed): the worker group restarts on the head from the
  last checkpoint and the run finishes;
* cut off (its link set down, and back up later): Ray declares the node dead within the health-check
  bound that netns_cluster.sh sets, and the run finishes the same way, or fails with one line naming
  the host; it never hangs.

Needs root (``ip netns``); skipped with the reason otherwise. Run: ``pytest -m multihost tests/test_multihost.py``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "launch" / "netns_cluster.sh"
HEAD_IP, WORKER_IP = "10.213.0.1", "10.213.0.2"


def _netns_problem() -> str | None:
    """Why network namespaces cannot be used here, or None."""
    if not sys.platform.startswith("linux"):
        return "network namespaces are Linux only"
    if shutil.which("ip") is None:
        return "needs iproute2 (ip)"
    if os.geteuid() != 0:
        return "ip netns needs root"
    name = f"gcadns-probe-{os.getpid()}"
    r = subprocess.run(["ip", "netns", "add", name], capture_output=True, text=True)
    if r.returncode != 0:
        return f"ip netns add is not permitted here: {r.stderr.strip()[:200]}"
    subprocess.run(["ip", "netns", "del", name], capture_output=True)
    return None


_PROBLEM = _netns_problem()


def _build_store(tmp: Path) -> Path:
    from test_job_submit import _build_store as build

    return build(tmp)


def _cluster_env(state_dir: Path) -> dict:
    env = {**os.environ, "GCAD_NETNS_DIR": str(state_dir), "GCAD_NETNS_TAG": f"t{os.getpid()}",
           "GCAD_RAY_STOP_GRACE": "3", "OMP_NUM_THREADS": "1"}
    for var in ("RAY_ADDRESS", "GCAD_RAY_ADDRESS", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH", "RAY_AUTH_MODE"):
        env.pop(var, None)
    return env


def _sh(env: dict, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(SCRIPT), *args], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=timeout)


@pytest.fixture
def cluster():
    """A two-host cluster of our own; always torn down (only what it started)."""
    state = Path(tempfile.mkdtemp(prefix="gcn", dir="/tmp"))  # short: Ray's Unix sockets live under it
    env = _cluster_env(state)
    try:
        r = _sh(env, "up", timeout=300)
        assert r.returncode == 0, r.stdout + r.stderr
        yield env
    finally:
        down = _sh(env, "down", timeout=120)
        ns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
        shutil.rmtree(state, ignore_errors=True)
    assert down.returncode == 0, down.stdout + down.stderr
    assert f"gcadns-t{os.getpid()}-" not in ns, ns  # our namespaces are gone


def _submit(env: dict, store: Path, out: Path, *extra: str, step_delay: float = 0.2) -> subprocess.Popen:
    """``ray job submit`` from host a (launch/submit.sh), 2 workers spread over the hosts; waits for the job."""
    runtime_env = {"env_vars": {"GCAD_STEP_DELAY_S": str(step_delay), "OMP_NUM_THREADS": "1"}}
    job_env = {**env, "GCAD_SUBMIT_ARGS": "--runtime-env-json=" + json.dumps(runtime_env, separators=(",", ":"))}
    args = ["--store", str(store), "--out", str(out), "--workers", "2", "--placement-strategy", "SPREAD",
            "--epochs", "2", "--hidden", "8", "--graph-batch-nodes", "2000", "--min-steps-per-epoch", "40",
            "--checkpoint-every", "10", "--checkpoint-interval", "0", "--collective-timeout", "60", *extra]
    return subprocess.Popen(["bash", str(SCRIPT), "exec", "a", "bash", "launch/submit.sh", *args], cwd=REPO,
                            env=job_env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def _events(out: Path) -> list[dict]:
    path = out / "events.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _registered_step(out: Path) -> int | None:
    """Step of the latest checkpoint Ray Train has registered (what a restarted group resumes from)."""
    try:
        snap = json.loads((out / "ray_train" / "checkpoint_manager_snapshot.json").read_text())
        return int(snap["latest_checkpoint_result"]["metrics"]["step"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _wait(cond, timeout: float, job: subprocess.Popen, what: str):
    t0 = time.time()
    while time.time() - t0 < timeout:
        v = cond()
        if v:
            return v
        if job.poll() is not None:
            pytest.fail(f"job ended before {what}:\n{job.stdout.read()[-4000:]}")
        time.sleep(0.2)
    job.kill()
    pytest.fail(f"timed out waiting for {what}")


def _lose_host_b(cluster: dict, tmp_path: Path, fault: str) -> dict:
    """Run the job, lose host b (fault "kill" or "cut") mid-epoch after a registered checkpoint; returns
    what the test checks."""
    store = _build_store(tmp_path)
    out = tmp_path / "pre"
    job = _submit(cluster, store, out)
    try:
        # Placement from the run's own record: one worker per host.
        start = _wait(lambda: next((e for e in _events(out) if e["event"] == "start"), None), 240, job, "the start")
        assert sorted(r["ip"] for r in start["ranks"]) == [HEAD_IP, WORKER_IP], start
        ckpt = _wait(lambda: (s := _registered_step(out)) is not None and s >= 10 and s, 120, job, "a checkpoint")
        t_fault = time.time()
        r = _sh(cluster, "kill" if fault == "kill" else "cut")
        assert r.returncode == 0, r.stderr
        before = [e for e in _events(out) if e["time"] < t_fault]
        if fault == "cut":
            # Keep the link down until the run has moved on without host b, then bring it back.
            _wait(lambda: sum(e["event"] == "start" for e in _events(out)) >= 2, 180, job, "the restart")
            t_heal = time.time()
            assert _sh(cluster, "heal").returncode == 0
        log, _ = job.communicate(timeout=300)
    finally:
        if job.poll() is None:
            job.kill()
    events = _events(out)
    starts = [e for e in events if e["event"] == "start"]
    facts = {"log": log, "rc": job.returncode, "out": out, "events": events, "starts": starts, "before": before,
             "t_fault": t_fault, "registered": ckpt}
    if fault == "cut":
        facts["t_heal"] = t_heal
    (tmp_path / "job.log").write_text(log or "")  # kept for a look after a failure
    print(json.dumps(_timings(facts), indent=1))
    return facts


def _timings(f: dict) -> dict:
    """Fault -> host declared dead (driver's line in ray.log is not timed; the restart's start is) ->
    training resumed (first progress of the restarted group)."""
    t0 = f["t_fault"]
    restart = next((e for e in f["starts"] if e.get("restarts")), None)
    resumed = next((e for e in f["events"] if e["event"] == "progress" and restart and e["time"] > restart["time"]),
                   None)
    return {"restart_start_s": restart and round(restart["time"] - t0, 1),
            "first_step_after_s": resumed and round(resumed["time"] - t0, 1)}


def _check_recovered(f: dict) -> None:
    log, out = f["log"], f["out"]
    assert f["rc"] == 0, log[-4000:]
    assert "succeeded" in log
    # The driver said which host was lost, and that the group restarted.
    assert f"host lost: Ray node {WORKER_IP}" in log, log[-4000:]
    assert "worker group restarted (restart 1)" in log
    # Ray's own chatter went to <out>/ray.log, not to the job's output.
    assert "TrainController" not in log and "(RayTrainWorker" not in log
    assert (out / "ray.log").exists() and "RayTrainWorker" in (out / "ray.log").read_text()

    # The fault came mid-epoch 0, after a registered checkpoint.
    last = [e for e in f["before"] if e["event"] == "progress"][-1]
    assert last["epoch"] == 0 and last["position"] < last["steps_per_epoch"], last
    assert len(f["starts"]) == 2, f["starts"]
    first, second = f["starts"]
    assert sorted(r["ip"] for r in first["ranks"]) == [HEAD_IP, WORKER_IP]
    assert [r["ip"] for r in second["ranks"]] == [HEAD_IP, HEAD_IP]  # both on the surviving host
    # The step counter continued from the last checkpoint: resumed at a checkpoint written before the fault,
    # no earlier than the one registered when the fault came; so at most the steps since it were redone.
    ckpt_steps = {e["step"] for e in f["before"] if e["event"] == "checkpoint"}
    # (A checkpoint may land after the last progress event before the fault: progress events are not written at
    # every step, so the resumed step can exceed that event's step; being a checkpoint written before the fault is
    # what bounds it.)
    assert second["step"] in ckpt_steps and second["step"] >= f["registered"], (second, ckpt_steps)
    assert second["restarts"] == 1

    metrics = json.loads((out / "metrics.json").read_text())
    s = metrics["summary"]
    assert s["global_step"] == 2 * s["steps_per_epoch"] == 80
    assert s["restarts"] == 1
    hist = metrics["history"]
    assert [h["step"] for h in hist] == [40, 80]
    assert all(h["nodes"] == [HEAD_IP, HEAD_IP] for h in hist)  # both epochs ended after the restart

    # The final checkpoint loads in gcad_dist.score, which scores the graph with it.
    r = subprocess.run([sys.executable, "-m", "gcad_dist.score", "--checkpoint", str(out / "final"), "--graph",
                        str(out.parent / "g.npz"), "--out", str(out.parent / "scores.parquet")], cwd=REPO,
                       capture_output=True, text=True, timeout=300, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert r.returncode == 0, r.stderr[-3000:]
    assert (out.parent / "scores.parquet").exists()


@pytest.mark.multihost
@pytest.mark.slow
@pytest.mark.skipif(_PROBLEM is not None, reason=f"multihost: {_PROBLEM}")
def test_host_killed_mid_epoch_run_finishes_on_the_survivor(cluster, tmp_path: Path) -> None:
    _check_recovered(_lose_host_b(cluster, tmp_path, "kill"))


@pytest.mark.multihost
@pytest.mark.slow
@pytest.mark.skipif(_PROBLEM is not None, reason=f"multihost: {_PROBLEM}")
def test_network_cut_mid_epoch_run_finishes_on_the_survivor(cluster, tmp_path: Path) -> None:
    f = _lose_host_b(cluster, tmp_path, "cut")
    _check_recovered(f)
    # Host b, reconnected, is not taken back: Ray declared it dead, and its raylet exits when it hears so.
    status = _sh(cluster, "status").stdout
    print(status)
    assert "host a" in status


@pytest.mark.multihost
@pytest.mark.slow
@pytest.mark.skipif(_PROBLEM is not None, reason=f"multihost: {_PROBLEM}")
def test_two_hosts_split_a_whole_graph_and_stay_one_model(cluster, tmp_path: Path) -> None:
    """The label-free recipe on a whole-graph store, one worker per host: each host trains its share of the nodes, the
    gradients are averaged across the hosts (session 59: DDP had averaged none of them), and the two hosts' weights
    never part (``weight_spread``, a weight checksum's spread over the workers, 0 on every epoch)."""
    from partitioning.build import main as build_main
    from partitioning.io import save_npz
    from partitioning.synthetic import SyntheticConfig, synthesize

    g = synthesize(SyntheticConfig(nodes=600, avg_degree=8, features=8, anomaly_fraction=0.05, seed=0)).graph
    save_npz(g, tmp_path / "g.npz")
    store = tmp_path / "w.zarr"
    assert build_main(["--graph", str(tmp_path / "g.npz"), "--out", str(store), "--k", "1", "--no-progress",
                       "--no-plot"]) == 0
    out = tmp_path / "pre"
    job = _submit(cluster, store, out, step_delay=0)
    try:
        log, _ = job.communicate(timeout=600)
    finally:
        if job.poll() is None:
            job.kill()
    assert job.returncode == 0, log[-4000:]
    assert "takes a share of about 300 of its 600 nodes" in log, log[-4000:]
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["config"]["contrast"] == "local" and metrics["config"]["shard_targets"]
    hist = metrics["history"]
    assert len(hist) == 2 and all(sorted(h["nodes"]) == [HEAD_IP, WORKER_IP] for h in hist), hist
    assert [h["weight_spread"] for h in hist] == [0.0, 0.0]


# -- the pieces the end-to-end tests rely on, without a cluster ------------------------------------------


def test_failure_line_names_the_lost_host_and_the_failed_ranks(tmp_path: Path) -> None:
    from ray.train import WorkerGroupError

    from gcad_dist.pretrain import PretrainConfig, RunMonitor, _failure_line

    mon = RunMonitor(tmp_path / "events.jsonl", progress=False)
    mon._handle({"event": "start", "ranks": [{"rank": 0, "ip": HEAD_IP}, {"rank": 1, "ip": WORKER_IP}],
                 "world": 2, "restarts": 0, "step": 0, "epoch": 0, "position": 0})
    mon._handle({"event": "checkpoint", "step": 20})
    mon.lost_hosts.append(WORKER_IP)
    err = WorkerGroupError("x", {0: RuntimeError("Traceback ...\n  File x\nRuntimeError: Connection reset by peer"),
                                 1: RuntimeError("A worker health check failed.\nWorker info: ...")})
    line = _failure_line(err, PretrainConfig(store="s", max_failures=0), mon, tmp_path / "pre")
    assert "\n" not in line
    assert line.startswith("training failed (--max-failures 0 used up): host 10.213.0.2 lost; ")
    assert f"rank 0 on {HEAD_IP}: RuntimeError: Connection reset by peer" in line
    assert f"rank 1 on {WORKER_IP}: A worker health check failed." in line
    assert line.endswith(f"last checkpoint at step 20 (continue with --resume --out {tmp_path / 'pre'})")


def test_events_log_records_placement_progress_and_checkpoints(tmp_path: Path) -> None:
    """run_worker in-process (one rank, a stand-in reporter) writes the run record the driver follows."""
    import contextlib
    from dataclasses import asdict

    from gcad_dist.distributed.train_loop import run_worker
    from gcad_dist.pretrain import PretrainConfig, RunMonitor

    store = _build_store(tmp_path)

    class Reporter:
        def __init__(self):
            self.reports = []

        @contextlib.contextmanager
        def latest_checkpoint(self):
            yield None

        def report(self, metrics, checkpoint_dir):
            self.reports.append((metrics, checkpoint_dir))

    events = tmp_path / "events.jsonl"
    cfg = PretrainConfig(store=str(store), out=str(tmp_path / "pre"), epochs=2, hidden=8, graph_batch_nodes=2000,
                         min_steps_per_epoch=6, checkpoint_every=4, checkpoint_interval=0)
    mon = RunMonitor(events, progress=True)
    run_worker({"pretrain": asdict(cfg), "events_path": str(events)}, Reporter())
    ev = [json.loads(line) for line in events.read_text().splitlines()]
    kinds = [e["event"] for e in ev]
    assert kinds[0] == "start" and kinds.count("epoch") == 2 and "progress" in kinds
    assert ev[0]["ranks"][0]["rank"] == 0 and ev[0]["ranks"][0]["ip"] and ev[0]["steps_per_epoch"] == 6
    assert [e["step"] for e in ev if e["event"] == "checkpoint"] == [4, 6, 8, 12]
    assert all(e["nodes"] == [ev[0]["ranks"][0]["ip"]] for e in ev if e["event"] == "epoch")
    # The driver's monitor reads all of it (and keeps the last checkpoint for an error message).
    for e in mon._read():
        mon._handle(e)
    assert mon.last_checkpoint["step"] == 12 and mon.rank_ips == {0: ev[0]["ranks"][0]["ip"]}
