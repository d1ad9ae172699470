"""Joining a Ray cluster, or starting a private Ray in this process: the one place every entry point does it.

With an address (``--address`` or the ``RAY_ADDRESS`` variable that ``ray job submit`` sets) the process
joins that cluster. Otherwise it starts a private Ray on this machine: its own temp dir, a GCS port of its own
(so several local instances do not mix), as many logical CPUs as asked, and the dashboard only when the
caller needs its state API (Ray Train does; plain tasks do not). :func:`stop_ray` ends it and deletes its temp dir
(session logs, sockets: about 2 MB a run, which Ray leaves behind), which is also its workers' ``TMPDIR``.

Ray's dashboard is bound to 127.0.0.1. Ray's own gRPC servers (GCS, raylet, workers, agents) are built into its
binaries and listen on every interface whatever ``_node_ip_address`` says; Ray 2.60 guards them with token
authentication, which is on by default.
"""

from __future__ import annotations

import logging
import os
import shutil
import socket
import tempfile
from pathlib import Path

from gcad_dist.cli import UsageError

log = logging.getLogger(__name__)

REPO_ROOT = Path(__file__).resolve().parents[2]

_temp_dir: str | None = None  # the temp dir of the local Ray that start_ray started, removed by stop_ray


def free_port() -> int:
    """A TCP port free on loopback now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def dashboard_dependency_error() -> str | None:
    """Why Ray's dashboard cannot start here (``ray[default]`` not installed), or None (also when unknown)."""
    try:
        from ray._private.utils import get_dashboard_dependency_error
    except ImportError:  # a Ray without this private helper: let ray.init decide
        return None
    err = get_dashboard_dependency_error()
    return str(err) if err else None


def start_ray(address: str | None, num_cpus: int, dashboard: bool = True, what: str = "") -> bool:
    """Join the cluster at ``address`` (or ``$RAY_ADDRESS``), or start a private local Ray with ``num_cpus``
    logical CPUs; nothing when Ray is already up in this process. Returns True when this call started or
    joined Ray (the caller then ends it with :func:`stop_ray`). ``dashboard``: the local instance needs the
    dashboard's state API (Ray Train); a missing ``ray[default]`` is then a usage error, not Ray's deep one."""
    import ray

    if ray.is_initialized():
        return False
    address = address or os.environ.get("RAY_ADDRESS")
    if address:
        log.info("joining Ray cluster at %s", address)
        ray.init(address=address, log_to_driver=True)
        return True
    if dashboard:
        missing = dashboard_dependency_error()
        if missing:  # Ray would fail deep inside ray.init with "Cannot include dashboard with missing packages."
            raise UsageError(
                f"Ray's dashboard packages are missing ({missing}). Ray Train polls the dashboard's state API, so a "
                f"Ray started in this process needs them: pip install 'ray[default,train]=={ray.__version__}' (or "
                "join a running cluster with --address)")
    pythonpath = os.pathsep.join(p for p in [str(REPO_ROOT), os.environ.get("PYTHONPATH", "")] if p)
    # A private instance on loopback. Its GCS port is chosen here so that Ray's own helper actors
    # (Ray Train V2's placement-group cleaner polls the state API) can be told which instance is theirs
    # through RAY_ADDRESS even when other Ray instances run on this machine.
    global _temp_dir
    port = free_port()
    _temp_dir = tempfile.mkdtemp(prefix="ray-", dir="/tmp")
    # Set while Ray starts its own processes (they inherit the environment): the GCS port, and TMPDIR so that their
    # temporary files (multiprocessing's pymp-* folders, which a process killed at shutdown never removes) go into
    # the instance's temp dir, which stop_ray deletes. The workers get the same TMPDIR through the runtime env.
    tempfile.gettempdir()  # this process's own temporary folder is fixed (cached) before TMPDIR changes below
    previous = {k: os.environ.get(k) for k in ("RAY_GCS_SERVER_PORT", "TMPDIR")}
    os.environ.update({"RAY_GCS_SERVER_PORT": str(port), "TMPDIR": _temp_dir})
    try:
        ray.init(
            num_cpus=num_cpus,
            _node_ip_address="127.0.0.1",
            # The dashboard process serves that state API; bound to loopback only.
            include_dashboard=dashboard,
            **({"dashboard_host": "127.0.0.1"} if dashboard else {}),
            object_store_memory=256 << 20,
            _temp_dir=_temp_dir,
            runtime_env={"env_vars": {"PYTHONPATH": pythonpath, "RAY_ADDRESS": f"127.0.0.1:{port}",
                                      "TMPDIR": _temp_dir}},
            log_to_driver=True,
        )
    finally:
        for k, v in previous.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    log.info("started a local Ray instance%s", f" for {what}" if what else "")
    return True


def stop_ray() -> None:
    """``ray.shutdown()``, then delete the temp dir of the local instance :func:`start_ray` started (none for a
    joined cluster: its files are the cluster's)."""
    import ray

    global _temp_dir
    ray.shutdown()
    if _temp_dir is not None:
        shutil.rmtree(_temp_dir, ignore_errors=True)
        _temp_dir = None
