"""Fine-tune a pre-trained GCCAD on a fraction of the real labels: ``python -m gcad_dist.finetune``.

GCCAD-pre's second stage (METHOD.md section 4: "optionally fine-tune on real labels afterwards").

1. Rebuild the model from the checkpoint (``model.pt``: config + weights). The graph's feature
   width must equal the checkpoint's ``in_dim``.
2. Split the graph: its own split masks (``--split-index``, default ``seed % S``) or a seeded
   stratified random split (``--train-frac`` / ``--val-frac``).
3. Keep ``--label-fraction`` of the labelled *training* nodes: a seeded stratified sample, at least
   one node of each class present. Validation and test splits are untouched. On a partly labelled
   graph (``y = -1`` / ``label_mask``) every split holds labelled nodes only, so the fraction applies
   to the labelled training nodes and all metrics are over labelled nodes.
4. Evaluate the pre-trained model as is (zero-shot, reported as ``zero_shot`` in the metrics; the
   checkpoint's own ``link_eval`` / ``score_space``, as ``python -m gcad_dist.score`` scores it), then
   fine-tune full-batch with :func:`gcad_dist.supervised.fit_supervised`, selecting the epoch on
   validation AUPRC. ``--epochs 0`` stops after the zero-shot evaluation. Since session 70 the checkpoint's own
   model is fine-tuned with L2-SP (``--anchor``, :attr:`gcad_dist.supervised.SupervisedConfig.anchor`): its loss
   adds ``anchor / 2 * ||w - w_pretrained||^2``, so that a few labels adjust the label-free model rather than
   overwrite it (BENCHMARKS.md, session 70).
5. Which model is fine-tuned (``--model``, :data:`FINETUNE_MODELS`): the checkpoint's own (``checkpoint``);
   ``gcad_dist.train``'s GCCAD started from the checkpoint's input projection (``graph``); or that GCCAD from a
   random start (``scratch``: what ``gcad_dist.train`` fits on the same labels, on ``gcad_dist.train``'s feature
   normalisation, z-scores, since session 63 (``--scratch-normalize``; before, the checkpoint's, ``power`` for a
   default store, which squeezes the far tails that a rule over counts reads: BENCHMARKS.md, sessions 41 and 63).
   Kept beside models that read the checkpoint's normalisation, the written model reads both, one input block each
   (:class:`~gcad_dist.model.candidate_ensemble.CandidateEnsemble`, the checkpoint's ``input_blocks``), and
   ``gcad_dist.score`` builds both from the raw features. The label-free recipe's model
   (the ``local`` contrast) passes no message: it carries the pre-trained score, and labels cannot teach it the
   graph. So by default (``auto``) such a checkpoint is fitted all three ways, the checkpoint unchanged
   (:data:`ZERO_SHOT`, :func:`zero_shot_fit`) joins them as a fourth candidate, and every one whose validation
   AUPRC a paired bootstrap over the validation nodes does not place clearly below the best one's is kept; the
   kept ones' standardised scores are averaged (:func:`gcad_dist.train.keep_candidates`, ``--contrast auto``'s
   rule one level up; chosen on validation halves in session 25, BENCHMARKS.md), since session 69 each weighted by
   its validation AUPRC's lift over the base rate (``--candidate-weights lift``; ``equal`` before; the weights are
   folded into the written ensemble's stds, :func:`~gcad_dist.model.candidate_ensemble.flat_ensemble`). Each graph model is itself
   ``gcad_dist.train``'s: its ``--contrast auto`` candidates, those validation cannot tell
   apart kept and averaged (:func:`gcad_dist.train.keep_candidates`).
   Both graph starts are candidates because neither wins everywhere on validation (BENCHMARKS.md, session 15:
   the pre-trained start is better on tolokers, worse on inj_cora with all its labels). A checkpoint that passes
   messages is fine-tuned as it is, alone. ``metrics.json`` records the choice (``finetuned_model``,
   ``model_selection``, and each graph model's own candidates kept in ``contrast_selection``).
   ``--keep-rule cross-fitted`` judges each trained candidate at this level by cross-fitted validation scores
   (:class:`gcad_dist.selection.CrossFit`: each validation half scored by the evaluations chosen on the other half),
   so that a fit's own choice of epochs on validation does not flatter it against the zero-shot candidate, which
   chose nothing there (BENCHMARKS.md, session 44).
   Since session 65 (``--isolation-forest auto``) the label-free feature view's isolation forest on the raw features
   (:data:`ISOLATION_FOREST`, no label read) joins them where validation holds at least 10 anomalies, judged by its
   own scores as the zero-shot model is: where labels follow a rule over a few heavy-tailed attributes it ranks the
   anomalies far above GCCAD fitted on a few labels (session 64). Kept, it is written as its trees
   (:class:`~gcad_dist.model.isolation_forest.IsolationForestScorer`), reading the raw features as an input block of
   its own (``input_blocks`` names it ``none``).
   Since session 73 (``--zero-shot-views``) the zero-shot candidate is the checkpoint as ``gcad_dist.score`` scores
   it: its contrast with the label-free views the checkpoint records (:mod:`gcad_dist.label_free_views`: the feature
   and signature views, fitted on this graph, no label read), not the bare contrast. Kept, the written ensemble's
   member carries them (:class:`~gcad_dist.model.candidate_ensemble.CandidateEnsemble`'s ``views``: the raw features
   as an input block ``none``), so that the written model scores as the run did. Where the links say little the
   views carry the label-free score, and a few labels' fits are averaged with a zero-shot candidate that ranks the
   anomalies instead of one at chance (BENCHMARKS.md, sessions 72-73).
   Since session 77 (``--checkpoint-views``) the fine-tuned checkpoint candidate is scored with the same views
   (:func:`viewed_fit`: its scores and cross-fitted selection scores), and its written member carries them too:
   fine-tuning changes the contrast's weights, not what the views read, and with a training anomaly or two the bare
   fine-tuned contrast ranked the anomalies far below the zero-shot score where the links say little.
   Since session 78 (``--exemplar auto``) the kept training anomalies are one more candidate as exemplars
   (:data:`EXEMPLAR`, :mod:`gcad_dist.model.exemplar`): each node's cosine similarity to the nearest of them on the raw
   features z-scored over all nodes, judged by its own scores as the zero-shot model is, offered where it ranks the
   validation anomalies above chance at one-sided 5% and the kept training anomalies are fewer than 10
   (:func:`exemplar_offer`). Where anomalies share a trait (camouflaged fraud) one known case finds the others, which a
   fit on one training anomaly does not learn. Kept, it is written as its exemplars and the z-score's statistics
   (:class:`~gcad_dist.model.exemplar.ExemplarScorer`), reading the raw features as an input block of its own.
   Since session 74 (``--rejoin``) a candidate the keep rule dropped may rejoin the kept ones
   (:func:`gcad_dist.selection.rejoin`, with >= 10 validation anomalies): the keep rule judges each candidate alone
   against the best, but where the anomalies are of several kinds a candidate weaker alone ranks other anomalies than
   the kept ones do, and their mean with it ranks the validation anomalies better. One at a time, the dropped
   candidate that raises the kept ones' validation AUPRC most joins with an equal share, iff a paired bootstrap over
   the validation nodes finds the mean with it better with P >= 0.8 (``model_selection["rejoined"]`` records them).
   With 1-9 validation anomalies the bootstrap cannot drop anything; since session 76 (``--few-anomalies
   weighted``) a candidate at or below 0.5 in validation AUROC leaves the average there (``below_chance``): one
   training anomaly often teaches a fit nothing, and a pre-trained one carries nothing where the links say nothing.
   The others weigh halfway between alike and their validation AUROC's lift over 0.5.
6. Label inputs (``--label-inputs``; by default as ``gcad_dist.train``: on when the kept training labels hold at
   least :data:`~gcad_dist.train.LABEL_INPUTS_MIN_ANOMALIES` anomalies): every fitted model reads two more input
   columns, its neighbours labelled anomalous among the *kept* training labels (:mod:`gcad_dist.data.label_inputs`,
   the masked label trick during training). The checkpoint's input projection is widened by two zero columns
   (:func:`widen_input_projection`: the fine-tuning starts from the pre-trained model exactly), the graph start
   copies the checkpoint's projection into its first columns. The written model records it, and
   ``gcad_dist.score`` fills the columns from the labels of the graph it scores. Below the count they cost
   validation AUPRC (6 anomalies, inj_cora at 10%: -0.023), above it they gained (BENCHMARKS.md, session 32).
7. The forest view (``--forest``, default ``auto`` as ``gcad_dist.train``'s, :mod:`gcad_dist.forest_view`): trees
   on ``[x, neighbours' mean x, degree]`` (the forest also the second hop's mean; a random forest and gradient-boosted
   trees, their ranks averaged) fitted on the kept training labels joins the fine-tuned score by
   rank, or scores alone, where validation says so by ``gcad_dist.train``'s rule (session 62). ``--forest off``:
   the fine-tuned GCCAD alone (every run before session 62).

Fine-tuning uses the supervised defaults of ``python -m gcad_dist.train`` (taken from its
:class:`~gcad_dist.train.TrainConfig`, not copied): the optimiser, epoch and patience settings and the
evaluation-time GCCAD settings ``--link-eval`` (default ``expected``) and ``--score-space`` (default
``projection``), which replace the checkpoint's for fine-tuning, validation, test and the written model
(they change no weight's shape). ``--link-eval threshold --score-space encoder`` is METHOD.md's rule.

Writes to ``--out``: ``final/model.pt`` (the selected weights, same format as every checkpoint, so
``python -m gcad_dist.score --checkpoint <out>/final`` works), ``metrics.json`` and, unless
``--no-plots``, ``training_curves.png`` and ``roc_pr_test.png``.
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import logging
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from gcad_dist.allocator import retain_freed_memory
from gcad_dist.checkpoint import INPUT_BLOCKS_KEY
from gcad_dist.cli import ArgumentParser, DefaultsHelpFormatter, UsageError, add_runtime_options, run_cli, setup_logging
from gcad_dist.data.splits import subsample_labels  # re-exported: it lived here before
from gcad_dist.fit_state import STATE_DIR, ResumeMismatch
from gcad_dist.forest_view import FOREST_COLUMNS, FOREST_MODES, describe_choice
from gcad_dist.provenance import environment
from gcad_dist.fit_state import abandon as abandon_run_state
from gcad_dist.fit_state import finish as finish_run_state
from gcad_dist.train import (FEW_VALIDATION_MODES, LINK_EVALS, SCORE_SPACES, WEIGHTINGS, TrainConfig,
                             add_candidate_options, add_few_anomalies_option, add_forest_columns_option,
                             add_forest_min_anomalies_option, add_resume_options,
                             add_schedule_options, add_split_options, check_fit_options, prepare_run_state)
from gcad_dist.score import NORMALIZE_CHOICES as SCORE_NORMALIZE_CHOICES
from partitioning.errors import GraphInputError

if TYPE_CHECKING:
    from gcad_dist.supervised import FitResult

log = logging.getLogger("gcad_dist.finetune")

__all__ = ["FINETUNE_MODELS", "FinetuneConfig", "subsample_labels", "warm_start_input_projection",
           "widen_input_projection", "finetune", "main"]

#: ``--model``: ``checkpoint`` fine-tunes the checkpoint's own model; ``graph`` fine-tunes gcad_dist.train's model
#: (message passing, its ``--contrast auto`` candidates) started from the checkpoint's input projection; ``scratch``
#: trains that model from a random start, as gcad_dist.train does (the pre-trained weights unused); ``auto``
#: fine-tunes the checkpoint as it is when its model passes messages, else fits AUTO_MODELS and keeps one on
#: validation (every fit not clearly below the best by the bootstrap of :mod:`gcad_dist.selection`, averaged)
FINETUNE_MODELS = ("auto", "checkpoint", "graph", "scratch")
AUTO_MODELS = ("checkpoint", "graph", "scratch")
#: ``--model auto``'s last candidate for a label-free recipe's checkpoint: the checkpoint unchanged, the zero-shot
#: model. It is kept unless validation places
#: it clearly below the best fit, so few labels cannot make a run worse than no label where validation can see it
#: (BENCHMARKS.md, session 36)
ZERO_SHOT = "zero-shot"
#: ``--model auto``'s candidate beside them (``--isolation-forest auto``): the label-free feature view's isolation
#: forest on the raw features (:mod:`gcad_dist.model.isolation_forest`), judged as the zero-shot model is, by its own
#: scores; offered only where validation holds at least :data:`gcad_dist.selection.MIN_POSITIVES` anomalies, the
#: fewest with which the keep rule can drop it (BENCHMARKS.md, sessions 64-65)
ISOLATION_FOREST = "isolation-forest"
#: ``--isolation-forest``: offer that candidate (auto) or not (off)
ISOLATION_FOREST_MODES = ("auto", "off")
#: ``--model auto``'s candidate beside them (``--exemplar auto``): each node's likeness to the nearest labelled training
#: anomaly (:mod:`gcad_dist.model.exemplar`), judged by its own scores, offered where validation finds it above chance
#: (:func:`gcad_dist.model.exemplar.above_chance`; BENCHMARKS.md, session 78)
EXEMPLAR = "exemplar"
#: ``--exemplar``: offer that candidate (auto) or not (off)
EXEMPLAR_MODES = ("auto", "off")
#: the exemplar is offered only with fewer kept training anomalies than this: from there the fits learn from the labels
#: (gcad_dist.train's label inputs start at the same count), and with 12 exemplars of every kind it cost AUPRC on ten
#: fresh graphs (-0.013 with all their labels; session 78's guard)
EXEMPLAR_MAX_ANOMALIES = 10
#: the candidates that read the raw features as an input block of their own ("none") and pass no message
RAW_FEATURE_CANDIDATES = (ISOLATION_FOREST, EXEMPLAR)
#: ``--scratch-normalize``: the scratch candidate's features, ``gcad_dist.train``'s normalisations or the checkpoint's
SCRATCH_NORMALIZE = ("checkpoint", "standard", "power", "none")
#: ``--keep-rule``: how the model-level keep rule judges a trained candidate on validation (its scores, or its
#: cross-fitted scores, :class:`gcad_dist.selection.CrossFit`)
KEEP_RULES = ("validation", "cross-fitted")


@dataclass
class FinetuneConfig:
    """Settings of ``python -m gcad_dist.finetune`` (one field per command-line option)."""

    checkpoint: str
    graph: str
    out: str = "runs/ft"
    label_fraction: float = 1.0
    model: str = "auto"  # which model is fine-tuned: FINETUNE_MODELS
    # Supervised defaults shared with ``python -m gcad_dist.train`` (one place: TrainConfig).
    epochs: int = TrainConfig.epochs
    lr: float = TrainConfig.lr
    weight_decay: float = TrainConfig.weight_decay
    eval_every: int = TrainConfig.eval_every
    patience: int = TrainConfig.patience
    snapshots: int = TrainConfig.snapshots
    max_degree: int = TrainConfig.max_degree
    # L2-SP strength of the checkpoint candidate's fine-tuning (SupervisedConfig.anchor): its weights are pulled
    # towards the pre-trained ones instead of towards zero; 0 = off (before session 70). 1 was chosen on validation
    # by a rule written before its runs (BENCHMARKS.md, session 70)
    anchor: float = 1.0
    input_dropout: float | None = None  # the GCCAD fits' (None: gcad_dist.train's rule); the checkpoint model has none
    # neighbours' kept training labels as two input columns of every fit; None: gcad_dist.train's rule (by the count
    # of kept training anomalies, resolve_label_inputs)
    label_inputs: bool | None = None
    link_eval: str = TrainConfig.link_eval
    score_space: str = TrainConfig.score_space
    seed: int = 0
    split_index: int | None = None
    train_frac: float = 0.4
    val_frac: float = 0.2
    normalize: str = "auto"
    # the scratch candidate's feature normalisation: SCRATCH_NORMALIZE ("checkpoint": the one above, before session 63)
    scratch_normalize: str = TrainConfig.normalize
    device: str = "auto"
    threads: int = 0
    candidate_workers: int = TrainConfig.candidate_workers
    address: str | None = None
    resume: bool = False
    overwrite: bool = False
    checkpoint_interval: float = TrainConfig.checkpoint_interval
    plots: bool = True
    # write <out>/candidate_scores.npz: every --model auto candidate's scores of every node, with the labels and split
    # masks, for studies of the keep rule (bench/finetune_selection.py)
    candidate_scores: bool = False
    keep_rule: str = "cross-fitted"  # KEEP_RULES; "validation" before session 44
    candidate_weights: str = "lift"  # gcad_dist.train.WEIGHTINGS: how the kept models' scores are averaged ("equal" before session 69)
    # a candidate the keep rule dropped rejoins where the kept ones' mean with it ranks the validation anomalies better
    # (gcad_dist.selection.rejoin; False: as before session 74)
    rejoin: bool = True
    # with 1-9 validation anomalies (too few for the bootstrap): "above-chance" drops a candidate at or below 0.5 in
    # validation AUROC from the average, "weighted" also weighs the others by that AUROC's lift over 0.5
    # (gcad_dist.train.FEW_VALIDATION_MODES; "average": every candidate alike, as before session 76)
    few_anomalies: str = "weighted"
    forest: str = TrainConfig.forest  # the forest view (gcad_dist.forest_view), as gcad_dist.train's
    forest_min_anomalies: int = TrainConfig.forest_min_anomalies  # its join test's fewest validation anomalies, as train's
    forest_columns: str = TrainConfig.forest_columns  # the trees' inputs (FOREST_COLUMNS), as train's
    isolation_forest: str = "auto"  # ISOLATION_FOREST_MODES: the label-free isolation forest as a --model auto candidate
    # EXEMPLAR_MODES: the kept training anomalies (1-9 of them) as exemplars, a --model auto candidate where validation
    # finds it above chance (session 78)
    exemplar: str = "auto"
    # the zero-shot candidate scored with the label-free views its checkpoint records (gcad_dist.score's score of it),
    # carried by the written ensemble; False: its bare contrast (before session 73)
    zero_shot_views: bool = True
    # the fine-tuned checkpoint candidate scored with the checkpoint's label-free views too, as the zero-shot one is
    # (session 77: +0.012 / +0.022 test AUROC / AUPRC over ten fresh generated graphs at 10%, none lower)
    checkpoint_views: bool = True
    progress: bool = True
    verbose: bool = False


def _validate(cfg: FinetuneConfig) -> None:
    if cfg.epochs < 0:
        raise UsageError(f"--epochs: must be >= 0 (0 = zero-shot evaluation only), got {cfg.epochs}")
    check_fit_options(cfg)
    if not cfg.anchor >= 0:  # NaN too
        raise UsageError(f"--anchor: must be >= 0 (0 = off), got {cfg.anchor}")
    if cfg.keep_rule not in KEEP_RULES:
        raise UsageError(f"--keep-rule: unknown value {cfg.keep_rule!r} (choose from {', '.join(KEEP_RULES)})")
    if cfg.candidate_weights not in WEIGHTINGS:
        raise UsageError(f"--candidate-weights: unknown value {cfg.candidate_weights!r} (choose from "
                         f"{', '.join(WEIGHTINGS)})")
    if cfg.few_anomalies not in FEW_VALIDATION_MODES:
        raise UsageError(f"--few-anomalies: unknown value {cfg.few_anomalies!r} (choose from "
                         f"{', '.join(FEW_VALIDATION_MODES)})")
    if cfg.scratch_normalize not in SCRATCH_NORMALIZE:
        raise UsageError(f"--scratch-normalize: unknown value {cfg.scratch_normalize!r} (choose from "
                         f"{', '.join(SCRATCH_NORMALIZE)})")
    if cfg.forest not in FOREST_MODES:
        raise UsageError(f"--forest: unknown value {cfg.forest!r} (choose from {', '.join(FOREST_MODES)})")
    if cfg.forest_min_anomalies < 1:
        raise UsageError(f"--forest-min-anomalies must be at least 1, got {cfg.forest_min_anomalies}")
    if cfg.forest_columns not in FOREST_COLUMNS:
        raise UsageError(f"--forest-columns: unknown value {cfg.forest_columns!r} (choose from "
                         f"{', '.join(FOREST_COLUMNS)})")
    if cfg.isolation_forest not in ISOLATION_FOREST_MODES:
        raise UsageError(f"--isolation-forest: unknown value {cfg.isolation_forest!r} (choose from "
                         f"{', '.join(ISOLATION_FOREST_MODES)})")
    if cfg.exemplar not in EXEMPLAR_MODES:
        raise UsageError(f"--exemplar: unknown value {cfg.exemplar!r} (choose from {', '.join(EXEMPLAR_MODES)})")
    if cfg.model not in FINETUNE_MODELS:
        raise UsageError(f"--model: unknown value {cfg.model!r} (choose from {', '.join(FINETUNE_MODELS)})")
    if cfg.link_eval not in LINK_EVALS:
        raise UsageError(f"--link-eval: unknown value {cfg.link_eval!r} (choose from {', '.join(LINK_EVALS)})")
    if cfg.score_space not in SCORE_SPACES:
        raise UsageError(f"--score-space: unknown value {cfg.score_space!r} (choose from {', '.join(SCORE_SPACES)})")
    out = Path(cfg.out)
    if out.exists() and not out.is_dir():
        raise UsageError(f"--out: {out} exists and is not a directory")


def warm_start_input_projection(model: torch.nn.Module, source: torch.nn.Module) -> None:
    """Copy ``source``'s input projection (``encoder.input_proj``, F -> hidden) into ``model``'s, in place.

    An ensemble's projection holds K members' blocks of ``hidden`` rows side by side; the first member's is taken
    (the members are trained alike from different starts, so any one is as good a start, and their mean is not a
    trained projection). A ``model`` with more input columns than ``source`` (label inputs appended) gets the
    source's weights in its first F columns and keeps its own initialisation in the others. Raises ValueError when
    ``model`` has fewer input columns or the rows do not match.
    """
    dst, src = model.encoder.input_proj, source.encoder.input_proj
    rows, cols = dst.weight.size(0), src.weight.size(1)
    if cols > dst.weight.size(1) or src.weight.size(0) % rows:
        raise ValueError(f"input projections differ in shape: {tuple(src.weight.shape)} cannot start "
                         f"{tuple(dst.weight.shape)}")
    with torch.no_grad():
        dst.weight[:, :cols].copy_(src.weight[:rows])
        dst.bias.copy_(src.bias[:rows])


def widen_input_projection(model: torch.nn.Module, extra: int) -> None:
    """Give ``model``'s input projection (``encoder.input_proj``) ``extra`` more input columns, in place, with zero
    weights: the model computes exactly what it did on the old columns until training moves the new weights."""
    old = model.encoder.input_proj
    new = torch.nn.Linear(old.in_features + extra, old.out_features, device=old.weight.device, dtype=old.weight.dtype)
    with torch.no_grad():
        new.weight.zero_()
        new.weight[:, :old.in_features].copy_(old.weight)
        new.bias.copy_(old.bias)
    model.encoder.input_proj = new


#: ``--candidate-scores``' file in ``--out``
CANDIDATE_SCORES = "candidate_scores.npz"


def write_candidate_scores(path: Path, names: list[str], scores: list[np.ndarray], y: np.ndarray, split: Any,
                           selection_scores: list[np.ndarray | None] | None = None) -> None:
    """Save the candidates' scores of every node ([C, N], float32) with their names, the labels and the split's
    train / val / test masks: what :func:`gcad_dist.train.keep_candidates` chose from, for offline studies of the rule
    (``bench/finetune_selection.py``, ``bench/keep_rule_holdout.py``). ``selection_scores`` ([C, N]): each
    candidate's cross-fitted scores (:class:`gcad_dist.selection.CrossFit`; its scores where it has none)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    sel = {} if selection_scores is None else {"selection_scores": np.stack(
        [np.asarray(s if s is not None else sc, np.float32) for s, sc in zip(selection_scores, scores)])}
    np.savez_compressed(path, names=np.array(names), scores=np.stack([np.asarray(s, np.float32) for s in scores]),
                        y=np.asarray(y), **sel, **{m: torch.as_tensor(getattr(split, m)).cpu().numpy()
                                            for m in ("train", "val", "test")})
    log.info("candidate scores of %s written to %s", " / ".join(names), path)


