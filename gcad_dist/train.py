"""Supervised training on one labelled graph: ``python -m gcad_dist.train``.

Reads a labelled graph (``.npz`` / ``.pt`` / folder, see :func:`partitioning.io.load_graph`),
splits it (the dataset's own split masks if it has them, else a seeded stratified 40/20/40 split),
using only the nodes whose label is known when the graph is partly labelled (``y = -1`` / ``label_mask``:
unlabelled nodes pass messages but are in no split, no loss and no metric),
trains GCCAD (or an ablation, or a baseline) full-batch, keeps the ``--snapshots`` evaluations with the best
validation AUPRC and scores with the mean of their scores (:mod:`gcad_dist.model.snapshots`), and writes to
``--out``. GCCAD's default ``--contrast auto`` trains three candidates with the same seed (the paper's graph
contrast, the local ``ego`` one, and the graph contrast with the graph norm), keeps every candidate that a paired
bootstrap over the validation nodes does not place clearly below the best one (:mod:`gcad_dist.selection`), and
scores with the mean of the kept candidates' standardised scores
(:mod:`gcad_dist.model.candidate_ensemble`). With ``--pretrain`` (:mod:`gcad_dist.pretrain_first`) the run
pre-trains without labels on a one-part store of the graph and fine-tunes from that checkpoint instead, written to the
same places (the store and the label-free checkpoint under ``<out>/pretrain``). Written:

* ``model.pt``       checkpoint (:func:`gcad_dist.checkpoint.save_model`; ``extra["model"]`` is the kind; the
  snapshot states and the kept candidates, which :func:`gcad_dist.score.load_checkpoint_model` loads as one
  ensemble)
* ``metrics.json``   config, label counts, split sizes, selected epoch, validation and test metrics, history
* ``training_curves.png``, ``roc_pr_test.png``
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import shlex
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch

from gcad_dist.allocator import retain_freed_memory
from gcad_dist.cli import ArgumentParser, DefaultsHelpFormatter, UsageError, add_runtime_options, run_cli, setup_logging
from gcad_dist.fit_state import ResumeMismatch
from gcad_dist.fit_state import abandon as abandon_run_state
from gcad_dist.fit_state import finish as finish_run_state
from gcad_dist.forest_view import FOREST_COLUMNS, FOREST_MODES, describe_choice
from gcad_dist.pretrain_first import PRETRAIN_MODES
from gcad_dist.provenance import environment
from gcad_dist.supervised import FitResult, SupervisedConfig, fit_supervised
from partitioning.graph import describe_labels
from partitioning.features import NORMALIZE_CHOICES, POWER_ALL_ROWS

log = logging.getLogger("gcad_dist.train")

MODELS = ("gccad", "mlp", "gcn", "gin", "sage", "gat", "bwgnn")
CONVS = ("gin", "gcn", "sage", "gat")
ABLATIONS = ("none", "ce", "no-link-loss", "no-global", "no-edge-update")
SCORE_SPACES = ("encoder", "projection")
LINK_EVALS = ("expected", "threshold")
#: :func:`keep_candidates`' ``weighting`` (gcad_dist.finetune's ``--candidate-weights``): equal = the plain mean of the
#: kept candidates; lift = their mean weighted by each one's validation AUPRC lift over the base rate
WEIGHTINGS = ("equal", "lift")
#: ``keep_candidates(few=...)``: with fewer validation anomalies than the keep rule needs (1 to 9), ``average`` keeps
#: every candidate (as before); ``above-chance`` drops a candidate whose validation AUROC is at or below 0.5;
#: ``weighted``: those above chance, weighed halfway between alike and their validation AUROC's lift over 0.5
#: (session 76)
FEW_VALIDATION_MODES = ("average", "above-chance", "weighted")
CONTRASTS = ("graph", "neighbors", "ego")  # gcad_dist.model.gccad.CONTRASTS, without importing the model here
JUMPS = ("last", "cat", "cat-local")  # gcad_dist.model.gccad.JUMPS
NORMS = ("layer", "graph")  # gcad_dist.model.node_update.NORMS


def resolve_jump(model: str, ablation: str = "none", jump: str | None = None) -> str:
    """``--jump`` as given, else the default: jumping knowledge (``cat``) for the full GCCAD model and the
    paper's last-layer embedding for its ablations (``gccad-ce`` included), which stay controlled comparisons
    with the paper's model, as with ``--contrast auto``."""
    if jump is not None:
        return jump
    return "cat" if model == "gccad" and ablation == "none" else "last"
AUTO_CONTRASTS = ("graph", "ego")  # --contrast auto: both trained; ego kept only if clearly better on validation


def auto_candidates(norm: str = "layer") -> tuple[tuple[str, str], ...]:
    """``--contrast auto``'s candidates as (contrast, norm), the primary first: the graph and ego contrasts with
    ``norm``, and with LayerNorm (the default) also the graph contrast with the graph norm, which keeps the
    nodes' relative sizes (BENCHMARKS.md, session 17: +0.05 validation AUPRC on inj_cora, -0.09 on tolokers)."""
    pairs = tuple((c, norm) for c in AUTO_CONTRASTS)
    return pairs + ((("graph", "graph"),) if norm == "layer" else ())


def candidate_name(model_cfg: Any, norm: str = "layer") -> str:
    """A candidate's name in the selection record: its contrast, plus the norm where it differs from ``norm``."""
    n = model_cfg.norm
    return model_cfg.contrast if n == norm else f"{model_cfg.contrast} ({n} norm)"


@dataclass
class TrainConfig:
    """Settings of ``python -m gcad_dist.train`` (one field per command-line option)."""

    graph: str
    out: str
    model: str = "gccad"
    conv: str = "gin"
    ablation: str = "none"
    score_space: str = "projection"
    link_eval: str = "expected"
    contrast: str = "auto"
    # the full model: trees on [x, neighbours' mean x, degree] (the forest also the 2-hop mean; a random forest and
    # gradient-boosted trees, their ranks averaged) blended by rank where validation does not lean towards GCCAD alone
    # (gcad_dist.forest_view); "off": GCCAD alone
    forest: str = "auto"
    # the fewest validation anomalies the forest view's join test runs on (below: GCCAD alone); below 10 a joined
    # forest blends, never scores alone (session 77)
    forest_min_anomalies: int = 10
    # the trees' inputs (FOREST_COLUMNS): "local" adds neighbour cosine and the local kNN distance (session 89; the
    # default since session 90), "none" the trees' inputs before it
    forest_columns: str = "local"
    # --contrast auto: a contrast the keep rule dropped rejoins where the kept ones' mean with it ranks the validation
    # anomalies better (gcad_dist.selection.rejoin, as gcad_dist.finetune --rejoin; session 75)
    rejoin: bool = False
    # --contrast auto with 1-9 validation anomalies: FEW_VALIDATION_MODES ("average": every contrast alike; session 76's
    # "weighted" met its own rule but not the guard on fine-tuning, whose graph and scratch candidates follow this)
    few_anomalies: str = "average"
    # PRETRAIN_MODES (gcad_dist.pretrain_first): pre-train without labels and fine-tune, in this command; "auto": where
    # the fit holds fewer than FEW_ANOMALIES labelled training anomalies; "off": from scratch always (before session 80)
    pretrain: str = "auto"
    jump: str | None = None  # None: "cat" for the full GCCAD model, "last" (the paper's) for its ablations
    norm: str = "layer"  # node-update normalisation, every model: "layer" (LayerNorm) | "graph" (GraphScaleNorm)
    hidden: int = 64
    layers: int = 2
    dropout: float = 0.1
    # dropout on the input features during training; None = the model's default (resolve_input_dropout)
    input_dropout: float | None = None
    # two more input columns: how many of a node's neighbours are labelled anomalies of the train split (the masked
    # label trick, gcad_dist.data.label_inputs); None = the model's default (resolve_label_inputs)
    label_inputs: bool | None = None
    epochs: int = SupervisedConfig.epochs
    lr: float = SupervisedConfig.lr
    weight_decay: float = SupervisedConfig.weight_decay
    eval_every: int = SupervisedConfig.eval_every
    patience: int = SupervisedConfig.patience
    snapshots: int = SupervisedConfig.snapshots
    max_degree: int = SupervisedConfig.max_degree
    class_weight: bool = SupervisedConfig.class_weight
    normalize: str = "standard"
    seed: int = 0
    split_index: int | None = None
    train_frac: float = 0.4
    val_frac: float = 0.2
    label_fraction: float = 1.0
    device: str = "auto"
    threads: int = 0
    candidate_workers: int = 1  # --contrast auto: fit up to this many candidates at once, as Ray tasks
    address: str | None = None  # Ray cluster for those tasks (default: $RAY_ADDRESS, else Ray started here)
    resume: bool = False  # continue the unfinished run in out (gcad_dist.fit_state)
    overwrite: bool = False  # delete an unfinished run in out and start over
    checkpoint_interval: float = 60.0  # seconds between two writes of a fit's training state (0 = every epoch)
    plots: bool = True
    progress: bool = True
    verbose: bool = False


def normalize_features(x: torch.Tensor, how: str) -> torch.Tensor:
    """``standard``: z-score every feature over all nodes (label-free); ``power``: z-score, a Yeo-Johnson transform
    per column, z-score again (:func:`partitioning.features.power_normalize`, label-free; on torch's threads);
    ``none``: unchanged."""
    if how == "none":
        return x
    if how == "standard":
        mean = x.mean(0, keepdim=True)
        std = x.std(0, keepdim=True)
        return (x - mean) / torch.where(std > 0, std, torch.ones_like(std))
    if how in ("power", POWER_ALL_ROWS):  # power-all-rows: a store or checkpoint written before session 40
        from partitioning.features import power_normalize

        out = power_normalize(x.detach().cpu().numpy(), exclude_majority=how == "power",
                              threads=torch.get_num_threads())[0]
        return torch.from_numpy(out).to(x.device)
    raise UsageError(f"--normalize: unknown value {how!r} (choose from {', '.join(NORMALIZE_CHOICES)})")


