"""Detection-quality benchmark: ``python -m gcad_dist.quality``.

Runs every model on every dataset for several seeds and reports test AUROC, AUPRC and Recall@K
(K = number of test anomalies) as mean ± std over seeds, with the labels each method used and its
wall time per run.

* Models: the GNNs of :mod:`gcad_dist.train` (GCCAD, its cross-entropy ablation, MLP/GCN/GIN/SAGE/GAT),
  trained on the train split with the epoch chosen on validation AUPRC (labels used: train+val), and the
  reference detectors of :mod:`gcad_dist.detectors`: label-free ones (IsolationForest, neighbour cosine,
  PyGOD DOMINANT / CoLA, GCCAD-pre) fitted on all nodes without labels, and a supervised tree ensemble
  fitted on the train split.
* Seed index ``s`` fixes the split (tolokers: its given split ``s % 10``; other graphs: a stratified
  40/20/40 split of the labelled nodes seeded by ``s``), the initialisation and the training noise. Every
  model sees the same splits; every metric is over the split's (labelled) test nodes, the test split is
  only read for the report.
* Each run's result is written to ``<out>/runs/<dataset>/<model>/<key>/seed<s>.json`` as soon as it ends,
  where ``<key>`` is a hash of every setting that changes the run's result (:func:`run_settings`: model
  settings, dataset content, split fractions, library versions, :data:`RESULTS_VERSION`); the settings
  are stored in the JSON. A rerun with the same settings skips runs whose JSON exists (resume); a rerun
  with other settings trains anew, and the tables only read runs whose settings match the current ones. A GNN run
  that was interrupted (Ctrl-C, a crash) continues from its fits' training state, kept beside its JSON in
  ``seed<s>.unfinished/`` until the JSON is written (:mod:`gcad_dist.fit_state`).
* ``<out>/quality.md`` (and stdout) get the Markdown tables.
"""

from __future__ import annotations

import argparse
import copy
import hashlib
import json
import logging
import math
import shutil
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tqdm.auto import tqdm

from gcad_dist.allocator import retain_freed_memory
from gcad_dist.cli import ArgumentParser, DefaultsHelpFormatter, UsageError, bar_disable, run_cli, setup_logging
from gcad_dist.data.label_inputs import LENDS
from gcad_dist.selection import KEEP_RULE
from gcad_dist.fit_state import ResumeMismatch
from gcad_dist.forest_view import FOREST_MODES, FOREST_RULE
from gcad_dist.pretrain_first import PRETRAIN_MODES
from gcad_dist.provenance import environment
from gcad_dist.train import (AUTO_CONTRASTS, CONVS, FEW_ANOMALIES, LINK_EVALS, NORMS, SCORE_SPACES, TrainConfig,
                             auto_candidates, check_input_dropout, input_dropout_rule, label_inputs_rule, load_labelled,
                             normalize_features, resolve_jump, train_one, write_json)
from partitioning.features import NORMALIZE_CHOICES

log = logging.getLogger("gcad_dist.quality")

#: Bump when a code change alters the result of a run with unchanged settings: older runs are then not reused.
RESULTS_VERSION = 2
GNN_MODELS = ("gccad", "gccad-ce", "mlp", "gcn", "gin", "sage", "gat", "bwgnn")
DETECTOR_MODELS = ("iforest", "knn", "nbr-cosine", "local-knn", "dominant", "cola", "trees", "boosted-trees",
                   "gccad-pre", "gccad-pre-paper")
ALL_MODELS = GNN_MODELS + DETECTOR_MODELS
#: gccad-pre and gccad-pre-paper (store build + Ray pre-training per run) only run when asked for.
DEFAULT_MODELS = GNN_MODELS + ("iforest", "knn", "nbr-cosine", "local-knn", "dominant", "cola", "trees", "boosted-trees")
DEFAULT_DATASETS = ("tolokers", "reddit", "books", "disney", "enron", "inj_cora")
METRICS = (("auroc", "AUROC"), ("auprc", "AUPRC"), ("recall_at_k", "Rec@K"))
GCCAD_ONLY = ("conv", "score_space", "link_eval")  # settings that only GCCAD and its ablation read