def _models_to_fit(choice: str, config: Any) -> list[str]:
    """The candidates ``--model`` asks for, given the checkpoint's model config: ``auto`` on a label-free recipe's
    checkpoint (no message passing) adds :data:`ZERO_SHOT`. A message-passing (paper recipe) checkpoint is fine-tuned
    alone: its zero-shot score is near chance, and as a candidate it cost AUPRC on held-out validation halves
    (inj_cora at 10%: -0.009; BENCHMARKS.md, session 36)."""
    if choice == "auto":
        return ["checkpoint"] if config.passes_messages else [*AUTO_MODELS, ZERO_SHOT]
    return [choice]


def zero_shot_fit(zs_model: torch.nn.Module, config: Any, scores: np.ndarray, val: dict[str, Any],
                  test: dict[str, Any], label_columns: int = 0) -> tuple[FitResult, torch.nn.Module, Any]:
    """The pre-trained model unchanged as a candidate fit (:data:`ZERO_SHOT`): its ``scores`` of every node and their
    validation and test metrics, no epoch, no history. With ``label_columns`` > 0 (label inputs on) a copy of its
    weights reads that many more input columns with zero weights, so it scores the widened inputs exactly as it scored
    the plain ones, and can join the other candidates' ensemble."""
    from gcad_dist.model.snapshots import leaf_models
    from gcad_dist.supervised import FitResult

    model = copy.deepcopy(zs_model)
    if label_columns:
        for m in leaf_models(model):  # every member of a snapshot or candidate ensemble (a fine-tuned checkpoint)
            widen_input_projection(m, label_columns)
            m.config = dataclasses.replace(m.config, in_dim=m.config.in_dim + label_columns)
        config = dataclasses.replace(config, in_dim=config.in_dim + label_columns)
    device = next(model.parameters()).device
    res = FitResult(best_epoch=0, val=val, test=test, history={}, state_dict={}, scores=np.asarray(scores),
                    epochs_run=0, seconds=0.0, device=str(device), extra={})
    return res, model, config


