"""Peak memory and time of ``gcad_dist.score`` on a label-free checkpoint: h^(0) of every node against input space.

Example (BENCHMARKS.md, session 55):
    python -m bench.score_memory --checkpoint runs/pre/final --graph g1m.npz --out /tmp/score_memory --threads 1

Each mode is one ``gcad_dist.score`` run with default flags, in a process of its own (so that its peak resident set
is its own): ``h0`` materialises the input projection h^(0) of every node and its contexts, as scoring did up to
session 54; ``input`` keeps the features with a column of ones in their place and projects a block of nodes at a
time (:data:`gcad_dist.model.gccad.INPUT_SPACE_SCORING`, the default since session 55). The table gives each run's
wall seconds, peak RSS, the ratios to the first mode listed (the baseline), the metrics when the graph has labels,
and how far each mode's scores are from the baseline's.
"""

from __future__ import annotations

import argparse
import json
import logging
import resource
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script or with -m from the repo

from bench.labelfree_scale import _parquet_scores  # noqa: E402  (gcad_dist.score's scores in node order)
from gcad_dist.cli import ArgumentParser, UsageError, run_cli, setup_logging  # noqa: E402

log = logging.getLogger("bench.score_memory")

MODES = ("h0", "input")


@dataclass
class ScoreMemoryBenchConfig:
    """Settings of ``python -m bench.score_memory``."""

    checkpoint: str
    graph: str
    out: str
    modes: list[str] = field(default_factory=lambda: list(MODES))
    threads: int = 1


def child(mode: str, args: list[str]) -> int:
    """One ``gcad_dist.score`` run in ``mode``; prints ``{"seconds", "max_rss_mb"}`` as its last line."""
    from gcad_dist import score
    from gcad_dist.model import gccad

    gccad.INPUT_SPACE_SCORING = mode == "input"
    t0 = time.perf_counter()
    rc = score.main(args)
    print(json.dumps({"seconds": round(time.perf_counter() - t0, 1),
                      "max_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)}))
    return rc


def run(cfg: ScoreMemoryBenchConfig) -> list[dict]:
    """Every mode in turn; one row of results each."""
    out = Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    for mode in cfg.modes:
        parquet = out / f"scores_{mode}.parquet"
        cmd = [sys.executable, "-m", "bench.score_memory", "--child", mode, "--checkpoint", cfg.checkpoint,
               "--graph", cfg.graph, "--out", str(parquet), "--threads", str(cfg.threads)]
        log.info("%s: %s", mode, " ".join(cmd))
        done = subprocess.run(cmd, cwd=Path(__file__).resolve().parents[1], capture_output=True, text=True)
        (out / f"score_{mode}.log").write_text(done.stdout + done.stderr)
        if done.returncode != 0:
            last = (done.stderr.strip().splitlines() or ["(no output)"])[-1]
            raise UsageError(f"{mode}: gcad_dist.score failed (exit {done.returncode}): {last} "
                             f"(whole log: {out}/score_{mode}.log)")
        row = {"mode": mode, **json.loads(done.stdout.strip().splitlines()[-1])}
        metrics = Path(f"{parquet}.metrics.json")
        if metrics.exists():
            m = json.loads(metrics.read_text())
            row.update(auroc=m.get("auroc"), auprc=m.get("auprc"))
        row["scores"] = _parquet_scores(parquet)
        rows.append(row)
    return rows


def table(rows: list[dict]) -> str:
    """Markdown table: seconds, peak RSS, ratios to the first row, metrics, max |score - first's|."""
    base = rows[0]
    lines = ["| mode | seconds | peak RSS GB | time vs first | memory vs first | AUROC | AUPRC | max abs score diff |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        diff = float(np.max(np.abs(r["scores"] - base["scores"]))) if r["scores"].size else 0.0
        fmt = (lambda v: "" if v is None else f"{v:.4f}")
        lines.append(f"| {r['mode']} | {r['seconds']:.1f} | {r['max_rss_mb'] / 1024:.2f} | "
                     f"{r['seconds'] / base['seconds']:.2f}x | {r['max_rss_mb'] / base['max_rss_mb']:.2f}x | "
                     f"{fmt(r.get('auroc'))} | {fmt(r.get('auprc'))} | {diff:.2e} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--child"]:
        if len(argv) < 2 or argv[1] not in MODES:
            raise UsageError(f"--child: one of {MODES}")
        return child(argv[1], argv[2:])
    p = ArgumentParser(prog="python -m bench.score_memory", description=__doc__.split("\n\n")[0],
                       formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--checkpoint", required=True, help="a label-free checkpoint (pretrain's runs/pre/final)")
    p.add_argument("--graph", required=True, help="the graph to score (.npz, .pt or folder)")
    p.add_argument("--out", required=True, help="folder for each mode's scores and log")
    p.add_argument("--modes", nargs="+", choices=MODES, default=list(MODES),
                   help="modes to run, in order; the first is the baseline of the ratios")
    p.add_argument("--threads", type=int, default=1, help="gcad_dist.score --threads")
    cfg = ScoreMemoryBenchConfig(**vars(p.parse_args(argv)))
    if cfg.threads < 1:
        raise UsageError(f"--threads: must be >= 1, got {cfg.threads}")
    for name in ("checkpoint", "graph"):
        if not Path(getattr(cfg, name)).exists():
            raise UsageError(f"--{name}: {getattr(cfg, name)} does not exist")
    setup_logging()
    print(table(run(cfg)))
    return 0


if __name__ == "__main__":
    run_cli(main)