@dataclass
class QualityConfig:
    """Settings of ``python -m gcad_dist.quality``."""

    datasets: list[str] = field(default_factory=lambda: list(DEFAULT_DATASETS))
    seeds: int = 5
    first_seed: int = 0
    models: list[str] = field(default_factory=lambda: list(DEFAULT_MODELS))
    data_dir: str = "../shared/data"
    out: str = "runs/quality"
    conv: str = "gin"
    score_space: str = "projection"
    link_eval: str = "expected"
    contrast: str = TrainConfig.contrast
    forest: str = TrainConfig.forest  # GCCAD's forest view (gcad_dist.train --forest)
    pretrain: str = TrainConfig.pretrain  # GCCAD: pre-train first (gcad_dist.train --pretrain)
    jump: str | None = TrainConfig.jump
    norm: str = TrainConfig.norm
    hidden: int = TrainConfig.hidden
    layers: int = TrainConfig.layers
    input_dropout: float | None = TrainConfig.input_dropout  # None: each model's default
    label_inputs: bool | None = TrainConfig.label_inputs  # neighbour-label inputs; None: each model's default
    epochs: int = TrainConfig.epochs
    lr: float = TrainConfig.lr
    eval_every: int = TrainConfig.eval_every
    patience: int = TrainConfig.patience
    snapshots: int = TrainConfig.snapshots
    max_degree: int = TrainConfig.max_degree
    # the share of the split's labelled training nodes that every supervised method fits on (gcad_dist.train
    # --label-fraction's seeded stratified subsample: GCCAD, the GNNs and the trees get the same nodes); validation and
    # test untouched; label-free detectors read no label
    label_fraction: float = TrainConfig.label_fraction
    pre_epochs: int | None = None  # None: the recipe's (gcad_dist.detectors.gccad_pre: local 3, paper 10)
    pre_ensemble: int | None = None  # None: the local recipe's (gcad_dist.detectors.gccad_pre.LOCAL_ENSEMBLE)
    pre_cliques: float | None = None  # None: the local recipe's pretrain --plant-cliques
    pre_tails: float | None = None  # None: the local recipe's pretrain --push-tails
    pre_batch_size: int | None = None  # None: the local recipe's pretrain --batch-size
    pre_context_hops: int | None = None  # None: the local recipe's pretrain --context-hops (1)
    pre_normalize: str | None = None  # None: partitioning.build's default --normalize (power)
    pre_degree_detrend: bool | None = None  # None: the local recipe's pretrain --degree-detrend (on)
    pre_loose_context: bool | None = None  # None: the local recipe's pretrain --loose-context
    pre_ball_switch: bool | None = None  # None: the local recipe's pretrain --ball-switch
    pre_feature_view: bool | None = None  # None: the local recipe's pretrain --feature-view
    pre_signature_view: bool | None = None  # None: the local recipe's pretrain --signature-view
    pre_dense_links: int | None = None  # None: pretrain's --dense-links
    pre_sample_threshold: int | None = None  # None: pretrain's --sample-threshold
    pre_max_degree: int | None = None  # None: pretrain's --max-degree
    pre_fanout: int | None = None  # None: pretrain's --fanouts (a minibatch seed's context: 10 sampled neighbours)
    pre_lr: float | None = None  # None: the local recipe's pretrain --lr (1e-3)
    pre_workers: int | None = None  # None: pretrain --workers 1 (each worker --threads threads)
    # the model every other one is compared with seed by seed (paired_tables); None = gccad when it is run
    paired_with: str | None = None

    def detector_options(self) -> dict[str, Any]:
        """The harness options that detectors read (:attr:`gcad_dist.detectors.DetectorSpec.options`)."""
        return {"pre_epochs": self.pre_epochs, "pre_ensemble": self.pre_ensemble, "pre_cliques": self.pre_cliques,
                "pre_tails": self.pre_tails, "pre_batch_size": self.pre_batch_size,
                "pre_context_hops": self.pre_context_hops, "pre_normalize": self.pre_normalize,
                "pre_degree_detrend": self.pre_degree_detrend, "pre_loose_context": self.pre_loose_context,
                "pre_ball_switch": self.pre_ball_switch, "pre_feature_view": self.pre_feature_view,
                "pre_signature_view": self.pre_signature_view,
                "pre_dense_links": self.pre_dense_links, "pre_sample_threshold": self.pre_sample_threshold,
                "pre_fanout": self.pre_fanout, "pre_lr": self.pre_lr, "pre_max_degree": self.pre_max_degree,
                "pre_workers": self.pre_workers,
                "label_inputs": self.label_inputs}
    device: str = "auto"
    threads: int = 0
    candidate_workers: int = 1  # gccad's --contrast auto candidates fitted side by side (the same results)
    report_only: bool = False
    verbose: bool = False


# ---------------------------------------------------------------------------------------------------
# Run keys


def _version(module: str) -> str | None:
    """Installed version of ``module`` without a local build tag (``2.13.0+cpu`` -> ``2.13.0``), or None."""
    import importlib

    try:
        return str(importlib.import_module(module).__version__).split("+")[0]
    except ImportError:
        return None


_FINGERPRINTS: dict[str, str] = {}


def dataset_fingerprint(path: Path) -> str:
    """SHA-256 (16 hex digits) of a graph file's bytes; for a folder, of its files' names, sizes and mtimes."""
    h = hashlib.sha256()
    if path.is_dir():
        for f in sorted(p for p in path.rglob("*") if p.is_file()):
            st = f.stat()
            h.update(f"{f.relative_to(path)}|{st.st_size}|{st.st_mtime_ns}\n".encode())
        return h.hexdigest()[:16]
    st = path.stat()
    key = f"{path.resolve()}|{st.st_size}|{st.st_mtime_ns}"  # a rewritten file is hashed again
    if key not in _FINGERPRINTS:
        with open(path, "rb") as fh:
            for block in iter(lambda: fh.read(1 << 22), b""):
                h.update(block)
        _FINGERPRINTS[key] = h.hexdigest()[:16]
    return _FINGERPRINTS[key]


def train_config(cfg: QualityConfig, path: Path, model: str, seed: int) -> TrainConfig:
    """The :class:`TrainConfig` of one GNN run."""
    return TrainConfig(
        graph=str(path), out="", model=model, conv=cfg.conv, score_space=cfg.score_space, link_eval=cfg.link_eval,
        contrast=cfg.contrast, forest=cfg.forest, pretrain=cfg.pretrain if model == "gccad" else "off",
        jump=cfg.jump, norm=cfg.norm, hidden=cfg.hidden,
        layers=cfg.layers, input_dropout=cfg.input_dropout, label_inputs=cfg.label_inputs, epochs=cfg.epochs, lr=cfg.lr, eval_every=cfg.eval_every,
        patience=cfg.patience,
        snapshots=cfg.snapshots, max_degree=cfg.max_degree, label_fraction=cfg.label_fraction, seed=seed,
        device=cfg.device, threads=cfg.threads, candidate_workers=cfg.candidate_workers, progress=False, plots=False,
    )


