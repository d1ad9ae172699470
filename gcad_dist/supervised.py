"""The single-process labelled training loop: full-batch training on one graph (or a ``Batch``).

One loop serves GCCAD (its own ``model.loss`` on the train nodes, score ``model.score(out)``) and
the cross-entropy baselines of :mod:`gcad_dist.model.baselines` (optionally class-weighted CE,
score = softmax probability of class 1). Optimiser: Adam; learning-rate schedule as METHOD.md §2
(linear warm-up over the first 10 % of steps, then linear decay to lr / 10; one step per epoch).
The model is evaluated every ``eval_every`` epochs on the validation split; the ``snapshots`` states with
the best **validation AUPRC** are kept (the test split is never used for selection), every node is scored
with the mean of their scores (:mod:`gcad_dist.model.snapshots`), and training stops after ``patience``
epochs without a better single evaluation. Nodes with an unknown label (``y < 0``, partly labelled
graphs) take part in message passing only: they are dropped from the train/val/test masks, so they enter
no loss and no metric.
"""

from __future__ import annotations

import contextlib
import copy
import logging
import math
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor
from tqdm.auto import tqdm

from gcad_dist.checkpoint import cpu_state, rng_state, set_rng_state
from gcad_dist.cli import bar_disable
from gcad_dist.data.degree_cap import DegreeCap
from gcad_dist.data.label_inputs import LABEL_COLUMNS, LabelInputSampler
from gcad_dist.fit_state import FitCheckpointer, FitInterrupted, ResumeMismatch, StopRequest, fingerprint, same_fit
from gcad_dist.metrics import evaluate
from gcad_dist.model.baselines import CrossEntropyClassifier
from gcad_dist.model.precision import autocast, resolve_precision
from gcad_dist.model.snapshots import SnapshotEnsemble
from gcad_dist.optim import adam
from gcad_dist.selection import CrossFit, validation_folds

log = logging.getLogger(__name__)
_CAP_SAID: set[tuple[int, int, float]] = set()  # the in-degree caps already logged in this process

__all__ = ["SupervisedConfig", "FitResult", "fit_supervised", "FitInterrupted", "ResumeMismatch", "lr_lambda", "resolve_device", "predict"]


@dataclass
class SupervisedConfig:
    """Settings of :func:`fit_supervised`."""

    # maximum number of full-batch epochs (= optimiser steps). 400, not 200: at 200 the cap bound on tolokers for
    # every GNN and for GCCAD's ego contrast (BENCHMARKS.md, session 8); elsewhere patience stops runs first
    epochs: int = 400
    lr: float = 1e-3  # peak learning rate (Adam)
    weight_decay: float = 0.0  # Adam weight decay (L2)
    # L2-SP (Li et al., 2018): anchor / 2 * ||w - w_start||^2 added to the loss, which pulls the weights towards those
    # the fit started from (a pre-trained model's) rather than towards zero; 0 = off
    anchor: float = 0.0
    warmup_frac: float = 0.1  # linear warm-up over this fraction of the steps
    final_lr_frac: float = 0.1  # the learning rate decays linearly to lr * final_lr_frac
    eval_every: int = 5  # evaluate on the validation split every n epochs (and after the last)
    patience: int = 50  # stop after this many epochs without a better val AUPRC (0 = never stop early)
    # score with the mean of the scores of this many evaluations, those with the best val AUPRC (1 = the single
    # best epoch, the rule before session 13; BENCHMARKS.md, "snapshot ensemble")
    snapshots: int = 5
    class_weight: bool = True  # baselines: weight CE by inverse class frequency of the train nodes
    grad_clip: float = 0.0  # clip the gradient norm to this value (0 = off)
    seed: int = 0  # seed for dropout / Gumbel sampling during training
    device: str = "auto"  # "auto" (cuda if available), "cpu", "cuda", "cuda:1", ...
    progress: bool = True  # show a tqdm bar
    # "fp32" | "bf16": bf16 autocast for the forward pass and loss (and evaluation), on GPUs and CPUs
    # with native bf16; elsewhere it falls back to fp32 with a warning (gcad_dist.model.precision)
    precision: str = "fp32"
    # GCCAD only: train each epoch on a fresh sample of at most about this many in-edges a node, their sums rescaled
    # (gcad_dist.data.degree_cap); evaluation uses every edge. 0 = every edge in every epoch. 64 since session 24:
    # level on tolokers' and reddit's validation splits (32 cost reddit 0.006 AUROC and tolokers 0.011 AUPRC);
    # tolokers' epoch 2.1x faster, a 4.3M-edge graph's 4.9x (BENCHMARKS.md, session 24)
    max_degree: int = 64
    # where the fit's training state is written so that an interrupted run continues (gcad_dist.fit_state): a
    # folder, with the fit's file named by fit_supervised's ``state_name``; None = not written
    state_dir: str | None = None
    state_interval: float = 60.0  # write the state at an epoch end at most every this many seconds (0 = every epoch)
    # the last LABEL_COLUMNS columns of x are neighbour-label inputs (gcad_dist.data.label_inputs, built from the
    # train split): each training epoch redraws them from a random half of the training anomalies, the loss takes
    # every other training node
    label_inputs: bool = False