# GCCAD's input dropout since session 28, chosen on held-out halves of the validation splits: it raised GCCAD's AUPRC
# on inj_cora, books and reddit and cost tolokers 0.007 (0.5 cost tolokers 0.031); the models learn the few training
# anomalies by heart within 20-30 epochs. GraphSAGE gained less and lost on books, so the baselines keep none
# (BENCHMARKS.md, session 28)
GCCAD_INPUT_DROPOUT = 0.2
# ... while the labels are few for the input's width (session 29): its validation gain fell as the labelled training
# anomalies per input feature grew, on real and generated graphs alike (+0.18 AUPRC at 1.4 a feature, -0.02 at 30
# and 60); from this ratio on, GCCAD trains without it. Of the shared graphs it switches off for tolokers only
# (1,283 anomalies, 10 features)
INPUT_DROPOUT_MAX_LABELS_PER_FEATURE = 20.0


def _input_dropout_by_rule(model: str, value: float | None) -> bool:
    """Whether the labels decide the input dropout: no value given, and GCCAD or one of its ablations."""
    return value is None and model.startswith("gccad")


def resolve_input_dropout(model: str, value: float | None = None, train_anomalies: int | None = None,
                          num_features: int | None = None) -> float:
    """``value``, or when None the default of ``model``: 0 for the baselines; for GCCAD and its ablations
    :data:`GCCAD_INPUT_DROPOUT`, unless the fit's training split holds at least
    :data:`INPUT_DROPOUT_MAX_LABELS_PER_FEATURE` labelled anomalies per input feature (then 0; when the counts are not
    known, the few-label default)."""
    if not _input_dropout_by_rule(model, value):
        return 0.0 if value is None else float(value)
    if train_anomalies is not None and num_features and train_anomalies / num_features >= INPUT_DROPOUT_MAX_LABELS_PER_FEATURE:
        return 0.0
    return GCCAD_INPUT_DROPOUT


def input_dropout_rule(model: str, value: float | None = None) -> float | str:
    """What decides a run's input dropout, for settings records: the value when it is fixed (given, or a baseline's
    0), else the rule of :func:`resolve_input_dropout` in words."""
    if not _input_dropout_by_rule(model, value):
        return resolve_input_dropout(model, value)
    return (f"{GCCAD_INPUT_DROPOUT:g} below {INPUT_DROPOUT_MAX_LABELS_PER_FEATURE:g} labelled training anomalies per "
            "input feature, else 0")


# GCCAD reads the neighbours' training labels as inputs since session 31, chosen on the validation splits of tolokers,
# reddit, inj_cora and books by a rule written before the runs (BENCHMARKS.md, session 31); the baselines keep the
# inputs they are known by (GADBench's), so the quality table compares GCCAD with what a user would try first
GCCAD_LABEL_INPUTS = True
# ... when the fit's training labels hold at least this many anomalies: the masked trick takes half of them out of each
# epoch's loss, and with 6 (inj_cora at 10% of its labels) the inputs cost validation AUPRC in both gcad_dist.train
# and gcad_dist.finetune; from 11 on they gained (BENCHMARKS.md, session 32)
LABEL_INPUTS_MIN_ANOMALIES = 10


def _label_inputs_by_rule(model: str, value: bool | None) -> bool:
    """Whether the labels decide the label inputs: no value given, and GCCAD or one of its ablations."""
    return value is None and GCCAD_LABEL_INPUTS and model.startswith("gccad")


def resolve_label_inputs(model: str, value: bool | None = None, train_anomalies: int | None = None) -> bool:
    """``value``, or when None the default of ``model``: off for the baselines; for GCCAD and its ablations
    :data:`GCCAD_LABEL_INPUTS`, unless the fit's training labels hold fewer than :data:`LABEL_INPUTS_MIN_ANOMALIES`
    anomalies (when the count is not known, on)."""
    if not _label_inputs_by_rule(model, value):
        return bool(value)
    return train_anomalies is None or train_anomalies >= LABEL_INPUTS_MIN_ANOMALIES


def label_inputs_rule(model: str, value: bool | None = None) -> bool | str:
    """What decides a run's label inputs, for settings records: the value when it is fixed (given, or a baseline's
    off), else the rule of :func:`resolve_label_inputs` in words."""
    if not _label_inputs_by_rule(model, value):
        return bool(value)
    return f"from {LABEL_INPUTS_MIN_ANOMALIES} labelled training anomalies"


#: below this many labelled training anomalies ``gcad_dist.train --pretrain auto`` pre-trains without labels and
#: fine-tunes (and a fit from scratch suggests it). 20 in session 80, 100 in session 81, 300 since session 82: each
#: raised by a rule written before its own eight fresh generated graphs (BENCHMARKS.md, sessions 80-82; at 156-264
#: training anomalies +0.006 / +0.019 test AUROC / AUPRC, 15 of 16 runs ahead, one level). 300 puts reddit (146) on
#: the pre-training path (level there) and keeps tolokers (about 1,280) on the path from scratch, about 3x faster;
#: session 83's rule kept the threshold at 300 (792 training anomalies: +0.001 / +0.003; tolokers +0.002 / +0.009).
FEW_ANOMALIES = 300


def few_labels_hint(graph: str, n_anomalies: int) -> str | None:
    """The suggestion ``gcad_dist.train`` logs when a fit from scratch held fewer than :data:`FEW_ANOMALIES` labelled
    training anomalies (None otherwise): ``--pretrain on``, which pre-trains without labels and fine-tunes."""
    if n_anomalies >= FEW_ANOMALIES:
        return None
    return (f"only {n_anomalies} labelled training anomalies: with fewer than {FEW_ANOMALIES}, pre-training without "
            "labels and fine-tuning has usually scored better than training from scratch "
            "(README, 'Fine-tuning with a few labels'); python -m gcad_dist.train --graph "
            f"{shlex.quote(graph)} --pretrain on does both (the default GCCAD model)")


def train_anomaly_count(y: Any, train_mask: Any) -> int:
    """How many nodes of ``train_mask`` are labelled anomalous (what the label-dependent defaults count)."""
    return int((torch.as_tensor(y)[torch.as_tensor(train_mask, dtype=torch.bool)] == 1).sum())


def with_label_inputs_resolved(cfg: "TrainConfig", y: Any, train_mask: Any) -> "TrainConfig":
    """``cfg`` with its label inputs resolved (:func:`resolve_label_inputs`) for the labels of ``train_mask``."""
    n_anomalies = train_anomaly_count(y, train_mask)
    on = resolve_label_inputs(cfg.model, cfg.label_inputs, n_anomalies)
    if _label_inputs_by_rule(cfg.model, cfg.label_inputs):
        log.info("label inputs %s (%d labelled training anomalies; %s)", "on" if on else "off", n_anomalies,
                 label_inputs_rule(cfg.model))
    return replace(cfg, label_inputs=on)


def reads_label_inputs(data: Any) -> bool:
    """Whether a fit's ``data`` carries the label-input columns (:func:`gcad_dist.data.label_inputs.with_label_inputs`)."""
    return bool(getattr(data, "label_input_columns", 0))


def check_input_dropout(value: float | None) -> None:
    """The ``--input-dropout`` check of every CLI that has it (None = the model's default)."""
    if value is not None and not 0 <= value < 1:
        raise UsageError(f"--input-dropout: must be in [0, 1), got {value}")


def build_model(kind: str, in_dim: int, hidden: int = 64, layers: int = 2, dropout: float = 0.1,
                conv: str = "gin", ablation: str = "none", score_space: str = "projection",
                link_eval: str = "expected", contrast: str = "graph",
                jump: str = "last", norm: str = "layer", input_dropout: float = 0.0) -> tuple[torch.nn.Module, Any]:
    """Construct a model and its config dataclass. ``jump`` applies to the graph contrast only (the local
    contrasts compare single-layer embeddings); with another contrast it is ignored.

    ``kind`` is ``gccad`` (with ``conv`` and ``ablation``), ``gccad-ce`` (= gccad + ablation ce)
    or a baseline name (mlp, gcn, gin, sage, gat, bwgnn).
    """
    if kind == "gccad-ce":
        kind, ablation = "gccad", "ce"
    if kind == "gccad":
        from gcad_dist.model import GCCAD, GCCADConfig

        if score_space not in SCORE_SPACES:
            raise UsageError(f"--score-space: unknown value {score_space!r} (choose from {', '.join(SCORE_SPACES)})")
        cfg = GCCADConfig(in_dim=in_dim, hidden=hidden, num_layers=layers, conv=conv, dropout=dropout,
                          score_space=score_space, link_eval=link_eval, contrast=contrast,
                          jump=jump if contrast == "graph" else "last", norm=norm, input_dropout=input_dropout)
        if ablation == "ce":
            cfg.loss = "ce"
        elif ablation == "no-link-loss":
            cfg.link_loss_weight = 0.0
        elif ablation == "no-global":
            cfg.link_global = False
        elif ablation == "no-edge-update":
            cfg.edge_update = False
        elif ablation != "none":
            raise UsageError(f"--ablation: unknown value {ablation!r} (choose from {', '.join(ABLATIONS)})")
        return GCCAD(cfg), cfg
    from gcad_dist.model.baselines import BASELINES, BaselineConfig, build_baseline

    if kind not in BASELINES:
        raise UsageError(f"--model: unknown value {kind!r} (choose from {', '.join(MODELS)})")
    if ablation != "none":
        raise UsageError(f"--ablation: only applies to --model gccad, not {kind}")
    bcfg = BaselineConfig(in_dim=in_dim, kind=kind, hidden=hidden, num_layers=layers, dropout=dropout, norm=norm,
                          input_dropout=input_dropout)
    if kind == "gat" and hidden % bcfg.heads:
        raise UsageError(f"--hidden: GAT needs a multiple of {bcfg.heads} heads, got {hidden}")
    return build_baseline(bcfg), bcfg