def viewed_fit(res: FitResult, raw_x: np.ndarray, data: Any, views: dict[str, bool], y: np.ndarray,
               graph: np.ndarray | None, split: Any) -> tuple[FitResult, dict[str, Any]]:
    """``res`` (the fine-tuned checkpoint's fit) with the label-free ``views`` (:func:`gcad_dist.label_free_views.
    apply_views`, fitted on ``raw_x`` and ``data``'s links, no label read) added to its scores and to its cross-fitted
    selection scores, and its validation and test metrics recomputed; and the views' records (``--checkpoint-views``).
    A written ensemble member with the same views scores as the returned fit."""
    from gcad_dist.label_free_views import apply_views
    from gcad_dist.metrics import evaluate

    def viewed(scores: np.ndarray, dtype: Any) -> tuple[np.ndarray, Any, Any]:
        return apply_views(np.asarray(scores, dtype=dtype), raw_x, data.edge_index, data.num_nodes, **views)

    # float32 as a written ensemble's member scores (CandidateEnsemble.member_score), so that it scores as this fit
    scores, feature, signature = viewed(res.scores, np.float32)
    selection = None if res.selection_scores is None else viewed(res.selection_scores, np.float64)[0]
    out = dataclasses.replace(res, scores=scores, selection_scores=selection, best_scores=None,
                              val=evaluate(y, scores, graph, split.val.numpy()),
                              test=evaluate(y, scores, graph, split.test.numpy()))
    record = {"feature_view": feature, "signature_view": signature, "bare": {"val": res.val, "test": res.test}}
    log.info("the fine-tuned checkpoint candidate with its label-free views (feature view %s, signature view %s): "
             "validation AUPRC %.4f -> %.4f", "joined" if feature and feature.get("used") else "not joined",
             "joined" if signature and signature.get("used") else "not joined", res.val["auprc"], out.val["auprc"])
    return out, record