@dataclass
class FitResult:
    """Outcome of :func:`fit_supervised`. ``state_dict`` is the best single (best-validation) state, already
    loaded into the model; ``scores`` (and ``val``, ``test``) are those of the snapshot ensemble, the mean over
    ``snapshot_states`` (the best first), which :meth:`ensemble` rebuilds as one module."""

    best_epoch: int
    val: dict[str, float]
    test: dict[str, float]
    history: dict[str, list]
    state_dict: dict[str, Tensor]
    scores: np.ndarray  # anomaly score of every node under the selected state
    epochs_run: int
    seconds: float
    device: str
    extra: dict[str, Any] = field(default_factory=dict)
    snapshot_states: list[dict[str, Tensor]] = field(default_factory=list)
    snapshot_epochs: list[int] = field(default_factory=list)
    best_scores: np.ndarray | None = None  # the best single state's scores (= scores with one snapshot)
    # standardised scores whose validation part was chosen on the other validation half (gcad_dist.selection.CrossFit):
    # what a keep rule judges the fit by without the optimism of its own epoch choice; None on multi-graph data
    selection_scores: np.ndarray | None = None

    def ensemble(self, model: torch.nn.Module) -> torch.nn.Module:
        """``model`` itself with one snapshot or when it is already a candidate ensemble (the fit of
        :func:`gcad_dist.train.combine_candidates`, whose members hold their own snapshots), else a
        :class:`SnapshotEnsemble` of ``model``'s architecture holding the snapshots: the module whose scores are
        ``scores``."""
        from gcad_dist.model.candidate_ensemble import CandidateEnsemble

        if len(self.snapshot_states) <= 1 or isinstance(model, CandidateEnsemble):
            return model
        return SnapshotEnsemble(model, self.snapshot_states)

    def seconds_per_epoch(self) -> float:
        """Mean wall seconds of an epoch after the first: its step, plus its validation pass when it had one
        (so every ``eval_every``-th epoch's evaluation is included). The first epoch is left out, as it holds
        one-time costs (allocations, lazy initialisation)."""
        t = self.history.get("epoch_seconds") or []
        return round(float(np.mean(t[1:] if len(t) > 1 else t)), 4) if t else float("nan")

    def summary(self) -> dict[str, Any]:
        """JSON-friendly summary (no tensors)."""
        return {
            "best_epoch": self.best_epoch,
            "epochs_run": self.epochs_run,
            "seconds": round(self.seconds, 3),
            "seconds_per_epoch": self.seconds_per_epoch(),
            "device": self.device,
            "snapshot_epochs": self.snapshot_epochs,
            "val": self.val,
            "test": self.test,
            **self.extra,
        }