def check_labels(source: str, y: Any, what: str = "supervised training") -> dict[str, int]:
    """Label counts of ``y`` (-1 = unknown; see :func:`partitioning.graph.label_counts`); GraphInputError
    unless at least one labelled anomaly and one labelled normal node exist."""
    from partitioning.errors import GraphInputError
    from partitioning.graph import label_counts

    if y is None:
        raise GraphInputError(source, f"the graph has no labels (y); {what} needs them")
    c = label_counts(y)
    if c["labelled"] == 0:
        raise GraphInputError(source, f"no node has a known label (all -1); {what} needs labelled nodes")
    if c["anomalies"] == 0 or c["normal"] == 0:
        which = "normal (0)" if c["anomalies"] == 0 else "anomalies (1)"
        raise GraphInputError(source, f"all {c['labelled']} labelled nodes are {which}; "
                                      "need both anomalies (1) and normal nodes (0)")
    return c


def load_labelled(path: str, normalize: str = "standard"):
    """Load a graph with labels as a PyG ``Data`` (features normalised); raises GraphInputError.

    Partly labelled graphs are fine (``data.y`` is -1 where unknown, ``data.label_mask`` marks the
    known labels) as long as at least one labelled anomaly and one labelled normal node exist.
    """
    from partitioning.io import load_graph

    graph = load_graph(path)
    check_labels(path, graph.y)
    data = graph.to_data()
    data.x = normalize_features(data.x.float(), normalize)
    return data


def check_fit_options(cfg: Any) -> None:
    """The checks of the fitting options that ``gcad_dist.train`` and ``gcad_dist.finetune`` share (their settings
    dataclasses have the same names for them); raises :class:`UsageError` naming the option."""
    if cfg.eval_every < 1:
        raise UsageError(f"--eval-every: must be >= 1, got {cfg.eval_every}")
    if cfg.checkpoint_interval < 0:
        raise UsageError(f"--checkpoint-interval: must be >= 0 (0 = every epoch), got {cfg.checkpoint_interval}")
    if cfg.patience < 0:
        raise UsageError(f"--patience: must be >= 0, got {cfg.patience}")
    if cfg.snapshots < 1:
        raise UsageError(f"--snapshots: must be >= 1, got {cfg.snapshots}")
    if cfg.max_degree < 0:
        raise UsageError(f"--max-degree: must be >= 0 (0 = every edge in every epoch), got {cfg.max_degree}")
    if not (cfg.lr > 0 and math.isfinite(cfg.lr)):
        raise UsageError(f"--lr: must be > 0, got {cfg.lr}")
    check_input_dropout(cfg.input_dropout)
    if not (0 < cfg.train_frac < 1 and 0 < cfg.val_frac < 1 and cfg.train_frac + cfg.val_frac < 1):
        raise UsageError(f"--train-frac/--val-frac: need 0 < train, val and train + val < 1, got {cfg.train_frac}/{cfg.val_frac}")
    if not 0 < cfg.label_fraction <= 1:
        raise UsageError(f"--label-fraction: must be in (0, 1], got {cfg.label_fraction}")
    if cfg.candidate_workers < 1:
        raise UsageError(f"--candidate-workers: must be >= 1, got {cfg.candidate_workers}")
    if cfg.threads < 0:
        raise UsageError(f"--threads: must be >= 0 (0 = torch's default), got {cfg.threads}")


def _validate(cfg: TrainConfig) -> None:
    if cfg.model not in MODELS and cfg.model != "gccad-ce":
        raise UsageError(f"--model: unknown value {cfg.model!r} (choose from {', '.join(MODELS)})")
    if cfg.conv not in CONVS:
        raise UsageError(f"--conv: unknown value {cfg.conv!r} (choose from {', '.join(CONVS)})")
    if cfg.ablation not in ABLATIONS:
        raise UsageError(f"--ablation: unknown value {cfg.ablation!r} (choose from {', '.join(ABLATIONS)})")
    for name in ("epochs", "hidden", "layers"):
        if getattr(cfg, name) < 1:
            raise UsageError(f"--{name.replace('_', '-')}: must be >= 1, got {getattr(cfg, name)}")
    if cfg.contrast not in (*CONTRASTS, "auto"):
        raise UsageError(f"--contrast: unknown value {cfg.contrast!r} (choose from {', '.join(CONTRASTS)}, auto)")
    if cfg.forest_min_anomalies < 1:
        raise UsageError(f"--forest-min-anomalies must be at least 1, got {cfg.forest_min_anomalies}")
    if cfg.few_anomalies not in FEW_VALIDATION_MODES:
        raise UsageError(f"--few-anomalies: unknown value {cfg.few_anomalies!r} (choose from "
                         f"{', '.join(FEW_VALIDATION_MODES)})")
    if cfg.forest not in FOREST_MODES:
        raise UsageError(f"--forest: unknown value {cfg.forest!r} (choose from {', '.join(FOREST_MODES)})")
    if cfg.forest_columns not in FOREST_COLUMNS:
        raise UsageError(f"--forest-columns: unknown value {cfg.forest_columns!r} (choose from "
                         f"{', '.join(FOREST_COLUMNS)})")
    if cfg.jump is not None and cfg.jump not in JUMPS:
        raise UsageError(f"--jump: unknown value {cfg.jump!r} (choose from {', '.join(JUMPS)})")
    if cfg.jump not in (None, "last") and cfg.contrast in ("neighbors", "ego"):
        raise UsageError(f"--jump {cfg.jump}: applies to the graph contrast only (--contrast graph or auto), "
                         f"not to --contrast {cfg.contrast}")
    check_fit_options(cfg)
    if not 0 <= cfg.dropout < 1:
        raise UsageError(f"--dropout: must be in [0, 1), got {cfg.dropout}")
    if cfg.device not in ("auto", "cpu") and not cfg.device.startswith("cuda"):
        raise UsageError(f"--device: unknown device {cfg.device!r} (auto, cpu, cuda, cuda:N)")
    if cfg.device.startswith("cuda") and not torch.cuda.is_available():
        raise UsageError(f"--device: {cfg.device} requested but no CUDA device is available")


@dataclass
class TrainOutcome:
    """What :func:`train_one` produced."""

    fit: FitResult
    metrics: dict[str, Any]  # JSON-ready: config, split, selected epoch, val/test metrics, history
    model: torch.nn.Module
    model_config: Any
    data: Any  # the (normalised) PyG Data the model reads, label-input columns included
    split: Any  # gcad_dist.data.splits.Split


@dataclass
class Candidates:
    """What :func:`fit_candidates` produced: every candidate's fit, before the choice between them."""

    fits: list[tuple[FitResult, torch.nn.Module, Any]]  # (fit, model, model config), the default first
    data: Any
    split: Any
    counts: dict[str, int]
    budget: dict[str, int]
    fit_split: Any = None  # the split the fits trained on: its training part cut by --label-fraction (None = split)


def run_split(cfg: TrainConfig, data: Any) -> tuple[dict[str, int], Any, Any, dict[str, int]]:
    """The label counts, split, fit split (``--label-fraction``'s seeded stratified subsample of the training labels,
    the same as gcad_dist.finetune's) and label budget of a run of ``cfg`` on ``data``; bad labels or a bad
    ``--split-index`` are usage errors."""
    from gcad_dist.data.splits import make_split, subsample_split

    counts = check_labels(cfg.graph, getattr(data, "y", None))
    try:
        split = make_split(data, seed=cfg.seed, split_index=cfg.split_index, train=cfg.train_frac, val=cfg.val_frac)
    except ValueError as e:
        raise UsageError(f"--split-index: {e}") from e
    fit_split, budget = subsample_split(split, data.y, cfg.label_fraction, seed=cfg.seed)
    return counts, split, fit_split, budget


def fit_candidates(cfg: TrainConfig, data=None, state_dir: Path | None = None) -> Candidates:
    """Load (unless ``data`` is given), split, build and fit the model, or each candidate of ``--contrast auto``;
    each fit writes its training state to ``state_dir`` and continues from it (:func:`prepare_run_state`)."""
    _validate(cfg)
    if cfg.threads > 0:
        torch.set_num_threads(cfg.threads)
    retain_freed_memory()
    if data is None:
        data = load_labelled(cfg.graph, cfg.normalize)
    counts, split, fit_split, budget = run_split(cfg, data)
    warn_split_classes(split, data.y)
    cfg = with_input_dropout(cfg, data.y, fit_split.train, data.num_features)
    cfg = with_label_inputs_resolved(cfg, data.y, fit_split.train)
    if cfg.label_inputs:  # two more input columns: the neighbours labelled anomalous in the (fit) train split
        from gcad_dist.data.label_inputs import with_label_inputs

        data = with_label_inputs(data, fit_split.train)
    scfg = supervised_config(cfg, state_dir)
    log.info("%s: %d nodes, %d directed edges, %d features; %s; split %s %s; model %s%s",
             cfg.graph, data.num_nodes, data.edge_index.shape[1], data.num_features, describe_labels(data.y),
             split.source, split.sizes(), cfg.model,
             f" (conv {cfg.conv}, ablation {cfg.ablation})" if cfg.model == "gccad" else "")
    fits = fit_models(cfg, data, fit_split, scfg)
    return Candidates(fits, data, split, counts, budget, fit_split)


