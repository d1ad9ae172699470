"""``gcad_dist.train --pretrain``: pre-train without labels, then fine-tune, in the one command.

With a few labelled anomalies, fine-tuning a label-free GCCAD-pre checkpoint has scored far above training from
scratch on the same labels (BENCHMARKS.md, sessions 33-36, 67-81: 24 of 24 runs on eight fresh generated graphs with
4 training anomalies; with about 60 and 96 of them, 13 of 16 ahead and 3 level, session 81; with about 156 and 264,
15 of 16 ahead by less, +0.006 / +0.019 AUROC / AUPRC, and one level, session 82). ``gcad_dist.train``
used to only suggest the three commands; with ``--pretrain auto`` it runs them itself where the fit holds fewer than
:data:`gcad_dist.train.FEW_ANOMALIES` labelled training anomalies:

1. ``partitioning.build --k 1``: a one-part store of the graph, ``<out>/pretrain/store.zarr``;
2. ``gcad_dist.pretrain``: self-supervised pre-training on it (one Ray Train worker; Ray started in this process
   unless ``--address`` / ``$RAY_ADDRESS`` names a cluster), ``<out>/pretrain/run``, at its own defaults and the run's
   ``--seed``; it reads no label;
3. ``gcad_dist.finetune`` from ``<out>/pretrain/run/final`` with the run's split, label subsample and supervised
   settings (its ``--model auto`` also fits ``gcad_dist.train``'s own model from scratch as one candidate, kept where
   validation prefers it); its checkpoint is written where ``gcad_dist.train`` writes its own, ``<out>/model.pt``.

``metrics.json`` says what was chosen and why (``pretraining``). ``--resume`` reuses a finished store and
pre-training and continues an unfinished one from its last checkpoint.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gcad_dist.cli import UsageError

log = logging.getLogger("gcad_dist.pretrain_first")

#: ``gcad_dist.train --pretrain``: auto = pre-train first below FEW_ANOMALIES labelled training anomalies, on = always,
#: off = never (training from scratch, as before session 80)
PRETRAIN_MODES = ("auto", "on", "off")
#: the pre-training stage's folder inside ``--out``
STAGE_DIR = "pretrain"
#: ``TrainConfig`` fields that fine-tuning does not take (it fits ``gcad_dist.train``'s default model): pre-training
#: first needs them at their defaults
MODEL_FIELDS = ("model", "conv", "ablation", "contrast", "jump", "norm", "hidden", "layers", "dropout", "class_weight",
                "rejoin", "few_anomalies")


@dataclass
class PretrainChoice:
    """Whether a ``gcad_dist.train`` run pre-trains first, and why (``metrics.json`` ``pretraining``)."""

    mode: str
    used: bool
    reason: str
    train_anomalies: int | None = None

    def record(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def changed_model_options(cfg: Any) -> list[str]:
    """The options of :data:`MODEL_FIELDS` that ``cfg`` (a ``TrainConfig``) sets away from their defaults."""
    from gcad_dist.train import TrainConfig, option_name

    d = TrainConfig(graph="", out="")
    return [option_name(f) for f in MODEL_FIELDS if getattr(cfg, f) != getattr(d, f)]


def check_pretrain_option(cfg: Any) -> None:
    """``--pretrain``'s checks before any work: a known mode, and ``on`` only with the default model."""
    if cfg.pretrain not in PRETRAIN_MODES:
        raise UsageError(f"--pretrain: {cfg.pretrain!r} is not one of {', '.join(PRETRAIN_MODES)}")
    changed = changed_model_options(cfg)
    if cfg.pretrain == "on" and changed:
        raise UsageError(f"--pretrain on fine-tunes gcad_dist.train's default GCCAD model, and {', '.join(changed)} "
                         "would change it: drop them, or pass --pretrain off")


def choose(cfg: Any, train_anomalies: int) -> PretrainChoice:
    """Whether the run pre-trains first: ``--pretrain on``; ``auto`` with the default model and fewer than
    :data:`gcad_dist.train.FEW_ANOMALIES` labelled training anomalies (after ``--label-fraction``; -1: not counted)."""
    from gcad_dist.train import FEW_ANOMALIES

    if cfg.pretrain == "off":
        return PretrainChoice("off", False, "--pretrain off", train_anomalies)
    if cfg.pretrain == "on":
        return PretrainChoice("on", True, "--pretrain on", train_anomalies)
    changed = changed_model_options(cfg)
    if changed:
        return PretrainChoice("auto", False, f"{', '.join(changed)} set: fine-tuning fits the default model only",
                              train_anomalies if train_anomalies >= 0 else None)
    if train_anomalies >= FEW_ANOMALIES:
        return PretrainChoice("auto", False, f"{train_anomalies} labelled training anomalies, at least {FEW_ANOMALIES}",
                              train_anomalies)
    return PretrainChoice("auto", True, f"{train_anomalies} labelled training anomalies, fewer than {FEW_ANOMALIES}",
                          train_anomalies)