def run_settings(cfg: QualityConfig, dataset: str, path: Path, model: str) -> dict[str, Any]:
    """Every setting that changes the result of a (dataset, model) run, except the seed (JSON-ready)."""
    from gcad_dist import __version__

    t = TrainConfig(graph="", out="")
    s: dict[str, Any] = {
        "results_version": RESULTS_VERSION, "gcad_dist": __version__, "model": model,
        "dataset": dataset, "data_sha256": dataset_fingerprint(path),
        "split": {"given_masks": "seed % S", "random": f"stratified {t.train_frac:g}/{t.val_frac:g}/rest, seeded"},
    }
    if model in GNN_MODELS:
        tc = asdict(train_config(cfg, path, model, 0))
        keep = ("hidden", "layers", "dropout", "epochs", "lr", "weight_decay", "eval_every", "patience",
                "class_weight", "normalize", "train_frac", "val_frac", "conv", "score_space", "link_eval")
        s["train"] = {k: tc[k] for k in keep if model in ("gccad", "gccad-ce") or k not in GCCAD_ONLY}
        if tc["snapshots"] != 1:  # absent = 1, the single best epoch (runs before session 13)
            s["train"]["snapshots"] = tc["snapshots"]
        if model == "gccad" and tc["contrast"] != "graph":  # absent = graph: keeps earlier runs' keys
            s["train"]["contrast"] = tc["contrast"]
            if tc["contrast"] == "auto":  # session 6's auto kept the higher validation AUPRC: another key
                s["train"]["contrast_rule"] = KEEP_RULE  # was SWITCH_RULE (keep one) in sessions 7-17
                cands = auto_candidates(tc["norm"])
                if cands != tuple((c, "layer") for c in AUTO_CONTRASTS):  # absent = graph and ego (sessions 6-16)
                    s["train"]["auto_candidates"] = [list(c) for c in cands]
        jump = resolve_jump(model, "none", tc["jump"])
        if model in ("gccad", "gccad-ce") and jump != "last":  # absent = last: keeps earlier runs' keys
            s["train"]["jump"] = jump
        if model == "gccad" and tc["forest"] != "off":  # absent = off (GCCAD alone: every run before session 61)
            s["train"]["forest"] = FOREST_RULE
            if tc["forest_columns"] != "none":  # absent = none, the trees' inputs before session 90's default
                s["train"]["forest_columns"] = tc["forest_columns"]
        if model == "gccad" and tc["pretrain"] != "off":  # absent = off (from scratch: every run before session 80)
            s["train"]["pretrain"] = tc["pretrain"]
            if tc["pretrain"] == "auto":  # the threshold auto counts against (20 in session 80, keyed since 81)
                s["train"]["pretrain_below"] = FEW_ANOMALIES
        if tc["norm"] != "layer":  # absent = layer (LayerNorm): keeps earlier runs' keys
            s["train"]["norm"] = tc["norm"]
        if model in ("gccad", "gccad-ce") and tc["max_degree"]:  # absent = 0, every edge in every epoch
            s["train"]["max_degree"] = tc["max_degree"]
        p_in = input_dropout_rule(model, tc["input_dropout"])
        if p_in:  # absent = 0, no input dropout (runs before session 28 stay valid); session 28's 0.2 for any labels
            s["train"]["input_dropout"] = p_in
        li = label_inputs_rule(model, tc["label_inputs"])
        if li:  # absent = off (every run before session 31); True = on for any labels (session 31), else the rule
            s["train"]["label_inputs"] = li
            s["train"]["label_lends"] = LENDS  # absent = half of each class lent per epoch (sessions 31-32)
        s["libs"] = {"torch": _version("torch"), "torch_geometric": _version("torch_geometric")}
    else:
        from gcad_dist.detectors import DETECTORS, settings_of

        s["detector"] = settings_of(model, cfg.detector_options())
        libs = {"numpy": _version("numpy"), "sklearn": _version("sklearn"), "torch": _version("torch")}
        libs.update({m: _version(m) for m, _extra in DETECTORS[model].requires if m not in ("faiss", "ray")})
        s["libs"] = libs
    if cfg.label_fraction != 1 and labels_used(model) != "none":  # absent = every training label (runs before s93)
        s["label_fraction"] = cfg.label_fraction
    return json.loads(json.dumps(s))  # exactly what a run JSON holds after a round trip


def settings_key(settings: dict[str, Any]) -> str:
    """12 hex digits of the SHA-256 of the canonical JSON of ``settings``."""
    canon = json.dumps(settings, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canon.encode()).hexdigest()[:12]


def run_path(out: Path, dataset: str, model: str, seed: int, key: str) -> Path:
    return out / "runs" / dataset / model / key / f"seed{seed}.json"


# ---------------------------------------------------------------------------------------------------
# Reading results and tables


def _resolve_dataset(data_dir: Path, name: str) -> Path:
    p = Path(name)
    if p.suffix or p.exists():
        return p
    return data_dir / f"{name}.npz"


def _fmt(vals: list[float]) -> str:
    v = np.asarray([x for x in vals if x is not None and not (isinstance(x, float) and math.isnan(x))], dtype=float)
    if v.size == 0:
        return "n/a"
    if v.size == 1:
        return f"{v[0]:.4f}"
    return f"{v.mean():.4f} ± {v.std(ddof=1):.4f}"


def collect(out: Path, settings: dict[tuple[str, str], dict[str, Any]], seeds: range) -> dict[tuple[str, str], list[dict]]:
    """Finished runs of seeds ``seeds`` whose stored settings equal ``settings[(dataset, model)]``:
    (dataset, model) -> list of run summaries."""
    res: dict[tuple[str, str], list[dict]] = {}
    for (ds, m), s in settings.items():
        key = settings_key(s)
        runs = []
        for seed in seeds:
            p = run_path(out, ds, m, seed, key)
            if not p.exists():
                continue
            try:
                r = json.loads(p.read_text())
            except (OSError, json.JSONDecodeError):
                log.warning("skipping unreadable %s", p)
                continue
            if r.get("settings") != s:
                log.warning("skipping %s: its stored settings differ from the current ones", p)
                continue
            runs.append(r)
        res[(ds, m)] = runs
    return res


def labels_used(model: str) -> str:
    """``none`` (label-free), ``train`` (fitted on the train split) or ``train+val`` (epoch chosen on val)."""
    if model in GNN_MODELS:
        return "train+val"
    from gcad_dist.detectors import DETECTORS

    return DETECTORS[model].labels


def markdown_tables(results: dict[tuple[str, str], list[dict]], datasets: list[str], models: list[str],
                    skipped: dict[str, str] | None = None) -> str:
    """One Markdown table per dataset: rows = models, columns = labels used, test AUROC / AUPRC / Rec@K
    (mean ± std), validation AUPRC, the number of seeds and the mean wall time per run."""
    skipped = skipped or {}
    lines: list[str] = []
    for ds in datasets:
        lines.append(f"### {ds}\n")
        lines.append("| method | labels used | test AUROC | test AUPRC | test Rec@K | val AUPRC | seeds | s/run |")
        lines.append("|---|---|---|---|---|---|---|---|")
        for m in models:
            runs = results.get((ds, m), [])
            if not runs:
                note = f"not run: {skipped[m]}" if m in skipped else "–"
                lines.append(f"| {m} | {labels_used(m)} | {note} | – | – | – | 0 | – |")
                continue
            cells = [_fmt([r["test"].get(k) for r in runs]) for k, _ in METRICS]
            val = _fmt([r["val"].get("auprc") for r in runs])
            secs = float(np.mean([r.get("wall_seconds", float("nan")) for r in runs]))
            secs_txt = f"{secs:.1f}" if secs < 10 else f"{secs:.0f}"
            lines.append(f"| {m} | {labels_used(m)} | {' | '.join(cells)} | {val} | {len(runs)} | {secs_txt} |")
        for m in models:  # --contrast auto: which candidates each seed kept (one before session 18)
            kept = [r["contrast_selection"].get("chosen") for r in results.get((ds, m), [])
                    if r.get("contrast_selection")]
            kept = [c for c in kept if c]
            if kept:
                counts = ", ".join(f"{c} {kept.count(c)}" for c in sorted(set(kept)))
                lines.append(f"\n{m}: candidates kept on validation ({len(kept)} seed{'s' if len(kept) != 1 else ''}): {counts}.")
        for m in models:  # the forest view (gcad_dist.train --forest auto, session 61): on how many seeds it joined
            views = [r["forest_view"] for r in results.get((ds, m), []) if r.get("forest_view")]
            if views:
                joined = sum(bool(v.get("kept")) for v in views)
                alone = sum(v.get("choice") == "forest" for v in views)
                lines.append(f"\n{m}: forest view joined on {joined} of {len(views)} seed{'s' if len(views) != 1 else ''}"
                             + (f" (the forest alone on {alone})." if alone else "."))
        for m in models:  # gcad_dist.train --pretrain (session 80): on how many seeds it pre-trained first
            pre = [r["pretraining"] for r in results.get((ds, m), []) if r.get("pretraining")]
            if pre:
                used = sum(bool(p.get("used")) for p in pre)
                lines.append(f"\n{m}: pre-trained without labels and fine-tuned on {used} of {len(pre)} "
                             f"seed{'s' if len(pre) != 1 else ''} ({pre[0].get('reason')}).")
        lines.append("")
    return "\n".join(lines)