def with_input_dropout(cfg: TrainConfig, y: Any, train_mask: Any, num_features: int) -> TrainConfig:
    """``cfg`` with its input dropout resolved (:func:`resolve_input_dropout`) for the labels of ``train_mask`` and
    ``num_features`` input features."""
    n_anomalies = train_anomaly_count(y, train_mask)
    p = resolve_input_dropout(cfg.model, cfg.input_dropout, n_anomalies, num_features)
    if _input_dropout_by_rule(cfg.model, cfg.input_dropout):
        log.info("input dropout %g (%d labelled training anomalies, %d features; %s)", p, n_anomalies, num_features,
                 input_dropout_rule(cfg.model))
    return replace(cfg, input_dropout=p)


def supervised_config(cfg: TrainConfig, state_dir: str | Path | None = None) -> SupervisedConfig:
    """The :class:`SupervisedConfig` of a run of ``cfg`` (optimiser, epochs, selection, device); ``state_dir``: where
    each fit writes its training state (:func:`prepare_run_state`), None = nowhere."""
    return SupervisedConfig(
        epochs=cfg.epochs, lr=cfg.lr, weight_decay=cfg.weight_decay, eval_every=cfg.eval_every,
        patience=cfg.patience, snapshots=cfg.snapshots, class_weight=cfg.class_weight, seed=cfg.seed, device=cfg.device,
        progress=cfg.progress, max_degree=cfg.max_degree,
        label_inputs=resolve_label_inputs(cfg.model, cfg.label_inputs),
        state_dir=None if state_dir is None else str(state_dir), state_interval=cfg.checkpoint_interval,
    )


# options that change where and how a run goes, not what it computes: a resumed run may change them
RUNTIME_OPTIONS = ("out", "resume", "overwrite", "checkpoint_interval", "device", "threads", "candidate_workers",
                   "address", "plots", "progress", "verbose")

# settings added after runs were written, and what the code ran before each (an unfinished run saved without one
# resumes where it is given that value): --forest-columns came in session 89, the trees' inputs before it "none"
ADDED_SETTINGS = {"forest_columns": "none"}


def option_name(field_name: str) -> str:
    """The command-line option of a settings field (``split_index`` -> ``--split-index``)."""
    return {"class_weight": "--no-class-weight"}.get(field_name, "--" + field_name.replace("_", "-"))


def prepare_run_state(cfg: Any) -> Path | None:
    """``<out>/unfinished`` for a run of ``cfg`` (a :class:`TrainConfig` or ``gcad_dist.finetune``'s settings), after
    the checks of :func:`gcad_dist.fit_state.prepare_state_dir` (``--resume``, ``--overwrite``, same settings);
    None without ``out``."""
    from gcad_dist.fit_state import prepare_state_dir

    if not cfg.out:
        return None
    settings = {k: v for k, v in asdict(cfg).items() if k not in RUNTIME_OPTIONS}
    return prepare_state_dir(cfg.out, settings, cfg.resume, cfg.overwrite,
                             {k: option_name(k) for k in settings}, ADDED_SETTINGS)


def fit_models(cfg: TrainConfig, data: Any, fit_split: Any, scfg: SupervisedConfig,
               init: Callable[[torch.nn.Module], None] | None = None,
               state_prefix: str = "") -> list[tuple[FitResult, torch.nn.Module, Any]]:
    """Build and fit ``cfg``'s model on ``data`` (each candidate of ``--contrast auto``, the default first), every
    candidate from the same seed. ``init`` (if given) changes each freshly built model before its fit, e.g.
    :func:`gcad_dist.finetune` starting from a pre-trained input projection. With ``cfg.candidate_workers`` > 1
    the candidates are fitted side by side as Ray tasks (:mod:`gcad_dist.distributed.candidates`), with the
    same results as one after another. With ``scfg.state_dir``, a candidate's training state is
    ``<state_dir>/<state_prefix><candidate>.pt``."""
    # auto: the full model only; an ablation or a baseline keeps the paper's graph contrast (a controlled comparison)
    auto = cfg.contrast == "auto" and cfg.model == "gccad" and cfg.ablation == "none"
    candidates = auto_candidates(cfg.norm) if auto else (((cfg.contrast if cfg.contrast != "auto" else "graph"), cfg.norm),)
    if cfg.candidate_workers > 1 and len(candidates) > 1:
        from gcad_dist.distributed.candidates import fit_side_by_side

        return fit_side_by_side(cfg, data, fit_split, scfg, candidates, init, state_prefix)
    return [fit_candidate(cfg, data, fit_split, scfg, contrast, norm, init, state_prefix) for contrast, norm in candidates]


def build_candidate(cfg: TrainConfig, in_dim: int, contrast: str, norm: str) -> tuple[torch.nn.Module, Any]:
    """``cfg``'s model with this contrast and norm, initialised from ``cfg.seed`` (every candidate alike)."""
    torch.manual_seed(cfg.seed)
    np.random.seed(cfg.seed)
    return build_model(cfg.model, in_dim, cfg.hidden, cfg.layers, cfg.dropout, cfg.conv, cfg.ablation,
                       cfg.score_space, cfg.link_eval, contrast, resolve_jump(cfg.model, cfg.ablation, cfg.jump), norm,
                       resolve_input_dropout(cfg.model, cfg.input_dropout))


def fit_candidate(cfg: TrainConfig, data: Any, fit_split: Any, scfg: SupervisedConfig, contrast: str, norm: str,
                  init: Callable[[torch.nn.Module], None] | None = None,
                  state_prefix: str = "") -> tuple[FitResult, torch.nn.Module, Any]:
    """Build (:func:`build_candidate`), ``init`` and fit one candidate: (fit, model at its best state, config)."""
    model, model_cfg = build_candidate(cfg, data.num_features, contrast, norm)
    if init is not None:
        init(model)
    name = state_prefix + (f"{contrast}-{norm}" if cfg.model == "gccad" else cfg.model)
    return fit_supervised(model, data, fit_split, scfg, state_name=name), model, model_cfg


def train_one(cfg: TrainConfig, data=None, state_dir: Path | None = None) -> TrainOutcome:
    """Load (unless ``data`` is given), split, build and fit one model (or the candidates of ``--contrast
    auto``, keeping those validation cannot tell apart and scoring with their mean); ``state_dir``: see
    :func:`fit_candidates`."""
    return finish_fit(cfg, fit_candidates(cfg, data, state_dir))


def finish_fit(cfg: TrainConfig, c: Any) -> TrainOutcome:
    """The run's model from its fitted candidates ``c`` (:func:`fit_candidates`): with several, those validation cannot
    tell apart (:func:`keep_candidates`, ``cfg.rejoin``) scored together; then the forest view (``cfg.forest``).
    Reads no label outside the training and validation splits, and leaves ``c`` unchanged, so that
    ``bench/train_rejoin.py`` can finish one fit under two settings."""
    fits, data, split, counts, budget = c.fits, c.data, c.split, c.counts, c.budget
    selection = None
    if len(fits) > 1:  # --contrast auto: the candidates validation cannot tell apart, scored together
        kept, selection = keep_candidates(fits, data.y, split.val, seed=cfg.seed, rejoin=cfg.rejoin,
                                          few=cfg.few_anomalies)
        res, model, model_cfg = combine_candidates(fits, kept, data, split, weights=selection_weights(selection))
    else:
        res, model, model_cfg = fits[0]
    forest = None
    if cfg.forest == "auto" and cfg.model == "gccad" and cfg.ablation == "none":
        from gcad_dist.forest_view import add_forest_view

        # the forest trains on the labels GCCAD trained on (--label-fraction's subsample), no other
        fit_split = c.fit_split if c.fit_split is not None else split
        res, model, forest = add_forest_view(res, model, data, fit_split, seed=cfg.seed,
                                              threads=cfg.threads if cfg.threads > 0 else torch.get_num_threads(),
                                              min_anomalies=cfg.forest_min_anomalies,
                                              local=cfg.forest_columns == "local")
    metrics = {
        "config": asdict(replace(cfg, label_inputs=reads_label_inputs(data))),
        "model_config": asdict(model_cfg),
        "labels": counts,
        "split": {"source": split.source, **split.sizes()},
        "label_budget": {"label_fraction": cfg.label_fraction, **budget},
        **res.summary(),
        "history": res.history,
        "environment": environment(res.device),
    }
    if selection:
        metrics["contrast_selection"] = selection
    if forest:
        metrics["forest_view"] = forest
    return TrainOutcome(res, metrics, model, model_cfg, data, split)


def selection_weights(record: dict[str, Any]) -> list[float] | None:
    """The kept candidates' weights from :func:`keep_candidates`' record (in the kept candidates' order, as it
    writes them), or None where they weigh alike (:func:`combine_candidates`' plain mean)."""
    w = record.get("weights")
    return None if not w else [float(v) for v in w.values()]


def _validation_view(fits: list[tuple[FitResult, Any, Any]], y: Any, val_mask: Any,
                     names: list[str] | None) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """The validation mask and labels as NumPy, and the candidates' names (default: :func:`candidate_name`)."""
    vm = torch.as_tensor(val_mask, dtype=torch.bool).cpu().numpy()
    yv = torch.as_tensor(y).cpu().numpy()[vm]
    names = list(names) if names is not None else [candidate_name(m_cfg, fits[0][2].norm) for _, _, m_cfg in fits]
    if len(set(names)) != len(names) or len(names) != len(fits):
        raise ValueError(f"one distinct name per candidate needed, got {names} for {len(fits)} candidates")
    return vm, yv, names


