"""The per-worker pre-training loop run by Ray Train (``TorchTrainer(train_loop_per_worker, ...)``).

Every worker: opens the store, builds its :class:`~gcad_dist.data.store_dataset.StoreDataset` share,
wraps GCCAD in DDP (gloo on CPUs, NCCL on GPUs; with one worker, no wrapper), and trains on the
corrupt subgraphs' synthetic labels (METHOD.md section 4) with Adam, 10% warm-up then linear decay to
lr/10. Context sums of large subgraphs are all-reduced through :class:`AllReduceContextSync` on a
dedicated process group (never interleaving with DDP's gradient buckets).

An epoch is at least ``min_steps_per_epoch`` steps: a small store's epoch repeats whole passes over
its subgraphs (:mod:`gcad_dist.data.sharding`), so ``--epochs`` means real training on any store.

Checkpoints (``ray.train.report(..., checkpoint=...)`` from rank 0) are written every
``checkpoint_every`` steps if set, at an epoch end once ``checkpoint_interval`` seconds have passed
since the last one (0 = every epoch end), and always at the end of the last epoch. They hold the
model (:func:`gcad_dist.checkpoint.save_model` format, with ``extra["normalize"]`` = the store's
feature normalisation, so that finetune and score ``--normalize auto`` z-score their graph the same
way) and the training state: optimizer, scheduler, memory buffers, epoch, position in the epoch,
global step, every rank's RNG states, the metric history and the number of checkpoints written. A
restarted worker group (``FailureConfig``) or a ``--resume`` run continues from the latest one, the
step counter continuing.

The loop talks to Ray only through a reporter (:class:`RayReporter`: ``latest_checkpoint()``,
``report(metrics, checkpoint_dir)``), so tests can run it in-process with a stand-in.

Run record: with ``config["events_path"]`` (``<out>/events.jsonl``, on the storage every host shares)
rank 0 appends one JSON object per line: ``start`` when a worker group starts (every rank's node IP,
host name and pid, the step it resumes from, the restart count), ``progress`` at most once a second
(position in the epoch, running loss, seeds/s), ``checkpoint`` after each checkpoint and ``epoch`` with
the epoch's record. The driver (:mod:`gcad_dist.pretrain`) follows it for its progress line; tests read
placement and the step a restarted group resumed from out of it. Each epoch record also lists the
node IP of every rank (``nodes``).

Test hooks: ``fail_at_step`` (from ``GCAD_FAIL_AT_STEP``) makes the last rank SIGKILL itself once
that global step is done, but only if ``fail_marker`` does not exist yet (it is created first), so the
failure fires once per run. ``step_delay_s`` (from ``GCAD_STEP_DELAY_S``) sleeps that long after every
step, so that a test can act in the middle of an epoch on a fast machine.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import logging
import math
import os
import shutil
import signal
import socket
import tempfile
import time
from collections.abc import Iterator
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

import torch
import torch.distributed as dist

from gcad_dist.allocator import retain_freed_memory
from gcad_dist.checkpoint import load_model_file, load_train_state, rng_state, save_model, save_train_state, set_rng_state
from gcad_dist.data.degree_cap import cap_dense_step
from gcad_dist.data.online_corruption import draw_member_swaps, plant_cliques, push_to_tails, swap_features
from gcad_dist.data.sharding import ShardConfig
from gcad_dist.data.store_dataset import StoreDataset
from gcad_dist.data.target_shard import shard_for
from gcad_dist.distributed.context import AllReduceContextSync
from gcad_dist.distributed.grad_sync import average_gradients
from gcad_dist.model import GCCAD, GCCADConfig
from gcad_dist.model.ball import DEFAULT_FANOUT
from gcad_dist.model.precision import autocast, resolve_precision
from gcad_dist.optim import adam

if TYPE_CHECKING:
    from gcad_dist.pretrain import PretrainConfig

log = logging.getLogger("gcad_dist.pretrain")

#: GCAD_STEP_SYNC=1: read the loss sums back to the host after every step (the loop before session 34), for timing
STEP_SYNC = os.environ.get("GCAD_STEP_SYNC", "0") == "1"


def lr_lambda(total_steps: int, warmup_frac: float = 0.1, final_frac: float = 0.1):
    """LR multiplier: linear warm-up over the first ``warmup_frac`` of steps, then linear decay to
    ``final_frac`` at the last step (METHOD.md section 2)."""
    warm = max(1, int(math.ceil(warmup_frac * total_steps)))

    def f(step: int) -> float:
        if step < warm:
            return (step + 1) / warm
        return 1.0 - (1.0 - final_frac) * min(1.0, (step - warm) / max(1, total_steps - warm))

    return f


def model_config(cfg, in_dim: int) -> GCCADConfig:
    """The GCCAD settings of a pre-training run."""
    return GCCADConfig(
        in_dim=in_dim, hidden=cfg.hidden, num_layers=cfg.layers, conv=cfg.conv, readout=cfg.readout,
        dropout=cfg.dropout, tau=cfg.tau, contrast=cfg.contrast, jump=cfg.jump, loss=cfg.loss,
        ensemble=getattr(cfg, "ensemble", None) or 1, context_hops=getattr(cfg, "context_hops", 1),
        degree_detrend=bool(getattr(cfg, "degree_detrend", False)),
        loose_context=bool(getattr(cfg, "loose_context", False)),
        ball_switch=bool(getattr(cfg, "ball_switch", False)),
        feature_view=bool(getattr(cfg, "feature_view", False)),
        signature_view=bool(getattr(cfg, "signature_view", False)),
    )


def _world() -> tuple[int, int]:
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def _allreduce_floats(values: list[float], op=None) -> list[float]:
    """Sum (or ``op``) a few floats over all workers."""
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return values
    t = torch.tensor(values, dtype=torch.float64)
    if dist.get_backend() == "nccl":
        t = t.cuda()
    dist.all_reduce(t, op=op or dist.ReduceOp.SUM)
    return t.cpu().tolist()


class Reporter(Protocol):
    """Where metrics and checkpoints go (Ray Train in production, a stand-in in tests)."""

    def latest_checkpoint(self) -> contextlib.AbstractContextManager[str | None]:
        """Context manager: a local directory holding the checkpoint to resume from, or None."""
        ...

    def report(self, metrics: dict, checkpoint_dir: str | None) -> None:
        """Called by every rank at the same points; rank 0 passes the checkpoint directory (copied now)."""
        ...


class RayReporter:
    """:class:`Reporter` through ``ray.train.get_checkpoint`` / ``ray.train.report``."""

    @contextlib.contextmanager
    def latest_checkpoint(self) -> Iterator[str | None]:
        import ray.train

        ckpt = ray.train.get_checkpoint()
        if ckpt is None:
            yield None
            return
        with ckpt.as_directory() as d:
            yield d

    def report(self, metrics: dict, checkpoint_dir: str | None) -> None:
        import ray.train

        ckpt = None if checkpoint_dir is None else ray.train.Checkpoint.from_directory(checkpoint_dir)
        ray.train.report(metrics, checkpoint=ckpt)


def node_ip() -> tuple[str, str]:
    """(IP, node id) of the Ray node this worker runs on (its host's address in the cluster), else the
    host name's address and ""."""
    try:
        import ray

        if ray.is_initialized():
            nid = ray.get_runtime_context().get_node_id()
            for n in ray.nodes():
                if n.get("NodeID") == nid:
                    return n["NodeManagerAddress"], nid
            return ray.util.get_node_ip_address(), nid
    except Exception:  # noqa: BLE001 - a record, never a reason to fail
        pass
    try:
        return socket.gethostbyname(socket.gethostname()), ""
    except OSError:
        return "127.0.0.1", ""


class EventLog:
    """Appends JSON lines to ``path`` (rank 0 only; ``path`` None = off). ``progress`` events are
    rate-limited to one per ``interval_s``."""

    def __init__(self, path: str | None, interval_s: float = 1.0):
        self.path = path
        self.interval_s = interval_s
        self._last = 0.0

    def due(self, event: str) -> bool:
        """Whether :meth:`write` would write ``event`` now (so a caller can skip computing its fields)."""
        return bool(self.path) and (event != "progress" or time.time() - self._last >= self.interval_s)

    def write(self, event: str, **fields) -> None:
        if not self.due(event):
            return
        now = time.time()
        if event == "progress":
            self._last = now
        line = json.dumps({"event": event, "time": now, **fields}) + "\n"
        try:
            with open(self.path, "a") as f:  # one short write per line: appends stay whole
                f.write(line)
        except OSError as e:  # a full or read-only disk must not stop training
            log.warning("cannot write %s: %s", self.path, e)
            self.path = None


def checkpoint_due(last_epoch: bool, since_last_s: float, interval_s: float) -> bool:
    """Checkpoint at this epoch end? Always after the last epoch, else once ``interval_s`` seconds have
    passed since the last checkpoint (``interval_s`` 0: every epoch). ``since_last_s`` must be the
    same on every rank (the all-reduced maximum) so that all ranks decide alike."""
    return last_epoch or since_last_s >= interval_s


def shard_config(cfg: PretrainConfig) -> ShardConfig:
    """How a :class:`gcad_dist.pretrain.PretrainConfig` (batch size resolved) divides the store among workers."""
    return ShardConfig(
        sample_threshold=cfg.sample_threshold, batch_cost=cfg.graph_batch_nodes, batch_size=cfg.batch_size,
        seed=cfg.seed, min_steps=cfg.min_steps_per_epoch,
        # a capped dense step costs the links it trains on: its epoch is as long as any whole-graph store's
        max_degree=cfg.max_degree if cfg.contrast == "local" else 0, dense_links=cfg.dense_links,
    )


def train_loop_per_worker(config: dict) -> None:
    """Ray Train entry point; ``config["pretrain"]`` is a :class:`gcad_dist.pretrain.PretrainConfig` as a dict."""
    import ray.train.torch

    gpu = float(config["pretrain"].get("gpus_per_worker", 0)) > 0
    run_worker(config, RayReporter(), ray.train.torch.get_device() if gpu else torch.device("cpu"))


def run_worker(config: dict, reporter: Reporter, device: torch.device | None = None) -> None:
    """The training loop of one worker (rank and world from ``torch.distributed`` if initialised)."""
    from gcad_dist.cli import setup_logging
    from gcad_dist.pretrain import PretrainConfig, apply_auto_batch, apply_recipe, shards_targets
    from partitioning.store.reader import StoreReader

    setup_logging(config.get("verbose", False))
    cfg = PretrainConfig(**config["pretrain"])
    rank, world = _world()
    device = device or torch.device("cpu")
    torch.set_num_threads(max(1, int(cfg.cpus_per_worker)))
    retain_freed_memory()
    torch.manual_seed(cfg.seed + rank)

    # the driver checked every file before Ray started (pretrain.validate); chunks are still checked as read
    reader = StoreReader(cfg.store, verify=False)
    normalize = reader.feature_normalization()  # recorded in every checkpoint's extra
    apply_auto_batch(cfg, int(min(reader.node_counts)))  # the driver's choice, unless called directly
    shard = shard_config(cfg)
    fanouts = cfg.fanout_list()
    if cfg.contrast == "local":  # the local contrast reads the seeds' own neighbours only: one hop (two: the ball)
        fanouts = fanouts[:1] + ([DEFAULT_FANOUT] if getattr(cfg, "context_hops", 1) == 2 else [])
    dataset = StoreDataset(reader, rank, world, shard, fanouts=fanouts, backend=cfg.backend,
                           cache_bytes=int(cfg.cache_gb * (1 << 30)), prefetch=cfg.prefetch,
                           device=device if cfg.samples_on_gpu(device) else "cpu")
    steps_per_epoch = dataset.steps_per_epoch()
    passes = dataset.passes_per_epoch()
    if cfg.max_steps_per_epoch:
        steps_per_epoch = min(steps_per_epoch, cfg.max_steps_per_epoch)
    total_steps = steps_per_epoch * cfg.epochs

    apply_recipe(cfg, reader.num_corrupted > 0)  # the driver's choice, unless called directly
    mcfg = model_config(cfg, reader.num_features)
    torch.manual_seed(cfg.seed)  # identical initial weights on every rank
    model = GCCAD(mcfg).to(device)
    torch.manual_seed(cfg.seed + 1000 * (rank + 1))
    optimizer = adam(model.parameters(), device, cfg.lr)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_lambda(total_steps))
    timeout = datetime.timedelta(seconds=float(config["pretrain"].get("collective_timeout") or 1800))
    sync = AllReduceContextSync(group=dist.new_group(timeout=timeout) if world > 1 else None,
                                momentum=cfg.memory_momentum)

    # -- restore ------------------------------------------------------------------------------
    epoch, pos, global_step = 0, 0, 0
    history: list[dict] = []
    restarts = checkpoints = 0
    with reporter.latest_checkpoint() as d:
        state = None
        if d is not None:
            model.load_state_dict(load_model_file(d)["state_dict"])
            state = load_train_state(d)
        if state is not None:
            optimizer.load_state_dict(state["optimizer"])
            scheduler.load_state_dict(state["scheduler"])
            # A resumed run may ask for more epochs: the schedule follows the new total.
            scheduler.lr_lambdas = [lr_lambda(total_steps)]
            sync.load_state_dict(state["memory"])
            epoch, pos, global_step = state["epoch"], state["position"], state["global_step"]
            history = state.get("history", [])
            restarts = state.get("restarts", 0) + 1
            checkpoints = state.get("checkpoints", 0)
            rngs = state.get("rng", [])
            if len(rngs) == world:
                set_rng_state(rngs[rank])
        if d is not None and rank == 0:
            log.info("restored checkpoint: epoch %d, position %d, global step %d (restart %d)",
                     epoch, pos, global_step, restarts)

    net: torch.nn.Module = model
    # the local contrast's loss applies the head outside forward and skips the GCCAD layers: DDP's hooks never averaged
    # its gradients (until session 59), so its workers average them by hand after each backward (grad_sync)
    by_hand = world > 1 and model.config.contrast == "local"
    trained = [p for p in model.parameters() if p.requires_grad]
    if world > 1 and not by_hand:
        net = torch.nn.parallel.DistributedDataParallel(
            model, device_ids=[device.index] if device.type == "cuda" else None)
    elif by_hand:  # as DDP does: every rank starts from rank 0's weights
        for t in model.state_dict().values():
            dist.broadcast(t, 0)
    # Where every rank runs (node IP, host, pid): logged, in every epoch record and in the run record.
    ip, node_id = node_ip()
    me = {"rank": rank, "ip": ip, "node_id": node_id, "host": socket.gethostname(), "pid": os.getpid()}
    ranks = [me]
    if world > 1:
        ranks = [None] * world
        dist.all_gather_object(ranks, me)
    nodes = [r["ip"] for r in ranks]
    events = EventLog(config.get("events_path") if rank == 0 else None)
    events.write("start", epoch=epoch, position=pos, step=global_step, restarts=restarts, world=world,
                 ranks=ranks, steps_per_epoch=steps_per_epoch, epochs=cfg.epochs)
    if rank == 0:
        log.info("worker group: ranks on %s", ", ".join(f"{r['rank']}@{r['ip']}" for r in ranks))
        log.info("worker group: %d worker(s) on %s; %d subgraphs, %d steps/epoch (%d pass(es) over the store, "
                 "--min-steps-per-epoch %d), %d epochs", world, device, len(reader.node_counts), steps_per_epoch,
                 passes, cfg.min_steps_per_epoch, cfg.epochs)

    def report(metrics: dict, with_checkpoint: bool) -> None:
        """All ranks report; with a checkpoint, rank 0 attaches it (the RNG states of every rank inside)."""
        nonlocal checkpoints, last_checkpoint
        rngs = [None] * world
        if with_checkpoint:
            checkpoints += 1
            if world > 1:
                dist.all_gather_object(rngs, rng_state())
            else:
                rngs = [rng_state()]
        if not (with_checkpoint and rank == 0):
            reporter.report(metrics, None)
        else:
            tmp = tempfile.mkdtemp(prefix="gcad-ckpt-")
            try:
                save_model(tmp, model, mcfg,
                           extra={"pretrain": asdict(cfg), "global_step": global_step, "normalize": normalize})
                save_train_state(tmp, {
                    "optimizer": optimizer.state_dict(), "scheduler": scheduler.state_dict(),
                    "memory": sync.state_dict(), "epoch": epoch, "position": pos, "global_step": global_step,
                    "rng": rngs, "history": history, "restarts": restarts, "world_size": world,
                    "steps_per_epoch": steps_per_epoch, "passes_per_epoch": passes,
                    "checkpoints": checkpoints,
                })
                reporter.report(metrics, tmp)
            finally:
                shutil.rmtree(tmp, ignore_errors=True)
        if with_checkpoint:
            last_checkpoint = time.perf_counter()
            events.write("checkpoint", epoch=epoch, position=pos, step=global_step, checkpoints=checkpoints)

    fail_at = int(config.get("fail_at_step") or 0)
    fail_marker = config.get("fail_marker")
    step_delay = float(config.get("step_delay_s") or 0)

    precision = resolve_precision(getattr(cfg, "precision", "fp32"), device)
    if rank == 0 and precision != "fp32":
        log.info("precision: %s autocast for the forward pass and loss", precision)

    members = model.config.ensemble
    # the local contrast's context is a mean over in-neighbours (no sum to rescale): a capped draw averages fewer
    cap_dense, caps = cfg.contrast == "local" and cfg.max_degree > 0, {}
    # a whole-graph store with several workers: each trains its share of the target nodes (gcad_dist.data.target_shard)
    split_targets, shards = shards_targets(cfg, reader.node_counts, world), {}
    # -- train --------------------------------------------------------------------------------
    last_checkpoint = time.perf_counter()  # a restarted group counts from its start
    net.train()
    while epoch < cfg.epochs:
        # the epoch's loss sums stay on the device (float64): reading them every step would make the host wait for
        # each step before queueing the next one's kernels (GCAD_STEP_SYNC=1 does, to time the two with bench.gpu)
        sums = torch.zeros(3, dtype=torch.float64, device=device)  # total, con, link
        seeds = edges = n_steps = 0
        t_epoch = time.perf_counter()
        for tb in dataset.iter_epoch(epoch, start=pos):
            if pos >= steps_per_epoch:
                break
            tb = tb.to(device)
            ei, y, hop_edges, step_edges = tb.edge_index, tb.y, tb.num_sampled_edges, tb.num_edges
            loss_mask, num_seeds, shard = tb.loss_mask, tb.num_seeds, None
            if split_targets and not hop_edges:  # this worker's targets: their in-links and loss terms only
                shard = shard_for(shards, ei, tb.x.size(0), rank, world, cfg.seed, tb.key)
                ei, loss_mask = shard.edge_index, shard.loss_mask(tb.loss_mask)
                num_seeds, step_edges = shard.count(loss_mask, tb.loss_mask), int(ei.size(1))
            if cap_dense and not hop_edges:  # a dense whole-graph step: contexts of at most ~max_degree neighbours
                # (the whole graph's link count decides; a share's targets keep all their in-links to draw from)
                dense = (shard.total_links if shard is not None else int(ei.size(1))) > cfg.dense_links
                ei = cap_dense_step(ei, tb.x.size(0), cfg.max_degree if dense else 0, 0, caps, tb.key)
                step_edges = min(step_edges, int(ei.size(1)))  # a capped step's own links
            if cfg.plant_cliques:  # one draw of cliques for every member; swaps pick among the rest
                ei, y, hop1 = plant_cliques(ei, y, tb.loss_mask, cfg.plant_cliques, tuple(cfg.clique_size),
                                            hop_edges[0] if hop_edges else None)
                hop_edges = [hop1, *hop_edges[1:]] if hop_edges else None
            x = tb.x
            if cfg.push_tails:  # one draw for every member, like the cliques
                x, y = push_to_tails(x, y, tb.loss_mask, cfg.push_tails)
            # an ensemble's members each get their own draw of swaps, applied inside the model
            plan = draw_member_swaps(y, tb.loss_mask, cfg.swap_features, members) if members > 1 else None
            if plan is None:
                (x, y), swaps = swap_features(x, y, tb.loss_mask, cfg.swap_features), {}
            else:
                y, swaps = plan[0], {"member_swaps": plan[1:]}
            sync.set_subgraph(tb.key, shared=tb.shared)
            with autocast(precision, device):
                out = net(x, ei, batch=tb.batch, num_graphs=tb.num_graphs,
                          context_mask=tb.context_mask, sync=sync, num_sampled_nodes=tb.num_sampled_nodes,
                          num_sampled_edges=hop_edges, **swaps)
                losses = model.loss(out, y, mask=loss_mask, sync=sync)
                if shard is not None:  # the mean of the shares' gradients is then the whole step's
                    w = shard.weight(tb.loss_mask, loss_mask)
                    losses = {k: v * w for k, v in losses.items()}
            optimizer.zero_grad(set_to_none=True)
            losses["total"].backward()
            if by_hand:
                average_gradients(trained)
            optimizer.step()
            scheduler.step()
            pos += 1
            global_step += 1
            n_steps += 1
            seeds += num_seeds
            edges += step_edges
            sums += torch.stack([losses["total"].detach(), losses["con"].detach(), losses["link"].detach()]).double()
            if STEP_SYNC:
                sums.tolist()
            if rank == 0 and events.due("progress"):
                dt = time.perf_counter() - t_epoch
                events.write("progress", epoch=epoch, position=pos, step=global_step, loss=float(sums[0]) / n_steps,
                             seeds_per_s=seeds * world / max(dt, 1e-9), steps_per_epoch=steps_per_epoch)
            if step_delay:
                time.sleep(step_delay)
            if fail_at and global_step == fail_at and rank == world - 1 and fail_marker \
                    and not os.path.exists(fail_marker):
                Path(fail_marker).touch()
                log.warning("test hook: rank %d kills itself after global step %d", rank, global_step)
                os.kill(os.getpid(), signal.SIGKILL)
            if cfg.checkpoint_every and global_step % cfg.checkpoint_every == 0 and pos < steps_per_epoch:
                report({"epoch": epoch, "step": global_step, "loss": float(sums[0]) / max(1, n_steps)}, True)
        now = time.perf_counter()
        elapsed = now - t_epoch
        tot = _allreduce_floats([*sums.tolist(), n_steps, seeds, edges,
                                 dataset.wait_time, dataset.read_time])
        # the workers' models must be one model: the spread of a weight checksum over them (0 when in step)
        check = float(sum(p.detach().double().sum() for p in trained))
        elapsed_max, since_ckpt, hi, neg_lo = _allreduce_floats([elapsed, now - last_checkpoint, check, -check],
                                                                op=dist.ReduceOp.MAX if world > 1 else None)
        steps_all = max(1.0, tot[3])
        record = {
            "epoch": epoch, "step": global_step, "loss": tot[0] / steps_all, "con": tot[1] / steps_all,
            "link": tot[2] / steps_all, "lr": scheduler.get_last_lr()[0], "steps": int(tot[3] / world),
            "seeds_per_s": tot[4] / max(elapsed_max, 1e-9), "edges_per_s": tot[5] / max(elapsed_max, 1e-9),
            "wait_frac": tot[6] / world / max(elapsed_max, 1e-9), "read_s": tot[7] / world,
            "time_s": elapsed_max, "restarts": restarts, "workers": world, "nodes": nodes,
            "weight_spread": hi + neg_lo,
        }
        history.append(record)
        events.write("epoch", **record, steps_per_epoch=steps_per_epoch, epochs=cfg.epochs)
        if record["weight_spread"] > 1e-6 * max(1.0, abs(check)) and rank == 0:
            log.warning("epoch %d: the workers' models differ (weight checksum spread %.3g): their gradients are not "
                        "averaged", epoch, record["weight_spread"])
        if rank == 0:
            log.info("epoch %d: step %d loss %.4f (con %.4f link %.4f) %.0f seeds/s, %.1f%% waiting for data",
                     epoch, global_step, record["loss"], record["con"], record["link"], record["seeds_per_s"],
                     100 * record["wait_frac"])
        epoch, pos = epoch + 1, 0
        report(record, checkpoint_due(epoch >= cfg.epochs, since_ckpt, cfg.checkpoint_interval))