def paired_tables(results: dict[tuple[str, str], list[dict]], datasets: list[str], models: list[str],
                  reference: str) -> str:
    """``reference`` against every other model, seed by seed. Seed s is the same split for every model, so the
    difference of two models' test metrics on one seed is free of the split's luck, which dominates the spread
    of the per-model tables on graphs with few anomalies. Per dataset and model: the seeds both ran, the mean
    ± std of (reference - model) in test AUROC and AUPRC, and on how many of those seeds the reference is
    ahead."""
    lines = [f"### Paired against {reference} (test, same seeds; difference = {reference} - method)\n",
             f"| dataset | method | seeds | AUROC difference | {reference} ahead (AUROC) | AUPRC difference | "
             f"{reference} ahead (AUPRC) |", "|---|---|---|---|---|---|---|"]
    for ds in datasets:
        ref = {r["seed"]: r["test"] for r in results.get((ds, reference), [])}
        for m in models:
            if m == reference:
                continue
            other = {r["seed"]: r["test"] for r in results.get((ds, m), [])}
            seeds = sorted(set(ref) & set(other))
            if not seeds:
                continue
            cells = []
            for k in ("auroc", "auprc"):
                d = np.array([ref[s][k] - other[s][k] for s in seeds], dtype=float)
                ok = d[np.isfinite(d)]
                spread = f" ± {ok.std(ddof=1):.4f}" if ok.size > 1 else ""
                cells += [f"{ok.mean():+.4f}{spread}" if ok.size else "n/a", f"{int((ok > 0).sum())}/{ok.size}"]
            lines.append(f"| {ds} | {m} | {len(seeds)} | {' | '.join(cells)} |")
    return "\n".join(lines) + "\n"


def header(cfg: QualityConfig, models: list[str]) -> str:
    """What the tables' figures were computed with (the settings every row's runs match)."""
    seeds = f"{cfg.first_seed}..{cfg.first_seed + cfg.seeds - 1}"
    parts = [f"Test metrics over the split's test nodes, mean ± std over seeds {seeds} "
             "(seed s = split s, initialisation and noise s)."]
    gnn = [m for m in models if m in GNN_MODELS]
    if gnn:
        sel = ("epoch selected on validation AUPRC" if cfg.snapshots == 1 else
               f"mean score of the {cfg.snapshots} evaluations with the best validation AUPRC")
        parts.append(f"GNNs ({', '.join(gnn)}): {sel}; hidden={cfg.hidden}, "
                     f"layers={cfg.layers}, epochs<={cfg.epochs}, lr={cfg.lr}, eval every {cfg.eval_every}, "
                     f"patience {cfg.patience}; GCCAD conv={cfg.conv}, score space {cfg.score_space}, link eval {cfg.link_eval}"
                     + (f", contrast {cfg.contrast}" if cfg.contrast != "graph" else "") + ".")
    det = [m for m in models if m in DETECTOR_MODELS]
    if det:
        from gcad_dist.detectors import settings_of

        parts.append(f"Detectors ({', '.join(det)}): the published defaults of gcad_dist.detectors; label-free ones "
                     "fitted on all nodes without labels" + "".join(
                         f"; {m} {settings_of(m, cfg.detector_options())['pre_epochs']} pre-training epochs"
                         for m in det if m.startswith("gccad-pre")) + ".")
    parts.append("labels used: none = label-free, train = fitted on the train split, train+val = also epoch "
                 "selection on validation. s/run = wall seconds per run (fit + scoring).")
    if cfg.label_fraction != 1:
        parts.append(f"Every supervised method fitted on the same {cfg.label_fraction:g} of the split's labelled "
                     "training nodes (seeded, stratified: gcad_dist.train --label-fraction); validation and test "
                     "whole.")
    return " ".join(parts) + "\n\n"


def environments_line(results: dict[tuple[str, str], list[dict]]) -> str:
    """One line naming the environments the tables' runs were computed in (:func:`gcad_dist.provenance.environment`:
    package versions, CPU, torch's CPU kernel level, the native kernels), with how many runs each, so that tables
    from two builds can be told apart; runs written before session 92 recorded none."""
    counts: dict[str, int] = {}
    missing = 0
    for runs in results.values():
        for r in runs:
            env = r.get("environment")
            if not env:
                missing += 1
                continue
            pk = env.get("packages", {})
            native = str(env.get("native_kernels", "?")).removeprefix("loaded ")
            text = (", ".join(f"{k} {v}" for k, v in pk.items()) + f"; CPU {env.get('cpu', '?')}"
                    + (f" ({env['torch_cpu_capability']})" if env.get("torch_cpu_capability") else "")
                    + (f", GPU {env['gpu']}" if env.get("gpu") else "") + f"; native kernels {native}")
            counts[text] = counts.get(text, 0) + 1
    parts = [f"{text} ({n} run{'s' if n > 1 else ''})" for text, n in sorted(counts.items(), key=lambda kv: -kv[1])]
    if missing:
        parts.append(f"not recorded ({missing} run{'s' if missing > 1 else ''})")
    return "Environment of the runs: " + ("; or ".join(parts) if parts else "no runs") + ".\n"