def choose_contrast(fits: list[tuple[FitResult, Any, Any]], y: Any, val_mask: Any, seed: int = 0,
                    names: list[str] | None = None, what: str = "contrast") -> tuple[int, dict[str, Any]]:
    """Keep the first candidate (the paper's graph contrast) unless an alternative's validation AUPRC is
    better with bootstrap confidence >= :data:`gcad_dist.selection.SWITCH_CONFIDENCE` (paired Poisson
    bootstrap over the validation nodes; among several such alternatives, the surest wins, and among equally
    sure ones the higher validation AUPRC). With fewer than
    :data:`gcad_dist.selection.MIN_POSITIVES` validation anomalies the first candidate is kept.

    Reads the validation nodes' labels and scores only. Returns the kept candidate's index and a JSON-ready
    record: the choice, the rule, each candidate's validation AUPRC and bootstrap comparison, and (for
    reports, read after the choice) each candidate's selected epoch and held-out metrics. ``names`` name the
    candidates (default: :func:`candidate_name`, their contrasts and norms); ``what`` names the choice in the log.
    """
    from gcad_dist.selection import SWITCH_RULE, compare_auprc

    vm, yv, names = _validation_view(fits, y, val_mask, names)
    default = fits[0][0].scores[vm]
    record: dict[str, Any] = {"rule": f"keep {names[0]} unless an alternative's validation AUPRC is higher by "
                                      f"paired bootstrap over the validation nodes: {SWITCH_RULE}",
                              "val_auprc": {}, "bootstrap": {}, "candidates": {}}
    chosen, best = 0, (-1.0, -1.0)
    for i, (res, _, _) in enumerate(fits):
        record["val_auprc"][names[i]] = float(res.val.get("auprc", float("nan")))
        record["candidates"][names[i]] = {"best_epoch": res.best_epoch, "val": res.val, "test": res.test}
        if i == 0:
            continue
        cmp = compare_auprc(yv, default, res.scores[vm], seed=seed)
        record["bootstrap"][names[i]] = cmp.as_dict()
        if cmp.switch and (cmp.p_alternative_better, cmp.alternative_auprc) > best:  # ties: the higher AUPRC
            chosen, best = i, (cmp.p_alternative_better, cmp.alternative_auprc)
    record["chosen"] = names[chosen]
    log.info("%s kept on validation: %s (%s)", what, names[chosen], "; ".join(
        f"{n}: val AUPRC {record['val_auprc'][n]:.4f}"
        + (f", P(better than {names[0]}) {record['bootstrap'][n]['p_alternative_better']:.3f}" if n in record["bootstrap"] else "")
        for n in names))
    return chosen, record


def keep_candidates(fits: list[tuple[FitResult, Any, Any]], y: Any, val_mask: Any, seed: int = 0,
                    names: list[str] | None = None, cross_fitted: bool = False,
                    weighting: str = "equal", rejoin: bool = False,
                    few: str = "average") -> tuple[list[int], dict[str, Any]]:
    """Keep every candidate whose validation AUPRC is not clearly below the best one's: drop candidate ``i`` only
    if a paired bootstrap over the validation nodes finds the best one better with confidence >=
    :data:`gcad_dist.selection.SWITCH_CONFIDENCE` over >= :data:`gcad_dist.selection.MIN_POSITIVES` validation
    anomalies (with fewer, every candidate is kept). :func:`combine_candidates` then scores with the kept ones.

    Reads the validation nodes' labels and scores only. Returns the kept candidates' indices (in candidate
    order, so the first kept one is the primary) and a JSON-ready record: the rule, each candidate's validation
    AUPRC and its bootstrap against the best, the kept names (``chosen`` joins them with ``+``), and (for reports,
    read after the choice) each candidate's selected epoch and held-out metrics.

    With ``cross_fitted``, a fit is judged by its ``selection_scores`` where it has them
    (:class:`gcad_dist.selection.CrossFit`: every validation node scored by evaluations chosen on the other
    validation half), so that a fit's own epoch choice does not flatter it against a candidate that chose nothing on
    validation; a fit without them (the pre-trained model unchanged) is judged by its scores.

    ``weighting="lift"`` (:data:`WEIGHTINGS`) then weighs the kept candidates: each by
    ``max(0, validation AUPRC - the validation base rate)`` (:func:`lift_weights`, judged as above), normalised; a
    kept candidate of weight 0 is dropped, and ``record["weights"]`` holds the kept ones' weights (summing to 1) for
    :func:`combine_candidates`; with fewer than :data:`gcad_dist.selection.MIN_POSITIVES` validation anomalies, or no
    kept one above the base rate, the kept ones weigh alike.

    ``rejoin`` (``gcad_dist.finetune --rejoin``, session 74) then lets the dropped candidates rejoin, one at a time,
    where their mean with the kept ones ranks the validation anomalies better by paired bootstrap
    (:func:`gcad_dist.selection.rejoin`: P >= :data:`gcad_dist.selection.REJOIN_CONFIDENCE`, each with an equal
    share; judged as above, each candidate's scores standardised over every node as :func:`combine_candidates`
    standardises them); only with >= :data:`gcad_dist.selection.MIN_POSITIVES` validation anomalies (with fewer none
    is dropped). ``record["rejoined"]`` lists them, and ``record["weights"]`` holds the weights.

    ``few="above-chance"`` (``gcad_dist.finetune --few-anomalies``, session 76) applies where validation holds 1 to
    ``MIN_POSITIVES - 1`` anomalies, too few for the bootstrap to drop anything: a candidate whose validation AUROC
    (judged as above) is at or below 0.5 ranks the few validation anomalies no better than chance and is dropped;
    the others weigh alike (none above 0.5: every candidate is kept). ``record["val_auroc"]`` holds each candidate's
    AUROC and ``record["below_chance"]`` the dropped ones. ``few="weighted"`` then weighs the kept ones
    ``0.5 / k + 0.5 * lift_i / sum(lift)``, ``lift_i = max(0, AUROC_i - 0.5)`` (alike where no lift is above 0).
    """
    from gcad_dist.metrics import auprc, auroc
    from gcad_dist.model.candidate_ensemble import standardised_scores
    from gcad_dist.selection import MIN_POSITIVES, REJOIN_CONFIDENCE, SWITCH_RULE, compare_auprc
    from gcad_dist.selection import rejoin as rejoin_dropped

    if weighting not in WEIGHTINGS:
        raise ValueError(f"weighting: unknown value {weighting!r} (choose from {', '.join(WEIGHTINGS)})")
    if few not in FEW_VALIDATION_MODES:
        raise ValueError(f"few: unknown value {few!r} (choose from {', '.join(FEW_VALIDATION_MODES)})")
    vm, yv, names = _validation_view(fits, y, val_mask, names)
    judged = [res.scores if not cross_fitted or getattr(res, "selection_scores", None) is None
              else res.selection_scores for res, _, _ in fits]
    val_ap = [auprc(yv, s[vm]) if (yv == 1).any() and (yv == 0).any() else float("nan") for s in judged]
    best = int(np.nanargmax(val_ap)) if np.isfinite(val_ap).any() else 0  # ties: the first
    record: dict[str, Any] = {
        "rule": "keep every candidate unless the best one's validation AUPRC is higher by paired bootstrap over the "
                f"validation nodes ({SWITCH_RULE}); score with the mean of the kept candidates' standardised scores"
                + ("; each fit judged by cross-fitted scores (its evaluations chosen on the other validation half)"
                   if cross_fitted else ""),
        "best": names[best], "val_auprc": dict(zip(names, val_ap)), "bootstrap": {}, "candidates": {},
        "cross_fitted": bool(cross_fitted)}
    kept = []
    for i, (res, _, _) in enumerate(fits):
        record["candidates"][names[i]] = {"best_epoch": res.best_epoch, "val": res.val, "test": res.test}
        if i != best:
            cmp = compare_auprc(yv, judged[i][vm], judged[best][vm], seed=seed)
            record["bootstrap"][names[i]] = {
                "auprc": cmp.default_auprc, "best_auprc": cmp.alternative_auprc, "p_best_better": cmp.p_alternative_better,
                "diff_low": cmp.diff_low, "diff_high": cmp.diff_high, "n_boot": cmp.n_boot, "positives": cmp.positives,
                "dropped": cmp.switch}
            if cmp.switch:
                continue
        kept.append(i)
    record["kept"] = [names[i] for i in kept]
    record["chosen"] = " + ".join(record["kept"])
    positives = int((yv == 1).sum())
    if positives < MIN_POSITIVES and len(fits) > 1:
        record["too_few_validation_anomalies"] = positives
        if few in ("above-chance", "weighted") and positives > 0 and (yv == 0).any():
            kept = _above_chance(kept, [auroc(yv, s[vm]) for s in judged], names, record)
        log.warning("validation holds %d labelled anomalies, fewer than the %d the rule needs to drop a candidate by "
                    "bootstrap: %d of %d candidates (%s) are kept and averaged%s; more validation labels let it choose",
                    positives, MIN_POSITIVES, len(kept), len(fits), " / ".join(record["kept"]),
                    (" (those above chance in validation AUROC" + (", weighted by it)" if few == "weighted" else ")"))
                    if "below_chance" in record else "")
    if weighting == "lift":
        base = float(positives / max(len(yv), 1))
        w = (lift_weights([val_ap[i] for i in kept], base) if positives >= MIN_POSITIVES
             else np.full(len(kept), 1.0 / len(kept)))
        kept, w = [i for i, wi in zip(kept, w) if wi > 0], w[w > 0]
        record.update(weighting="lift", base_rate=base, kept=[names[i] for i in kept],
                      weights=dict(zip([names[i] for i in kept], (w / w.sum()).tolist())))
        record["rule"] += ("; the kept candidates weighted by their validation AUPRC's lift over the base rate, "
                           "max(0, AUPRC - base rate) (alike with fewer than "
                           f"{MIN_POSITIVES} validation anomalies or none above it)")
        record["chosen"] = " + ".join(record["kept"])
    if few == "weighted" and "below_chance" in record and len(kept) > 1:
        lift = np.array([max(0.0, record["val_auroc"][names[i]] - 0.5) for i in kept])
        w = 0.5 / len(kept) + (0.5 * lift / lift.sum() if lift.sum() > 0 else np.full(len(kept), 0.5 / len(kept)))
        record["weights"] = dict(zip([names[i] for i in kept], (w / w.sum()).tolist()))
        record["rule"] += "; the kept ones weighted halfway between alike and their validation AUROC's lift over 0.5"
    if rejoin and positives >= MIN_POSITIVES and (yv == 0).any() and len(kept) < len(fits):
        w_all = np.zeros(len(fits))
        w_all[kept] = selection_weights(record) or 1.0 / len(kept)
        w_all, steps = rejoin_dropped(yv, standardised_scores(judged)[0][:, vm], w_all, seed=seed)
        record["rule"] += (f"; then a dropped candidate rejoins with an equal share where the kept ones' mean with it "
                           f"has the higher validation AUPRC by paired bootstrap, P >= {REJOIN_CONFIDENCE}")
        record["rejoined"] = [{**st, "candidate": names[st["candidate"]]} for st in steps]
        if steps:
            kept = [int(i) for i in np.flatnonzero(w_all > 0)]
            record.update(kept=[names[i] for i in kept], weights={names[i]: float(w_all[i]) for i in kept})
            record["chosen"] = " + ".join(record["kept"])
    log.info("candidates kept on validation: %s (%s)", record["chosen"], "; ".join(
        f"{n}: val AUPRC {record['val_auprc'][n]:.4f}"
        + (f", P({names[best]} better) {record['bootstrap'][n]['p_best_better']:.3f}" if n in record["bootstrap"] else "")
        + (f", weight {record['weights'].get(n, 0.0):.3f}" if "weights" in record else "")
        for n in names))
    return kept, record


