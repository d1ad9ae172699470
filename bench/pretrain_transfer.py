"""Quality without labels on real graphs: GCCAD-pre zero-shot / fine-tuned next to supervised GCCAD.

Example (BENCHMARKS.md):
    python -m bench.pretrain_transfer --datasets tolokers,reddit --seeds 0,1,2 --epochs 30 --out runs/h8/transfer

For each dataset (a name in ``--data-dir`` such as ``tolokers``, or a path to a graph file):

1. ``python -m partitioning.build``: FAISS K-means parts and corrupt subgraphs, a Zarr store (``--k auto``);
2. ``python -m gcad_dist.pretrain``: self-supervised pre-training on that store (Ray Train, ``--workers``),
   once per dataset (pre-training seed ``--pretrain-seed``); it never sees a real label;
3. for each seed of ``--seeds``, on the same split (the graph's given split ``seed % S`` for tolokers, a
   seeded stratified 40/20/40 split otherwise; every CLI below uses the same split function):
   * ``python -m gcad_dist.finetune --epochs 0``: zero-shot, the pre-trained score as it is;
   * ``python -m gcad_dist.finetune --label-fraction f`` for each ``--label-fractions``: fine-tuned on a
     stratified fraction of the training labels, epoch chosen on validation AUPRC;
   * ``python -m gcad_dist.train --model gccad``: supervised GCCAD from scratch on all training labels.
4. Test AUROC / AUPRC / Recall@K (K = number of test anomalies) from each ``metrics.json``, mean ± std over the
   seeds, as a Markdown table on stdout (also ``<out>/table.md`` and ``<out>/results.json``).

Steps whose outputs exist are reused (delete ``--out`` or pass ``--overwrite`` to redo them). A failing step
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

from gcad_dist.cli import UsageError, run_cli, setup_logging  # noqa: E402

log = logging.getLogger("bench.pretrain_transfer")

REPO = Path(__file__).resolve().parents[1]
METRICS = ("auroc", "auprc", "recall_at_k")


@dataclass
class TransferConfig:
    """Settings of ``python -m bench.pretrain_transfer`` (one field per option)."""

    datasets: list[str] = field(default_factory=lambda: ["tolokers", "reddit"])
    seeds: list[int] = field(default_factory=lambda: [0, 1, 2])
    epochs: int = 30
    label_fractions: list[float] = field(default_factory=lambda: [0.1, 1.0])
    data_dir: str = str(REPO.parent / "shared" / "data")
    out: str = "runs/pretrain_transfer"
    k: str = "auto"
    workers: int = 1
    pretrain_seed: int = 0
    ft_epochs: int = 100
    sup_epochs: int = 100
    lr: float = 5e-3
    patience: int = 30
    sup_score_space: str = "projection"
    sup_normalize: str = "standard"
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
    p = argparse.ArgumentParser(
        prog="python -m bench.pretrain_transfer",
        description="Build -> pre-train (no labels) -> zero-shot / fine-tune with a fraction of the labels -> "
                    "supervised GCCAD, on real graphs, and print test AUROC/AUPRC/Rec@K (mean ± std over seeds).",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument("--datasets", type=_csv(str), default=d.datasets,
                   help="comma-separated dataset names in --data-dir (<name>.npz) or graph file paths")
    p.add_argument("--seeds", type=_csv(int), default=d.seeds,
                   help="comma-separated seeds; each seed fixes the split, label subsample and training noise")
    p.add_argument("--epochs", type=int, default=d.epochs, help="pre-training epochs (passes over the store)")
    p.add_argument("--label-fractions", type=_csv(float), default=d.label_fractions,
                   help="fractions of the training labels used for fine-tuning, each in (0, 1]")
    p.add_argument("--data-dir", default=d.data_dir, help="folder of the real datasets (<name>.npz)")
    p.add_argument("--out", default=d.out, help="output folder: stores, pre-training runs, per-run metrics, table.md")
    p.add_argument("--k", default=d.k, help="parts for partitioning.build (number or 'auto')")
    p.add_argument("--workers", type=int, default=d.workers, help="Ray Train workers for pre-training")
    p.add_argument("--pretrain-seed", type=int, default=d.pretrain_seed, help="seed of the store build and of pre-training")
    p.add_argument("--ft-epochs", type=int, default=d.ft_epochs, help="maximum fine-tuning epochs")
    p.add_argument("--sup-epochs", type=int, default=d.sup_epochs, help="maximum supervised training epochs")
    p.add_argument("--lr", type=float, default=d.lr, help="peak learning rate of pre-training, fine-tuning and supervised training")
    p.add_argument("--patience", type=int, default=d.patience, help="early-stopping patience (epochs) of fine-tuning and supervised training")
    p.add_argument("--sup-score-space", default=d.sup_score_space, choices=("encoder", "projection"),
                   help="score space of the supervised GCCAD (the quality benchmark's choice on validation)")
    p.add_argument("--sup-normalize", default=d.sup_normalize, choices=("standard", "none"),
                   help="feature normalisation of supervised training (fine-tuning uses the checkpoint's: none, as the store holds raw features)")
    p.add_argument("--threads", type=int, default=d.threads, help="torch / FAISS threads of every step (also OMP_NUM_THREADS)")
    p.add_argument("--retries", type=int, default=d.retries,
                   help="tries of the pre-training step (starting a local Ray instance can time out on a loaded machine)")
    p.add_argument("--step-timeout", type=float, default=d.step_timeout,
                   help="seconds after which one step is killed (with its process group) and counted as failed")
    p.add_argument("--overwrite", action="store_true", help="redo steps whose outputs already exist")
    p.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    return p


def _validate(cfg: TransferConfig) -> dict[str, Path]:
    if cfg.epochs < 1:
        raise UsageError(f"--epochs: must be >= 1, got {cfg.epochs}")
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
                                 "--seed", str(cfg.pretrain_seed), "--threads", str(cfg.threads), "--no-progress", "--no-plot", *ow],
               store / "zarr.json"):
        return []
    if not run(f"{name}-pretrain", ["gcad_dist.pretrain", "--store", str(store), "--out", str(pre), "--workers", str(cfg.workers),
                                    "--epochs", str(cfg.epochs), "--seed", str(cfg.pretrain_seed), "--lr", str(cfg.lr),
                                    "--cpus-per-worker", str(cfg.threads), "--overwrite"],
               pre / "final" / "model.pt", tries=max(1, cfg.retries)):
        return []
    ckpt = str(pre / "final")
    records = []
    for seed in cfg.seeds:
        methods: list[tuple[str, str, list[str]]] = [
            ("zero-shot", f"zs-s{seed}", ["gcad_dist.finetune", "--checkpoint", ckpt, "--epochs", "0"]),
            *[(f"fine-tune {f:g} labels", f"ft{f:g}-s{seed}",
               ["gcad_dist.finetune", "--checkpoint", ckpt, "--label-fraction", str(f), "--epochs", str(cfg.ft_epochs),
                "--lr", str(cfg.lr), "--patience", str(cfg.patience)])
              for f in cfg.label_fractions],
            ("supervised GCCAD", f"sup-s{seed}",
             ["gcad_dist.train", "--model", "gccad", "--epochs", str(cfg.sup_epochs), "--normalize", cfg.sup_normalize,
              "--lr", str(cfg.lr), "--patience", str(cfg.patience), "--score-space", cfg.sup_score_space]),
        ]
        for method, tag, args in methods:
            rdir = out / tag
            args = [*args, "--graph", str(graph), "--out", str(rdir), "--seed", str(seed), "--threads", str(cfg.threads),
                    "--device", "cpu", "--no-plots", "--no-progress"]
            if not run(f"{name}-{tag}", args, rdir / "metrics.json"):
                continue
            m = json.loads((rdir / "metrics.json").read_text())
            records.append({
                "dataset": name, "method": method, "seed": seed,
                **{k: m["test"][k] for k in METRICS},
                "val_auprc": m["val"]["auprc"], "best_epoch": m.get("best_epoch"),
                "labels": (m.get("labels") or {}).get("train_labelled"),
                "wall_seconds": m.get("wall_seconds"), "split": m.get("split"),
            })
    return records


def table(records: list[dict[str, Any]]) -> str:
    """Markdown table: one row per (dataset, method), mean ± std of the test metrics over seeds."""
    lines = ["| dataset | method | train labels | test AUROC | test AUPRC | test Rec@K | seed(s) | wall s/run |",
             "|---|---|---|---|---|---|---|---|"]
    seen: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for r in records:
        seen.setdefault((r["dataset"], r["method"]), []).append(r)
    for (ds, method), rs in seen.items():
        cells = []
        for k in METRICS:
            v = np.array([r[k] for r in rs], dtype=float)
            cells.append(f"{v.mean():.4f} ± {v.std(ddof=1):.4f}" if v.size > 1 else f"{v.mean():.4f}")
        labels = rs[0]["labels"]
        if method == "zero-shot":
            labels = 0
        elif labels is None:
            labels = (rs[0].get("split") or {}).get("train", "all")
        walls = [r["wall_seconds"] for r in rs if r.get("wall_seconds") is not None]
        wall = f"{np.mean(walls):.0f}" if walls else "-"
        lines.append(f"| {ds} | {method} | {labels} | {' | '.join(cells)} | {','.join(str(r['seed']) for r in rs)} | {wall} |")
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
    md = table(records)
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