# ---------------------------------------------------------------------------------------------------
# Running


def _evaluate(data: Any, scores: np.ndarray, split: Any) -> tuple[dict, dict]:
    """Validation and test metrics of ``scores`` over the split's labelled nodes."""
    from gcad_dist.metrics import evaluate

    y = data.y.cpu().numpy().astype(np.int64)
    known = y >= 0
    gid = getattr(data, "graph_id", None)
    g = None if gid is None else gid.cpu().numpy()
    val = evaluate(y, scores, g, split.val.cpu().numpy() & known)
    test = evaluate(y, scores, g, split.test.cpu().numpy() & known)
    return val, test


def run_detector(cfg: QualityConfig, model: str, raw: Any, standard: Any, seed: int) -> dict[str, Any]:
    """One detector run on the seed's split: fit, score every node, evaluate on val and test."""
    from gcad_dist.data.splits import make_split, subsample_split
    from gcad_dist.detectors import DETECTORS, fit_score

    spec = DETECTORS[model]
    data = raw if spec.features == "raw" else standard
    try:
        split = make_split(data, seed=seed)
    except ValueError as e:
        raise UsageError(f"--datasets: {e}") from e
    fit_split, budget = split, None
    if spec.labels != "none":  # the training labels gcad_dist.train --label-fraction fits on, for the same seed
        fit_split, budget = subsample_split(split, data.y, cfg.label_fraction, seed=seed)
    t0 = time.perf_counter()
    scores = fit_score(model, data, fit_split, seed, **cfg.detector_options(), threads=max(1, cfg.threads),
                       device=cfg.device)
    seconds = time.perf_counter() - t0
    val, test = _evaluate(data, scores, split)
    record = {"val": val, "test": test, "seconds": round(seconds, 3), "labels_used": spec.labels,
              "split": {"source": split.source, **split.sizes()}, "environment": environment(cfg.device)}
    if budget is not None:
        record["label_budget"] = {"label_fraction": cfg.label_fraction, **budget}
    return record


def run_gnn(cfg: QualityConfig, path: Path, model: str, standard: Any, seed: int,
            state_dir: Path | None = None) -> dict[str, Any]:
    """One GNN run as ``gcad_dist.train`` does it: :func:`gcad_dist.train.train_one`, or, where ``--pretrain`` chooses
    it, pre-training and fine-tuning (:func:`gcad_dist.pretrain_first.run_pretrained`, in ``<state_dir>.pretrain``,
    deleted once done); its summary with the validation history. ``state_dir``: where its fits write their training
    state and find it after an interruption (:mod:`gcad_dist.fit_state`)."""
    tcfg = train_config(cfg, path, model, seed)
    choice = None
    if tcfg.pretrain != "off" and state_dir is not None:
        from gcad_dist.fit_state import has_unfinished_run
        from gcad_dist.pretrain_first import pretraining_unfinished, run_pretrained
        from gcad_dist.train import pretraining_choice

        choice, _ = pretraining_choice(tcfg, standard)  # the graph loaded once per dataset, not per seed
        if choice.used:
            work = state_dir.with_suffix(".pretrain")
            resume = pretraining_unfinished(work) or has_unfinished_run(work)
            m = run_pretrained(replace(tcfg, out=str(work), resume=resume), choice)
            shutil.rmtree(work, ignore_errors=True)
            summary = {k: v for k, v in m.items() if k not in ("history", "contrast_selection")}
            # the model fine-tuning kept, where the report lists gcad_dist.train's kept contrasts
            summary["contrast_selection"] = {"chosen": m.get("finetuned_model"),
                                             "graph_models": m.get("contrast_selection")}
            summary["labels_used"] = "train+val"
            summary["history"] = {k: (m.get("history") or {}).get(k, []) for k in ("eval_epoch", "val_auroc",
                                                                                   "val_auprc")}
            return summary
    o = train_one(tcfg, data=standard, state_dir=state_dir)
    summary = {k: v for k, v in o.metrics.items() if k != "history"}
    summary["labels_used"] = "train+val"
    summary["history"] = {k: o.metrics["history"][k] for k in ("eval_epoch", "val_auroc", "val_auprc")}
    if choice is not None:
        summary["pretraining"] = choice.record()
    return summary


def _load(path: Path) -> tuple[Any, Any]:
    """(raw-feature Data, z-scored Data) of a labelled graph."""
    raw = load_labelled(str(path), normalize="none")
    standard = copy.copy(raw)
    standard.x = normalize_features(raw.x.float(), "standard")
    return raw, standard