def _above_chance(kept: list[int], val_auroc: list[float], names: list[str], record: dict[str, Any]) -> list[int]:
    """:func:`keep_candidates`' ``few="above-chance"``: the ``kept`` candidates whose validation AUROC is above 0.5
    (all of them where none is), recorded in ``record`` (``val_auroc``, ``below_chance``, ``kept``, ``chosen``)."""
    above = [i for i in kept if np.isfinite(val_auroc[i]) and val_auroc[i] > 0.5]
    record["val_auroc"] = dict(zip(names, map(float, val_auroc)))
    record["below_chance"] = [names[i] for i in kept if i not in above] if above else []
    record["rule"] += ("; with 1-9 validation anomalies, a candidate at or below 0.5 in validation AUROC is dropped "
                       "(all kept where none is above)")
    kept = above or kept
    record["kept"] = [names[i] for i in kept]
    record["chosen"] = " + ".join(record["kept"])
    return kept


def lift_weights(val_auprc: list[float], base_rate: float) -> np.ndarray:
    """Each candidate's weight ``max(0, val_auprc - base_rate)`` (a NaN AUPRC weighs 0), normalised to sum 1; all 0:
    equal weights. The base rate is the AUPRC of a random score, so a candidate weighs what it adds over chance."""
    w = np.nan_to_num(np.asarray(val_auprc, dtype=np.float64) - base_rate, nan=0.0).clip(min=0.0)
    return w / w.sum() if w.sum() > 0 else np.full(len(w), 1.0 / len(w))


def combine_candidates(fits: list[tuple[FitResult, Any, Any]], kept: list[int], data: Any,
                       split: Any, blocks: list[int] | None = None, width: int = 0,
                       label_columns: int = 0, weights: list[float] | None = None,
                       views: list[dict[str, Any] | None] | None = None) -> tuple[FitResult, torch.nn.Module, Any]:
    """The kept candidates as one fit: the candidate itself when one is kept, else a
    :class:`~gcad_dist.model.candidate_ensemble.CandidateEnsemble` scoring with the mean of their scores, each
    standardised over every node (no label), and its validation and test metrics. The first kept candidate is the
    primary: its epochs, history and config describe the run. ``blocks``: each kept candidate's input block, where
    they read differently normalised features (``gcad_dist.finetune``; :func:`~gcad_dist.model.candidate_ensemble.
    flat_ensemble`); one kept candidate that reads a block of its own is an ensemble of one. ``weights``: the kept
    candidates' weights (:func:`keep_candidates`' ``record["weights"]``), a weighted mean; None: the plain mean.
    ``views``: each kept candidate's label-free views record or None (``gcad_dist.finetune``'s zero-shot candidate,
    whose scores include them; :class:`~gcad_dist.model.candidate_ensemble.CandidateEnsemble`); one kept candidate
    with views is an ensemble of one too."""
    from dataclasses import replace

    from gcad_dist.metrics import evaluate
    from gcad_dist.model.candidate_ensemble import flat_ensemble, standardised_mean

    if len(kept) == 1 and not any(blocks or []) and not any(views or []):  # one kept reading the usual input: itself
        return fits[kept[0]]
    scores, stats = standardised_mean([fits[i][0].scores for i in kept], weights)
    y = torch.as_tensor(data.y).cpu().numpy()
    graph = getattr(data, "graph_id", None)
    graph = None if graph is None else torch.as_tensor(graph).cpu().numpy()
    val = evaluate(y, scores, graph, torch.as_tensor(split.val).cpu().numpy())
    test = evaluate(y, scores, graph, torch.as_tensor(split.test).cpu().numpy())
    primary, _, primary_cfg = fits[kept[0]]
    # the ensemble's cross-fitted scores: the same mean over the members' (their plain scores where they have none)
    sel, _ = standardised_mean([fits[i][0].selection_scores if getattr(fits[i][0], "selection_scores", None)
                                is not None else fits[i][0].scores for i in kept], weights)
    res = replace(primary, val=val, test=test, scores=scores, best_scores=None, selection_scores=sel,
                  extra={**primary.extra, "candidates_kept": len(kept)})
    # a kept fit that is itself a candidate ensemble (gcad_dist.finetune's graph models) joins as its members
    model = flat_ensemble([(fits[i][0].ensemble(fits[i][1]), mu, sd) for i, (mu, sd) in zip(kept, stats)],
                          blocks=blocks, width=width, label_columns=label_columns, weights=weights, views=views)
    return res, model, primary_cfg


def warn_split_classes(split: Any, y: Any) -> None:
    """Log a warning for a train or validation part without a labelled anomaly (nothing to learn / select on)."""
    yv = torch.as_tensor(y)
    for name in ("train", "val"):
        m = getattr(split, name)
        if int((yv[m] == 1).sum()) == 0:
            log.warning("the %s split holds no labelled anomaly (%d labelled nodes); %s", name, int(m.sum()),
                        "training has no anomaly to learn from" if name == "train" else "epoch selection is blind")


def _json_default(o: Any) -> Any:
    if isinstance(o, (np.floating, np.integer)):
        return o.item()
    return str(o)


def write_json(obj: Any, path: Path) -> None:
    """Write JSON (NaN becomes null) atomically enough for resume: temp file then rename."""
    def clean(v: Any) -> Any:
        if isinstance(v, float) and not math.isfinite(v):
            return None
        if isinstance(v, dict):
            return {k: clean(x) for k, x in v.items()}
        if isinstance(v, (list, tuple)):
            return [clean(x) for x in v]
        return v

    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(clean(obj), indent=1, default=_json_default))
    tmp.replace(path)


def add_forest_columns_option(p: argparse.ArgumentParser, default: str) -> None:
    """``--forest-columns``, shared by ``gcad_dist.train`` and ``gcad_dist.finetune``."""
    p.add_argument("--forest-columns", default=default, choices=FOREST_COLUMNS,
                   help="--forest auto: the trees' inputs. local = also each node's neighbour cosine (1 - cos(x, its "
                   "neighbours' mean x)) and its distance to its 2nd most alike neighbour, so that the trees see a "
                   "node that disagrees with its neighbours across columns (session 89: +0.126 validation AUROC of "
                   "the trees over eight fresh generated graphs, inj_cora +0.080, tolokers and reddit level; the "
                   "default since session 90: end to end +0.002 / +0.009 test AUROC / AUPRC over nine fresh generated "
                   "graphs, the shared graphs level). none = the trees' inputs before it")


def add_forest_min_anomalies_option(p: argparse.ArgumentParser, default: int) -> None:
    """``--forest-min-anomalies``, shared by ``gcad_dist.train`` and ``gcad_dist.finetune``."""
    p.add_argument("--forest-min-anomalies", type=int, default=default, metavar="N",
                   help="--forest auto: the fewest labelled validation anomalies the forest view's join test runs on; "
                   "with fewer, GCCAD scores alone. Below 10 the same bootstrap test decides, and a joined forest "
                   f"blends, never scores alone (session 77, BENCHMARKS.md) (default: {default})")


def add_few_anomalies_option(p: argparse.ArgumentParser, default: str, when: str, what: str, measured: str) -> None:
    """``--few-anomalies`` (:data:`FEW_VALIDATION_MODES`, :func:`keep_candidates`' ``few``) for ``gcad_dist.train``'s
    contrasts and ``gcad_dist.finetune``'s models: ``when`` the choice is made, ``what`` is chosen, what was
    ``measured`` and where the run records it."""
    p.add_argument("--few-anomalies", default=default, choices=FEW_VALIDATION_MODES,
                   help=f"{when} with 1-9 validation anomalies, too few for the bootstrap to drop any of the {what}: "
                   "'average' averages them alike; 'above-chance' drops those whose validation AUROC is at or below "
                   "0.5 (all stay where none is above); 'weighted' then weighs the others halfway between alike and "
                   f"their validation AUROC's lift over 0.5 ({measured}, each one's AUROC; BENCHMARKS.md, session 76)")