def resolve_device(device: str) -> torch.device:
    """``"auto"`` -> cuda when available, else cpu."""
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)


def lr_lambda(total_steps: int, warmup_frac: float = 0.1, final_frac: float = 0.1):
    """LambdaLR factor: linear warm-up to 1 over ``warmup_frac`` of the steps, then linear decay to
    ``final_frac`` at the last step."""
    warm = max(1, int(math.ceil(warmup_frac * total_steps))) if warmup_frac > 0 else 0

    def f(step: int) -> float:
        if step < warm:
            return (step + 1) / warm
        rest = max(1, total_steps - warm - 1)
        t = min(1.0, (step - warm) / rest)
        return 1.0 - (1.0 - final_frac) * t

    return f


def _graph_args(data: Any) -> tuple[Tensor | None, int | None]:
    batch = getattr(data, "batch", None)
    if batch is None:
        batch = getattr(data, "graph_id", None)
    if batch is None:
        return None, None
    return batch, int(batch.max()) + 1 if batch.numel() else 0


def _forward(model: torch.nn.Module, data: Any, batch: Tensor | None, num_graphs: int | None) -> Any:
    ew = getattr(data, "edge_weight", None)
    kwargs: dict[str, Any] = {"batch": batch, "num_graphs": num_graphs}
    if ew is not None:
        kwargs["edge_weight"] = ew
    scale = getattr(data, "edge_scale", None)
    if scale is not None:
        kwargs["edge_scale"] = scale
    return model(data.x, data.edge_index, **kwargs)


@torch.no_grad()
def predict(model: torch.nn.Module, data: Any, precision: str = "fp32") -> Tensor:
    """Anomaly scores [N] of every node (eval mode, deterministic edge decisions); ``precision="bf16"``
    runs the forward pass under bf16 autocast (the scores are fp32)."""
    was_training = model.training
    model.eval()
    batch, ng = _graph_args(data)
    with autocast(precision, data.x.device):
        out = _forward(model, data, batch, ng)
        s = model.score(out).detach().float()
    model.train(was_training)
    return s


# settings that do not change what a fit computes (a resumed fit may differ in them)
_RUNTIME_SETTINGS = ("device", "progress", "state_dir", "state_interval")


def _with_sampled_labels(data: Any, labels_in: LabelInputSampler) -> tuple[Any, Tensor]:
    """``data`` (shallow copy) with this epoch's label inputs in its last columns, and the epoch's loss mask."""
    feats, loss_mask = labels_in.sample()
    out = copy.copy(data)
    out.x = torch.cat([data.x[:, :-LABEL_COLUMNS], feats.to(data.x.dtype)], dim=1)
    return out, loss_mask


def _fit_settings(cfg: SupervisedConfig) -> dict[str, Any]:
    return {k: v for k, v in asdict(cfg).items() if k not in _RUNTIME_SETTINGS}


def _class_weight(y: Tensor, mask: Tensor) -> Tensor:
    counts = torch.bincount(y[mask].long(), minlength=2).float().clamp(min=1)
    return counts.sum() / (2 * counts)