def build_parser() -> argparse.ArgumentParser:
    d = QualityConfig()
    p = ArgumentParser(
        prog="python -m gcad_dist.quality",
        description="Benchmark GCCAD, its cross-entropy ablation, GNN baselines and reference detectors (label-free and "
                    "supervised) on labelled graphs: test AUROC, AUPRC, Rec@K as mean ± std over seeds, labels used, "
                    "seconds per run.",
        formatter_class=DefaultsHelpFormatter,
    )
    p.add_argument("--datasets", nargs="+", default=d.datasets,
                   help="dataset names (<data-dir>/<name>.npz) or paths to graph files")
    p.add_argument("--seeds", type=int, default=d.seeds, help="number of seeds (split, init and training noise) per model and dataset")
    p.add_argument("--first-seed", type=int, default=d.first_seed, help="first seed index (runs use first-seed .. first-seed + seeds - 1)")
    p.add_argument("--models", nargs="+", default=d.models, choices=ALL_MODELS, metavar="MODEL",
                   help=f"models, from: {', '.join(ALL_MODELS)}. gccad-ce = GCCAD with the cross-entropy head; bwgnn = "
                        "BWGNN, the Beta-wavelet GNN for anomaly detection (as GADBench runs it); "
                        "iforest, knn (distance to the 5th nearest node in feature space), nbr-cosine, local-knn (distance "
                        "to the 2nd most alike neighbour in feature space), dominant, "
                        "cola, gccad-pre (local recipe) and gccad-pre-paper (METHOD.md "
                        "section 4) are label-free; trees (RF-Graph) and boosted-trees (XGB-Graph's analogue) are supervised "
                        "(gcad_dist.detectors); dominant / cola need the 'baselines' extra (skipped without it)")
    p.add_argument("--data-dir", default=d.data_dir, help="folder of the <name>.npz datasets")
    p.add_argument("--out", default=d.out, help="output folder: runs/<dataset>/<model>/<key>/seed<s>.json and quality.md")
    p.add_argument("--conv", default=d.conv, choices=CONVS, help="GCCAD node-update convolution")
    p.add_argument("--link-eval", default=d.link_eval, choices=LINK_EVALS,
                   help="GCCAD link remover at evaluation: expected (edge weight x p) or threshold (p > 0.5, METHOD.md)")
    p.add_argument("--contrast", default=d.contrast, choices=("graph", "neighbors", "ego", "auto"),
                   help="GCCAD's contrast (gcad_dist.train --contrast)")
    p.add_argument("--forest", default=d.forest, choices=FOREST_MODES,
                   help="GCCAD's forest view (gcad_dist.train --forest): auto = trees on [x, neighbours' mean x (two hops for the forest), "
                        "degree] (a random forest and gradient-boosted trees, ranks averaged) join GCCAD's score by rank unless validation places it below; off = GCCAD "
                        "alone (every run before session 61)")
    p.add_argument("--pretrain", default=d.pretrain, choices=PRETRAIN_MODES,
                   help="GCCAD: pre-train without labels and fine-tune, as gcad_dist.train --pretrain (auto: below "
                        f"{FEW_ANOMALIES} labelled training anomalies); the other models never pre-train")
    p.add_argument("--jump", default=d.jump, choices=("last", "cat", "cat-local"),
                   help="GCCAD's graph-contrast embedding (gcad_dist.train --jump; default: cat for gccad, last "
                        "for gccad-ce)")
    p.add_argument("--norm", default=d.norm, choices=NORMS,
                   help="normalisation after each message-passing layer, every GNN (gcad_dist.train --norm)")
    p.add_argument("--score-space", default=d.score_space, choices=SCORE_SPACES,
                   help="GCCAD score on the encoder outputs (METHOD.md) or after the projection head")
    p.add_argument("--hidden", type=int, default=d.hidden, help="hidden width (GNNs)")
    p.add_argument("--layers", type=int, default=d.layers, help="message-passing layers (GNNs)")
    p.add_argument("--input-dropout", type=float, default=d.input_dropout, metavar="P",
                   help="dropout on the input features during training, every GNN (default: each model's, "
                        "gcad_dist.train --input-dropout: for GCCAD 0.2 below 20 labelled training anomalies per "
                        "input feature, else 0; 0 for the baselines)")
    p.add_argument("--label-inputs", action=argparse.BooleanOptionalAction, default=d.label_inputs,
                   help="two more input columns, the neighbours labelled anomalous in the train split "
                        "(gcad_dist.train --label-inputs), for every GNN and the trees (--label-inputs) or none "
                        "(--no-label-inputs). Default: GCCAD's default (on from 10 labelled training anomalies), "
                        "the other methods' (off)")
    p.add_argument("--epochs", type=int, default=d.epochs, help="maximum epochs per GNN run")
    p.add_argument("--lr", type=float, default=d.lr, help="peak learning rate (GNNs)")
    p.add_argument("--eval-every", type=int, default=d.eval_every, help="validation every n epochs (GNNs)")
    p.add_argument("--patience", type=int, default=d.patience, help="early-stopping patience in epochs (GNNs; 0 = off)")
    p.add_argument("--snapshots", type=int, default=d.snapshots,
                   help="GNNs: score with the mean of the n evaluations with the best validation AUPRC (1 = the single "
                   "best epoch). Default: %(default)s")
    p.add_argument("--max-degree", type=int, default=d.max_degree, metavar="D",
                   help="GCCAD: train each epoch on at most about D in-edges a node, sampled afresh and rescaled "
                   "(gcad_dist.train --max-degree; 0 = every edge). Default: %(default)s")
    p.add_argument("--label-fraction", type=float, default=d.label_fraction, metavar="F",
                   help="fit every supervised method (GCCAD, the GNNs, the trees) on the same fraction F of the "
                        "split's labelled training nodes: gcad_dist.train --label-fraction's seeded, stratified "
                        "subsample (at least one node of each class), so that a few labels are compared on equal "
                        "terms; validation and test stay whole, and label-free detectors are unaffected. With fewer "
                        "than 300 labelled training anomalies left, GCCAD pre-trains first as gcad_dist.train does "
                        "(--pretrain auto). Default: %(default)s (every training label)")
    p.add_argument("--pre-epochs", type=int, default=d.pre_epochs,
                   help="pre-training epochs of gccad-pre / gccad-pre-paper (default: the recipe's, 3 / 10)")
    p.add_argument("--pre-ensemble", type=int, default=d.pre_ensemble,
                   help="models trained side by side in gccad-pre (pretrain --ensemble; 1 = one model, session 10's "
                   "default) (default: the recipe's, 5)")
    p.add_argument("--pre-cliques", type=float, default=d.pre_cliques, metavar="FRACTION",
                   help="gccad-pre: pretrain --plant-cliques FRACTION, planted cliques redrawn at every step, and "
                   "--swap-features cut by as much (0.15 - FRACTION), so that the corrupted share stays 0.15 "
                   "(default: the recipe's, 0)")
    p.add_argument("--pre-tails", type=float, default=d.pre_tails, metavar="FRACTION",
                   help="gccad-pre: pretrain --push-tails FRACTION, global outliers (features from column tails) "
                   "redrawn at every step, and --swap-features cut by as much, so that the corrupted share stays "
                   "0.15 with --pre-cliques (default: the recipe's, 0)")
    p.add_argument("--pre-batch-size", type=int, default=d.pre_batch_size, metavar="SEEDS",
                   help="gccad-pre: seed nodes per pre-training minibatch (pretrain --batch-size) (default: the "
                   "recipe's, 1024)")
    p.add_argument("--pre-dense-links", type=int, default=d.pre_dense_links, metavar="LINKS",
                   help="gccad-pre: pretrain --dense-links LINKS, whole-graph steps with more links average each "
                   "context over at most --max-degree (64) in-neighbours; 0 = every step (default: pre-training's, "
                   "2,000,000)")
    p.add_argument("--pre-max-degree", type=int, default=d.pre_max_degree, metavar="D",
                   help="gccad-pre: pretrain --max-degree D, the in-neighbours a capped context averages at most "
                   "(see --pre-dense-links; 0 = every link) (default: pre-training's, 64)")
    p.add_argument("--pre-workers", type=int, default=d.pre_workers, metavar="W",
                   help="gccad-pre: pretrain --workers W, each of --threads threads (a whole-graph store: each worker "
                   "takes a share of the nodes at every step) (default: 1)")
    p.add_argument("--pre-sample-threshold", type=int, default=d.pre_sample_threshold, metavar="NODES",
                   help="gccad-pre: pretrain --sample-threshold NODES, a graph with more nodes is pre-trained by "
                   "neighbour-sampled minibatches (default: pre-training's, 50,000)")
    p.add_argument("--pre-fanout", type=int, default=d.pre_fanout, metavar="K",
                   help="gccad-pre: neighbours sampled for a minibatch seed's context (pretrain --fanouts K; -1 = all; "
                   "minibatch steps only, see --pre-sample-threshold) (default: pre-training's, 10)")
    p.add_argument("--pre-lr", type=float, default=d.pre_lr, metavar="LR",
                   help="gccad-pre: pretrain --lr LR (default: the recipe's, 1e-3)")
    p.add_argument("--pre-context-hops", type=int, choices=(1, 2), default=d.pre_context_hops, metavar="HOPS",
                   help="gccad-pre: pretrain --context-hops HOPS, the local contrast's context: the neighbours (1) or "
                   "the two-hop ball (2) (default: the recipe's, 1)")
    p.add_argument("--pre-normalize", choices=NORMALIZE_CHOICES, default=d.pre_normalize,
                   help="gccad-pre: partitioning.build --normalize of its store (default: the build's, power; "
                   "standard was the default before session 39)")
    p.add_argument("--pre-degree-detrend", action=argparse.BooleanOptionalAction, default=d.pre_degree_detrend,
                   help="gccad-pre: pretrain --degree-detrend, the score's trend over log(1 + degree) removed "
                   "(default: the recipe's, on since session 46; --no-pre-degree-detrend = earlier sessions' score)")
    p.add_argument("--pre-loose-context", action=argparse.BooleanOptionalAction, default=d.pre_loose_context,
                   help="gccad-pre: pretrain --loose-context, each node also scored against its loose context "
                   "(neighbours weighted by (1 + common neighbours)^-2), the larger robust z kept (default: the "
                   "recipe's)")
    p.add_argument("--pre-ball-switch", action=argparse.BooleanOptionalAction, default=d.pre_ball_switch,
                   help="gccad-pre: pretrain --ball-switch, the two-hop ball as context where it makes a group stand "
                   "out that the neighbours hide (default: the recipe's)")
    p.add_argument("--pre-feature-view", action=argparse.BooleanOptionalAction, default=d.pre_feature_view,
                   help="gccad-pre: pretrain --feature-view, an isolation forest on the raw features added to the score "
                   "where it corroborates the contrast's top nodes (the distance to the 5th nearest node in feature "
                   "space where the links say nothing about the features) "
                   "(default: the recipe's)")
    p.add_argument("--pre-signature-view", action=argparse.BooleanOptionalAction, default=d.pre_signature_view,
                   help="gccad-pre: pretrain --signature-view, the score's top nodes generalised by a cross-fitted "
                   "linear classifier of the features where it tells them apart (default: the recipe's)")
    p.add_argument("--device", default=d.device, help="auto (CUDA when available), cpu, cuda, cuda:N")
    p.add_argument("--threads", type=int, default=d.threads,
                   help="torch CPU threads (0 = torch default; use 1 when running several at once); "
                        "detectors use max(1, threads)")
    p.add_argument("--candidate-workers", type=int, default=d.candidate_workers,
                   help="gccad: fit its --contrast auto candidates this many at once as Ray tasks, each with "
                   "--threads CPUs (gcad_dist.train --candidate-workers; the same results, so not part of a run's key)")
    p.add_argument("--paired-with", default=d.paired_with, choices=ALL_MODELS, metavar="MODEL",
                   help="add a table comparing this model with every other, seed by seed on the same splits (mean "
                        "difference and on how many seeds it is ahead); default: gccad when it is among --models")
    p.add_argument("--report-only", action="store_true", help="train nothing; build the tables from the run JSONs in --out")
    p.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    return p


