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
steps per pass) is unaffected. Dense graphs: a whole-graph step of the local contrast with more than
``--dense-links`` links (2M; a 12,000-node graph of mean degree 700 has 8.4M) averages each node's context over at
most about ``--max-degree`` (64) of its in-neighbours, drawn afresh at every step, as ``gcad_dist.train`` does; a
whole-graph step costs every link otherwise. Checkpoints: at an epoch end at most once per ``--checkpoint-interval``
seconds (default 60), every ``--checkpoint-every`` steps if given, and always after the last epoch.

Outputs in ``--out``: ``final/model.pt`` (the :mod:`gcad_dist.checkpoint` format that finetune and score
load; ``extra["normalize"]`` records the store's feature normalisation, ``standard`` for a store built
with the default ``partitioning.build --normalize``, which their ``--normalize auto`` then applies to
the target graph with its own statistics), ``metrics.json`` (per-epoch history and a summary) and
``ray_train/`` (Ray's checkpoints), ``events.jsonl`` (the run record: every worker group's placement,
rank by rank with node IPs, progress, checkpoints, epochs; :mod:`gcad_dist.distributed.train_loop`) and
``ray.log`` (Ray's own output: worker start-up, Ray Train controller and checkpoint messages, the
workers' log lines). The terminal gets this module's lines and a progress line per epoch (steps,
seeds/s, loss, ETA); ``--verbose`` also sends Ray's output there.

Losing a host: a worker group whose node dies (or is cut off) is restarted from the last checkpoint
within ``--max-failures``, on whatever nodes have room; the driver names the lost host
(``host lost: node 10.0.0.2 ...``). ``--collective-timeout`` bounds how long a worker waits in an
all-reduce for a peer that no longer answers; how fast Ray itself declares a silent node dead is set
where the cluster starts (``RAY_health_check_*``, launch/README.md). When the failures run out the
run ends with one line, ``error: training failed ...: host ... lost ...``, exit status 1.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import math
import os
import shutil
import sys
import threading
import time
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

from gcad_dist.cli import (ArgumentParser, DefaultsHelpFormatter, UsageError, auto_or, bar_disable, run_cli,
                           setup_logging)
from gcad_dist.data.degree_cap import DENSE_LINKS, MAX_DEGREE
from gcad_dist.data.sharding import ShardConfig, capped_whole, idle_workers
from gcad_dist.model.gccad import CONTRASTS
from gcad_dist.model.precision import PRECISIONS
from partitioning.features import describe_normalization

os.environ.setdefault("RAY_TRAIN_V2_ENABLED", "1")
# On a busy machine the dashboard (which serves the state API Ray Train V2 polls) can take over
# Ray's default 60 s to come up; wait longer rather than fail before training starts.
os.environ.setdefault("RAY_DASHBOARD_STARTUP_TIMEOUT_S", "600")

log = logging.getLogger("gcad_dist.pretrain")

RUN_NAME = "ray_train"
EVENTS = "events.jsonl"
RAY_LOG = "ray.log"
# After a failed run, how long to wait for Ray to declare a silent node dead so that the error names it
# (netns_cluster.sh's health-check settings declare one dead within about 15 s).
LOST_HOST_WAIT_S = 20.0
PEER_LOST_SIGNS = ("peer", "health check", "node", "unavailable", "imed out", "ActorDied", "onnection")
PLACEMENT_STRATEGIES = ["PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD"]


#: What ``--recipe`` sets, unless given explicitly. ``paper``: METHOD.md section 4, for a store of corrupt
#: subgraphs (K-means parts + injected nodes). ``local``: for a store without stored corruption (``partitioning.build
#: --k 1 --corruption-mix none``, the whole graph): each node's input projection against its neighbours' mean,
#: a per-node logistic loss, feature swaps redrawn every step (BENCHMARKS.md, "A label-free GCCAD-pre that
#: detects real anomalies"), five such models trained side by side and averaged (BENCHMARKS.md, session 11).
#: Planted cliques (``--plant-cliques``) are off in both: on the real graphs' validation splits they gained little or
#: nothing and cost two (BENCHMARKS.md, session 20). Feature tails (``--push-tails``) are off too: on the real graphs'
#: training and validation labels they cost inj_cora, reddit and tolokers (BENCHMARKS.md, session 30). The local
#: recipe's ball switch (``--ball-switch``) scores with the two-hop ball where it makes a group stand out that the
#: neighbours hide (BENCHMARKS.md, session 49); its feature view (``--feature-view``) adds an isolation forest where it
#: corroborates the contrast (session 50), and its signature view (``--signature-view``) the rank of a cross-fitted
#: classifier of the score's top nodes where it tells them apart (session 60).
RECIPES: dict[str, dict[str, Any]] = {
    "paper": {"contrast": "graph", "loss": "contrastive", "tau": 0.1, "swap_features": 0.0,
              "plant_cliques": 0.0, "push_tails": 0.0, "ensemble": 1, "degree_detrend": False,
              "loose_context": False, "ball_switch": False, "feature_view": False,
              "signature_view": False},
    "local": {"contrast": "local", "loss": "logistic", "tau": 0.2, "swap_features": 0.15, "plant_cliques": 0.0,
              "push_tails": 0.0, "ensemble": 5, "degree_detrend": True, "loose_context": False,
              "ball_switch": True, "feature_view": True,
              "signature_view": True},
}


def apply_recipe(cfg: "PretrainConfig", store_corrupted: bool) -> "PretrainConfig":
    """Fill the options left unset (None) from ``cfg.recipe`` (``auto``: ``paper`` when the store holds corrupted
    nodes, ``local`` when it holds none); ``cfg.recipe`` becomes the recipe used. In place; returns ``cfg``."""
    if cfg.recipe == "auto":
        cfg.recipe = "paper" if store_corrupted else "local"
    for name, value in RECIPES[cfg.recipe].items():
        if getattr(cfg, name) is None:
            if name == "ensemble" and cfg.contrast != "local":
                value = 1
            elif name == "ball_switch" and (cfg.contrast != "local" or cfg.context_hops != 1 or cfg.loose_context):
                value = False  # the switch chooses between the neighbours and the ball: not with another context
            elif name in ("feature_view", "signature_view") and cfg.contrast != "local":
                value = False  # the views join the local contrast's score
            setattr(cfg, name, value)
    return cfg


#: ``--batch-size auto`` and ``--lr auto`` (BENCHMARKS.md, sessions 27 and 51). For the local contrast (the label-free
#: recipe) on a store whose every subgraph is trained in neighbour-sampled minibatches (all above ``--sample-threshold``),
#: GPU workers take ``GPU_BATCH_SIZE`` seeds a step, and the learning rate follows the step's seeds over *all* workers
#: (their gradients are averaged: W workers of B seeds train as one of W x B, in W times fewer steps; for the local
#: contrast only since session 59, gcad_dist.distributed.grad_sync): as the square root, ``BASE_LR`` x sqrt(S /
#: ``CPU_BATCH_SIZE``), from ``CPU_BATCH_SIZE`` seeds up to ``LR_SCALE_SEEDS`` seeds (4e-3), flat beyond. On the
#: generated 1M-node graph (session 59, seeds 0 and 1, against one worker of 1024 at 1e-3: 0.9700 / 0.9702 AUROC),
#: workers averaged at last: two workers (2048 seeds) scored 0.9716 / 0.9711 at 1.41e-3 and 0.9699 / 0.9692 at 2e-3,
#: four (4096) 0.9712 / 0.9717 at 2e-3 and 0.9680 / 0.9673 at 4e-3. Session 51 had fitted a linear rule (2e-3, 4e-3)
#: to workers whose gradients were not averaged (each trained a model of its own on 1/W of the seeds). One worker's
#: larger steps: 16384 seeds at 4e-3 were level where 1e-3 lost 0.03 AUROC (session 27); 65536 at 4e-3 were level and
#: at 8e-3 lost 0.006 (two seeds; session 51). The paper's recipe lost a little at 16384 / 4e-3 (one seed), and stores
#: with whole-graph steps (every real graph of the shared data) were measured at 1024 / 1e-3: those keep 1024 and 1e-3.
CPU_BATCH_SIZE = 1024
GPU_BATCH_SIZE = 16384
BASE_LR = 1e-3
LR_SCALE_SEEDS = 16384


def apply_auto_batch(cfg: "PretrainConfig", smallest_subgraph: int) -> "PretrainConfig":
    """Resolve ``batch_size`` / ``lr`` left at auto (None), given the store's smallest subgraph (nodes), after
    :func:`apply_recipe` (the rule depends on the contrast). In place."""
    all_sampled = smallest_subgraph > cfg.sample_threshold and cfg.contrast == "local"
    if cfg.batch_size is None:
        cfg.batch_size = GPU_BATCH_SIZE if cfg.gpus_per_worker > 0 and all_sampled else CPU_BATCH_SIZE
    if cfg.lr is None:
        cfg.lr = BASE_LR * math.sqrt(min(step_seeds(cfg), LR_SCALE_SEEDS) / CPU_BATCH_SIZE) if all_sampled else BASE_LR
    return cfg


def step_seeds(cfg: "PretrainConfig") -> int:
    """Seed nodes of one training step over all workers (a sampled subgraph's step: ``batch_size`` per worker)."""
    return int(cfg.batch_size) * max(1, int(cfg.workers))


def shards_targets(cfg: "PretrainConfig", node_counts: Any, world: int) -> bool:
    """Whether ``world`` workers split a whole-graph store's target nodes at every step
    (:mod:`gcad_dist.data.target_shard`): ``shard_targets`` (off: ``--no-shard-targets``), more than one worker, one
    subgraph trained whole, and the local recipe's per-node loss (logistic, the neighbours as context). After
    :func:`apply_recipe`."""
    whole = len(node_counts) == 1 and int(node_counts[0]) <= cfg.sample_threshold
    return bool(cfg.shard_targets and world > 1 and whole and cfg.contrast == "local" and cfg.loss == "logistic"
                and cfg.context_hops == 1)


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
    batch_size: int | None = None  # None = auto (apply_auto_batch): 1024, or 16384 on GPU workers
    fanouts: str = "10,5"
    sample_threshold: int = ShardConfig.sample_threshold
    graph_batch_nodes: int = 50_000
    # local contrast, whole-graph steps with more links than dense_links: each node's context averages at most about
    # max_degree of its in-neighbours, a fresh draw at every step (gcad_dist.data.degree_cap); scoring uses every link
    max_degree: int = MAX_DEGREE
    dense_links: int = DENSE_LINKS
    # a whole-graph store trained by several workers: each takes a disjoint share of the target nodes at every step
    # (gcad_dist.data.target_shard); False = every worker trains every node (W times the work for the one step)
    shard_targets: bool = True
    lr: float | None = None  # None = auto (apply_auto_batch): 1e-3, scaled with all workers' batch on all-sampled stores
    hidden: int = 64
    layers: int = 2
    conv: str = "gin"
    readout: str = "memory"
    dropout: float = 0.1
    # "auto" | "paper" | "local": the defaults of contrast, loss, tau, swap_features, ensemble, degree_detrend,
    # loose_context, ball_switch, feature_view and signature_view (RECIPES;
    # auto = local for a store without stored corruption, paper otherwise); an option given explicitly wins
    recipe: str = "auto"
    tau: float | None = None
    contrast: str | None = None
    loss: str | None = None
    jump: str = "last"
    swap_features: float | None = None
    # structural corruption drawn at every step: this fraction of each batch's normal nodes joined into cliques
    plant_cliques: float | None = None
    clique_size: tuple[int, int] = (4, 20)  # (min, max) members of a planted clique, drawn uniformly
    # global corruption drawn at every step: this fraction of each batch's normal nodes get features from column tails
    push_tails: float | None = None
    ensemble: int | None = None
    # local contrast: the context is the neighbours (1) or the two-hop ball (2; gcad_dist.model.ball)
    context_hops: int = 1
    # local contrast: the score's trend over log(1 + in-degree) removed when the model scores (recorded in the
    # checkpoint's model config; gcad_dist.model.degree_trend); None = the recipe's
    degree_detrend: bool | None = None
    # local contrast: also score each node against its loose context (neighbours weighted by (1 + common
    # neighbours)^-2) and keep the larger robust z-score (gcad_dist.model.loose_context); None = the recipe's
    loose_context: bool | None = None
    # local contrast with --context-hops 1: at scoring, switch to the two-hop ball when it makes a group of nodes stand
    # out that the neighbours hide (gcad_dist.model.ball.ball_reveals_group); None = the recipe's
    ball_switch: bool | None = None
    # local contrast: at scoring, add an isolation forest on the raw features where it corroborates the contrast's top
    # nodes, or the distance to the 5th nearest node in feature space where the links say nothing about the features
    # (gcad_dist.feature_view); None = the recipe's
    feature_view: bool | None = None
    # local contrast: at scoring, the score's top nodes generalised by a cross-fitted linear classifier of their
    # features where it tells them apart (gcad_dist.signature_view); None = the recipe's
    signature_view: bool | None = None
    memory_momentum: float = 0.5
    backend: str = "auto"
    sample_on: str = "auto"
    cache_gb: float = 4.0
    prefetch: int = 2
    min_steps_per_epoch: int = 100
    max_steps_per_epoch: int = 0
    checkpoint_every: int = 0
    checkpoint_interval: float = 60.0
    keep_checkpoints: int = 2
    max_failures: int = 3
    placement_strategy: str = "PACK"
    collective_timeout: float = 600.0
    # "fp32" | "bf16": bf16 autocast for each step's forward pass and loss on GPUs / CPUs with native bf16
    # (the edge kernels and every sum stay fp32; elsewhere fp32 with a warning): gcad_dist.model.precision
    precision: str = "fp32"
    resume: bool = False
    overwrite: bool = False
    seed: int = 0
    verbose: bool = False
    progress: bool = True

    def fanout_list(self) -> list[int]:
        return [int(f) for f in str(self.fanouts).split(",") if f.strip()]

    def samples_on_gpu(self, device: Any) -> bool:
        """Whether a worker training on ``device`` samples its minibatches there (``--sample-on``)."""
        if getattr(device, "type", "cpu") != "cuda" or self.sample_on == "cpu":
            return False
        return self.sample_on == "gpu" or self.backend in ("auto", "builtin")


def build_parser() -> argparse.ArgumentParser:
    p = ArgumentParser(
        prog="python -m gcad_dist.pretrain",
        description="Self-supervised GCCAD pre-training (GCCAD-pre) on a store of corrupt subgraphs, "
        "data-parallel over Ray Train workers.",
        formatter_class=DefaultsHelpFormatter,
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
    a("--batch-size", type=auto_or(int, "an integer"), default="auto",
      help=f"seed nodes per worker per step on subgraphs above --sample-threshold; auto = {GPU_BATCH_SIZE} on GPU "
      f"workers with the local contrast when every subgraph of the store is above the threshold, else {CPU_BATCH_SIZE}")
    a("--fanouts", default=d.fanouts, help="neighbours sampled per hop for large subgraphs, comma-separated (-1 = all)")
    a("--sample-threshold", type=int, default=d.sample_threshold,
      help="subgraphs with more nodes are trained by all workers together with neighbour-sampled minibatches; "
      "smaller ones are batched whole, each worker its own share")
    a("--graph-batch-nodes", type=int, default=d.graph_batch_nodes,
      help="cost budget (about nodes + edges/2) of one batch of whole small subgraphs")
    a("--max-degree", type=int, default=d.max_degree, metavar="D",
      help="local contrast on dense graphs: a whole-graph step with more than --dense-links links averages each "
      "node's context over at most about D of its in-neighbours, drawn afresh at every step (as gcad_dist.train's "
      "--max-degree); scoring uses every link. An epoch's length then counts those links only (at most nodes x D), "
      "so a dense graph's epoch is about --min-steps-per-epoch steps, like a sparse one's. A whole-graph step costs "
      "every link otherwise. 0 = every link")
    a("--dense-links", type=int, default=d.dense_links, metavar="LINKS",
      help="links (directed, as stored) of a whole-graph step above which --max-degree applies; no real graph of "
      "the shared data has as many (tolokers, the densest, 1.04M)")
    a("--no-shard-targets", dest="shard_targets", action="store_false",
      help="a whole-graph store (partitioning.build --k 1) with --workers above 1: every worker trains every node "
      "at every step (each with its own swaps; the step averages their gradients), as before session 59: W times "
      "the work of one worker a step. By default each worker takes a fixed share of the nodes, their contexts and "
      "loss terms, and the workers' gradients together make the one whole-graph step at about 1/W of the work a "
      "worker (the local recipe; gcad_dist/data/target_shard.py)")
    a("--lr", type=auto_or(float, "a number"), default="auto",
      help=f"peak Adam learning rate (10%% warm-up, then linear decay to lr/10); auto = {BASE_LR:g} x sqrt(S / "
      f"{CPU_BATCH_SIZE}), S = the step's seeds over all workers (batch size x workers) up to {LR_SCALE_SEEDS}, with "
      f"the local contrast when every subgraph of the store is above --sample-threshold (measured on a 1M-node graph "
      f"against {CPU_BATCH_SIZE} seeds at {BASE_LR:g}, two seeds: 2048 seeds a step at 1.41e-3 and 4096 at 2e-3 are "
      f"level or above, twice those rates 0.001-0.004 AUROC below; 16384 and 65536 at 4e-3 are level; 16384 at 1e-3 "
      f"lose 0.03, 65536 at 8e-3 0.006), else {BASE_LR:g}")
    a("--hidden", type=int, default=d.hidden, help="hidden width of the GCCAD encoder")
    a("--layers", type=int, default=d.layers, help="GCCAD layers")
    a("--conv", default=d.conv, choices=["gcn", "gin", "sage", "gat"], help="node-update convolution")
    a("--readout", default=d.readout, choices=["memory", "mean", "sum", "max"], help="graph-update readout")
    a("--dropout", type=float, default=d.dropout, help="dropout")
    a("--recipe", default=d.recipe, choices=["auto", *RECIPES],
      help="defaults of --contrast, --loss, --tau, --swap-features and --ensemble (an option given explicitly wins): "
      "paper = METHOD.md section 4 (graph, contrastive, 0.1, 0, 1); local = the label-free recipe for a whole-graph "
      "store built with 'partitioning.build --k 1 --corruption-mix none' (local, logistic, 0.2, 0.15, 5); auto = "
      "local for a store without stored corruption, paper otherwise; --plant-cliques and --push-tails are 0 in both")
    a("--tau", type=float, default=d.tau, help="temperature of the loss (default: the recipe's)")
    a("--swap-features", type=float, default=d.swap_features,
      help="at every step, this fraction of each batch's normal nodes take another node's features (and the "
      "label abnormal), drawn afresh each step, beside the store's fixed corruptions; a small store repeats "
      "its few subgraphs hundreds of times, and a fixed corruption is then learnt by heart (default: the recipe's)")
    a("--plant-cliques", type=float, default=d.plant_cliques, metavar="FRACTION",
      help="a structural corruption drawn afresh at every step, beside --swap-features: this fraction of each "
      "batch's normal nodes is split into groups of --clique-size nodes, every pair in a group joined by an edge "
      "(a planted clique of unlike nodes), and labelled abnormal; a member keeps its features and links. "
      "It teaches the local contrast that a neighbourhood mixed with nodes from anywhere is suspect. Try 0.05 "
      "(with --swap-features 0.10) when the anomalies you expect are dense groups of unlike nodes: on a generated "
      "graph's planted cliques it lifted validation AUROC from 0.81 to 0.95 (test 0.886 -> 0.969), but on the shared "
      "real graphs it gained little or nothing and cost books and reddit, so the recipes leave it off (BENCHMARKS.md, "
      "session 20). Not for fraud rings, whose members look alike: there it scored 0.737 against the default's "
      "0.907; score with gcad_dist.score --context-hops 2 instead (0.958; session 47) (default: the recipe's, 0)")
    a("--push-tails", type=float, default=d.push_tails, metavar="FRACTION",
      help="a global corruption drawn afresh at every step, beside --swap-features: this fraction of each batch's "
      "normal nodes keep their links, and a tenth of their features (at least one) take values from the far 1%% "
      "tail of their columns (a global outlier, what IsolationForest sees); labelled abnormal (default: the "
      "recipe's, 0)")
    a("--degree-detrend", action=argparse.BooleanOptionalAction, default=d.degree_detrend,
      help="local contrast: when the model scores, remove the trend of its scores over log(1 + in-degree) (one "
      "least-squares line over the nodes with neighbours, no label), so that a node is compared with nodes of "
      "any degree on the same footing; recorded in the checkpoint, so gcad_dist.score and gcad_dist.finetune "
      "score the same way. Default: the recipe's, on for local (BENCHMARKS.md, session 46), off for paper")
    a("--loose-context", action=argparse.BooleanOptionalAction, default=d.loose_context,
      help="local contrast: when the model scores, also contrast each node with its loose context (its neighbours, "
      "each weighted by (1 + their common neighbours)^-2, so that links inside a dense group count little) and keep "
      "the larger of the two robust z-scores: fraud rings, whose alike members are most of one another's "
      "neighbours, then stand out, and groups of unlike nodes still do. Recorded in the checkpoint. Default: the "
      "recipe's, off (BENCHMARKS.md, session 48)")
    a("--ball-switch", action=argparse.BooleanOptionalAction, default=d.ball_switch,
      help="local contrast with --context-hops 1: when the model scores, it also scores each node against its two-hop "
      "ball, and uses that score when the ball makes a group of nodes stand out (robust z > 3: at least 1%% more of "
      "the nodes, and 1.15 times as many) that the neighbours hide, which is what alike anomalies that are one "
      "another's neighbours do (fraud rings, bursts of alike accounts); the choice is logged. No label is read. "
      "Recorded in the checkpoint. Default: the recipe's, on for local (it never chose the ball on a graph where the "
      "ball scored lower, BENCHMARKS.md, sessions 48 and 49), off for paper")
    a("--feature-view", action=argparse.BooleanOptionalAction, default=d.feature_view,
      help="local contrast: when the model scores, an isolation forest on the graph's raw features is fitted, and its "
      "robust z-score is added to the contrast's where the two agree on what stands out: where the forest ranks the "
      "contrast's top 1%% of nodes at AUROC >= 0.75 against the others, or where the graph's links say nothing "
      "about the features (the Spearman correlation of a column across an edge: its 90th percentile over the "
      "columns below 0.06, so that a node's context is a random sample of the graph: there each node's distance to "
      "its 5th nearest node in z-scored feature space is added instead of the forest, session 88; both measures and "
      "the choice are logged). It finds what a contrast with the neighbours hardly sees, nodes extreme in a few attributes "
      "(camouflaged fraud), and stays off where the forest's outliers are normal nodes. No label is read. Recorded "
      "in the checkpoint. Default: the recipe's, on for local (BENCHMARKS.md, sessions 50 and 52), off for paper")
    a("--signature-view", action=argparse.BooleanOptionalAction, default=d.signature_view,
      help="local contrast: when the model scores, the top 5%% of its score are taken as pseudo anomalies and a "
      "logistic regression on each node's features, its neighbours' mean features and its degree learns them, "
      "cross-fitted over 5 folds (no node is scored by a model that saw it). Where it tells them at AUROC >= 0.85, "
      "they share a signature, and its rank is added to the score's rank, so that the other nodes with that "
      "signature rise too; otherwise the score is kept. The fit and the choice are logged. No label is read. "
      "Recorded in the checkpoint. Default: the recipe's, on for local (BENCHMARKS.md, session 60), off for paper")
    a("--context-hops", type=int, choices=(1, 2), default=d.context_hops,
      help="local contrast: each node is contrasted with the mean of its neighbours (1) or of its two-hop ball (2: "
      "its neighbours and up to 10 sampled neighbours of each, itself excluded; minibatches then sample two hops). "
      "On training and validation labels the ball scored higher on inj_cora (ten seeds: +0.021 AUROC, AUPRC 0.29 "
      "-> 0.40, ahead on every seed), where a node's few neighbours make a noisy context, about level on books "
      "(+0.008), and lower on reddit (-0.029, 3 seeds), tolokers (-0.013) and a generated graph whose anomalies "
      "differ from their direct neighbours (-0.029), so no recipe uses it; it is also slower on dense graphs "
      "(BENCHMARKS.md, session 35) (default: 1)")
    a("--clique-size", type=int, nargs=2, default=list(d.clique_size), metavar=("MIN", "MAX"),
      help="members of a planted clique (--plant-cliques), drawn uniformly from MIN..MAX")
    a("--ensemble", type=int, default=d.ensemble,
      help="local contrast: train this many models side by side in one checkpoint (each its own input projection "
      "and head, and its own draw of --swap-features at every step, on the same minibatches) and score with the "
      "mean of their scores; one model's score varies from seed to seed, and the mean of five is steadier and "
      "better (paper: 1, local: 5) (default: the recipe's)")
    a("--contrast", default=d.contrast, choices=list(CONTRASTS),
      help="what each node is contrasted with: graph = its subgraph's context q (the paper's); neighbors = the "
      "mean of its neighbours' embeddings; ego = its own features' projection against that neighbour mean "
      "(local anomalies: a node unlike its neighbours; pair with --corruption-mix features at build); local = "
      "its own features' projection against the mean of its neighbours' (no message passing on either side; "
      "--recipe local; the GCCAD layers are then skipped) (default: the recipe's)")
    a("--loss", default=d.loss, choices=["contrastive", "logistic"],
      help="contrastive = the paper's: each normal node's agreement with its context ranked against every "
      "abnormal node's of its graph; logistic = each node's own agreement, BCE(cos / tau, normal) "
      "(default: the recipe's)")
    a("--jump", default=d.jump, choices=["last", "cat"],
      help="graph contrast: last = contrast the last layer's embedding with the context (the paper's); cat = "
      "jumping knowledge, every layer's embedding and context concatenated (gcad_dist.train's default for "
      "supervised GCCAD; not measured to help pre-training, BENCHMARKS.md)")
    a("--memory-momentum", type=float, default=d.memory_momentum,
      help="EMA momentum of the per-subgraph context memory on large subgraphs (0 = no memory)")
    a("--backend", default=d.backend, help="neighbour-sampling backend: auto, pyg-lib, torch-sparse, builtin")
    a("--sample-on", default=d.sample_on, choices=["auto", "cpu", "gpu"],
      help="where a GPU worker samples its minibatches: gpu = on its GPU (the subgraph's CSR and features are "
      "copied there once; built-in sampler; the copies of the subgraphs kept by --cache-gb stay there too), cpu = "
      "on the host, then copied over; auto = gpu when training on GPUs with --backend auto or builtin, else cpu")
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
    a("--placement-strategy", default=d.placement_strategy, choices=PLACEMENT_STRATEGIES,
      help="placement of the workers on the cluster's nodes (Ray placement group strategy): PACK fills a node "
      "first, SPREAD puts them on as many nodes as it can")
    a("--collective-timeout", type=float, default=d.collective_timeout,
      help="seconds a worker waits in a collective (gloo/NCCL all-reduce, the DDP gradient sync) for a peer "
      "before failing, e.g. when a host's network is cut and Ray has not noticed; must exceed the longest "
      "gap between two steps of any worker (checkpoint writes, the first reads of the store)")
    a("--precision", default=d.precision, choices=list(PRECISIONS),
      help="bf16: forward pass and loss under bf16 autocast (GPUs, and CPUs with native bf16; elsewhere fp32 "
      "with a warning); the per-edge kernels, the context sums, the weights and the optimizer stay fp32")
    a("--resume", action="store_true", help="continue the run in --out from its last checkpoint")
    a("--overwrite", action="store_true", help="delete a previous run in --out and start over")
    a("--seed", type=int, default=d.seed, help="random seed")
    a("--verbose", action="store_true",
      help="debug logging, and Ray's own output (worker start-up, Ray Train messages, the workers' log lines) "
      "on the terminal too (always in <out>/ray.log)")
    a("--no-progress", dest="progress", action="store_false",
      help="no progress line during an epoch (the per-epoch summary lines stay)")
    return p


def parse_config(argv: list[str] | None) -> PretrainConfig:
    args = vars(build_parser().parse_args(argv))
    names = {f.name for f in fields(PretrainConfig)}
    args["clique_size"] = tuple(args["clique_size"])
    return PretrainConfig(**{k: v for k, v in args.items() if k in names})


def validate(cfg: PretrainConfig) -> dict:
    """Check options and the store before starting Ray; returns facts about the store."""
    checks = [
        (cfg.workers >= 1, "--workers", "must be >= 1"),
        (cfg.gpus_per_worker >= 0, "--gpus-per-worker", "must be >= 0"),
        (cfg.cpus_per_worker >= 1, "--cpus-per-worker", "must be >= 1"),
        (cfg.epochs >= 1, "--epochs", "must be >= 1"),
        (cfg.batch_size is None or cfg.batch_size >= 1, "--batch-size", "must be >= 1"),
        (cfg.sample_threshold >= 1, "--sample-threshold", "must be >= 1"),
        (cfg.graph_batch_nodes >= 1, "--graph-batch-nodes", "must be >= 1"),
        (cfg.max_degree >= 0, "--max-degree", "must be >= 0 (0 = every link)"),
        (cfg.dense_links >= 0, "--dense-links", "must be >= 0"),
        (cfg.lr is None or cfg.lr > 0, "--lr", "must be > 0"),
        (cfg.hidden >= 1 and cfg.layers >= 1, "--hidden/--layers", "must be >= 1"),
        (0 <= cfg.dropout < 1, "--dropout", "must be in [0, 1)"),
        (cfg.recipe in ("auto", *RECIPES), "--recipe", f"must be auto or one of {', '.join(RECIPES)}"),
        (cfg.tau is None or cfg.tau > 0, "--tau", "must be > 0"),
        (cfg.swap_features is None or 0 <= cfg.swap_features < 1, "--swap-features", "must be in [0, 1)"),
        (cfg.plant_cliques is None or 0 <= cfg.plant_cliques < 1, "--plant-cliques", "must be in [0, 1)"),
        (cfg.push_tails is None or 0 <= cfg.push_tails < 1, "--push-tails", "must be in [0, 1)"),
        (len(cfg.clique_size) == 2 and 2 <= cfg.clique_size[0] <= cfg.clique_size[1], "--clique-size",
         f"must be MIN MAX with 2 <= MIN <= MAX, got {' '.join(map(str, cfg.clique_size))}"),
        (cfg.ensemble is None or cfg.ensemble >= 1, "--ensemble", "must be >= 1"),
        (0 <= cfg.memory_momentum < 1, "--memory-momentum", "must be in [0, 1)"),
        (cfg.cache_gb >= 0 and cfg.prefetch >= 0, "--cache-gb/--prefetch", "must be >= 0"),
        (cfg.checkpoint_every >= 0, "--checkpoint-every", "must be >= 0"),
        (cfg.checkpoint_interval >= 0, "--checkpoint-interval", "must be >= 0"),
        (cfg.min_steps_per_epoch >= 0, "--min-steps-per-epoch", "must be >= 0"),
        (cfg.max_steps_per_epoch >= 0, "--max-steps-per-epoch", "must be >= 0"),
        (cfg.keep_checkpoints >= 1, "--keep-checkpoints", "must be >= 1"),
        (cfg.max_failures >= -1, "--max-failures", "must be >= -1"),
        (cfg.placement_strategy in PLACEMENT_STRATEGIES, "--placement-strategy",
         f"must be one of {', '.join(PLACEMENT_STRATEGIES)}"),
        (cfg.collective_timeout > 0, "--collective-timeout", "must be > 0"),
        (cfg.precision in PRECISIONS, "--precision", f"must be one of {', '.join(PRECISIONS)}"),
        (not (cfg.resume and cfg.overwrite), "--resume", "cannot be combined with --overwrite"),
        (cfg.sample_on in ("auto", "cpu", "gpu"), "--sample-on", "must be auto, cpu or gpu"),
        (cfg.sample_on != "gpu" or cfg.gpus_per_worker > 0, "--sample-on gpu",
         "needs GPU workers (--gpus-per-worker > 0)"),
        (cfg.sample_on != "gpu" or cfg.backend in ("auto", "builtin"), "--sample-on gpu",
         f"needs the built-in sampler (--backend auto or builtin; {cfg.backend} samples on the CPU only)"),
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
    corrupted = reader.num_corrupted > 0
    apply_recipe(cfg, corrupted)
    auto = [name for name in ("batch_size", "lr") if getattr(cfg, name) is None]
    apply_auto_batch(cfg, int(min(reader.node_counts)))
    if auto:
        over = f" ({step_seeds(cfg)} over {cfg.workers} workers)" if cfg.workers > 1 else ""
        log.info("%s (auto): %d seeds a step per worker%s, learning rate %g",
                 " and ".join(f"--{a.replace('_', '-')}" for a in auto), cfg.batch_size, over, cfg.lr)
    from gcad_dist.distributed.train_loop import shard_config

    dense = int(capped_whole(reader.node_counts, reader.edge_counts, shard_config(cfg)).sum())
    if dense:
        log.info("%d subgraph(s) trained whole hold more than --dense-links (%d) links: each step averages a node's "
                 "context over at most about --max-degree (%d) of its in-neighbours, drawn afresh, and an epoch counts "
                 "those links only (scoring uses every link)", dense, cfg.dense_links, cfg.max_degree)
    idle = idle_workers(reader.node_counts, cfg.workers, cfg.sample_threshold)
    if shards_targets(cfg, reader.node_counts, cfg.workers):
        log.info("--workers %d on a whole-graph store: each worker takes a share of about %d of its %d nodes at every "
                 "step (their contexts and loss terms; --no-shard-targets: every worker every node)", cfg.workers,
                 -(-int(reader.node_counts[0]) // cfg.workers), int(reader.node_counts[0]))
    elif idle:
        small = cfg.workers - idle
        log.warning("--workers %d: the store has %d subgraph(s) of at most --sample-threshold (%d) nodes, so %d worker(s) "
                    "have none of their own and repeat another's whole-subgraph steps, adding no data to them%s",
                    cfg.workers, small, cfg.sample_threshold, idle,
                    "; a whole-graph store this small trains as well on --workers 1" if len(reader) == 1 else "")
    kept = reader.manifest.get("partition", {}).get("edges_kept")
    if cfg.contrast == "local" and kept is not None and kept < 0.999:
        log.warning("--contrast local on a store whose parts keep %.0f%% of the graph's edges: each node's context is "
                    "the part of its neighbourhood inside its part (the local recipe was measured on whole-graph "
                    "stores, 'partitioning.build --k 1'; BENCHMARKS.md, session 10)", 100 * kept)
    if cfg.degree_detrend and cfg.contrast != "local":
        log.warning("--degree-detrend: applies to the local contrast's score only (this run's contrast is %s); "
                    "ignored", cfg.contrast)
    if cfg.loose_context and (cfg.contrast != "local" or cfg.context_hops != 1):
        raise UsageError("--loose-context: a second context of the local contrast with --context-hops 1 (this run: "
                         f"--contrast {cfg.contrast} --context-hops {cfg.context_hops}); leave it off")
    if cfg.ball_switch and (cfg.contrast != "local" or cfg.context_hops != 1 or cfg.loose_context):
        raise UsageError("--ball-switch: a choice between the neighbours and the two-hop ball at scoring, for the "
                         f"local contrast with --context-hops 1 and without --loose-context (this run: --contrast "
                         f"{cfg.contrast} --context-hops {cfg.context_hops}"
                         f"{' --loose-context' if cfg.loose_context else ''}); leave it off")
    if cfg.signature_view and cfg.contrast != "local":
        raise UsageError(f"--signature-view: joins the local contrast's score (this run's contrast is {cfg.contrast}); "
                         "leave it off")
    if cfg.feature_view and cfg.contrast != "local":
        raise UsageError(f"--feature-view: joins the local contrast's score (this run's contrast is {cfg.contrast}); "
                         "leave it off")
    if cfg.context_hops != 1 and cfg.contrast != "local":
        raise UsageError(f"--context-hops {cfg.context_hops}: the two-hop ball is a context of the local contrast "
                         f"only (this run's contrast is {cfg.contrast}); pass --contrast local or --recipe local")
    if cfg.ensemble > 1 and cfg.contrast != "local":
        raise UsageError(f"--ensemble {cfg.ensemble}: an ensemble is trained for the local contrast only (this run's "
                         f"contrast is {cfg.contrast}); leave --ensemble at its default")
    if cfg.swap_features == 0 and not cfg.plant_cliques and not cfg.push_tails and not corrupted:
        raise UsageError(f"--swap-features: {cfg.store} holds no corrupted node (built with --corruption-mix none), "
                         "so there is nothing to contrast without corruptions drawn at every step: pass "
                         "--swap-features 0.15, or leave it and --recipe at their defaults")
    if cfg.plant_cliques and reader.manifest.get("source", {}).get("multi_graph"):
        raise UsageError(f"--plant-cliques: {cfg.store} holds many small graphs, and a clique planted in a batch of "
                         "them would join nodes of different graphs; use it on a store of one graph")
    run_dir = Path(cfg.out) / RUN_NAME
    if cfg.resume and not run_dir.exists():
        raise UsageError(f"--resume: {cfg.out} holds no run to resume")
    if cfg.resume:  # every checkpoint must be ours (read weights_only) and hold this run's model config
        from gcad_dist.checkpoint import check_resume
        from gcad_dist.distributed.train_loop import model_config

        check_resume(run_dir, asdict(model_config(cfg, reader.num_features)))
    if run_dir.exists() and not (cfg.resume or cfg.overwrite):
        raise UsageError(f"--out: {cfg.out} already holds a run; pass --resume to continue it or --overwrite")
    return {"subgraphs": len(reader), "nodes": int(reader.node_counts.sum()),
            "edges": int(reader.edge_counts.sum()) // 2, "features": reader.num_features,
            "normalize": reader.feature_normalization()}


def _start_ray(cfg: PretrainConfig) -> bool:
    """Join a cluster or start a private local Ray (with the dashboard Ray Train needs); True when this
    process started it (:func:`gcad_dist.distributed.ray_runtime.start_ray`)."""
    from gcad_dist.distributed.ray_runtime import start_ray

    return start_ray(cfg.address, cfg.workers * cfg.cpus_per_worker, dashboard=True,
                     what=f"{cfg.workers} worker(s)")


class TrainingFailed(RuntimeError):
    """Training failed for good (worker-group failures beyond --max-failures); ``str`` is one line."""


class RayOutput:
    """Ray's own output goes to ``<out>/ray.log``; with ``verbose`` to the terminal as well.

    Three sources: the driver's ``ray`` logger (and Python warnings raised while the run is set up);
    the lines Ray forwards from its worker processes (Ray Train's controller, the training workers, the
    job's actors), which Ray hands to a dispatcher in the driver; and the cluster's error messages (a
    dead raylet's last log lines, a node marked dead), which Ray prints through
    ``ray._private.worker.print_to_stdstream``. The last two are private Ray APIs: if they change, the
    lines stay on the terminal. ``install`` before ``ray.init``, ``forward`` after it, ``close`` at the
    end (restores everything)."""

    def __init__(self, path: Path, verbose: bool):
        self.path, self.verbose = path, verbose
        self.file = open(path, "a", buffering=1, encoding="utf-8")  # noqa: SIM115 - closed in close()
        self.handler = logging.StreamHandler(self.file)
        self.handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s", "%H:%M:%S"))
        self._saved: list[tuple[logging.Logger, list, bool]] = []
        self._forwarding = False
        self._removed: list = []
        self._orig_print = None

    def install(self) -> None:
        logging.captureWarnings(True)
        for name in ("ray", "py.warnings"):
            lg = logging.getLogger(name)
            self._saved.append((lg, list(lg.handlers), lg.propagate))
            if not self.verbose:
                for h in list(lg.handlers):
                    lg.removeHandler(h)
                lg.propagate = False
            lg.addHandler(self.handler)

    def _write(self, data: dict) -> None:
        who = data.get("actor_name") or data.get("task_name")
        prefix = f"{time.strftime('%H:%M:%S')} ({who + ' ' if who else ''}pid={data.get('pid')}, ip={data.get('ip')}) "
        with contextlib.suppress(ValueError):  # a line that arrives after close()
            self.file.write("".join(f"{prefix}{line}\n" for line in data.get("lines", [])))

    def forward(self) -> None:
        """Route the worker output Ray sends this driver into the log file (instead of the terminal)."""
        try:
            from ray._private.worker import global_worker_stdstream_dispatcher as disp

            if not self.verbose:
                self._removed = [pair for pair in disp.handlers if pair[0] == "ray_print_logs"]
                disp.remove_handler("ray_print_logs")
            disp.add_handler("gcad_ray_log", self._write)
            self._forwarding = True
            # Ray's error messages (e.g. a raylet's last 20 log lines when its node dies) reach the terminal
            # through this function directly, not through the dispatcher.
            import ray._private.worker as rw

            self._orig_print = rw.print_to_stdstream

            def print_to_stdstream(data, ignore_prefix: bool) -> None:
                self._write(data)
                if self.verbose:
                    self._orig_print(data, ignore_prefix)

            rw.print_to_stdstream = print_to_stdstream
        except Exception as e:  # noqa: BLE001 - a private Ray API; without it the lines stay on the terminal
            log.debug("cannot route Ray's worker output to %s: %s", self.path, e)

    def close(self, ray_still_up: bool = False) -> None:
        """Undo ``install`` / ``forward``; ``ray_still_up``: Ray was not ours and keeps running, so its
        terminal handler goes back (after a ``ray.shutdown`` the next ``ray.init`` adds a fresh one)."""
        if self._forwarding:
            with contextlib.suppress(Exception):
                from ray._private.worker import global_worker_stdstream_dispatcher as disp

                disp.remove_handler("gcad_ray_log")
                if self._orig_print is not None:
                    import ray._private.worker as rw

                    rw.print_to_stdstream = self._orig_print
                if ray_still_up:
                    for name, handler in self._removed:
                        disp.add_handler(name, handler)
        for lg, handlers, propagate in self._saved:
            lg.removeHandler(self.handler)
            for h in handlers:
                if h not in lg.handlers:
                    lg.addHandler(h)
            lg.propagate = propagate
        logging.captureWarnings(False)
        self.file.close()


class RunMonitor(threading.Thread):
    """Follows ``<out>/events.jsonl`` (written by rank 0) and Ray's node table while ``fit`` runs.

    Prints where each worker group runs, a restart and the step it resumed from, a progress line per
    epoch (steps, seeds/s, loss, ETA: a tqdm bar on a terminal, else a log line at most every 30 s) and
    the epoch summaries; and notices nodes that die (``host lost: ...``), which ``lost_hosts`` keeps
    for the error message of a failed run."""

    def __init__(self, events: Path, progress: bool, poll_s: float = 0.5, nodes_every_s: float = 2.0):
        super().__init__(name="gcad-run-monitor", daemon=True)
        self.events, self.progress = events, progress
        self.poll_s, self.nodes_every_s = poll_s, nodes_every_s
        self.offset = events.stat().st_size if events.exists() else 0
        self.stop_event = threading.Event()
        self.lost_hosts: list[str] = []
        self.last_checkpoint: dict | None = None
        self.rank_ips: dict[int, str] = {}
        self._alive: dict[str, str] = {}
        self._bar = None
        self._tty = progress and sys.stderr.isatty()
        self._last_line = 0.0
        self._epoch_start: tuple[float, int] | None = None

    # -- events
    def _read(self) -> list[dict]:
        try:
            with open(self.events, "rb") as f:
                f.seek(self.offset)
                data = f.read()
        except OSError:
            return []
        end = data.rfind(b"\n") + 1  # only whole lines
        self.offset += end
        out = []
        for line in data[:end].splitlines():
            with contextlib.suppress(ValueError):
                out.append(json.loads(line))
        return out

    def _close_bar(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None

    def _handle(self, e: dict) -> None:
        kind = e.get("event")
        if kind == "start":
            self._close_bar()
            self.rank_ips = {int(r["rank"]): r["ip"] for r in e.get("ranks", [])}
            where = ", ".join(f"rank {r['rank']} on {r['ip']}" for r in e.get("ranks", []))
            if e.get("restarts"):
                log.warning("worker group restarted (restart %d): resuming at step %d (epoch %d, position %d) "
                            "from the last checkpoint; %s", e["restarts"], e["step"], e["epoch"], e["position"], where)
            else:
                log.info("worker group: %d worker(s): %s", e.get("world", 0), where)
            self._epoch_start = None
        elif kind == "progress":
            self._progress(e)
        elif kind == "checkpoint":
            self.last_checkpoint = e
            log.debug("checkpoint at step %d", e["step"])
        elif kind == "epoch":
            self._close_bar()
            self._epoch_start = None
            log.info("epoch %d/%d: step %d loss %.4f (con %.4f link %.4f) %.0f seeds/s, %.1f%% waiting for data, "
                     "%.1f s", e["epoch"] + 1, e.get("epochs", 0), e["step"], e["loss"], e["con"], e["link"],
                     e["seeds_per_s"], 100 * e["wait_frac"], e["time_s"])

    def _progress(self, e: dict) -> None:
        if not self.progress:
            return
        total, pos, now = int(e.get("steps_per_epoch") or 0), int(e["position"]), time.time()
        if self._epoch_start is None:
            self._epoch_start = (now, pos)
        t0, p0 = self._epoch_start
        rate = (pos - p0) / max(now - t0, 1e-9)
        if self._tty:
            from tqdm.auto import tqdm

            if self._bar is None:
                self._bar = tqdm(total=total or None, initial=pos, desc=f"epoch {e['epoch'] + 1}", unit="step",
                                 leave=False, file=sys.stderr, dynamic_ncols=True,
                                 disable=bar_disable())
            self._bar.update(pos - self._bar.n)
            self._bar.set_postfix(loss=f"{e['loss']:.4f}", seeds_s=f"{e['seeds_per_s']:.0f}", refresh=True)
        elif now - self._last_line >= 30:
            self._last_line = now
            eta = f"{(total - pos) / rate:.0f} s" if rate > 0 and total else "?"
            log.info("epoch %d: step %d/%d, %.0f seeds/s, loss %.4f, ETA %s", e["epoch"] + 1, pos, total,
                     e["seeds_per_s"], e["loss"], eta)

    # -- nodes
    def _check_nodes(self) -> None:
        import ray

        try:
            nodes = ray.nodes()
        except Exception:  # noqa: BLE001 - the GCS may be busy; try again next time
            return
        for n in nodes:
            nid, ip = n.get("NodeID", "?"), n.get("NodeManagerAddress", "?")
            if n.get("Alive"):
                self._alive[nid] = ip
            elif nid in self._alive:
                del self._alive[nid]
                reason = n.get("DeathReasonMessage") or n.get("DeathReason") or "no reason given"
                self.lost_hosts.append(ip)
                self._close_bar()
                log.warning("host lost: Ray node %s (%s) is dead: %s", ip, nid[:12], str(reason).splitlines()[0])

    def run(self) -> None:
        next_nodes = 0.0
        while not self.stop_event.is_set():
            for e in self._read():
                self._handle(e)
            if time.time() >= next_nodes:
                next_nodes = time.time() + self.nodes_every_s
                self._check_nodes()
            self.stop_event.wait(self.poll_s)
        for e in self._read():
            self._handle(e)
        self._close_bar()

    def stop(self) -> None:
        self.stop_event.set()
        self.join(timeout=10)

    def wait_for_lost_host(self, timeout_s: float) -> None:
        """After a failure: give Ray up to ``timeout_s`` to declare a silent node dead, so that the
        error can name it (a killed peer fails a collective at once, seconds before that)."""
        t0 = time.time()
        while not self.lost_hosts and time.time() - t0 < timeout_s:
            self._check_nodes()
            if not self.lost_hosts:
                time.sleep(1)


def _failure_line(err: Exception, cfg: PretrainConfig, monitor: RunMonitor | None, out: Path) -> str:
    """One line for a run that failed for good: which host was lost, which rank failed how, where to resume."""
    failures = getattr(err, "worker_failures", None) or {}
    ips = monitor.rank_ips if monitor else {}
    if failures:
        parts = []
        for rank, exc in sorted(failures.items()):
            lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
            # The last line of a traceback says what happened; Ray's "health check failed" says it first.
            what = lines[0] if lines and "health check" in lines[0] else (lines[-1] if lines else type(exc).__name__)
            parts.append(f"rank {rank}{' on ' + ips[rank] if rank in ips else ''}: {what[:160]}")
        what = "; ".join(parts)
    else:
        what = next((ln.strip() for ln in str(err).splitlines() if ln.strip() and "Training failed" not in ln),
                    type(err).__name__)[:300]
    lost = sorted(set(monitor.lost_hosts)) if monitor else []
    where = f"host {', '.join(lost)} lost; " if lost else ""
    ck = monitor.last_checkpoint if monitor else None
    resume = (f"last checkpoint at step {ck['step']} (continue with --resume --out {out})" if ck
              else "no checkpoint written")
    tries = "unlimited" if cfg.max_failures < 0 else str(cfg.max_failures)
    return f"training failed (--max-failures {tries} used up): {where}{what}; {resume}"


def finished_run(out: Path, cfg: PretrainConfig) -> dict | None:
    """The summary of the run in ``out`` if it finished with ``cfg``'s settings and epochs (its ``metrics.json`` and
    ``final/model.pt`` written), else None: ``--resume`` then has nothing left to do."""
    try:
        metrics = json.loads((out / "metrics.json").read_text())
    except (OSError, ValueError):
        return None
    if not (out / "final" / "model.pt").exists():
        return None
    runtime = {"resume", "overwrite", "verbose", "progress", "address", "out", "store"}
    saved = {k: v for k, v in metrics.get("config", {}).items() if k not in runtime}
    now = {k: v for k, v in json.loads(json.dumps(asdict(cfg), default=str)).items() if k not in runtime}
    return metrics.get("summary") if saved == now else None


def run(cfg: PretrainConfig) -> dict:
    """Validate, start/join Ray, train, write ``final/`` and ``metrics.json``; returns the summary."""
    info = validate(cfg)
    out = Path(cfg.out).resolve()
    if cfg.resume:
        done = finished_run(out, cfg)
        if done is not None:
            log.info("%s: this run already finished all %d epoch(s) (model in %s); nothing to resume (--overwrite "
                     "trains it again, --epochs N with more epochs continues it)", out, cfg.epochs, done["checkpoint"])
            return done
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
    from gcad_dist.distributed.ray_runtime import stop_ray
    from gcad_dist.distributed.train_loop import train_loop_per_worker

    events = out / EVENTS
    if not cfg.resume:
        events.unlink(missing_ok=True)
    ray_out = RayOutput(out / RAY_LOG, cfg.verbose)
    ray_out.install()
    monitor: RunMonitor | None = None
    started = False
    try:
        started = _start_ray(cfg)
        ray_out.forward()
        log.info("Ray's own output goes to %s%s", out / RAY_LOG, "" if cfg.verbose else " (--verbose: here too)")
        use_gpu = cfg.gpus_per_worker > 0
        resources = {"CPU": cfg.cpus_per_worker}
        if use_gpu:
            resources["GPU"] = cfg.gpus_per_worker
        loop_config = {"pretrain": asdict(cfg), "verbose": cfg.verbose, "events_path": str(events)}
        if os.environ.get("GCAD_STEP_DELAY_S"):
            loop_config["step_delay_s"] = float(os.environ["GCAD_STEP_DELAY_S"])
        if os.environ.get("GCAD_FAIL_AT_STEP"):
            loop_config["fail_at_step"] = int(os.environ["GCAD_FAIL_AT_STEP"])
            loop_config["fail_marker"] = os.environ.get("GCAD_FAIL_MARKER", str(out / ".fail_marker"))
        trainer = TorchTrainer(
            train_loop_per_worker,
            train_loop_config=loop_config,
            torch_config=TorchConfig(backend="nccl" if use_gpu else "gloo",
                                     timeout_s=int(math.ceil(cfg.collective_timeout))),
            scaling_config=ray.train.ScalingConfig(
                num_workers=cfg.workers, use_gpu=use_gpu, resources_per_worker=resources,
                placement_strategy=cfg.placement_strategy,
            ),
            run_config=ray.train.RunConfig(
                name=RUN_NAME,
                storage_path=str(out),
                failure_config=ray.train.FailureConfig(max_failures=cfg.max_failures),
                checkpoint_config=ray.train.CheckpointConfig(num_to_keep=cfg.keep_checkpoints),
            ),
        )
        monitor = RunMonitor(events, cfg.progress)
        monitor.start()
        try:
            result = trainer.fit()
        except ray.train.TrainingFailedError as e:
            monitor.stop()
            if any(w in str(e) or any(w in str(x) for x in (getattr(e, "worker_failures", None) or {}).values())
                   for w in PEER_LOST_SIGNS):
                monitor.wait_for_lost_host(LOST_HOST_WAIT_S)
            raise TrainingFailed(_failure_line(e, cfg, monitor, out)) from e
        finally:
            monitor.stop()
        if result.checkpoint is None:
            raise RuntimeError("training finished without a checkpoint")
        final = out / "final"
        with result.checkpoint.as_directory() as d:
            final.mkdir(parents=True, exist_ok=True)
            shutil.copy2(Path(d) / "model.pt", final / "model.pt")
            state = load_train_state(d) or {}
    finally:
        if started:
            stop_ray()
        ray_out.close(ray_still_up=not started)
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
    try:
        run(cfg)
    except TrainingFailed as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    run_cli(main)