def isolation_forest_offer(cfg: FinetuneConfig, candidates: list[str], y: np.ndarray, val: np.ndarray) -> dict[str, Any]:
    """Whether :data:`ISOLATION_FOREST` joins the ``candidates`` (JSON-ready record: ``offered`` and why): with
    ``--isolation-forest auto`` beside the zero-shot candidate (``--model auto`` on a label-free recipe's checkpoint)
    where the validation nodes hold at least :data:`gcad_dist.selection.MIN_POSITIVES` anomalies. With fewer the keep
    rule keeps every candidate and could not drop a forest whose outliers are normal nodes (tolokers, inj_cora)."""
    from gcad_dist.selection import MIN_POSITIVES

    positives = int((np.asarray(y)[np.asarray(val, dtype=bool)] == 1).sum())
    record: dict[str, Any] = {"mode": cfg.isolation_forest, "val_anomalies": positives, "offered": False}
    if cfg.isolation_forest == "off":
        record["why"] = "--isolation-forest off"
    elif ZERO_SHOT not in candidates:
        record["why"] = "offered beside the zero-shot candidate only (--model auto on a label-free checkpoint)"
    elif positives < MIN_POSITIVES:
        record["why"] = (f"validation holds {positives} anomalies, fewer than the {MIN_POSITIVES} the keep rule needs "
                         "to drop a candidate")
    else:
        record["offered"] = True
    return record


def isolation_forest_fit(x_raw: Any, y: np.ndarray, graph: np.ndarray | None, split: Any, config: Any,
                         threads: int = 1) -> tuple[FitResult, torch.nn.Module, Any]:
    """The label-free isolation forest on the raw features ``x_raw`` [N, F] as a candidate fit
    (:data:`ISOLATION_FOREST`): fitted on every node (no label read), its scores of every node and their validation
    and test metrics, no epoch. ``config`` (the zero-shot model's) stands for it where a checkpoint needs a model
    config (its input width)."""
    from gcad_dist.metrics import evaluate
    from gcad_dist.model.isolation_forest import fit_isolation_forest
    from gcad_dist.supervised import FitResult

    x = torch.as_tensor(x_raw, dtype=torch.float32)
    model = fit_isolation_forest(x, threads=threads)
    scores = model(x).numpy()
    res = FitResult(best_epoch=0, val=evaluate(y, scores, graph, torch.as_tensor(split.val).numpy()),
                    test=evaluate(y, scores, graph, torch.as_tensor(split.test).numpy()), history={}, state_dict={},
                    scores=scores, epochs_run=0, seconds=0.0, device="cpu", extra={})
    return res, model, config


def exemplar_offer(cfg: FinetuneConfig, candidates: list[str], x_raw: Any, y: np.ndarray, graph: np.ndarray | None,
                   split: Any, train: Any, config: Any
                   ) -> tuple[dict[str, Any], tuple[FitResult, torch.nn.Module, Any] | None]:
    """Whether :data:`EXEMPLAR` joins the ``candidates`` (JSON-ready record: ``offered`` and why), and its fit where it
    does: with ``--exemplar auto`` beside the zero-shot candidate (``--model auto`` on a label-free recipe's
    checkpoint) and 1 to :data:`EXEMPLAR_MAX_ANOMALIES` - 1 kept training anomalies, the scorer of those anomalies
    (``train``: the kept training nodes; no other label read to fit it) on the raw features ``x_raw``, offered where
    its validation AUROC is above chance at one-sided 5% (:func:`gcad_dist.model.exemplar.above_chance`): where the
    anomalies share no trait with the known ones it would only dilute the others. ``config`` (the zero-shot model's)
    stands for it where a checkpoint needs a model config."""
    from gcad_dist.metrics import evaluate
    from gcad_dist.model.exemplar import above_chance, fit_exemplars
    from gcad_dist.supervised import FitResult

    train = torch.as_tensor(train).cpu().numpy().astype(bool)
    anomalies = train & (np.asarray(y) == 1)
    record: dict[str, Any] = {"mode": cfg.exemplar, "exemplars": int(anomalies.sum()), "offered": False}
    if cfg.exemplar == "off":
        record["why"] = "--exemplar off"
        return record, None
    if ZERO_SHOT not in candidates:
        record["why"] = "offered beside the zero-shot candidate only (--model auto on a label-free checkpoint)"
        return record, None
    if not anomalies.any():
        record["why"] = "no labelled training anomaly"
        return record, None
    if anomalies.sum() >= EXEMPLAR_MAX_ANOMALIES:
        record["why"] = (f"{int(anomalies.sum())} kept training anomalies: offered below {EXEMPLAR_MAX_ANOMALIES} only, "
                         "where the fits learn little from the labels")
        return record, None
    x = torch.as_tensor(np.asarray(x_raw), dtype=torch.float32)
    model = fit_exemplars(x, anomalies)
    with torch.no_grad():
        scores = model(x).numpy()
    val = torch.as_tensor(split.val).cpu().numpy().astype(bool)
    above, auc, bar = above_chance(np.asarray(y)[val], scores[val])
    record.update({"val_auroc": None if np.isnan(auc) else round(auc, 4), "chance_bar": round(bar, 4),
                   "offered": above})
    if not above:
        record["why"] = (f"validation AUROC {auc:.3f}, not above chance at one-sided 5% ({bar:.3f})"
                         if np.isfinite(bar) else "validation holds no anomaly or no normal node")
        return record, None
    res = FitResult(best_epoch=0, val=evaluate(y, scores, graph, val),
                    test=evaluate(y, scores, graph, torch.as_tensor(split.test).cpu().numpy().astype(bool)),
                    history={}, state_dict={}, scores=scores, epochs_run=0, seconds=0.0, device="cpu", extra={})
    return record, (res, model, config)