def _validate(cfg: QualityConfig) -> None:
    if cfg.seeds < 1:
        raise UsageError(f"--seeds: must be >= 1, got {cfg.seeds}")
    if cfg.pre_epochs is not None and cfg.pre_epochs < 1:
        raise UsageError(f"--pre-epochs: must be >= 1, got {cfg.pre_epochs}")
    if cfg.pre_fanout is not None and cfg.pre_fanout < 1 and cfg.pre_fanout != -1:
        raise UsageError(f"--pre-fanout: must be >= 1 or -1 (all), got {cfg.pre_fanout}")
    if cfg.pre_lr is not None and not cfg.pre_lr > 0:
        raise UsageError(f"--pre-lr: must be > 0, got {cfg.pre_lr}")
    if cfg.pre_max_degree is not None and cfg.pre_max_degree < 0:
        raise UsageError(f"--pre-max-degree: must be >= 0, got {cfg.pre_max_degree}")
    if cfg.pre_workers is not None and cfg.pre_workers < 1:
        raise UsageError(f"--pre-workers: must be >= 1, got {cfg.pre_workers}")
    if cfg.pre_dense_links is not None and cfg.pre_dense_links < 0:
        raise UsageError(f"--pre-dense-links: must be >= 0, got {cfg.pre_dense_links}")
    if cfg.pre_sample_threshold is not None and cfg.pre_sample_threshold < 1:
        raise UsageError(f"--pre-sample-threshold: must be >= 1, got {cfg.pre_sample_threshold}")
    if cfg.pre_batch_size is not None and cfg.pre_batch_size < 1:
        raise UsageError(f"--pre-batch-size: must be >= 1, got {cfg.pre_batch_size}")
    if cfg.pre_ensemble is not None and cfg.pre_ensemble < 1:
        raise UsageError(f"--pre-ensemble: must be >= 1, got {cfg.pre_ensemble}")
    if cfg.pre_cliques is not None or cfg.pre_tails is not None:
        from gcad_dist.detectors.gccad_pre import LOCAL_PRETRAIN

        share = LOCAL_PRETRAIN["swap_features"]
        for flag, value in (("--pre-cliques", cfg.pre_cliques), ("--pre-tails", cfg.pre_tails)):
            if value is not None and not 0 <= value <= share:
                raise UsageError(f"{flag}: must be in [0, {share}] (the recipe's share of corrupted nodes), got "
                                 f"{value}")
        if (cfg.pre_cliques or 0) + (cfg.pre_tails or 0) > share:
            raise UsageError(f"--pre-cliques and --pre-tails: together at most {share} (the recipe's share of "
                             f"corrupted nodes), got {cfg.pre_cliques} + {cfg.pre_tails}")
    if not 0 < cfg.label_fraction <= 1:  # also rejects nan
        raise UsageError(f"--label-fraction: must be in (0, 1], got {cfg.label_fraction}")
    for name in ("hidden", "layers", "epochs", "eval_every", "candidate_workers"):
        if getattr(cfg, name) < 1:
            raise UsageError(f"--{name.replace('_', '-')}: must be >= 1, got {getattr(cfg, name)}")
    check_input_dropout(cfg.input_dropout)
    if cfg.paired_with is not None and cfg.paired_with not in cfg.models:
        raise UsageError(f"--paired-with {cfg.paired_with}: not among --models ({' '.join(cfg.models)})")