def fit_supervised(model: torch.nn.Module, data: Any, split: Any, cfg: SupervisedConfig | None = None,
                   state_name: str | None = None) -> FitResult:
    """Train ``model`` full-batch on the labelled graph ``data`` and select it on validation AUPRC.

    Args:
        model: a :class:`gcad_dist.model.GCCAD` or a baseline (:class:`gcad_dist.model.baselines.CrossEntropyClassifier`; anything with
            ``forward(x, edge_index, batch=, num_graphs=)``, ``loss(out, y, mask=)`` -> dict with
            ``"total"`` and ``score(out)``).
        data: PyG ``Data`` / ``Batch`` with ``x``, ``edge_index``, ``y`` (1 = anomaly, -1 = unknown), optionally
            ``batch`` or ``graph_id`` (multi-graph data: per-graph contexts and per-graph metrics).
        split: ``(train_mask, val_mask, test_mask)`` bool [N] (a :class:`gcad_dist.data.splits.Split` works);
            each is intersected with the labelled nodes.
        cfg: settings.
        state_name: with ``cfg.state_dir``, the fit's state is written to ``<state_dir>/<state_name>.pt`` (at most
            every ``cfg.state_interval`` seconds, at a requested stop and at the end) and a fit finds its saved state
            there and continues from it (:mod:`gcad_dist.fit_state`; :class:`ResumeMismatch` when it belongs to
            another fit). A Ctrl-C or SIGTERM then stops at the epoch's end with the state written
            (:class:`FitInterrupted`).

    Returns:
        :class:`FitResult` with the best single state loaded into ``model`` and the snapshot ensemble's scores
        (``cfg.snapshots`` best evaluations by validation AUPRC); ``history`` has per-epoch
        ``loss`` (and loss parts, ``lr``) and per-evaluation ``eval_epoch``, ``val_auroc``, ``val_auprc``.
    """
    cfg = cfg or SupervisedConfig()
    if cfg.epochs < 1:
        raise ValueError(f"epochs must be >= 1, got {cfg.epochs}")
    if cfg.snapshots < 1:
        raise ValueError(f"snapshots must be >= 1, got {cfg.snapshots}")
    device = resolve_device(cfg.device)
    precision = resolve_precision(cfg.precision, device)
    train_mask, val_mask, test_mask = (torch.as_tensor(m).bool() for m in split)
    if getattr(data, "y", None) is None:
        raise ValueError("the graph has no labels (y)")
    labelled = (data.y.detach() >= 0).to(train_mask.device)
    train_mask, val_mask, test_mask = train_mask & labelled, val_mask & labelled, test_mask & labelled
    if int(train_mask.sum()) == 0:
        raise ValueError("the train split holds no labelled node")

    torch.manual_seed(cfg.seed)
    data = copy.copy(data).to(device)  # shallow copy: the caller's Data stays where it is
    model = model.to(device)
    y = data.y.long()
    train_mask, val_mask, test_mask = train_mask.to(device), val_mask.to(device), test_mask.to(device)
    batch, num_graphs = _graph_args(data)
    graph_np = None if batch is None else batch.cpu().numpy()
    y_np = y.cpu().numpy()
    val_np, test_np = val_mask.cpu().numpy(), test_mask.cpu().numpy()
    is_baseline = isinstance(model, CrossEntropyClassifier)
    # each validation half's own best evaluations, for selection_scores (per-graph metrics: not cross-fitted)
    folds = validation_folds(y_np, val_np, cfg.seed) if graph_np is None else None
    cross = CrossFit(y_np, folds, cfg.snapshots) if folds is not None else None
    weight = _class_weight(y, train_mask) if (is_baseline and cfg.class_weight) else None

    cap = None
    if cfg.max_degree and not is_baseline:
        cap = DegreeCap(data.edge_index, int(data.num_nodes), cfg.max_degree)
        if cap.active:
            said = (cfg.max_degree, cap.num_edges, round(cap.expected_share, 4))
            (log.debug if said in _CAP_SAID else log.info)(
                "in-degree cap %d: each epoch trains on a fresh %.1f%% of the %d edges (nodes above %d in-edges "
                "sampled, their sums rescaled); evaluation uses every edge", cfg.max_degree,
                100 * cap.expected_share, cap.num_edges, cfg.max_degree)
            _CAP_SAID.add(said)  # said once per graph and cap, not once per candidate fit
        else:
            cap = None
    # the cap's own stream: the model's dropout and Gumbel draws stay those of an uncapped run's start
    cap_gen = torch.Generator(device=device).manual_seed(cfg.seed + 104_729) if cap is not None else None
    labels_in = LabelInputSampler(data.edge_index, int(data.num_nodes), y, train_mask, cfg.seed) if cfg.label_inputs else None
    if labels_in is not None and getattr(data, "label_input_columns", 0) != LABEL_COLUMNS:
        raise ValueError(f"label_inputs: x must end with the {LABEL_COLUMNS} columns of "
                         "gcad_dist.data.label_inputs.with_label_inputs")

    # the weights the fit starts from (before any saved state is loaded: a resumed fit keeps the same anchor)
    start = [p.detach().clone() for p in model.parameters()] if cfg.anchor > 0 else None
    opt = adam(model.parameters(), device, cfg.lr, cfg.weight_decay)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_lambda(cfg.epochs, cfg.warmup_frac, cfg.final_lr_frac))

    history: dict[str, list] = {"epoch": [], "loss": [], "lr": [], "eval_epoch": [], "val_auroc": [], "val_auprc": [],
                                "epoch_seconds": []}
    if not is_baseline and device.type == "cpu":
        from gcad_dist.model import native

        native.available()  # build / load the edge kernels now, not inside the first timed epoch
    best_epoch = 0
    best_state = copy.deepcopy(model.state_dict())  # kept if no evaluation happens (non-finite loss at once)
    # the cfg.snapshots best evaluations, best first: (val AUPRC, epoch, scores of every node, state)
    top: list[tuple[float, int, np.ndarray, dict[str, Tensor]]] = []
    epoch, done, elapsed = 0, False, 0.0
    saver, fp = None, None
    if cfg.state_dir and state_name:
        saver = FitCheckpointer(Path(cfg.state_dir) / f"{state_name}.pt", cfg.state_interval)
        fp = fingerprint(model, data, (train_mask, val_mask, test_mask), _fit_settings(cfg))
        saved = saver.load()
        if saved is not None:
            diff = same_fit(saved["fingerprint"], fp)
            if diff:
                raise ResumeMismatch(f"{saver.path}: saved by another fit (it differs in {', '.join(diff)})")
            epoch, done, elapsed, best_epoch = saved["epoch"], saved["done"], saved["seconds"], saved["best_epoch"]
            model.load_state_dict(saved["model"])
            opt.load_state_dict(saved["optimizer"])
            sched.load_state_dict(saved["scheduler"])
            set_rng_state(saved["rng"])
            if cap_gen is not None:
                cap_gen.set_state(saved["cap_rng"])
            if labels_in is not None:
                labels_in.generator.set_state(saved["label_rng"])
            history = saved["history"]
            top = [(float(v), int(e), sc.numpy(), {k: t.to(device) for k, t in st.items()})
                   for v, e, sc, st in saved["top"]]
            if cross is not None and saved.get("cross_fit") is not None:
                cross.load(saved["cross_fit"])
            log.info("%s: continuing from its saved state (epoch %d%s)", state_name, epoch,
                     ", finished" if done else "")

    def save_state() -> None:
        saver.save({
            "fingerprint": fp, "epoch": epoch, "done": done, "seconds": time.perf_counter() - t0,
            "best_epoch": best_epoch, "model": cpu_state(model.state_dict()), "optimizer": opt.state_dict(),
            "scheduler": sched.state_dict(), "rng": rng_state(),
            "cap_rng": cap_gen.get_state() if cap_gen is not None else None, "history": history,
            "label_rng": labels_in.generator.get_state() if labels_in is not None else None,
            "top": [(v, e, torch.from_numpy(sc), cpu_state(st)) for v, e, sc, st in top],
            "cross_fit": cross.state() if cross is not None else None,
        })

    t0 = time.perf_counter() - elapsed
    bar = tqdm(range(epoch + 1, cfg.epochs + 1), desc="train", unit="ep", initial=epoch, total=cfg.epochs,
               disable=True if done else bar_disable(cfg.progress), leave=False)
    stopper = StopRequest() if saver is not None else None
    with stopper or contextlib.nullcontext():
        for epoch in bar if not done else ():
            t_epoch = time.perf_counter()
            model.train()
            opt.zero_grad(set_to_none=True)
            with autocast(precision, device):  # forward and loss only; backward follows autocast's casts
                epoch_data, loss_mask = data if cap is None else cap.sample(data, cap_gen), train_mask
                if labels_in is not None:
                    epoch_data, loss_mask = _with_sampled_labels(epoch_data, labels_in)
                out = _forward(model, epoch_data, batch, num_graphs)
                if is_baseline:
                    losses = model.loss(out, y, mask=loss_mask, weight=weight)
                else:
                    losses = model.loss(out, y, mask=loss_mask)
            if start is not None:  # L2-SP: recorded as its own loss part ("loss_anchor" in the history)
                anchor = 0.5 * cfg.anchor * sum(((p - p0) ** 2).sum() for p, p0 in zip(model.parameters(), start))
                losses = {**losses, "anchor": anchor, "total": losses["total"] + anchor}
            loss = losses["total"]
            if not torch.isfinite(loss):
                log.warning("non-finite loss at epoch %d; stopping", epoch)
                break
            loss.backward()
            if cfg.grad_clip > 0:
                torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
            history["lr"].append(opt.param_groups[0]["lr"])
            opt.step()
            sched.step()
            history["epoch"].append(epoch)
            history["loss"].append(float(loss.detach()))
            for k, v in losses.items():
                if k != "total":
                    history.setdefault(f"loss_{k}", []).append(float(v.detach()))

            if epoch % cfg.eval_every == 0 or epoch == cfg.epochs:
                s = predict(model, data, precision).cpu().numpy()
                m = evaluate(y_np, s, graph_np, val_np)
                history["eval_epoch"].append(epoch)
                history["val_auroc"].append(float(m["auroc"]))  # plain floats: the saved state holds no NumPy
                history["val_auprc"].append(float(m["auprc"]))
                score = m["auprc"] if not math.isnan(m["auprc"]) else -math.inf
                if len(top) < cfg.snapshots or score > top[-1][0]:  # ties keep the earlier evaluation
                    top.append((score, epoch, s, copy.deepcopy(model.state_dict())))
                    top.sort(key=lambda t: (-t[0], t[1]))
                    del top[cfg.snapshots:]
                best_epoch = top[0][1]  # the best single evaluation leads the snapshots
                if cross is not None:
                    cross.update(epoch, s)
                bar.set_postfix(loss=f"{history['loss'][-1]:.4f}", val_auprc=f"{m['auprc']:.4f}", best=best_epoch)
                log.debug("epoch %d loss %.4f val auroc %.4f auprc %.4f", epoch, history["loss"][-1], m["auroc"], m["auprc"])
                stop = bool(cfg.patience and epoch - best_epoch >= cfg.patience)
            else:
                stop = False
            history["epoch_seconds"].append(time.perf_counter() - t_epoch)
            if stop:
                log.info("early stop at epoch %d (best val AUPRC %.4f at epoch %d)", epoch, top[0][0], best_epoch)
                break
            if saver is not None and (saver.due() or stopper.requested):
                save_state()
                if stopper.requested:
                    bar.close()
                    raise FitInterrupted(epoch, saver.path)
        done = True
        if saver is not None:
            save_state()  # a resumed run takes this fit's outcome as it is
    bar.close()
    seconds = time.perf_counter() - t0

    if top:
        best_state = top[0][3]
    model.load_state_dict(best_state)
    best_s = top[0][2] if top else predict(model, data, precision).cpu().numpy()
    s = np.mean([t[2] for t in top], axis=0) if len(top) > 1 else best_s
    val = evaluate(y_np, s, graph_np, val_np)
    test = evaluate(y_np, s, graph_np, test_np)
    return FitResult(
        best_epoch=best_epoch,
        val=val,
        test=test,
        history=history,
        state_dict=best_state,
        scores=s,
        epochs_run=epoch,
        seconds=seconds,
        device=str(device),
        extra={"class_weight": bool(weight is not None), "precision": precision},
        snapshot_states=[t[3] for t in top],
        snapshot_epochs=[t[1] for t in top],
        best_scores=best_s,
        selection_scores=cross.scores(s) if cross is not None else None,
    )
