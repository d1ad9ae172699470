"""Label-free pre-training with several workers: does the learning rate follow the step's seeds over all workers?

Example (BENCHMARKS.md, session 51):
    python -m bench.workers_lr --graph /tmp/big1m.npz --store /tmp/big1m.zarr --out /tmp/wlr \\
        --runs 1:1024:auto 2:1024:per-worker 2:1024:auto 2:8192:per-worker 2:8192:auto

The workers' gradients are averaged (for the label-free recipe only since session 59, which found that DDP had
averaged none of them), so W workers of B seeds a step train as one worker of W x B seeds: fewer, larger steps.
``gcad_dist.pretrain --lr auto`` gives 1e-3 x sqrt(S / 1024), S = W x B up to 16384 seeds (4e-3; session 59); session
51's rule, 1e-3 x S / 1024 up to 4096, was fitted to workers whose gradients were not averaged; before it, 1e-3 x
sqrt(B / 1024), one worker's B alone. Each run is ``WORKERS:BATCH:LR``, LR a number, ``auto`` (the rate
``gcad_dist.pretrain`` picks now) or ``per-worker`` (the rule before session 51, sqrt(B / 1024)). Every run
pre-trains the local recipe on ``--store`` (a whole-graph store, ``partitioning.build --k 1``, of a graph above
``--sample-threshold`` nodes, whose steps are sampled minibatches) with ``gcad_dist.pretrain``, then scores
``--graph`` with ``gcad_dist.score`` against its labels, which training never sees. The table gives each run's
seeds a step over all workers, rate, steps, seconds and AUROC / AUPRC, and the difference from the first run.
Workers share this machine's cores: use as many as it has.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script or with -m from the repo

from gcad_dist.cli import ArgumentParser, UsageError, run_cli, setup_logging  # noqa: E402
from gcad_dist.pretrain import BASE_LR, CPU_BATCH_SIZE, LR_SCALE_SEEDS  # noqa: E402

log = logging.getLogger("bench.workers_lr")
RATES = ("auto", "per-worker")


@dataclass
class WorkersLrConfig:
    """Settings of one benchmark run (one per CLI option)."""

    graph: str
    store: str
    out: str = "runs/workers_lr"
    runs: list[str] = field(default_factory=lambda: ["1:1024:auto", "2:1024:per-worker", "2:1024:auto"])
    epochs: int = 3
    seed: int = 0
    cpus_per_worker: int = 1
    score_threads: int = 2


@dataclass(frozen=True)
class Run:
    """One pre-training run: ``workers`` x ``batch`` seeds a step at rate ``lr`` (a number, or a rule of RATES)."""

    workers: int
    batch: int
    lr: str

    @property
    def name(self) -> str:
        return f"w{self.workers}-b{self.batch}-{self.lr}"

    def rate(self) -> float | None:
        """The rate to pass (None: leave ``--lr auto``)."""
        if self.lr == "auto":
            return None
        if self.lr == "per-worker":
            return BASE_LR * math.sqrt(self.batch / CPU_BATCH_SIZE)
        return float(self.lr)


def parse_run(text: str) -> Run:
    """``WORKERS:BATCH:LR`` -> :class:`Run`; UsageError naming the run otherwise."""
    parts = text.split(":")
    try:
        workers, batch, lr = int(parts[0]), int(parts[1]), parts[2]
        if len(parts) != 3 or workers < 1 or batch < 1 or (lr not in RATES and not float(lr) > 0):
            raise ValueError
    except (ValueError, IndexError):
        raise UsageError(f"--runs: {text!r} is not WORKERS:BATCH:LR (LR a positive number, or one of "
                         f"{', '.join(RATES)})") from None
    return Run(workers, batch, lr)


def build_parser() -> ArgumentParser:
    p = ArgumentParser(prog="python -m bench.workers_lr", description=__doc__.split("\n\n")[0],
                       formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    d = WorkersLrConfig(graph="", store="")
    p.add_argument("--graph", required=True, help="the labelled graph to score (anything gcad_dist.score reads)")
    p.add_argument("--store", required=True, help="its whole-graph store (partitioning.build --k 1)")
    p.add_argument("--out", default=d.out, help="folder for each run's checkpoint, scores and the table")
    p.add_argument("--runs", nargs="+", default=d.runs,
                   help="WORKERS:BATCH:LR each; LR a number, auto (gcad_dist.pretrain's rule since session 59: "
                   f"sqrt(min(workers x batch, {LR_SCALE_SEEDS}) / {CPU_BATCH_SIZE}) x {BASE_LR:g}) or per-worker "
                   "(the rule before "
                   f"session 51: sqrt(batch / "
                   f"{CPU_BATCH_SIZE}) x {BASE_LR:g}); the first run is the baseline")
    p.add_argument("--epochs", type=int, default=d.epochs, help="pre-training epochs of every run")
    p.add_argument("--seed", type=int, default=d.seed, help="pre-training seed of every run")
    p.add_argument("--cpus-per-worker", type=int, default=d.cpus_per_worker, help="threads of each Ray worker")
    p.add_argument("--score-threads", type=int, default=d.score_threads, help="threads of each scoring")
    return p


def _python(*args: str) -> None:
    """Run ``python -m ...`` from the repository; its last lines in the error when it fails."""
    done = subprocess.run([sys.executable, "-m", *args], cwd=Path(__file__).resolve().parents[1],
                          capture_output=True, text=True)
    if done.returncode:
        tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-5:])
        raise RuntimeError(f"{' '.join(args[:1])} failed (exit {done.returncode}):\n{tail}")


def measure(cfg: WorkersLrConfig, run: Run) -> dict:
    """Pre-train and score one run; its row of the table."""
    out = Path(cfg.out) / run.name
    rate = run.rate()
    t0 = time.perf_counter()
    _python("gcad_dist.pretrain", "--store", cfg.store, "--out", str(out / "pre"), "--epochs", str(cfg.epochs),
            "--workers", str(run.workers), "--cpus-per-worker", str(cfg.cpus_per_worker), "--batch-size",
            str(run.batch), "--seed", str(cfg.seed), "--no-progress", "--overwrite",
            *(["--lr", repr(rate)] if rate is not None else []))
    seconds = time.perf_counter() - t0
    pre = json.loads((out / "pre" / "metrics.json").read_text())
    scores = out / "scores.parquet"
    _python("gcad_dist.score", "--checkpoint", str(out / "pre" / "final"), "--graph", cfg.graph, "--out",
            str(scores), "--threads", str(cfg.score_threads))
    metrics = json.loads(Path(f"{scores}.metrics.json").read_text())
    scores.unlink()  # the table needs the metrics only (a 1M-node graph's scores are 9 MB a run)
    return {"run": run.name, "workers": run.workers, "seeds_per_step": run.workers * run.batch,
            "lr": pre["config"]["lr"], "steps": pre["summary"]["global_step"], "pretrain_s": round(seconds, 1),
            "auroc": metrics["auroc"], "auprc": metrics["auprc"]}


def table(rows: list[dict]) -> str:
    """Markdown table, differences against the first row."""
    base = rows[0]
    lines = ["| run | workers | seeds a step (all workers) | lr | steps | pre-train s | AUROC | AUPRC | "
             "AUROC - first | AUPRC - first |", "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['run']} | {r['workers']} | {r['seeds_per_step']} | {r['lr']:.3g} | {r['steps']} | "
                     f"{r['pretrain_s']:.0f} | {r['auroc']:.4f} | {r['auprc']:.4f} | "
                     f"{r['auroc'] - base['auroc']:+.4f} | {r['auprc'] - base['auprc']:+.4f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    a = build_parser().parse_args(argv)
    setup_logging(False)
    cfg = WorkersLrConfig(**vars(a))
    runs = [parse_run(r) for r in cfg.runs]
    for path, what in ((cfg.graph, "--graph"), (cfg.store, "--store")):
        if not Path(path).exists():
            raise UsageError(f"{what}: {path} does not exist")
    rows = []
    for run in runs:
        log.info("run %s", run.name)
        rows.append(measure(cfg, run))
    text = table(rows)
    Path(cfg.out).mkdir(parents=True, exist_ok=True)
    (Path(cfg.out) / "table.md").write_text(text + "\n")
    (Path(cfg.out) / "rows.json").write_text(json.dumps(rows, indent=1))
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(run_cli(main))