def main(argv: list[str] | None = None) -> int:
    cfg = QualityConfig(**vars(build_parser().parse_args(argv)))
    setup_logging(cfg.verbose)
    _validate(cfg)
    out = Path(cfg.out)
    data_dir = Path(cfg.data_dir)
    if cfg.threads > 0:
        torch.set_num_threads(cfg.threads)
    retain_freed_memory()  # every method's process alike
    models = list(dict.fromkeys(cfg.models))
    names = [Path(d).stem if Path(d).suffix else d for d in cfg.datasets]
    paths = [_resolve_dataset(data_dir, d) for d in cfg.datasets]
    for p in paths:
        if not p.exists():
            raise UsageError(f"--datasets: {p}: no such file")

    from gcad_dist.detectors import check_available

    skipped = {m: why for m in models if m in DETECTOR_MODELS and (why := check_available(m))}
    for m, why in skipped.items():
        log.warning("skipping %s: %s", m, why)
    if skipped and len(skipped) == len(models):
        raise UsageError(f"--models: {next(iter(skipped.values()))}")
    settings = {(n, m): run_settings(cfg, n, p, m) for n, p in zip(names, paths) for m in models}
    seeds = range(cfg.first_seed, cfg.first_seed + cfg.seeds)
    failed: list[str] = []
    if not cfg.report_only:
        # Seed-major order: every model and dataset gets seed 0 before any gets seed 1, so a partial
        # benchmark is balanced.
        todo = [(n, p, m, s) for s in seeds for n, p in zip(names, paths) for m in models
                if m not in skipped and not run_path(out, n, m, s, settings_key(settings[(n, m)])).exists()]
        total = len(names) * cfg.seeds * (len(models) - len(skipped))
        log.info("%d runs to do (%d already done)", len(todo), total - len(todo))
        cache: dict[str, tuple[Any, Any]] = {}
        for name, path, model, seed in tqdm(todo, desc="quality", unit="run", disable=bar_disable()):
            s = settings[(name, model)]
            dest = run_path(out, name, model, seed, settings_key(s))
            if dest.exists():  # done meanwhile by another process on the same --out
                continue
            if name not in cache:  # the datasets are small (< 15k nodes): keep them all
                cache[name] = _load(path)
            raw, standard = cache[name]
            t0 = time.perf_counter()
            try:
                if model in GNN_MODELS:
                    # an interrupted run continues from its fits' saved states (same settings: same key)
                    state_dir = dest.with_suffix(".unfinished")
                    try:
                        summary = run_gnn(cfg, path, model, standard, seed, state_dir)
                    except ResumeMismatch as e:  # a state from another version of the code: start over
                        log.warning("%s; starting %s %s seed %d over", e, name, model, seed)
                        shutil.rmtree(state_dir, ignore_errors=True)
                        summary = run_gnn(cfg, path, model, standard, seed, state_dir)
                else:
                    summary = run_detector(cfg, model, raw, standard, seed)
            except KeyboardInterrupt:
                log.warning("interrupted: rerun the same command to continue (%s %s seed %d from its saved state)",
                            name, model, seed)
                raise
            except UsageError:
                raise
            except Exception as e:  # noqa: BLE001 - one failing run must not lose the benchmark
                log.exception("%s %s seed %d failed: %s", name, model, seed, e)
                failed.append(f"{name}/{model}/seed{seed}: {type(e).__name__}: {e}")
                continue
            summary.update(dataset=name, model=model, seed=seed, wall_seconds=round(time.perf_counter() - t0, 3),
                           settings=s, settings_key=settings_key(s))
            write_json(summary, dest)
            write_json(s, dest.parent / "settings.json")
            shutil.rmtree(dest.with_suffix(".unfinished"), ignore_errors=True)
            log.info("%s %s seed %d: test AUROC %.4f AUPRC %.4f Rec@K %.4f (val AUPRC %.4f, %.1f s)", name, model, seed,
                     summary["test"]["auroc"], summary["test"]["auprc"], summary["test"]["recall_at_k"],
                     summary["val"]["auprc"], summary["wall_seconds"])
    results = collect(out, settings, seeds)
    if not any(results.values()):
        raise UsageError(f"--out: {out} holds no finished run of these datasets, models and seeds with the current "
                         "settings" + ("; run without --report-only first" if cfg.report_only else ""))
    for (ds, m), runs in sorted(results.items()):
        if m not in skipped and len(runs) < cfg.seeds:
            have = sorted(r.get("seed") for r in runs)
            log.warning("%s / %s: %d of the %d seeds asked for are in the table (%s)", ds, m, len(runs), cfg.seeds,
                        f"seeds {have}" if have else "none")
    md = header(cfg, models) + markdown_tables(results, names, models, skipped)
    reference = cfg.paired_with or ("gccad" if "gccad" in models else None)
    if reference is not None and len(models) > 1:
        md += "\n" + paired_tables(results, names, models, reference)
    md += "\n" + environments_line(results)
    out.mkdir(parents=True, exist_ok=True)
    (out / "quality.md").write_text(md)
    write_json({"config": asdict(cfg), "settings_keys": {f"{d}/{m}": settings_key(s) for (d, m), s in settings.items()},
                "failed": failed}, out / "quality_config.json")
    log.info("report written to %s (and its settings to %s), replacing any earlier one there", out / "quality.md",
             out / "quality_config.json")
    print(md)
    for f in failed:
        print(f"FAILED {f}")
    return 1 if failed else 0


if __name__ == "__main__":
    run_cli(main)