def finetune(cfg: FinetuneConfig) -> dict[str, Any]:
    """Run steps 1-4 of the module doc and write the outputs; returns the metrics dict."""
    from gcad_dist.checkpoint import save_model
    from gcad_dist.data.splits import make_split, subsample_split
    from gcad_dist.model import GCCAD
    from gcad_dist.model.candidate_ensemble import CandidateEnsemble
    from gcad_dist.model.rank_blend import RankBlend
    from gcad_dist.model.snapshots import base_model, member_states
    from gcad_dist.metrics import evaluate
    from gcad_dist.score import (_resolve_device, _resolve_normalize, load_checkpoint_model, prepare_data,
                                 with_views)
    from gcad_dist.label_free_views import recorded_views
    from gcad_dist.supervised import fit_supervised, predict
    from gcad_dist.data.label_inputs import LABEL_COLUMNS, with_label_inputs
    from gcad_dist.train import (check_labels, combine_candidates, fit_models, keep_candidates, resolve_label_inputs,
                                 selection_weights, supervised_config, warn_split_classes, with_input_dropout,
                                 write_json)
    from partitioning.graph import describe_labels
    from partitioning.io import load_graph

    _validate(cfg)
    _resolve_device(cfg.device)
    state_dir = prepare_run_state(cfg) if cfg.epochs > 0 else None
    if cfg.threads > 0:
        torch.set_num_threads(cfg.threads)
    retain_freed_memory()
    t0 = time.perf_counter()
    loaded = load_checkpoint_model(cfg.checkpoint)
    if loaded.kind != "gccad":
        raise GraphInputError(cfg.checkpoint, f"holds a {loaded.kind!r} baseline, not a GCCAD model; fine-tuning needs GCCAD")
    if loaded.label_inputs:  # its label columns would read the validation and test labels of the graph
        raise GraphInputError(cfg.checkpoint, "was trained with --label-inputs; fine-tune from a checkpoint without "
                                              "them (a gcad_dist.pretrain or a gcad_dist.train --no-label-inputs one)")
    if cfg.epochs > 0 and len(loaded.input_blocks) > 1:
        raise GraphInputError(cfg.checkpoint, "holds models that read differently normalised features ("
                              f"{', '.join(loaded.input_blocks)}: a fine-tuned checkpoint); fine-tune from the "
                              "pre-trained checkpoint it came from (--epochs 0 evaluates this one as it is)")
    normalize = _resolve_normalize(cfg.normalize, loaded)
    graph = load_graph(cfg.graph)  # its raw features stay for the zero-shot score's feature view
    data = prepare_data(graph, loaded, normalize, source=cfg.graph)
    counts = check_labels(cfg.graph, getattr(data, "y", None), "fine-tuning and evaluation")
    y = data.y.long()
    try:
        split = make_split(data, seed=cfg.seed, split_index=cfg.split_index, train=cfg.train_frac, val=cfg.val_frac)
    except ValueError as e:
        raise UsageError(f"--split-index: {e}") from e
    warn_split_classes(split, y)
    sub, budget = subsample_split(split, y, cfg.label_fraction, seed=cfg.seed)
    n_tr, n_sub = budget["train_total"], budget["train_labelled"]
    label_counts = {**counts, **budget}
    log.info("%s: %d nodes, %s; split %s %s; fine-tuning on %d of %d training labels (%d anomalies), normalize=%s",
             cfg.graph, data.num_nodes, describe_labels(y), split.source, split.sizes(), n_sub, n_tr,
             label_counts["train_labelled_anomalies"], normalize)

    # Zero-shot: the pre-trained model as it is (its own evaluation settings), on the same splits.
    zs_model = loaded.model
    if isinstance(zs_model, RankBlend):  # a gcad_dist.train checkpoint with its forest view: GCCAD's part only
        log.info("%s: the checkpoint's forest view (a forest fitted on that run's labels) is left out; fine-tuning "
                 "starts from its GCCAD model", cfg.checkpoint)
        zs_model = zs_model.members[0]
    zs_settings = {"link_eval": getattr(loaded.config, "link_eval", "threshold"),
                   "score_space": getattr(loaded.config, "score_space", "encoder")}
    # Fine-tuning, validation and test: the same weights under the supervised evaluation settings. The label-free
    # ball switch and the feature view stay with the zero-shot score: a fine-tuned model is scored against its
    # neighbours alone, as before session 49 (the switch would recompute the two-hop ball at every evaluation).
    ft_config = dataclasses.replace(loaded.config, link_eval=cfg.link_eval, score_space=cfg.score_space,
                                    ball_switch=False, feature_view=False,
                                    signature_view=False)
    model = GCCAD(ft_config)
    model.load_state_dict(base_model(zs_model).state_dict())  # a snapshot ensemble starts from its best state
    graph_np = None if getattr(data, "graph_id", None) is None else data.graph_id.numpy()
    y_np = y.numpy()
    dev = _resolve_device(cfg.device)
    zs_scores = predict(zs_model.to(dev), copy.copy(data).to(dev)).cpu().numpy()
    # the feature and signature views (gcad_dist.score's, label-free), reported beside the zero-shot score, on the raw
    # features as the written model reads them (float32, its raw input block)
    raw_x = np.asarray(graph.x, dtype=np.float32)
    view_scores, zs_view, zs_signature = with_views(zs_model, zs_scores, data, raw_x)
    # the zero-shot candidate is the checkpoint as gcad_dist.score scores it, views included (--zero-shot-views); the
    # written ensemble carries them (its member reads the raw features as an input block: CandidateEnsemble's views)
    recorded = recorded_views(zs_model)
    viewable = any(recorded.values()) and not isinstance(zs_model, CandidateEnsemble)
    zs_views = recorded if cfg.zero_shot_views and viewable else None
    # the fine-tuned checkpoint candidate with the same views (--checkpoint-views): fine-tuning changes the contrast's
    # weights, not what the label-free views read
    ck_views = recorded if cfg.checkpoint_views and viewable else None
    zero_shot = {
        "val": evaluate(y_np, zs_scores, graph_np, split.val.numpy()),
        "test": evaluate(y_np, zs_scores, graph_np, split.test.numpy()),
    }
    metrics: dict[str, Any] = {
        "config": asdict(cfg),
        "model_config": asdict(loaded.config),
        "normalize": normalize,
        "split": {"source": split.source, **split.sizes()},
        "labels": label_counts,
        "label_budget": {"label_fraction": cfg.label_fraction, **budget},  # the same record as gcad_dist.train's
        # evaluation settings of "val" / "test" (and of the written model); zero-shot used the checkpoint's
        "link_eval": cfg.link_eval if cfg.epochs > 0 else zs_settings["link_eval"],
        "score_space": cfg.score_space if cfg.epochs > 0 else zs_settings["score_space"],
        "zero_shot_settings": zs_settings,
        "zero_shot": zero_shot,
    }
    if zs_view is not None or zs_signature is not None:  # the checkpoint as gcad_dist.score scores it
        metrics["zero_shot_feature_view"] = {
            "choice": zs_view, "val": evaluate(y_np, view_scores, graph_np, split.val.numpy()),
            "test": evaluate(y_np, view_scores, graph_np, split.test.numpy())}
        if zs_signature is not None:
            metrics["zero_shot_feature_view"]["signature_view"] = zs_signature
    label_inputs = cfg.epochs > 0 and resolve_label_inputs("gccad", cfg.label_inputs,
                                                         label_counts["train_labelled_anomalies"])
    metrics["label_inputs"] = label_inputs
    out = Path(cfg.out)
    extra = {
        "model": "gccad",
        "normalize": normalize,
        "finetuned_from": str(cfg.checkpoint),
        "label_fraction": cfg.label_fraction,
        "label_inputs": label_inputs,
        "pretrain_extra": {k: v for k, v in loaded.extra.items() if isinstance(v, (int, float, str, bool))},
    }
    saved_model, saved_config, snapshots = model, ft_config, None
    if cfg.epochs == 0:
        # the checkpoint unchanged: a candidate ensemble (a fine-tuned checkpoint) as a whole, with all its members
        if isinstance(zs_model, CandidateEnsemble):
            saved_model, saved_config, snapshots = zs_model, loaded.config, None
            if len(loaded.input_blocks) > 1:  # its members read their own normalisations, as they did
                extra[INPUT_BLOCKS_KEY] = loaded.input_blocks
        else:
            saved_model, saved_config, snapshots = base_model(zs_model), loaded.config, member_states(zs_model)
        scores, history, best_epoch = view_scores, None, 0  # as gcad_dist.score scores the written checkpoint
        shown = metrics.get("zero_shot_feature_view", zero_shot)
        metrics.update({"best_epoch": 0, "epochs_run": 0, "val": shown["val"], "test": shown["test"]})
    else:
        # gcad_dist.train's settings for its model (the graph candidates) and for every fit here
        tcfg = TrainConfig(graph=cfg.graph, out=cfg.out, hidden=loaded.config.hidden, epochs=cfg.epochs, lr=cfg.lr,
                           weight_decay=cfg.weight_decay, eval_every=cfg.eval_every, patience=cfg.patience,
                           snapshots=cfg.snapshots, link_eval=cfg.link_eval, score_space=cfg.score_space,
                           max_degree=cfg.max_degree, input_dropout=cfg.input_dropout, label_inputs=label_inputs,
                           seed=cfg.seed,
                           device=cfg.device, threads=cfg.threads,
                           candidate_workers=cfg.candidate_workers, address=cfg.address, progress=cfg.progress,
                           verbose=cfg.verbose, checkpoint_interval=cfg.checkpoint_interval)
        tcfg = with_input_dropout(tcfg, y, sub.train, data.num_features)  # resolved for the labels it fits on
        scfg = supervised_config(tcfg, state_dir)
        if label_inputs:  # every fit reads the neighbours among the kept training labels (never val / test labels)
            data = with_label_inputs(data, sub.train)
            widen_input_projection(model, LABEL_COLUMNS)
            ft_config = dataclasses.replace(ft_config, in_dim=data.num_features)
            model.config = ft_config
            log.info("label inputs: %d more input columns from the %d kept training anomalies", LABEL_COLUMNS,
                     label_counts["train_labelled_anomalies"])
        source = base_model(zs_model)
        # the scratch candidate reads gcad_dist.train's normalisation (session 63): its own copy of the features
        scratch_norm = normalize if cfg.scratch_normalize == "checkpoint" else cfg.scratch_normalize
        data_s = data
        if scratch_norm != normalize and "scratch" in _models_to_fit(cfg.model, loaded.config):
            data_s = prepare_data(graph, loaded, scratch_norm, source=cfg.graph)
            if label_inputs:
                data_s = with_label_inputs(data_s, sub.train)
            log.info("the scratch candidate reads %s features (--scratch-normalize), the others %s", scratch_norm,
                     normalize)
        metrics["scratch_normalize"] = scratch_norm
        names, fits, graph_selection = [], [], {}
        for which in _models_to_fit(cfg.model, loaded.config):
            if which == ZERO_SHOT:  # the checkpoint unchanged, scored as above (zero_shot_fit), with its views or bare
                shown = metrics["zero_shot_feature_view"] if zs_views else zero_shot
                fits.append(zero_shot_fit(zs_model, dataclasses.replace(loaded.config, feature_view=False,
                                                                        signature_view=False),
                                          view_scores if zs_views else zs_scores, shown["val"], shown["test"],
                                          LABEL_COLUMNS if label_inputs else 0))
            elif which == "checkpoint":
                log.info("fine-tuning the checkpoint's model (contrast %s)", ft_config.contrast)
                res = fit_supervised(model, data, sub, dataclasses.replace(scfg, anchor=cfg.anchor),
                                     state_name="checkpoint")
                if ck_views:  # scored as gcad_dist.score scores a label-free checkpoint: its views added
                    res, metrics["checkpoint_views"] = viewed_fit(res, raw_x, data, ck_views, y_np, graph_np, split)
                fits.append((res, model, ft_config))
            else:  # gcad_dist.train's model and candidates, from the pre-trained input projection or from scratch
                init = (lambda m: warm_start_input_projection(m, source)) if which == "graph" else None
                log.info("fine-tuning gcad_dist.train's model (message passing), %s",
                         "started from the checkpoint's input projection" if init else "from scratch")
                fit_data = data_s if which == "scratch" else data
                gfits = fit_models(tcfg, fit_data, sub, scfg, init=init, state_prefix=f"{which}-")
                if len(gfits) > 1:  # the candidates validation cannot tell apart, scored together, as in train
                    kept, graph_selection[which] = keep_candidates(gfits, y, split.val, seed=cfg.seed,
                                                                   rejoin=tcfg.rejoin, few=tcfg.few_anomalies)
                    fits.append(combine_candidates(gfits, kept, fit_data, split,
                                                   weights=selection_weights(graph_selection[which])))
                else:
                    fits.append(gfits[0])
            names.append(which)
        offer = isolation_forest_offer(cfg, names, y_np, split.val.numpy())
        metrics["isolation_forest"] = offer
        if offer["offered"]:
            log.info("the label-free isolation forest on the raw features joins the candidates (%d validation "
                     "anomalies)", offer["val_anomalies"])
            fits.append(isolation_forest_fit(graph.x, y_np, graph_np, split, fits[names.index(ZERO_SHOT)][2],
                                             threads=cfg.threads if cfg.threads > 0 else torch.get_num_threads()))
            names.append(ISOLATION_FOREST)
        offer, fit = exemplar_offer(cfg, names, raw_x, y_np, graph_np, split, sub.train,
                                    fits[names.index(ZERO_SHOT)][2] if ZERO_SHOT in names else None)
        metrics["exemplar"] = offer
        if fit is not None:
            log.info("the %d labelled training anomalies as exemplars join the candidates (validation AUROC %.3f > "
                     "%.3f, chance at one-sided 5%%)", offer["exemplars"], offer["val_auroc"], offer["chance_bar"])
            fits.append(fit)
            names.append(EXEMPLAR)
        kept_name = names[0]
        if cfg.candidate_scores:
            write_candidate_scores(out / CANDIDATE_SCORES, names, [f[0].scores for f in fits], y_np, split,
                                   [f[0].selection_scores for f in fits])
        if len(fits) > 1:  # every model validation does not place clearly below the best, scored together
            kept, selection = keep_candidates(fits, y, split.val, seed=cfg.seed, names=names,
                                              cross_fitted=cfg.keep_rule == "cross-fitted",
                                              weighting=cfg.candidate_weights, rejoin=cfg.rejoin,
                                              few=cfg.few_anomalies)
            metrics["model_selection"] = selection
            kept_name = selection["chosen"]
        else:
            kept, selection = [0], {}
        weights = selection_weights(selection)
        # the kept models' input blocks, one per feature normalisation they read, the checkpoint's first: the scratch
        # fit's where it read its own, the isolation forest's raw features ("none")
        width = int(graph.x.shape[1])
        label_columns = LABEL_COLUMNS if label_inputs else 0
        block_names, block_x, blocks, views = [normalize], [data.x[:, :width]], [], []

        def block_of(how: str, feats: Any) -> int:
            """The input block (>= 1) holding ``feats`` under the normalisation ``how``, added if new."""
            if how not in block_names[1:]:
                block_names.append(how)
                block_x.append(feats)
            return 1 + block_names[1:].index(how)

        for i in kept:
            # the viewed zero-shot model's views read the raw features, a block of their own always
            member_views = {ZERO_SHOT: zs_views, "checkpoint": ck_views}.get(names[i])
            views.append({"block": block_of("none", torch.from_numpy(raw_x)), **member_views}
                         if member_views else None)
            if names[i] in RAW_FEATURE_CANDIDATES:  # a block of its own always, even where the checkpoint's is "none"
                blocks.append(block_of("none", torch.from_numpy(raw_x)))
            elif names[i] == "scratch" and data_s is not data:
                blocks.append(block_of(scratch_norm, data_s.x[:, :width]))
            else:
                blocks.append(0)
        view_data, view_features = data, None  # what the written model reads, and the forest's leading columns
        if cfg.model == "scratch" and blocks == [1]:  # gcad_dist.train's fit as it is: its input, its forest view
            res, saved_model, saved_config = fits[0]
            view_data = data_s
            extra["normalize"] = metrics["normalize"] = scratch_norm
        elif any(blocks) or any(views):  # the normalisations side by side (gcad_dist.score builds them alike); the
            # scratch fit, the forest or the viewed zero-shot model kept alone reads its block too, so that the forest
            # view reads the checkpoint's normalisation whichever candidates are kept
            res, saved_model, saved_config = combine_candidates(fits, kept, data, split, blocks=blocks, width=width,
                                                                label_columns=label_columns, weights=weights,
                                                                views=views if any(views) else None)
            view_data = copy.copy(data)
            view_data.x = torch.cat([*block_x, data.x[:, width:]], dim=1)
            view_features = width  # the forest reads the checkpoint's normalisation, as without the other blocks
            extra[INPUT_BLOCKS_KEY] = block_names
            metrics["input_blocks"] = {"blocks": block_names, "kept": dict(zip([names[i] for i in kept], blocks))}
        else:
            res, saved_model, saved_config = combine_candidates(fits, kept, data, split, weights=weights)
        if graph_selection:  # each graph model's own candidates kept, as gcad_dist.train keeps them
            metrics["contrast_selection"] = graph_selection
        forest = None
        if cfg.forest == "auto":  # on the kept training labels, as gcad_dist.train's forest (session 62)
            from gcad_dist.forest_view import add_forest_view

            if res.selection_scores is None:  # the zero-shot model alone: it chose nothing on validation
                res = dataclasses.replace(res, selection_scores=res.scores)
            res, saved_model, forest = add_forest_view(res, saved_model, view_data, sub, seed=cfg.seed,
                                                       threads=cfg.threads if cfg.threads > 0 else torch.get_num_threads(),
                                                       in_features=view_features,
                                                       min_anomalies=cfg.forest_min_anomalies,
                                                       local=cfg.forest_columns == "local")
        scores, history, best_epoch, snapshots = res.scores, res.history, res.best_epoch, res.snapshot_states
        metrics["finetuned_model"] = kept_name
        metrics["model_config"] = asdict(saved_config)
        metrics.update(res.summary())
        metrics["history"] = res.history
        if forest:
            metrics["forest_view"] = forest
        extra["finetuned_model"] = kept_name
    extra.update({"best_epoch": best_epoch, "val": metrics["val"], "test": metrics["test"]})
    save_model(out / "final", saved_model.cpu(), saved_config, extra=extra, snapshots=snapshots)
    metrics["wall_seconds"] = round(time.perf_counter() - t0, 3)
    metrics["environment"] = environment(dev)
    write_json(metrics, out / "metrics.json")
    finish_run_state(state_dir)
    if cfg.plots:
        from gcad_dist.plots import plot_roc_pr, plot_training_curves

        title = f"{Path(cfg.graph).name} fine-tune {cfg.label_fraction:g} labels"
        if history:  # none when the kept model is the zero-shot one alone
            plot_training_curves(history, out / "training_curves.png", title=title, best_epoch=best_epoch)
        test = split.test.numpy() & (y_np >= 0)
        plot_roc_pr(y_np[test], scores[test], out / "roc_pr_test.png", title=f"test, {title}")
    return metrics


