"""Quality without labels on real graphs: GCCAD-pre zero-shot / fine-tuned next to supervised GCCAD.

Example (BENCHMARKS.md):
    python -m bench.pretrain_transfer --datasets inj_cora --seeds 0,1,2 --label-fractions 0.01,0.1,1 --threads 1 --out runs/transfer10

For each dataset (a name in ``--data-dir`` such as ``tolokers``, or a path to a graph file):

1. ``python -m partitioning.build``: a Zarr store (``--k 1``, the default: one whole-graph store, the README's
   label-free pipeline; ``--k auto``: FAISS K-means parts and corrupt subgraphs, METHOD.md's);
2. ``python -m gcad_dist.pretrain``: self-supervised pre-training on that store (Ray Train, ``--workers``) at its
   own defaults (its recipe's epochs and learning rate) unless ``--epochs`` / ``--lr`` / ``--pretrain-jump`` say
   otherwise, once per dataset (pre-training seed ``--pretrain-seed``); it never sees a real label;
3. for each seed of ``--seeds``, on the same split (the graph's given split ``seed % S`` for tolokers, a
   seeded stratified 40/20/40 split otherwise; every CLI below uses the same split function):
   * ``python -m gcad_dist.finetune --epochs 0``: zero-shot, the pre-trained score as it is;
   * for each fraction f of ``--label-fractions`` (default 0.01, 0.1, 1), the same seeded stratified
     subsample of the training labels (:func:`gcad_dist.data.splits.subsample_labels`) for both:
     ``python -m gcad_dist.finetune --label-fraction f`` (fine-tuned from the checkpoint; its default ``--model
     auto`` keeps, on validation, the checkpoint's model, the graph models or an average of them, recorded per run) and
     ``python -m gcad_dist.train --model gccad --label-fraction f --forest off --pretrain off`` (supervised GCCAD
     from scratch, never pre-trained, whatever ``gcad_dist.train --pretrain``'s default;
     both without the forest view by default, ``--forest off`` on each side: the comparison is of the two GNNs, the
     pre-trained start against the random one; ``--forest auto`` runs both CLIs' defaults, the view included).
     Both run with the same supervised settings: ``gcad_dist.train``'s defaults (lr, epochs, patience,
     ``--link-eval expected``, ``--score-space projection``) unless ``--tune-lr`` / ``--ft-epochs`` /
     ``--sup-epochs`` / ``--patience`` / ``--link-eval`` / ``--score-space`` / ``--label-inputs`` say
     otherwise; epoch chosen on validation AUPRC. Label inputs: each CLI's own default unless ``--label-inputs`` /
     ``--no-label-inputs`` sets both sides alike (both CLIs' default is the same rule: on from 10 kept training
     anomalies).
4. Test AUROC / AUPRC / Recall@K (K = number of test anomalies) from each ``metrics.json``, mean ± std over the
   seeds, one row per (dataset, method, label fraction), then per (dataset, fraction) fine-tune minus scratch
   (paired by seed: mean ± std of the differences, seeds where fine-tuning wins, AUPRC ratio), as Markdown
   on stdout (also ``<out>/table.md`` and ``<out>/results.json``).

Steps whose outputs exist are reused (delete ``--out`` or pass ``--overwrite`` to redo them); a fine-tuning or
from-scratch run that stopped part-way (a crash, a killed bench) is continued from its saved fits (``--resume``,
session 69). A failing step
is logged with the tail of its output and left out of the table; the script exits 1 if any step failed.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script or with -m from the repo

from gcad_dist.cli import ArgumentParser, UsageError, run_cli, setup_logging  # noqa: E402
from partitioning.features import NORMALIZE_CHOICES  # noqa: E402

log = logging.getLogger("bench.pretrain_transfer")

REPO = Path(__file__).resolve().parents[1]
METRICS = ("auroc", "auprc", "recall_at_k")


@dataclass
class TransferConfig:
    """Settings of ``python -m bench.pretrain_transfer`` (one field per option)."""

    datasets: list[str] = field(default_factory=lambda: ["tolokers", "reddit"])
    seeds: list[int] = field(default_factory=lambda: [0, 1, 2])
    epochs: int | None = None  # pre-training; None = gcad_dist.pretrain's own (its recipe's)
    label_fractions: list[float] = field(default_factory=lambda: [0.01, 0.1, 1.0])
    data_dir: str = str(REPO.parent / "shared" / "data")
    out: str = "runs/pretrain_transfer"
    k: str = "1"  # one whole-graph store: the label-free pipeline of the README ("auto": K-means parts)
    workers: int = 1
    pretrain_seed: int = 0
    # None = the CLIs' own defaults, which are gcad_dist.train's (TrainConfig) for both fine-tuning and scratch
    ft_epochs: int | None = None
    sup_epochs: int | None = None
    lr: float | None = None  # pre-training; None = gcad_dist.pretrain's own (auto)
    pretrain_jump: str | None = None  # pre-training --jump; None = gcad_dist.pretrain's own
    tune_lr: float | None = None  # fine-tuning and supervised training
    patience: int | None = None
    link_eval: str | None = None
    score_space: str | None = None
    sup_normalize: str = "standard"
    store_normalize: str | None = None  # partitioning.build --normalize of the store; None = the build's default
    label_inputs: bool | None = None  # both sides alike; None = the CLIs' default (the same rule on both sides)
    candidate_scores: bool = False  # fine-tuning runs write candidate_scores.npz (bench/finetune_selection.py)
    scratch: bool = True  # the gcad_dist.train run from scratch beside each fine-tuning run
    forest: str = "off"  # both sides' --forest: off = the two GNNs compared; auto = both CLIs' defaults
    threads: int = 1
    retries: int = 3
    step_timeout: float = 3600.0
    overwrite: bool = False
    verbose: bool = False


def _csv(kind: type):
    def parse(s: str) -> list:
        try:
            vals = [kind(v) for v in s.split(",") if v.strip()]
        except ValueError as e:
            raise argparse.ArgumentTypeError(f"not a comma-separated list of {kind.__name__}: {s!r}") from e
        if not vals:
            raise argparse.ArgumentTypeError("empty list")
        return vals
    return parse


def build_parser() -> argparse.ArgumentParser:
    d = TransferConfig()
    p = ArgumentParser(
        prog="python -m bench.pretrain_transfer",
        description="Build -> pre-train (no labels) -> zero-shot / fine-tune with a fraction of the labels -> "
                    "supervised GCCAD, on real graphs, and print test AUROC/AUPRC/Rec@K (mean ± std over seeds).",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument("--datasets", type=_csv(str), default=d.datasets,
                   help="comma-separated dataset names in --data-dir (<name>.npz) or graph file paths")
    p.add_argument("--seeds", type=_csv(int), default=d.seeds,
                   help="comma-separated seeds; each seed fixes the split, label subsample and training noise")
    p.add_argument("--epochs", type=int, default=d.epochs,
                   help="pre-training epochs (passes over the store; default: gcad_dist.pretrain's)")
    p.add_argument("--label-fractions", type=_csv(float), default=d.label_fractions,
                   help="fractions of the training labels, each in (0, 1]; per fraction one fine-tune and one "
                        "from-scratch run on the same subsample")
    p.add_argument("--data-dir", default=d.data_dir, help="folder of the real datasets (<name>.npz)")
    p.add_argument("--out", default=d.out, help="output folder: stores, pre-training runs, per-run metrics, table.md")
    p.add_argument("--k", default=d.k, help="parts for partitioning.build (number or 'auto'): 1 = one whole-graph "
                   "store, the label-free pipeline of the README; auto = K-means parts, METHOD.md's corrupt subgraphs")
    p.add_argument("--workers", type=int, default=d.workers, help="Ray Train workers for pre-training")
    p.add_argument("--pretrain-seed", type=int, default=d.pretrain_seed, help="seed of the store build and of pre-training")
    p.add_argument("--ft-epochs", type=int, default=d.ft_epochs, help="maximum fine-tuning epochs (default: gcad_dist.train's)")
    p.add_argument("--sup-epochs", type=int, default=d.sup_epochs, help="maximum from-scratch epochs (default: gcad_dist.train's)")
    p.add_argument("--lr", type=float, default=d.lr,
                   help="peak learning rate of pre-training (default: gcad_dist.pretrain's, auto)")
    p.add_argument("--pretrain-jump", default=d.pretrain_jump, choices=("last", "cat"),
                   help="pre-training --jump: cat gives the fine-tuned model the jumping-knowledge embedding that "
                        "gcad_dist.train uses from scratch by default")
    p.add_argument("--tune-lr", type=float, default=d.tune_lr,
                   help="peak learning rate of fine-tuning and of supervised training from scratch (default: gcad_dist.train's)")
    p.add_argument("--patience", type=int, default=d.patience,
                   help="early-stopping patience (epochs) of fine-tuning and supervised training (default: gcad_dist.train's)")
    p.add_argument("--link-eval", default=d.link_eval, choices=("expected", "threshold"),
                   help="GCCAD link remover at evaluation, fine-tuned and from scratch alike (default: gcad_dist.train's)")
    p.add_argument("--score-space", "--sup-score-space", dest="score_space", default=d.score_space, choices=("encoder", "projection"),
                   help="GCCAD score space, fine-tuned and from scratch alike (default: gcad_dist.train's); "
                        "--sup-score-space is the old name")
    p.add_argument("--store-normalize", default=d.store_normalize, choices=NORMALIZE_CHOICES,
                   help="partitioning.build --normalize of the pre-training store; None = the build's default (power)")
    p.add_argument("--sup-normalize", default=d.sup_normalize, choices=NORMALIZE_CHOICES,
                   help="feature normalisation of supervised training from scratch (gcad_dist.train --normalize; "
                        "fine-tuning reads the checkpoint's, recorded from its store)")
    p.add_argument("--label-inputs", action=argparse.BooleanOptionalAction, default=d.label_inputs,
                   help="fine-tuning and scratch alike read (or, with --no-label-inputs, do not read) the neighbours' "
                        "kept training labels as inputs (default: the CLIs' own, the same rule on both sides: on "
                        "from 10 kept training anomalies)")
    p.add_argument("--forest", default=d.forest, choices=("off", "auto"),
                   help="--forest of both sides: off = the comparison of the two GNNs, the pre-trained start against "
                        "the random one; auto = both CLIs' defaults, the forest view included (each run's metrics.json "
                        "'forest_view' records what GCCAD alone scored)")
    p.add_argument("--candidate-scores", action="store_true",
                   help="fine-tuning runs also write candidate_scores.npz, for bench/finetune_selection.py")
    p.add_argument("--scratch", action=argparse.BooleanOptionalAction, default=d.scratch,
                   help="run gcad_dist.train from scratch on the same labels beside each fine-tuning run (the "
                        "comparison table); --no-scratch saves that time where only the fine-tuning runs are studied "
                        "(e.g. their candidate scores, bench/finetune_selection.py)")
    p.add_argument("--threads", type=int, default=d.threads, help="torch / FAISS threads of every step (also OMP_NUM_THREADS)")
    p.add_argument("--retries", type=int, default=d.retries,
                   help="tries of the pre-training step (starting a local Ray instance can time out on a loaded machine)")
    p.add_argument("--step-timeout", type=float, default=d.step_timeout,
                   help="seconds after which one step is killed (with its process group) and counted as failed")
    p.add_argument("--overwrite", action="store_true", help="redo steps whose outputs already exist")
    p.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    return p


def _validate(cfg: TransferConfig) -> dict[str, Path]:
    if cfg.epochs is not None and cfg.epochs < 1:
        raise UsageError(f"--epochs: must be >= 1, got {cfg.epochs}")
    for name in ("ft_epochs", "sup_epochs"):
        if getattr(cfg, name) is not None and getattr(cfg, name) < 1:
            raise UsageError(f"--{name.replace('_', '-')}: must be >= 1, got {getattr(cfg, name)}")
    if cfg.patience is not None and cfg.patience < 0:
        raise UsageError(f"--patience: must be >= 0, got {cfg.patience}")
    if cfg.tune_lr is not None and not cfg.tune_lr > 0:
        raise UsageError(f"--tune-lr: must be > 0, got {cfg.tune_lr}")
    if any(not (0 < f <= 1) for f in cfg.label_fractions):
        raise UsageError(f"--label-fractions: each must be in (0, 1], got {cfg.label_fractions}")
    graphs: dict[str, Path] = {}
    for name in cfg.datasets:
        path = Path(name) if Path(name).exists() else Path(cfg.data_dir) / f"{name}.npz"
        if not path.exists():
            raise UsageError(f"--datasets: {name}: neither a file nor {path}")
        graphs[path.stem] = path
    return graphs


class Runner:
    """Runs the CLIs as subprocesses with the thread settings, logging wall time and failures."""

    def __init__(self, cfg: TransferConfig, out: Path):
        self.cfg = cfg
        self.out = out
        self.env = dict(os.environ)
        self.env.update({
            "OMP_NUM_THREADS": str(cfg.threads), "OMP_WAIT_POLICY": "PASSIVE", "MKL_NUM_THREADS": str(cfg.threads),
            # Ray's dashboard can take over a minute to start on a loaded machine (default limit 60 s).
            "RAY_DASHBOARD_STARTUP_TIMEOUT_S": self.env.get("RAY_DASHBOARD_STARTUP_TIMEOUT_S", "600"),
            "PYTHONPATH": os.pathsep.join(p for p in [str(REPO), self.env.get("PYTHONPATH", "")] if p),
        })
        self.walls: dict[str, float] = {}
        self.failed: dict[str, str] = {}

    def _once(self, cmd: list[str], logf: Path) -> int:
        """One subprocess in its own session, killed with its process group after ``--step-timeout``."""
        with open(logf, "w") as fh:
            proc = subprocess.Popen(cmd, cwd=REPO, env=self.env, stdout=fh, stderr=subprocess.STDOUT, start_new_session=True)
            try:
                return proc.wait(timeout=self.cfg.step_timeout)
            except subprocess.TimeoutExpired:
                log.error("%s: timed out after %.0f s, killing its process group", logf.stem, self.cfg.step_timeout)
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
                return 124

    def __call__(self, step: str, args: list[str], done: Path, tries: int = 1) -> bool:
        """Run ``python -m args...`` (up to ``tries`` times) unless ``done`` exists; True when it exists afterwards."""
        if done.exists() and not self.cfg.overwrite:
            log.info("%s: reusing %s", step, done)
            return True
        logf = self.out / "logs" / f"{step}.log"
        logf.parent.mkdir(parents=True, exist_ok=True)
        cmd = [sys.executable, "-m", *args]
        t0 = time.perf_counter()
        for attempt in range(1, tries + 1):
            log.info("%s (try %d/%d): %s", step, attempt, tries, " ".join(cmd[1:]))
            rc = self._once(cmd, logf)
            if rc == 0 and done.exists():
                break
            tail = logf.read_text(errors="replace").strip().splitlines()[-8:]
            log.warning("%s try %d failed (exit %d); log %s:\n  %s", step, attempt, rc, logf, "\n  ".join(tail))
        self.walls[step] = round(time.perf_counter() - t0, 1)
        if rc != 0 or not done.exists():
            self.failed[step] = f"exit {rc}: " + " | ".join(tail)
            log.error("%s failed after %d tries (%.0f s)", step, tries, self.walls[step])
            return False
        log.info("%s: done in %.1f s", step, self.walls[step])
        return True


def run_dataset(cfg: TransferConfig, name: str, graph: Path, run: Runner) -> list[dict[str, Any]]:
    """All steps for one dataset; returns one record per finished (method, seed)."""
    out = Path(cfg.out) / name
    store, pre = out / "store.zarr", out / "pretrain"
    out.mkdir(parents=True, exist_ok=True)
    ow = ["--overwrite"] if cfg.overwrite else []
    if not run(f"{name}-build", ["partitioning.build", "--graph", str(graph), "--out", str(store), "--k", cfg.k,
                                 "--seed", str(cfg.pretrain_seed), "--threads", str(cfg.threads), "--no-progress", "--no-plot",
                                 *(["--normalize", cfg.store_normalize] if cfg.store_normalize else []), *ow],
               store / "zarr.json"):
        return []
    if not run(f"{name}-pretrain", ["gcad_dist.pretrain", "--store", str(store), "--out", str(pre), "--workers", str(cfg.workers),
                                    "--seed", str(cfg.pretrain_seed), "--cpus-per-worker", str(cfg.threads),
                                    *(["--epochs", str(cfg.epochs)] if cfg.epochs is not None else []),
                                    *(["--lr", str(cfg.lr)] if cfg.lr is not None else []),
                                    *(["--jump", cfg.pretrain_jump] if cfg.pretrain_jump else []), "--overwrite"],
               pre / "final" / "model.pt", tries=max(1, cfg.retries)):
        return []
    ckpt = str(pre / "final")
    records = []
    for seed in cfg.seeds:
        for method, fraction, tag, args in _method_runs(cfg, ckpt, seed):
            rdir = out / tag
            args = [*args, "--graph", str(graph), "--out", str(rdir), "--seed", str(seed), "--threads", str(cfg.threads),
                    "--device", "cpu", "--no-plots", "--no-progress", *_continue_flag(cfg, rdir)]
            if not run(f"{name}-{tag}", args, rdir / "metrics.json"):
                continue
            records.append(_record(name, method, fraction, seed, json.loads((rdir / "metrics.json").read_text())))
    return records


def _continue_flag(cfg: TransferConfig, rdir: Path) -> list[str]:
    """``--overwrite`` with ``cfg.overwrite``; else ``--resume`` where ``rdir`` holds a run stopped part-way (a crash,
    a killed bench), so that running the bench again goes on from the fits it saved."""
    from gcad_dist.fit_state import has_unfinished_run

    if cfg.overwrite:
        return ["--overwrite"]
    return ["--resume"] if has_unfinished_run(rdir) else []


def _tune_args(cfg: TransferConfig, epochs: int | None) -> list[str]:
    """Options shared by the fine-tune and the from-scratch runs (only those set; else the CLIs' shared defaults)."""
    args: list[str] = []
    for flag, value in (("--epochs", epochs), ("--lr", cfg.tune_lr), ("--patience", cfg.patience),
                        ("--link-eval", cfg.link_eval), ("--score-space", cfg.score_space)):
        if value is not None:
            args += [flag, str(value)]
    if cfg.label_inputs is not None:
        args.append("--label-inputs" if cfg.label_inputs else "--no-label-inputs")
    return args


def _method_runs(cfg: TransferConfig, ckpt: str, seed: int) -> list[tuple[str, float | None, str, list[str]]]:
    """(method, label fraction, run tag, CLI args) of one seed: zero-shot, then per fraction fine-tune and scratch."""
    runs: list[tuple[str, float | None, str, list[str]]] = [
        ("zero-shot", None, f"zs-s{seed}", ["gcad_dist.finetune", "--checkpoint", ckpt, "--epochs", "0"])]
    for f in cfg.label_fractions:
        runs.append(("fine-tune", f, f"ft{f:g}-s{seed}",
                     ["gcad_dist.finetune", "--checkpoint", ckpt, "--label-fraction", str(f), "--forest", cfg.forest,
                      *_tune_args(cfg, cfg.ft_epochs),
                      *(["--candidate-scores"] if cfg.candidate_scores else [])]))
        if not cfg.scratch:
            continue
        runs.append(("scratch", f, f"sc{f:g}-s{seed}",
                     ["gcad_dist.train", "--model", "gccad", "--label-fraction", str(f), "--normalize", cfg.sup_normalize,
                      "--forest", cfg.forest, "--pretrain", "off", *_tune_args(cfg, cfg.sup_epochs)]))
    return runs


def _record(dataset: str, method: str, fraction: float | None, seed: int, m: dict[str, Any]) -> dict[str, Any]:
    """One table record from a run's metrics.json."""
    budget = m.get("label_budget") or m.get("labels") or {}
    zero = method == "zero-shot"
    return {
        "dataset": dataset, "method": method, "fraction": fraction, "seed": seed,
        **{k: m["test"][k] for k in METRICS},
        "val_auprc": m["val"]["auprc"], "best_epoch": m.get("best_epoch"),
        "labels": 0 if zero else budget.get("train_labelled"),
        "label_anomalies": 0 if zero else budget.get("train_labelled_anomalies"),
        "link_eval": m.get("link_eval", (m.get("model_config") or {}).get("link_eval")),
        "score_space": m.get("score_space", (m.get("model_config") or {}).get("score_space")),
        "wall_seconds": m.get("wall_seconds"), "split": m.get("split"),
        "finetuned_model": m.get("finetuned_model"),  # gcad_dist.finetune --model auto: the model kept on validation
    }


def _mean_std(v: Any, fmt: str = ".4f", signed: bool = False) -> str:
    v = np.asarray(v, dtype=float)
    f = ("+" if signed else "") + fmt
    return f"{v.mean():{f}} ± {v.std(ddof=1):{fmt}}" if v.size > 1 else f"{v.mean():{f}}"


def _span(vals: list[Any]) -> str:
    vals = [v for v in vals if v is not None]
    if not vals:
        return "?"
    lo, hi = min(vals), max(vals)
    return f"{lo}" if lo == hi else f"{lo}-{hi}"


def table(records: list[dict[str, Any]]) -> str:
    """Markdown table: one row per (dataset, method, label fraction), mean ± std of the test metrics over seeds."""
    lines = ["| dataset | method | label fraction | train labels (anomalies) | test AUROC | test AUPRC | test Rec@K | seeds | wall s/run |",
             "|---|---|---|---|---|---|---|---|---|"]
    groups: dict[tuple[str, str, float | None], list[dict[str, Any]]] = {}
    for r in records:
        groups.setdefault((r["dataset"], r["method"], r.get("fraction")), []).append(r)
    for (ds, method, frac), rs in groups.items():
        cells = [_mean_std([r[k] for r in rs]) for k in METRICS]
        labels = f"{_span([r.get('labels') for r in rs])} ({_span([r.get('label_anomalies') for r in rs])})"
        walls = [r["wall_seconds"] for r in rs if r.get("wall_seconds") is not None]
        wall = f"{np.mean(walls):.0f}" if walls else "-"
        fr = "-" if frac is None else f"{frac:g}"
        lines.append(f"| {ds} | {method} | {fr} | {labels} | {' | '.join(cells)} | "
                     f"{','.join(str(r['seed']) for r in rs)} | {wall} |")
    return "\n".join(lines)


def comparison(records: list[dict[str, Any]]) -> str:
    """Markdown table: per (dataset, label fraction), fine-tune minus scratch paired by seed (mean ± std of the
    per-seed differences), the seeds where fine-tuning has the higher test AUROC / AUPRC, the ratio of the mean
    test AUPRCs (fine-tune / scratch) and which model each fine-tuning kept (``gcad_dist.finetune --model``: the
    checkpoint's or the graph model, counted over seeds). Seeds with only one of the two runs are left out."""
    lines = ["| dataset | label fraction | seeds | Δ test AUROC | Δ test AUPRC | Δ test Rec@K | seeds fine-tune better (AUROC, AUPRC) | "
             "AUPRC ratio | fine-tuned model kept |",
             "|---|---|---|---|---|---|---|---|---|"]
    runs: dict[tuple[str, float, str], dict[int, dict[str, Any]]] = {}
    keys: list[tuple[str, float]] = []
    for r in records:
        if r["method"] not in ("fine-tune", "scratch"):
            continue
        key = (r["dataset"], r["fraction"])
        if key not in keys:
            keys.append(key)
        runs.setdefault((*key, r["method"]), {})[r["seed"]] = r
    for ds, frac in keys:
        ft, sc = runs.get((ds, frac, "fine-tune"), {}), runs.get((ds, frac, "scratch"), {})
        seeds = [s for s in ft if s in sc]
        if not seeds:
            continue
        diffs = {k: [ft[s][k] - sc[s][k] for s in seeds] for k in METRICS}
        wins = ", ".join(f"{sum(d > 0 for d in diffs[k])}/{len(seeds)}" for k in ("auroc", "auprc"))
        sc_auprc = np.mean([sc[s]["auprc"] for s in seeds])
        ratio = f"{np.mean([ft[s]['auprc'] for s in seeds]) / sc_auprc:.2f}" if sc_auprc > 0 else "-"
        kept = [ft[s].get("finetuned_model") or "checkpoint" for s in seeds]  # older runs fine-tuned the checkpoint
        kept_cell = ", ".join(f"{m} {kept.count(m)}/{len(seeds)}" for m in dict.fromkeys(kept))
        lines.append(f"| {ds} | {frac:g} | {','.join(map(str, seeds))} | "
                     f"{' | '.join(_mean_std(diffs[k], signed=True) for k in METRICS)} | {wins} | {ratio} | {kept_cell} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    cfg = TransferConfig(**vars(build_parser().parse_args(argv)))
    setup_logging(cfg.verbose)
    graphs = _validate(cfg)
    out = Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)
    run = Runner(cfg, out)
    records: list[dict[str, Any]] = []
    for name, graph in graphs.items():
        records += run_dataset(cfg, name, graph, run)
    md = table(records) + "\n\nFine-tune minus scratch (same label subsample, paired by seed):\n\n" + comparison(records)
    (out / "table.md").write_text(md + "\n")
    (out / "results.json").write_text(json.dumps({"config": asdict(cfg), "records": records, "step_wall_seconds": run.walls,
                                                  "failed": run.failed}, indent=2))
    print(md)
    if run.walls:
        print("\nstep wall times (s): " + ", ".join(f"{k} {v:.0f}" for k, v in run.walls.items()))
    for step, why in run.failed.items():
        print(f"FAILED {step}: {why}")
    return 1 if run.failed else 0


if __name__ == "__main__":
    run_cli(main)