def build_parser() -> argparse.ArgumentParser:
    d = TrainConfig(graph="", out="")
    p = ArgumentParser(
        prog="python -m gcad_dist.train",
        description="Train GCCAD (or an ablation / a baseline) on one labelled graph, select the epoch on "
                    "validation AUPRC, write checkpoint, metrics JSON and plots. With fewer than "
                    f"{FEW_ANOMALIES} labelled training anomalies GCCAD is pre-trained without labels first and "
                    "fine-tuned (--pretrain auto).",
        formatter_class=DefaultsHelpFormatter,
    )
    p.add_argument("--graph", required=True, help="labelled graph: .npz (x, edge_index, y[, masks]), torch-saved PyG Data (.pt) or folder")
    p.add_argument("--out", required=True, help="output directory (model.pt, metrics.json, PNG plots)")
    p.add_argument("--model", default=d.model, choices=MODELS + ("gccad-ce",), help="gccad, or a cross-entropy baseline; gccad-ce = gccad --ablation ce; bwgnn = the Beta-wavelet filter bank "
                   "GADBench found the strongest GNN for anomaly detection (Tang et al., ICML 2022; --layers is its order)")
    p.add_argument("--conv", default=d.conv, choices=CONVS, help="GCCAD node-update convolution")
    p.add_argument("--link-eval", default=d.link_eval, choices=LINK_EVALS,
                   help="GCCAD link remover at evaluation: 'expected' weights each edge by its keep probability p "
                        "(the mean of what training samples); 'threshold' keeps iff p > 0.5 (METHOD.md, the paper). "
                        "expected beat threshold on the validation splits of tolokers, reddit, books and inj_cora "
                        "(BENCHMARKS.md)")
    p.add_argument("--forest", default=d.forest, choices=FOREST_MODES,
                   help="the full GCCAD model: auto = also fit trees on [x, the neighbours' mean x, degree] (the forest also its second hop) (GADBench's "
                   "RF-Graph and gradient-boosted trees, the strongest family on fraud graphs whose anomalies show in "
                   "their own attributes, their ranks averaged since session 66) on the same training nodes; they join where validation holds >= 10 anomalies and a "
                   "paired bootstrap over them finds GCCAD's cross-fitted validation AUPRC and AUROC higher with a "
                   "probability below 0.8 each, and the score is then the mean of both scores' ranks, or the "
                   "trees' alone where the same bootstrap places them above that blend with probability >= 0.95 "
                   "(labels set by a rule over a few attributes; seconds on 10k nodes; metrics.json 'forest_view' "
                   "says what was measured and chosen; BENCHMARKS.md, sessions 61, 62 and 66); off = GCCAD alone")
    add_forest_min_anomalies_option(p, d.forest_min_anomalies)
    add_forest_columns_option(p, d.forest_columns)
    p.add_argument("--rejoin", action=argparse.BooleanOptionalAction, default=d.rejoin,
                   help="--contrast auto: after the keep rule, a contrast it dropped rejoins the kept ones, with an "
                   "equal share, where a paired bootstrap over the validation nodes finds their mean with it better "
                   "in AUPRC with P >= 0.8 (with >= 10 validation anomalies; one at a time, the best first; "
                   "metrics.json 'contrast_selection' lists them under 'rejoined'); as gcad_dist.finetune --rejoin. Off by "
                   "default: on eight generated graphs and three real ones no contrast rejoined, since the three "
                   "contrasts rank the same anomalies (BENCHMARKS.md, session 75)")
    add_few_anomalies_option(p, d.few_anomalies, "--contrast auto", "contrasts",
                             "'weighted': +0.024 / +0.029 test AUROC / AUPRC on ten fresh generated graphs with 6 "
                             "validation anomalies, not the default: as fine-tuning's inner contrast rule it cost one "
                             "graph 0.015; metrics.json 'contrast_selection'")
    p.add_argument("--contrast", default=d.contrast, choices=(*CONTRASTS, "auto"),
                   help="GCCAD: what each node is contrasted with: graph = the graph's context (the paper's); "
                   "neighbors / ego = the mean of its neighbours' embeddings (ego: against the node's own feature "
                   "projection); auto = train three candidates from the same seed (with --norm layer: graph and ego "
                   "with LayerNorm, then graph with the graph norm; with --norm graph: graph with the graph norm, then "
                   "graph and ego with LayerNorm), keep every candidate whose validation AUPRC a paired bootstrap does "
                   "not place below the best one's (confidence >= 0.95 over >= 10 validation anomalies; with fewer, "
                   "all are kept) and score with the mean of the kept ones' standardised scores (about 3x the time of "
                   "one; --candidate-workers fits them side by side; the full GCCAD model only, ablations use graph)")
    p.add_argument("--jump", default=d.jump, choices=JUMPS,
                   help="GCCAD graph contrast: last = contrast and score the last layer's embedding h^(L) with the "
                   "context q^(L) (METHOD.md); cat = jumping knowledge, every layer's embedding and context "
                   "concatenated, the input projection h^(0) included, so a node's own features stay visible next "
                   "to what message passing made of them (with --contrast auto: the graph candidate). Default: cat "
                   "for the full model, last for --ablation and gccad-ce (controlled comparisons with the paper's "
                   "model); chosen on validation (BENCHMARKS.md, session 9). cat-local = cat with the first context "
                   "block the mean of the node's neighbours' h^(0) instead of the graph's (not the default yet: "
                   "BENCHMARKS.md, session 10)")
    p.add_argument("--norm", default=d.norm, choices=NORMS,
                   help="normalisation after each message-passing layer, every model: layer = LayerNorm, every node "
                   "rescaled to the same size; graph = one divisor (the root mean square over all nodes) and a "
                   "per-channel affine map, so a node's size relative to the others (a sum over many neighbours) "
                   "survives")
    p.add_argument("--score-space", default=d.score_space, choices=SCORE_SPACES,
                   help="GCCAD score 1 - cos(h, q) on the encoder outputs (METHOD.md) or after the projection head")
    p.add_argument("--ablation", default=d.ablation, choices=ABLATIONS,
                   help="GCCAD ablation: ce = cross-entropy head instead of the contrastive loss; no-link-loss = link-loss weight 0; "
                        "no-global = link predictor without the h - q terms; no-edge-update = no link predictor / remover")
    p.add_argument("--hidden", type=int, default=d.hidden, help="hidden width (all models)")
    p.add_argument("--layers", type=int, default=d.layers, help="number of message-passing layers (all models; bwgnn: the order of its wavelets, the hops each reaches)")
    p.add_argument("--dropout", type=float, default=d.dropout, help="dropout probability")
    p.add_argument("--input-dropout", type=float, default=d.input_dropout, metavar="P",
                   help="dropout on the input features during training (0 = none, the paper's). Default: for "
                        "GCCAD 0.2 while the training split holds fewer than 20 labelled anomalies per input "
                        "feature (after --label-fraction), else 0: with few labels its fits learn the anomalies by "
                        "heart within 20-30 epochs, and the dropout's gain on validation fell as that ratio grew, "
                        "to a loss from 30 on (BENCHMARKS.md, sessions 28-29); 0 for the baselines")
    p.add_argument("--label-inputs", action=argparse.BooleanOptionalAction, default=d.label_inputs,
                   help="two more input columns: how many of a node's neighbours are labelled anomalies of the "
                        "train split, and their share of its neighbours (guilt by association: ring members share "
                        "their links). Trained with the masked label trick (each epoch half of the training anomalies "
                        "are inputs, the loss takes every other training node), so no node is trained on a score its "
                        "own label fed; validation and test labels are never read. gcad_dist.score fills the "
                        "columns from the labels of the graph it scores. Default: on for GCCAD when the fit's "
                        "training labels (after --label-fraction) hold at least 10 anomalies (validation AUPRC +0.020 over four graphs, "
                        "BENCHMARKS.md, session 31; with 6 anomalies they cost 0.038, session 32), off for the "
                        "baselines")
    add_schedule_options(p, d)
    p.add_argument("--no-class-weight", dest="class_weight", action="store_false",
                   help="baselines: plain cross-entropy instead of inverse-class-frequency weighting")
    p.add_argument("--normalize", default=d.normalize, choices=NORMALIZE_CHOICES,
                   help="feature normalisation, label-free, over all nodes: standard = z-score; power = z-score, a "
                   "Yeo-Johnson transform per column (heavy tails made near-Gaussian), z-score; none = raw")
    add_split_options(p, d, seed_help="seed for initialisation, training noise and the random split")
    p.add_argument("--label-fraction", type=float, default=d.label_fraction,
                   help="train on this fraction of the training split's labels, in (0, 1]: the seeded stratified subsample "
                        "gcad_dist.finetune uses (same split and --seed -> same nodes); validation and test untouched")
    p.add_argument("--pretrain", default=d.pretrain, choices=PRETRAIN_MODES,
                   help="pre-train first: on = build a one-part store of the graph (partitioning.build --k 1), "
                   "pre-train GCCAD-pre on it without labels (gcad_dist.pretrain, one Ray Train worker, Ray started "
                   "here unless --address) and fine-tune from that checkpoint (gcad_dist.finetune, same split, labels "
                   "and settings; its candidates include this command's model from scratch), all under --out; "
                   f"auto = on where the fit holds fewer than {FEW_ANOMALIES} labelled training anomalies (after "
                   "--label-fraction) and the model options are the defaults; off = train from scratch. "
                   "metrics.json 'pretraining' says what was chosen and why")
    add_candidate_options(p, d)
    add_resume_options(p, d)
    add_runtime_options(p, d)
    return p