def build_parser() -> argparse.ArgumentParser:
    d = FinetuneConfig(checkpoint="", graph="")
    p = ArgumentParser(
        prog="python -m gcad_dist.finetune",
        description="Fine-tune a pre-trained GCCAD checkpoint on a labelled graph using a stratified fraction of "
                    "its training labels (epoch selected on validation AUPRC), or with --epochs 0 only evaluate it "
                    "zero-shot. Writes <out>/final/model.pt, <out>/metrics.json and plots.",
        formatter_class=DefaultsHelpFormatter,
    )
    p.add_argument("--checkpoint", required=True, help="pre-training checkpoint directory (with model.pt), e.g. runs/pre/final")
    p.add_argument("--graph", required=True, help="labelled graph: .npz (x, edge_index, y[, masks]), torch-saved PyG Data (.pt) "
                                                  "or folder; its feature width must equal the checkpoint's in_dim")
    p.add_argument("--out", default=d.out, help="output directory (final/model.pt, metrics.json, PNG plots)")
    p.add_argument("--label-fraction", type=float, default=d.label_fraction,
                   help="fraction of the training split's labels to use, in (0, 1]; stratified by class, seeded, "
                        "at least one node of each class (partly labelled graph: of its labelled training nodes)")
    p.add_argument("--model", default=d.model, choices=FINETUNE_MODELS,
                   help="what is fitted: 'checkpoint' = the checkpoint's own model; 'graph' = gcad_dist.train's GCCAD "
                        "(message passing; its --contrast auto candidates) started from the checkpoint's input "
                        "projection; 'scratch' = that GCCAD from a random start, as gcad_dist.train fits it (on its "
                        "z-scores: --scratch-normalize); 'auto' = "
                        "'checkpoint' when that model passes messages, else all three, and the checkpoint unchanged "
                        "(zero-shot) beside them, keeping every one that a paired "
                        "bootstrap over the validation nodes does not place clearly below the best in AUPRC and "
                        "averaging their standardised scores (the "
                        "label-free recipe's model has no message passing: where its score says little about the "
                        "labelled anomalies, a graph model learns what it cannot; where a few labels fit worse than "
                        "none, the zero-shot model stays; costs about 2x gcad_dist.train)")
    add_schedule_options(p, d, epochs_help="maximum full-batch fine-tuning epochs; 0 = zero-shot evaluation only "
                         "(optimiser, epoch and patience defaults are gcad_dist.train's)")
    p.add_argument("--anchor", type=float, default=d.anchor, metavar="A",
                   help="L2-SP: the fine-tuned checkpoint model's loss adds A/2 * ||w - w_pretrained||^2, pulling its "
                        "weights towards the pre-trained ones, so that a few labels adjust the label-free model "
                        "instead of overwriting it (0 = off, the rule before session 70; the other candidates start "
                        "from weights that were not pre-trained and are never anchored)")
    p.add_argument("--input-dropout", type=float, default=d.input_dropout,
                   help="dropout on the input features in the GCCAD fits (default: gcad_dist.train's, 0.2 below 20 "
                   "labelled training anomalies per input feature after --label-fraction, else 0; the fine-tuned "
                   "checkpoint model has none)")
    p.add_argument("--label-inputs", action=argparse.BooleanOptionalAction, default=d.label_inputs,
                   help="every fit also reads its neighbours labelled anomalous among the kept training labels, two "
                        "input columns (the masked label trick, as gcad_dist.train --label-inputs; the checkpoint's "
                        "model starts with zero weights on them). The written model then reads the labels of the graph "
                        "it scores (gcad_dist.score). Default: gcad_dist.train's rule, on when the kept training "
                        "labels hold at least 10 anomalies (with 6, inj_cora at 10%% of its labels, they cost "
                        "fine-tuning validation AUPRC 0.023; from 11 on they gained; BENCHMARKS.md, session 32)")
    p.add_argument("--link-eval", default=d.link_eval, choices=LINK_EVALS,
                   help="GCCAD link remover at evaluation (fine-tuned model; zero-shot keeps the checkpoint's): "
                        "'expected' weights each edge by its keep probability p, 'threshold' keeps iff p > 0.5 "
                        "(METHOD.md); default = gcad_dist.train's")
    p.add_argument("--score-space", default=d.score_space, choices=SCORE_SPACES,
                   help="GCCAD score 1 - cos(h, q) on the encoder outputs (METHOD.md) or after the projection head "
                        "(fine-tuned model; zero-shot keeps the checkpoint's); default = gcad_dist.train's")
    add_split_options(p, d, seed_help="seed for the label subsample, the random split and training noise")
    p.add_argument("--scratch-normalize", default=d.scratch_normalize, choices=SCRATCH_NORMALIZE,
                   help="the feature normalisation of the 'scratch' candidate: gcad_dist.train's default (standard, "
                        "z-scores) since session 63, so that it is the model gcad_dist.train fits on the same labels; "
                        "'checkpoint' = the one the other candidates read (--normalize), the behaviour before. Kept "
                        "beside them, the written model reads both normalisations and gcad_dist.score builds both")
    p.add_argument("--normalize", default=d.normalize, choices=SCORE_NORMALIZE_CHOICES,
                   help="feature normalisation: auto = what the checkpoint was trained with (extra['normalize']: "
                        "pre-training records its store's, power by default since session 39; none if unrecorded, e.g. "
                        "older checkpoints); standard = z-score over all nodes of this graph; power = z-score, a "
                        "Yeo-Johnson transform per column fitted on this graph, z-score; none = raw")
    p.add_argument("--candidate-scores", action="store_true",
                   help=f"also write <out>/{CANDIDATE_SCORES}: each fitted candidate's scores of every node, the "
                        "labels and the split masks (for studies of the keep rule: bench/finetune_selection.py)")
    p.add_argument("--forest", default=d.forest, choices=FOREST_MODES,
                   help="auto = gcad_dist.train's forest view: trees on [x, the neighbours' mean x, degree] (the forest also its second hop; a random forest "
                        "and gradient-boosted trees, ranks averaged) "
                        "fitted on the kept training labels joins the fine-tuned score by rank (or scores alone) where "
                        "validation says so by gcad_dist.train's rule (metrics.json 'forest_view'); off = the "
                        "fine-tuned GCCAD alone (every run before session 62)")
    add_forest_min_anomalies_option(p, d.forest_min_anomalies)
    add_forest_columns_option(p, d.forest_columns)
    p.add_argument("--isolation-forest", default=d.isolation_forest, choices=ISOLATION_FOREST_MODES,
                   help="--model auto on a label-free checkpoint: auto = the label-free isolation forest on the raw "
                        "features (the feature view's, no label read) joins the candidates where validation holds at "
                        "least 10 anomalies, judged by its own scores as the zero-shot model is; kept, it is written "
                        "into the checkpoint (its trees, reading the raw features as an input block of their own) "
                        "and gcad_dist.score scores with it. Where labels follow a rule over a few heavy-tailed "
                        "attributes it ranks the anomalies far above GCCAD fitted on 1%% of the labels (BENCHMARKS.md, "
                        "sessions 64-65); off = the candidates before session 65")
    p.add_argument("--exemplar", default=d.exemplar, choices=EXEMPLAR_MODES,
                   help="--model auto on a label-free checkpoint: auto = the kept training anomalies (1-9 of them) "
                        "as exemplars, each node scored by its cosine similarity to the nearest of them on the z-scored "
                        "raw features, join the candidates where that score ranks the validation anomalies above chance "
                        "(one-sided 5%%), judged by its own scores as the zero-shot model is; kept, the exemplars are "
                        "written into the checkpoint and gcad_dist.score scores with them. Where anomalies share a "
                        "trait (camouflaged fraud) one known case finds the others (BENCHMARKS.md, session 78); off = "
                        "the candidates before session 78")
    p.add_argument("--checkpoint-views", action=argparse.BooleanOptionalAction, default=d.checkpoint_views,
                   help="--model auto / checkpoint on a label-free checkpoint: score the fine-tuned checkpoint "
                        "candidate as gcad_dist.score scores a label-free checkpoint, its contrast plus the label-free "
                        "views the checkpoint records (feature and signature view, fitted on this graph, no label "
                        "read), as the zero-shot candidate is (--zero-shot-views); the written model carries them. "
                        "--no-checkpoint-views: its bare contrast (before session 77). Where the links say little the "
                        "fine-tuned contrast alone ranks the anomalies far below the zero-shot score: over ten fresh "
                        "generated graphs at 10%% of the labels the views gave +0.012 / +0.022 test AUROC / AUPRC, up "
                        "to +0.063, none lower (BENCHMARKS.md, session 77)")
    p.add_argument("--zero-shot-views", action=argparse.BooleanOptionalAction, default=d.zero_shot_views,
                   help="--model auto on a label-free checkpoint: the zero-shot candidate is the checkpoint as "
                        "gcad_dist.score scores it, its label-free views (feature and signature view, fitted on this "
                        "graph, no label read) included, and the written model applies them alike when it scores; "
                        "--no-zero-shot-views: its bare contrast (before session 73). Where the links say little the "
                        "views carry the label-free score (BENCHMARKS.md, sessions 72-73)")
    p.add_argument("--keep-rule", default=d.keep_rule, choices=KEEP_RULES,
                   help="--model auto: how a trained candidate is judged against the others on validation. "
                        "'validation': by its validation scores, which its own epoch choice made on the same nodes "
                        "flatters; 'cross-fitted': each validation half scored by the evaluations the fit chose on "
                        "the other half (the zero-shot candidate chose nothing and is judged by its scores)")
    p.add_argument("--candidate-weights", default=d.candidate_weights, choices=WEIGHTINGS,
                   help="--model auto: how the kept candidates' standardised scores are combined (the keep rule: every "
                        "candidate a paired bootstrap over >= 10 validation anomalies does not place below the best "
                        "with confidence >= 0.95). 'equal': their mean; 'lift': their mean weighted by each one's "
                        "validation AUPRC lift over the base rate, max(0, AUPRC - base rate) (alike with fewer than 10 "
                        "validation anomalies); metrics.json 'model_selection' records the weights")
    p.add_argument("--rejoin", action=argparse.BooleanOptionalAction, default=d.rejoin,
                   help="--model auto: after the keep rule, a dropped candidate rejoins the kept ones, with an equal "
                        "share, where a paired bootstrap over >= 10 validation anomalies finds their mean with it "
                        "better in AUPRC with confidence >= 0.8, one at a time. The keep rule judges each candidate "
                        "alone; where the anomalies are of several kinds, a candidate weaker alone can rank others "
                        "than the kept ones do (BENCHMARKS.md, session 74). --no-rejoin: as before session 74")
    add_few_anomalies_option(p, d.few_anomalies, "--model auto", "candidates",
                             "+0.010 / +0.034 test AUROC / AUPRC for the drop and +0.012 / +0.081 more for the "
                             "weights on two sets of ten fresh generated graphs with 6 validation anomalies; "
                             "metrics.json 'model_selection'")
    add_candidate_options(p, d)
    add_resume_options(p, d)
    add_runtime_options(p, d)
    return p


