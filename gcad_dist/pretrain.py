"""GCCAD-pre: distributed self-supervised pre-training on a store of corrupt subgraphs (Ray Train).

    python -m gcad_dist.pretrain --store runs/big.zarr --workers 2 --epochs 3 --out runs/pre

One code path for 1 and N workers: a ``ray.train.torch.TorchTrainer`` with ``num_workers`` data-parallel
workers (DDP over gloo on CPUs, NCCL on GPUs), each running
:func:`gcad_dist.distributed.train_loop.train_loop_per_worker` on its share of the store.

Ray: with ``--address`` (or the ``RAY_ADDRESS`` variable that ``ray job submit`` sets) it joins that
cluster; otherwise it starts Ray in this process (no dashboard, a private temp dir, as many logical
CPUs as the workers need) and stops it at the end. Ray Train V2 is used (the default since Ray 2.50;
this module sets ``RAY_TRAIN_V2_ENABLED=1`` if unset). In V2 a run is resumed by running again with the
same storage path and name: ``--resume`` does that (``<out>/ray_train``), and a worker-group failure
within ``--max-failures`` restarts the group from the latest checkpoint automatically.

Work per epoch: an epoch is at least ``--min-steps-per-epoch`` steps (default 100). A store whose
subgraphs fit a batch or two (one step per pass) repeats whole passes over its subgraphs, each with its
own packing, order and neighbour sampling, until the epoch has that many steps; a large store (more
steps per pass) is unaffected. Checkpoints: at an epoch end at most once per ``--checkpoint-interval``
seconds (default 60), every ``--checkpoint-every`` steps if given, and always after the last epoch.

Outputs in ``--out``: ``final/model.pt`` (the :mod:`gcad_dist.checkpoint` format that finetune and score
load; ``extra["normalize"]`` records the store's feature normalisation, ``standard`` for a store built
with the default ``partitioning.build --normalize``, which their ``--normalize auto`` then applies to
the target graph with its own statistics), ``metrics.json`` (per-epoch history and a summary) and
``ray_train/`` (Ray's checkpoints).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import tempfile
from dataclasses import asdict, dataclass, fields
from pathlib import Path

from gcad_dist.cli import UsageError, run_cli, setup_logging
from partitioning.features import describe_normalization

os.environ.setdefault("RAY_TRAIN_V2_ENABLED", "1")
# On a busy machine the dashboard (which serves the state API Ray Train V2 polls) can take over
# Ray's default 60 s to come up; wait longer rather than fail before training starts.
os.environ.setdefault("RAY_DASHBOARD_STARTUP_TIMEOUT_S", "600")

log = logging.getLogger("gcad_dist.pretrain")

RUN_NAME = "ray_train"
REPO_ROOT = Path(__file__).resolve().parents[1]


@dataclass
class PretrainConfig:
    """All settings of a pre-training run (one per CLI option)."""

    store: str
    out: str = "runs/pre"
    workers: int = 1
    gpus_per_worker: float = 0.0
    cpus_per_worker: int = 1
    address: str | None = None
    epochs: int = 3
    batch_size: int = 1024
    fanouts: str = "10,5"
    sample_threshold: int = 50_000
    graph_batch_nodes: int = 50_000
    lr: float = 1e-3
    hidden: int = 64
    layers: int = 2
    conv: str = "gin"
    readout: str = "memory"
    dropout: float = 0.1
    tau: float = 0.1
    memory_momentum: float = 0.5
    backend: str = "auto"
    cache_gb: float = 4.0
    prefetch: int = 2
    min_steps_per_epoch: int = 100
    max_steps_per_epoch: int = 0
    checkpoint_every: int = 0
    checkpoint_interval: float = 60.0
    keep_checkpoints: int = 2
    max_failures: int = 3
    resume: bool = False
    overwrite: bool = False
    seed: int = 0
    verbose: bool = False

    def fanout_list(self) -> list[int]:
        return [int(f) for f in str(self.fanouts).split(",") if f.strip()]


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m gcad_dist.pretrain",
        description="Self-supervised GCCAD pre-training (GCCAD-pre) on a store of corrupt subgraphs, "
        "data-parallel over Ray Train workers.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    d = PretrainConfig(store="")
    a = p.add_argument
    a("--store", required=True, help="store of corrupt subgraphs (python -m partitioning.build); path or fsspec URL")
    a("--out", default=d.out, help="output folder: final/model.pt, metrics.json, ray_train/ checkpoints")
    a("--workers", type=int, default=d.workers, help="data-parallel training workers (Ray Train num_workers)")
    a("--gpus-per-worker", type=float, default=d.gpus_per_worker,
      help="GPUs per worker: 0 = CPU training with gloo, >0 = GPU training with NCCL")
    a("--cpus-per-worker", type=int, default=d.cpus_per_worker, help="CPUs per worker (also torch threads)")
    a("--address", default=None,
      help="Ray cluster to join ('auto' or ray://host:10001); default: $RAY_ADDRESS if set, else start Ray here")
    a("--epochs", type=int, default=d.epochs,
      help="epochs; an epoch is one pass over the store, or as many whole passes as --min-steps-per-epoch needs")
    a("--batch-size", type=int, default=d.batch_size,
      help="seed nodes per worker per step on subgraphs above --sample-threshold")
    a("--fanouts", default=d.fanouts, help="neighbours sampled per hop for large subgraphs, comma-separated (-1 = all)")
    a("--sample-threshold", type=int, default=d.sample_threshold,
      help="subgraphs with more nodes are trained by all workers together with neighbour-sampled minibatches; "
      "smaller ones are batched whole, each worker its own share")
    a("--graph-batch-nodes", type=int, default=d.graph_batch_nodes,
      help="cost budget (about nodes + edges/2) of one batch of whole small subgraphs")
    a("--lr", type=float, default=d.lr, help="peak Adam learning rate (10%% warm-up, then linear decay to lr/10)")
    a("--hidden", type=int, default=d.hidden, help="hidden width of the GCCAD encoder")
    a("--layers", type=int, default=d.layers, help="GCCAD layers")
    a("--conv", default=d.conv, choices=["gcn", "gin", "sage", "gat"], help="node-update convolution")
    a("--readout", default=d.readout, choices=["memory", "mean", "sum", "max"], help="graph-update readout")
    a("--dropout", type=float, default=d.dropout, help="dropout")
    a("--tau", type=float, default=d.tau, help="temperature of the contrastive loss")
    a("--memory-momentum", type=float, default=d.memory_momentum,
      help="EMA momentum of the per-subgraph context memory on large subgraphs (0 = no memory)")
    a("--backend", default=d.backend, help="neighbour-sampling backend: auto, pyg-lib, torch-sparse, builtin")
    a("--cache-gb", type=float, default=d.cache_gb, help="memory per worker for caching subgraphs read from the store")
    a("--prefetch", type=int, default=d.prefetch, help="training steps prepared ahead in a background thread")
    a("--min-steps-per-epoch", type=int, default=d.min_steps_per_epoch,
      help="an epoch repeats whole passes over the store (each with fresh batch packing, order and neighbour "
      "sampling) until it has at least this many steps per worker, so that a small store whose subgraphs fit "
      "one batch still gets real training (100 steps cost seconds there); no effect on a store with this many "
      "steps per pass; 0 or 1 = one pass")
    a("--max-steps-per-epoch", type=int, default=d.max_steps_per_epoch,
      help="stop each epoch after this many steps (0 = no limit; for smoke tests and benchmarks; wins over "
      "--min-steps-per-epoch)")
    a("--checkpoint-every", type=int, default=d.checkpoint_every,
      help="also checkpoint every N steps within an epoch (0 = only at epoch ends, see --checkpoint-interval)")
    a("--checkpoint-interval", type=float, default=d.checkpoint_interval,
      help="checkpoint at an epoch end only once this many seconds have passed since the last checkpoint "
      "(a Ray Train checkpoint costs seconds; a failure loses at most this much work plus the epoch under way); "
      "0 = at every epoch end; the last epoch always ends with one, which becomes final/model.pt")
    a("--keep-checkpoints", type=int, default=d.keep_checkpoints, help="Ray checkpoints kept on disk")
    a("--max-failures", type=int, default=d.max_failures,
      help="worker-group failures to recover from (restart from the last checkpoint); -1 = unlimited")
    a("--resume", action="store_true", help="continue the run in --out from its last checkpoint")
    a("--overwrite", action="store_true", help="delete a previous run in --out and start over")
    a("--seed", type=int, default=d.seed, help="random seed")
    a("--verbose", action="store_true", help="debug logging")
    return p


def parse_config(argv: list[str] | None) -> PretrainConfig:
    args = vars(build_parser().parse_args(argv))
    names = {f.name for f in fields(PretrainConfig)}
    return PretrainConfig(**{k: v for k, v in args.items() if k in names})


def validate(cfg: PretrainConfig) -> dict:
    """Check options and the store before starting Ray; returns facts about the store."""
    checks = [
        (cfg.workers >= 1, "--workers", "must be >= 1"),
        (cfg.gpus_per_worker >= 0, "--gpus-per-worker", "must be >= 0"),
        (cfg.cpus_per_worker >= 1, "--cpus-per-worker", "must be >= 1"),
        (cfg.epochs >= 1, "--epochs", "must be >= 1"),
        (cfg.batch_size >= 1, "--batch-size", "must be >= 1"),
        (cfg.sample_threshold >= 1, "--sample-threshold", "must be >= 1"),
        (cfg.graph_batch_nodes >= 1, "--graph-batch-nodes", "must be >= 1"),
        (cfg.lr > 0, "--lr", "must be > 0"),
        (cfg.hidden >= 1 and cfg.layers >= 1, "--hidden/--layers", "must be >= 1"),
        (0 <= cfg.dropout < 1, "--dropout", "must be in [0, 1)"),
        (cfg.tau > 0, "--tau", "must be > 0"),
        (0 <= cfg.memory_momentum < 1, "--memory-momentum", "must be in [0, 1)"),
        (cfg.cache_gb >= 0 and cfg.prefetch >= 0, "--cache-gb/--prefetch", "must be >= 0"),
        (cfg.checkpoint_every >= 0, "--checkpoint-every", "must be >= 0"),
        (cfg.checkpoint_interval >= 0, "--checkpoint-interval", "must be >= 0"),
        (cfg.min_steps_per_epoch >= 0, "--min-steps-per-epoch", "must be >= 0"),
        (cfg.max_steps_per_epoch >= 0, "--max-steps-per-epoch", "must be >= 0"),
        (cfg.keep_checkpoints >= 1, "--keep-checkpoints", "must be >= 1"),
        (cfg.max_failures >= -1, "--max-failures", "must be >= -1"),
        (not (cfg.resume and cfg.overwrite), "--resume", "cannot be combined with --overwrite"),
    ]
    for ok, opt, problem in checks:
        if not ok:
            raise UsageError(f"{opt}: {problem}")
    try:
        fan = cfg.fanout_list()
    except ValueError:
        raise UsageError(f"--fanouts: expected comma-separated integers, got {cfg.fanouts!r}") from None
    if not fan or any(k < -1 or k == 0 for k in fan):
        raise UsageError(f"--fanouts: expected positive integers or -1, got {cfg.fanouts!r}")
    from gcad_dist.data.sampler import resolve_backend

    try:
        resolve_backend(cfg.backend)
    except ValueError as e:
        raise UsageError(f"--backend: {e}") from None
    if cfg.gpus_per_worker > 0 and not (cfg.address or os.environ.get("RAY_ADDRESS")):
        import torch

        if not torch.cuda.is_available():
            raise UsageError("--gpus-per-worker: no CUDA GPU here (use 0 for CPU training)")
    from partitioning.store.reader import StoreReader

    reader = StoreReader(cfg.store)  # raises StoreError (a GraphInputError) on a bad store
    if len(reader) == 0:
        raise UsageError(f"--store: {cfg.store} holds no subgraphs")
    run_dir = Path(cfg.out) / RUN_NAME
    if cfg.resume and not run_dir.exists():
        raise UsageError(f"--resume: {cfg.out} holds no run to resume")
    if run_dir.exists() and not (cfg.resume or cfg.overwrite):
        raise UsageError(f"--out: {cfg.out} already holds a run; pass --resume to continue it or --overwrite")
    return {"subgraphs": len(reader), "nodes": int(reader.node_counts.sum()),
            "edges": int(reader.edge_counts.sum()) // 2, "features": reader.num_features,
            "normalize": reader.feature_normalization()}


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _start_ray(cfg: PretrainConfig) -> bool:
    """Join a cluster or start a private local Ray; returns True when this process started it."""
    import ray

    if ray.is_initialized():
        return False
    address = cfg.address or os.environ.get("RAY_ADDRESS")
    if address:
        log.info("joining Ray cluster at %s", address)
        ray.init(address=address, log_to_driver=True)
        return True
    pythonpath = os.pathsep.join(p for p in [str(REPO_ROOT), os.environ.get("PYTHONPATH", "")] if p)
    # A private instance on loopback. Its GCS port is chosen here so that Ray's own helper actors
    # (Ray Train V2's placement-group cleaner polls the state API) can be told which instance is theirs
    # through RAY_ADDRESS even when other Ray instances run on this machine.
    port = _free_port()
    previous = os.environ.get("RAY_GCS_SERVER_PORT")
    os.environ["RAY_GCS_SERVER_PORT"] = str(port)
    try:
        ray.init(
            num_cpus=cfg.workers * cfg.cpus_per_worker,
            _node_ip_address="127.0.0.1",
            # The dashboard process serves that state API; bound to loopback only.
            include_dashboard=True,
            dashboard_host="127.0.0.1",
            object_store_memory=256 << 20,
            _temp_dir=tempfile.mkdtemp(prefix="ray-", dir="/tmp"),
            runtime_env={"env_vars": {"PYTHONPATH": pythonpath, "RAY_ADDRESS": f"127.0.0.1:{port}"}},
            log_to_driver=True,
        )
    finally:
        if previous is None:
            os.environ.pop("RAY_GCS_SERVER_PORT", None)
        else:
            os.environ["RAY_GCS_SERVER_PORT"] = previous
    log.info("started a local Ray instance for %d worker(s)", cfg.workers)
    return True


def run(cfg: PretrainConfig) -> dict:
    """Validate, start/join Ray, train, write ``final/`` and ``metrics.json``; returns the summary."""
    info = validate(cfg)
    out = Path(cfg.out).resolve()
    if cfg.overwrite and (out / RUN_NAME).exists():
        shutil.rmtree(out / RUN_NAME)
    out.mkdir(parents=True, exist_ok=True)
    cfg.out = str(out)
    cfg.store = cfg.store if "://" in cfg.store else str(Path(cfg.store).resolve())
    log.info("store %s: %d subgraphs, %d nodes, %d edges, features %s", cfg.store, info["subgraphs"], info["nodes"],
             info["edges"], describe_normalization(info["normalize"]))
    if info["normalize"] == "none":
        log.warning("the store holds raw features (built with --normalize none, or before stores were normalised); "
                    "the checkpoint records normalize=none, so finetune/score --normalize auto use raw features too")

    import ray
    import ray.train
    from ray.train.torch import TorchConfig, TorchTrainer

    from gcad_dist.checkpoint import load_train_state
    from gcad_dist.distributed.train_loop import train_loop_per_worker

    started = _start_ray(cfg)
    try:
        use_gpu = cfg.gpus_per_worker > 0
        resources = {"CPU": cfg.cpus_per_worker}
        if use_gpu:
            resources["GPU"] = cfg.gpus_per_worker
        loop_config = {"pretrain": asdict(cfg), "verbose": cfg.verbose}
        if os.environ.get("GCAD_FAIL_AT_STEP"):
            loop_config["fail_at_step"] = int(os.environ["GCAD_FAIL_AT_STEP"])
            loop_config["fail_marker"] = os.environ.get("GCAD_FAIL_MARKER", str(out / ".fail_marker"))
        trainer = TorchTrainer(
            train_loop_per_worker,
            train_loop_config=loop_config,
            torch_config=TorchConfig(backend="nccl" if use_gpu else "gloo"),
            scaling_config=ray.train.ScalingConfig(
                num_workers=cfg.workers, use_gpu=use_gpu, resources_per_worker=resources
            ),
            run_config=ray.train.RunConfig(
                name=RUN_NAME,
                storage_path=str(out),
                failure_config=ray.train.FailureConfig(max_failures=cfg.max_failures),
                checkpoint_config=ray.train.CheckpointConfig(num_to_keep=cfg.keep_checkpoints),
            ),
        )
        result = trainer.fit()
        if result.checkpoint is None:
            raise RuntimeError("training finished without a checkpoint")
        final = out / "final"
        with result.checkpoint.as_directory() as d:
            final.mkdir(parents=True, exist_ok=True)
            shutil.copy2(Path(d) / "model.pt", final / "model.pt")
            state = load_train_state(d) or {}
    finally:
        if started:
            ray.shutdown()
    history = state.get("history", [])
    last = history[-1] if history else {}
    summary = {
        "store": cfg.store, "normalize": info["normalize"], "workers": cfg.workers, "epochs": cfg.epochs,
        "global_step": state.get("global_step"),
        "steps_per_epoch": state.get("steps_per_epoch"), "passes_per_epoch": state.get("passes_per_epoch"),
        "checkpoints": state.get("checkpoints"), "restarts": state.get("restarts", 0),
        "final_loss": last.get("loss"), "seeds_per_s": last.get("seeds_per_s"),
        "edges_per_s": last.get("edges_per_s"), "wait_frac": last.get("wait_frac"),
        "checkpoint": str(final), "ray_checkpoint": result.checkpoint.path,
    }
    (out / "metrics.json").write_text(json.dumps({"summary": summary, "history": history, "config": asdict(cfg)},
                                                 indent=2))
    log.info("done: %d steps over %d epoch(s) on %d worker(s), %s checkpoint(s), final loss %s, %s seeds/s; "
             "model in %s", summary["global_step"] or 0, cfg.epochs, cfg.workers, summary["checkpoints"],
             f"{summary['final_loss']:.4f}" if summary["final_loss"] is not None else "n/a",
             f"{summary['seeds_per_s']:.0f}" if summary["seeds_per_s"] is not None else "n/a", final)
    return summary


def main(argv: list[str] | None = None) -> int:
    cfg = parse_config(argv)
    setup_logging(cfg.verbose)
    run(cfg)
    return 0


if __name__ == "__main__":
    run_cli(main)