def add_schedule_options(p: argparse.ArgumentParser, defaults: object, epochs_help: str = "") -> None:
    """--epochs, --lr, --weight-decay, --eval-every, --patience, --snapshots and --max-degree: how each labelled fit
    is trained and its epochs chosen (gcad_dist.train and gcad_dist.finetune share them)."""
    g = lambda name: getattr(defaults, name)  # noqa: E731
    p.add_argument("--epochs", type=int, default=g("epochs"),
                   help=epochs_help or "maximum full-batch epochs (one optimiser step each)")
    p.add_argument("--lr", type=float, default=g("lr"), help="peak learning rate (Adam; 10%% warm-up, then linear decay to lr/10)")
    p.add_argument("--weight-decay", type=float, default=g("weight_decay"), help="Adam weight decay")
    p.add_argument("--eval-every", type=int, default=g("eval_every"), help="evaluate on the validation split every n epochs")
    p.add_argument("--patience", type=int, default=g("patience"),
                   help="early stop after n epochs without better validation AUPRC (0 = off)")
    p.add_argument("--snapshots", type=int, default=g("snapshots"),
                   help="score with the mean of the scores of the n evaluations with the best validation AUPRC, a "
                   "snapshot ensemble that the checkpoint keeps (1 = the single best epoch). Steadier than one epoch "
                   "picked on a few validation anomalies (BENCHMARKS.md, session 13). Default: %(default)s")
    p.add_argument("--max-degree", type=int, default=g("max_degree"), metavar="D",
                   help="GCCAD on dense graphs: each training epoch uses every in-edge of a node with at most D of them "
                   "and a fresh random D / degree share of a busier node's, its sum rescaled to the full degree "
                   "(GraphSAGE-style sampling; an epoch then costs at most about D edges a node); evaluation and scoring "
                   "use every edge. No effect where no node has more than D in-edges. 0 = every edge in every epoch. "
                   "Default: %(default)s")


def add_split_options(p: argparse.ArgumentParser, defaults: object, seed_help: str) -> None:
    """--seed, --split-index, --train-frac and --val-frac: which labelled split a run uses (gcad_dist.train and
    gcad_dist.finetune make the same split from the same flags)."""
    p.add_argument("--seed", type=int, default=getattr(defaults, "seed"),
                   help=f"{seed_help}; with given split masks, split seed %% S is used")
    p.add_argument("--split-index", type=int, default=None, help="use this given split (0..S-1) instead of seed %% S")
    p.add_argument("--train-frac", type=float, default=getattr(defaults, "train_frac"),
                   help="random split: train fraction (when the graph has no split masks)")
    p.add_argument("--val-frac", type=float, default=getattr(defaults, "val_frac"),
                   help="random split: validation fraction (the rest is test)")


def add_resume_options(p: argparse.ArgumentParser, defaults: object) -> None:
    """--resume, --overwrite and --checkpoint-interval: an interrupted run continues (train and finetune)."""
    p.add_argument("--resume", action="store_true",
                   help="continue the unfinished run in --out where it stopped (Ctrl-C, a crash, a lost machine): "
                   "finished fits are not trained again, an unfinished one continues from its last saved epoch with "
                   "the same random streams, so the result is the uninterrupted run's; the settings must be the same "
                   "(--threads, --device, --candidate-workers may change)")
    p.add_argument("--overwrite", action="store_true", help="delete an unfinished run in --out and start over")
    p.add_argument("--checkpoint-interval", type=float, default=getattr(defaults, "checkpoint_interval"),
                   metavar="SECONDS",
                   help="while training, write each fit's state (model, optimiser, random streams, best evaluations) "
                   "to <out>/unfinished at an epoch end at most every SECONDS (0 = every epoch); a crash loses at most "
                   "that much work, a Ctrl-C or SIGTERM none (the fit stops at the epoch's end after writing it); the "
                   "folder is deleted when the run has written its outputs")


def add_candidate_options(p: argparse.ArgumentParser, defaults: object) -> None:
    """--candidate-workers and --address: where the candidates are fitted (``gcad_dist.train --contrast auto``'s,
    ``gcad_dist.finetune --model auto``'s)."""
    p.add_argument("--candidate-workers", type=int, default=getattr(defaults, "candidate_workers"),
                   help="fit up to this many candidates at once (gcad_dist.train --contrast auto's three, gcad_dist.finetune "
                   "--model auto's), each as a Ray task "
                   "with --threads CPUs (with --threads 0: this machine's CPUs shared; or one GPU each on CUDA), on "
                   "this machine or on the cluster of --address; the scores are those of fitting them one after "
                   "another. 1 = one after another in this process, no Ray")
    p.add_argument("--address", default=None,
                   help="with --candidate-workers > 1: Ray cluster to join ('auto' or ray://host:10001); default: "
                   "$RAY_ADDRESS if set, else start Ray in this process for the run")


def pretraining_choice(cfg: TrainConfig, data: Any = None) -> tuple[Any, Any]:
    """``--pretrain``'s choice for ``cfg`` (:func:`gcad_dist.pretrain_first.choose`) and the graph it counted the
    labelled training anomalies on (``data``, loaded unless given; None where it needs no count: ``--pretrain off``,
    or another model)."""
    from gcad_dist.pretrain_first import PretrainChoice, changed_model_options, check_pretrain_option, choose

    check_pretrain_option(cfg)
    if cfg.pretrain == "off":
        return PretrainChoice("off", False, "--pretrain off"), data
    if changed_model_options(cfg):  # auto with another model: from scratch, whatever the count
        return choose(cfg, -1), data
    if data is None:
        data = load_labelled(cfg.graph, cfg.normalize)
    _, _, _, budget = run_split(cfg, data)
    return choose(cfg, int(budget["train_labelled_anomalies"])), data


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    cfg = TrainConfig(**vars(args))
    setup_logging(cfg.verbose)
    out = Path(cfg.out)
    if out.exists() and not out.is_dir():
        raise UsageError(f"--out: {out} exists and is not a directory")
    _validate(cfg)
    choice, data = pretraining_choice(cfg)
    if choice.used:
        from gcad_dist.finetune import summary_line
        from gcad_dist.pretrain_first import finetune_settings, run_pretrained

        m = run_pretrained(cfg, choice)
        p = m["pretraining"]
        print(f"{cfg.model}: pre-trained without labels ({p['store_seconds'] + p['pretrain_seconds']:.0f} s: "
              f"{choice.reason}), then " + summary_line(finetune_settings(cfg, Path(p["run"]) / "final"), m))
        return 0
    if choice.mode == "auto":
        log.info("no pre-training: %s", choice.reason)
    state_dir = prepare_run_state(cfg)
    t0 = time.perf_counter()
    try:
        o = train_one(cfg, data=data, state_dir=state_dir)
    except ResumeMismatch as e:
        raise UsageError(f"--resume: {e}; start over with --overwrite") from None
    except BaseException as e:
        abandon_run_state(state_dir, e)
        raise
    res, metrics = o.fit, o.metrics
    from gcad_dist.checkpoint import save_model

    kind = "gccad" if cfg.model == "gccad-ce" else cfg.model
    save_model(out, o.model, o.model_config, extra={
        "model": kind, "ablation": "ce" if cfg.model == "gccad-ce" else cfg.ablation,
        "normalize": cfg.normalize, "best_epoch": res.best_epoch, "val": res.val, "test": res.test,
        "label_inputs": reads_label_inputs(o.data),
    }, snapshots=res.snapshot_states)
    metrics["wall_seconds"] = round(time.perf_counter() - t0, 3)
    metrics["pretraining"] = choice.record()
    write_json(metrics, out / "metrics.json")
    sel = metrics.get("contrast_selection", {})
    kept_names = sel.get("kept", [])  # the curves and best epoch below are the first kept candidate's
    if cfg.plots:
        from gcad_dist.plots import plot_roc_pr, plot_training_curves

        title = f"{Path(cfg.graph).name} {cfg.model}" + (f" ({cfg.ablation})" if cfg.ablation != "none" else "")
        curves = title + (f": candidate {kept_names[0]}, the first of {len(kept_names)} averaged"
                          if len(kept_names) > 1 else "")
        plot_training_curves(res.history, out / "training_curves.png", title=curves, best_epoch=res.best_epoch)
        y_np = o.data.y.cpu().numpy()
        test = o.split.test.cpu().numpy() & (y_np >= 0)
        plot_roc_pr(y_np[test], res.scores[test], out / "roc_pr_test.png", title=f"test, {title}")
    finish_run_state(state_dir)
    snaps = f" (scored by {len(res.snapshot_epochs)} snapshots)" if len(res.snapshot_epochs) > 1 else ""
    kept = f" | {sel['chosen']} (kept of {' / '.join(sel['candidates'])})" if sel else ""
    fv = metrics.get("forest_view")
    if fv:
        kept += " | forest view " + describe_choice(fv)
    first = f"first kept candidate ({kept_names[0]}): " if len(kept_names) > 1 else ""
    print(f"{cfg.model}: {describe_labels(o.data.y)}{kept} | {first}best epoch {res.best_epoch}/{res.epochs_run}{snaps}, "
          f"{res.seconds_per_epoch():.3f} s/epoch | run {metrics['wall_seconds']:.1f} s | "
          f"val AUROC {res.val['auroc']:.4f} AUPRC {res.val['auprc']:.4f} | "
          f"test ({res.test['num_nodes']} labelled nodes) AUROC {res.test['auroc']:.4f} AUPRC {res.test['auprc']:.4f} "
          f"Rec@K {res.test['recall_at_k']:.4f} -> {out}")
    hint = few_labels_hint(cfg.graph, metrics["label_budget"]["train_labelled_anomalies"])
    if hint:
        log.info(hint)
    return 0


if __name__ == "__main__":
    run_cli(main)