def run_finetune(cfg: FinetuneConfig) -> dict[str, Any]:
    """:func:`finetune` as the command runs it: a changed ``--resume`` is a usage error, and a run that fails keeps
    its fits' states for ``--resume`` (:func:`gcad_dist.fit_state.abandon`)."""
    try:
        return finetune(cfg)
    except ResumeMismatch as e:
        raise UsageError(f"--resume: {e}; start over with --overwrite") from None
    except BaseException as e:
        abandon_run_state(Path(cfg.out) / STATE_DIR, e)
        raise


def summary_line(cfg: FinetuneConfig, m: dict[str, Any]) -> str:
    """The line the command prints for a run of ``cfg`` with metrics ``m``."""
    zs, te = m["zero_shot"]["test"], m["test"]
    label = ("zero-shot only" if cfg.epochs == 0
             else f"{m['finetuned_model']} model, best epoch {m['best_epoch']}/{m['epochs_run']}")
    fv = m.get("forest_view")
    if fv:
        label += ", forest view " + describe_choice(fv)
    lab = m["labels"]
    graph_labels = ("all labelled" if lab["labelled"] == lab["nodes"]
                    else f"{lab['labelled']:,} of {lab['nodes']:,} nodes labelled")
    return (f"fine-tune ({lab['train_labelled']} training labels, {graph_labels}, {label}) | test on {te['num_nodes']} "
            f"labelled nodes | zero-shot test AUROC {zs['auroc']:.4f} "
            f"AUPRC {zs['auprc']:.4f} | test AUROC {te['auroc']:.4f} AUPRC {te['auprc']:.4f} "
            f"Rec@K {te['recall_at_k']:.4f} -> {cfg.out}")


def main(argv: list[str] | None = None) -> int:
    cfg = FinetuneConfig(**vars(build_parser().parse_args(argv)))
    setup_logging(cfg.verbose)
    print(summary_line(cfg, run_finetune(cfg)))
    return 0


if __name__ == "__main__":
    run_cli(main)