def pretrained_checkpoint(cfg: Any) -> tuple[Path, dict[str, Any]]:
    """Steps 1-2 of the module doc for a ``TrainConfig``: the pre-trained checkpoint folder and what was done.
    Without ``--resume`` both are made afresh; with it a finished store and pre-training are reused and an
    unfinished pre-training continues from its last checkpoint."""
    from gcad_dist.pretrain import PretrainConfig
    from gcad_dist.pretrain import run as pretrain
    from gcad_dist.score import _resolve_device
    from partitioning.build import BuildConfig, build
    from partitioning.kmeans import available_threads

    stage = Path(cfg.out) / STAGE_DIR
    store, run_dir = stage / "store.zarr", stage / "run"
    if not cfg.resume and stage.exists():
        shutil.rmtree(stage)
    stage.mkdir(parents=True, exist_ok=True)
    record: dict[str, Any] = {"store": str(store), "run": str(run_dir)}
    t0 = time.perf_counter()
    if store.exists():  # a store folder is only ever a finished build (written elsewhere, renamed last)
        log.info("pre-training: reusing the store %s", store)
    else:
        log.info("pre-training 1/2: one-part store of %s -> %s", cfg.graph, store)
        build(BuildConfig(graph=cfg.graph, out=str(store), k=1, corruption_mix="none", seed=cfg.seed,
                          threads=cfg.threads, plot=False, progress=cfg.progress))
    record["store_seconds"] = round(time.perf_counter() - t0, 3)
    cuda = _resolve_device(cfg.device).type == "cuda"
    pcfg = PretrainConfig(store=str(store), out=str(run_dir), workers=1,
                          cpus_per_worker=cfg.threads or available_threads(),
                          gpus_per_worker=1.0 if cuda else 0.0, address=cfg.address, seed=cfg.seed,
                          verbose=cfg.verbose, progress=cfg.progress)
    pcfg.resume = (run_dir / "ray_train").exists()  # only with --resume: the stage was deleted above otherwise
    t1 = time.perf_counter()
    log.info("pre-training 2/2: gcad_dist.pretrain on %s -> %s (no labels read)", store, run_dir)
    try:
        pretrain(pcfg)
    except BaseException:
        log.error("pre-training stopped; the same command with --resume continues it from its last checkpoint")
        raise
    record["pretrain_seconds"] = round(time.perf_counter() - t1, 3)
    return run_dir / "final", record


def finetune_settings(cfg: Any, checkpoint: Path) -> Any:
    """The ``FinetuneConfig`` of a ``TrainConfig``'s step 3: the same split, labels, supervised and run settings;
    fine-tuning's own defaults for what only it has."""
    from gcad_dist.finetune import FinetuneConfig

    return FinetuneConfig(
        checkpoint=str(checkpoint), graph=cfg.graph, out=cfg.out, label_fraction=cfg.label_fraction,
        epochs=cfg.epochs, lr=cfg.lr, weight_decay=cfg.weight_decay, eval_every=cfg.eval_every,
        patience=cfg.patience, snapshots=cfg.snapshots, max_degree=cfg.max_degree, input_dropout=cfg.input_dropout,
        label_inputs=cfg.label_inputs, link_eval=cfg.link_eval, score_space=cfg.score_space, seed=cfg.seed,
        split_index=cfg.split_index, train_frac=cfg.train_frac, val_frac=cfg.val_frac,
        scratch_normalize=cfg.normalize, device=cfg.device, threads=cfg.threads,
        candidate_workers=cfg.candidate_workers, address=cfg.address, resume=cfg.resume, overwrite=cfg.overwrite,
        checkpoint_interval=cfg.checkpoint_interval, plots=cfg.plots, forest=cfg.forest,
        forest_min_anomalies=cfg.forest_min_anomalies, forest_columns=cfg.forest_columns, progress=cfg.progress,
        verbose=cfg.verbose,
    )


def pretraining_unfinished(out: Path) -> bool:
    """Whether ``out`` holds a pre-training stage that stopped after its first checkpoint, before its model."""
    run_dir = out / STAGE_DIR / "run"
    return (run_dir / "ray_train").exists() and not (run_dir / "final" / "model.pt").exists()


def check_stage(cfg: Any) -> None:
    """``--resume`` / ``--overwrite`` against what ``<out>`` holds, before any work (as ``gcad_dist.train``'s own
    fits: an unfinished run is continued or deleted only when asked)."""
    from gcad_dist.fit_state import has_unfinished_run

    out = Path(cfg.out)
    unfinished = pretraining_unfinished(out) or has_unfinished_run(out)
    if cfg.resume and not (unfinished or (out / STAGE_DIR / "store.zarr").exists()):
        raise UsageError(f"--resume: {out} holds no unfinished run (no pre-training or fit state)")
    if unfinished and not (cfg.resume or cfg.overwrite):
        raise UsageError(f"--out: {out} holds an unfinished run (pre-training first); pass --resume to continue it, "
                         "or --overwrite to start over")


def run_pretrained(cfg: Any, choice: PretrainChoice) -> dict[str, Any]:
    """Steps 1-3 of the module doc for a ``TrainConfig``; returns fine-tuning's metrics with ``pretraining``
    added (also in ``<out>/metrics.json``); the model goes to ``<out>/model.pt``."""
    from gcad_dist.finetune import run_finetune
    from gcad_dist.fit_state import has_unfinished_run
    from gcad_dist.train import write_json

    log.info("pre-training first (%s); --pretrain off trains from scratch", choice.reason)
    out = Path(cfg.out)
    check_stage(cfg)
    t0 = time.perf_counter()
    checkpoint, stage = pretrained_checkpoint(cfg)
    fcfg = finetune_settings(cfg, checkpoint)
    # fine-tuning continues only where it left fits' states; after a pre-training just finished it starts
    fcfg.resume = cfg.resume and has_unfinished_run(out)
    t1 = time.perf_counter()
    metrics = run_finetune(fcfg)
    final = out / "final"
    os.replace(final / "model.pt", out / "model.pt")  # where gcad_dist.train writes its model
    shutil.rmtree(final, ignore_errors=True)
    metrics["pretraining"] = {**choice.record(), **stage, "finetune_seconds": round(time.perf_counter() - t1, 3)}
    metrics["wall_seconds"] = round(time.perf_counter() - t0, 3)
    write_json(metrics, out / "metrics.json")
    return metrics
