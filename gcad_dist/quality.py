"""Detection-quality benchmark: ``python -m gcad_dist.quality``.

Trains every model on every dataset for several seeds with :mod:`gcad_dist.train` and reports
test AUROC, AUPRC and Recall@K (K = number of test anomalies) as mean +- std over seeds.

* Seed index ``s`` fixes the split (tolokers: its given split ``s % 10``; other graphs: a stratified
  40/20/40 split seeded by ``s``), the initialisation and the training noise. Every model sees the
  same splits.
* Each run selects its epoch on validation AUPRC; the test split is only read for the report.
* Each run's result is written to ``<out>/runs/<dataset>/<model>/seed<s>.json`` as soon as it ends;
  a rerun skips runs whose JSON exists (resume), so a partial benchmark is never lost.
* ``<out>/quality.md`` (and stdout) get the Markdown tables.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tqdm.auto import tqdm

from gcad_dist.cli import UsageError, run_cli, setup_logging
from gcad_dist.train import CONVS, SCORE_SPACES, TrainConfig, load_labelled, train_one, write_json

log = logging.getLogger("gcad_dist.quality")

ALL_MODELS = ("gccad", "gccad-ce", "mlp", "gcn", "gin", "sage", "gat")
DEFAULT_DATASETS = ("tolokers", "reddit", "books", "disney", "enron", "inj_cora")
METRICS = (("auroc", "AUROC"), ("auprc", "AUPRC"), ("recall_at_k", "Rec@K"))


@dataclass
class QualityConfig:
    """Settings of ``python -m gcad_dist.quality``."""

    datasets: list[str] = field(default_factory=lambda: list(DEFAULT_DATASETS))
    seeds: int = 5
    first_seed: int = 0
    models: list[str] = field(default_factory=lambda: list(ALL_MODELS))
    data_dir: str = "../shared/data"
    out: str = "runs/quality"
    conv: str = "gin"
    score_space: str = "encoder"
    hidden: int = 64
    layers: int = 2
    epochs: int = 200
    lr: float = 1e-3
    eval_every: int = 5
    patience: int = 50
    device: str = "auto"
    threads: int = 0
    report_only: bool = False
    verbose: bool = False


def run_path(out: Path, dataset: str, model: str, seed: int) -> Path:
    return out / "runs" / dataset / model / f"seed{seed}.json"


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


def collect(out: Path, datasets: list[str], models: list[str]) -> dict[tuple[str, str], list[dict]]:
    """Read every finished run JSON: (dataset, model) -> list of run summaries."""
    res: dict[tuple[str, str], list[dict]] = {}
    for ds in datasets:
        for m in models:
            runs = []
            for p in sorted((out / "runs" / ds / m).glob("seed*.json")):
                try:
                    runs.append(json.loads(p.read_text()))
                except (OSError, json.JSONDecodeError):
                    log.warning("skipping unreadable %s", p)
            res[(ds, m)] = runs
    return res


def markdown_tables(results: dict[tuple[str, str], list[dict]], datasets: list[str], models: list[str]) -> str:
    """One Markdown table per dataset: rows = models, columns = test AUROC / AUPRC / Rec@K (mean ± std)
    plus validation AUPRC, the number of seeds and the mean wall time per run."""
    lines: list[str] = []
    for ds in datasets:
        lines.append(f"### {ds}\n")
        lines.append("| model | test AUROC | test AUPRC | test Rec@K | val AUPRC | seeds | s/run |")
        lines.append("|---|---|---|---|---|---|---|")
        for m in models:
            runs = results.get((ds, m), [])
            if not runs:
                lines.append(f"| {m} | – | – | – | – | 0 | – |")
                continue
            cells = [_fmt([r["test"].get(k) for r in runs]) for k, _ in METRICS]
            val = _fmt([r["val"].get("auprc") for r in runs])
            secs = np.mean([r.get("wall_seconds", r.get("seconds", float("nan"))) for r in runs])
            lines.append(f"| {m} | {' | '.join(cells)} | {val} | {len(runs)} | {secs:.0f} |")
        lines.append("")
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    d = QualityConfig()
    p = argparse.ArgumentParser(
        prog="python -m gcad_dist.quality",
        description="Benchmark GCCAD, its cross-entropy ablation and baselines on labelled graphs: test AUROC, "
                    "AUPRC, Rec@K as mean ± std over seeds (model selection on validation AUPRC).",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument("--datasets", nargs="+", default=d.datasets,
                   help="dataset names (<data-dir>/<name>.npz) or paths to graph files")
    p.add_argument("--seeds", type=int, default=d.seeds, help="number of seeds (split, init and training noise) per model and dataset")
    p.add_argument("--first-seed", type=int, default=d.first_seed, help="first seed index (runs use first-seed .. first-seed + seeds - 1)")
    p.add_argument("--models", nargs="+", default=d.models, choices=ALL_MODELS,
                   help="models; gccad-ce is GCCAD with the cross-entropy head instead of the contrastive loss")
    p.add_argument("--data-dir", default=d.data_dir, help="folder of the <name>.npz datasets")
    p.add_argument("--out", default=d.out, help="output folder: runs/<dataset>/<model>/seed<s>.json and quality.md")
    p.add_argument("--conv", default=d.conv, choices=CONVS, help="GCCAD node-update convolution")
    p.add_argument("--score-space", default=d.score_space, choices=SCORE_SPACES,
                   help="GCCAD score on the encoder outputs (METHOD.md) or after the projection head")
    p.add_argument("--hidden", type=int, default=d.hidden, help="hidden width (all models)")
    p.add_argument("--layers", type=int, default=d.layers, help="message-passing layers (all models)")
    p.add_argument("--epochs", type=int, default=d.epochs, help="maximum epochs per run")
    p.add_argument("--lr", type=float, default=d.lr, help="peak learning rate (all models)")
    p.add_argument("--eval-every", type=int, default=d.eval_every, help="validation every n epochs")
    p.add_argument("--patience", type=int, default=d.patience, help="early-stopping patience in epochs (0 = off)")
    p.add_argument("--device", default=d.device, help="auto (CUDA when available), cpu, cuda, cuda:N")
    p.add_argument("--threads", type=int, default=d.threads, help="torch CPU threads (0 = torch default; use 1 when running several at once)")
    p.add_argument("--report-only", action="store_true", help="train nothing; build the tables from the run JSONs in --out")
    p.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    return p


def main(argv: list[str] | None = None) -> int:
    cfg = QualityConfig(**vars(build_parser().parse_args(argv)))
    setup_logging(cfg.verbose)
    if cfg.seeds < 1:
        raise UsageError(f"--seeds: must be >= 1, got {cfg.seeds}")
    out = Path(cfg.out)
    data_dir = Path(cfg.data_dir)
    if cfg.threads > 0:
        torch.set_num_threads(cfg.threads)
    names = [Path(d).stem if Path(d).suffix else d for d in cfg.datasets]
    paths = [_resolve_dataset(data_dir, d) for d in cfg.datasets]
    if not cfg.report_only:
        for p in paths:
            if not p.exists():
                raise UsageError(f"--datasets: {p}: no such file")
        # Seed-major order: every model and dataset gets seed 0 before any gets seed 1, so a partial
        # benchmark is balanced.
        todo = [(n, p, m, s) for s in range(cfg.first_seed, cfg.first_seed + cfg.seeds) for n, p in zip(names, paths)
                for m in cfg.models if not run_path(out, n, m, s).exists()]
        log.info("%d runs to do (%d already done)", len(todo),
                 len(names) * cfg.seeds * len(cfg.models) - len(todo))
        cache: dict[str, Any] = {}
        for name, path, model, seed in tqdm(todo, desc="quality", unit="run"):
            if run_path(out, name, model, seed).exists():  # done meanwhile by another process on the same --out
                continue
            if name not in cache:  # the datasets are small (< 15k nodes): keep them all
                cache[name] = load_labelled(str(path))
            tcfg = TrainConfig(
                graph=str(path), out="", model=model, conv=cfg.conv, score_space=cfg.score_space, hidden=cfg.hidden, layers=cfg.layers,
                epochs=cfg.epochs, lr=cfg.lr, eval_every=cfg.eval_every, patience=cfg.patience, seed=seed,
                device=cfg.device, progress=False, plots=False,
            )
            t0 = time.perf_counter()
            o = train_one(tcfg, data=cache[name])
            summary = {k: v for k, v in o.metrics.items() if k != "history"}
            summary.update(dataset=name, model=model, seed=seed, wall_seconds=round(time.perf_counter() - t0, 3))
            summary["history"] = {k: o.metrics["history"][k] for k in ("eval_epoch", "val_auroc", "val_auprc")}
            write_json(summary, run_path(out, name, model, seed))
            log.info("%s %s seed %d: test AUROC %.4f AUPRC %.4f Rec@K %.4f (val AUPRC %.4f, epoch %d, %.0f s)",
                     name, model, seed, o.fit.test["auroc"], o.fit.test["auprc"], o.fit.test["recall_at_k"],
                     o.fit.val["auprc"], o.fit.best_epoch, summary["wall_seconds"])
    results = collect(out, names, cfg.models)
    header = (f"Test metrics, mean ± std over seeds (model selected on validation AUPRC). "
              f"hidden={cfg.hidden}, layers={cfg.layers}, GCCAD conv={cfg.conv}, score space {cfg.score_space}, epochs<={cfg.epochs}, "
              f"lr={cfg.lr}, eval every {cfg.eval_every}, patience {cfg.patience}.\n\n")
    md = header + markdown_tables(results, names, cfg.models)
    out.mkdir(parents=True, exist_ok=True)
    (out / "quality.md").write_text(md)
    write_json({"config": asdict(cfg)}, out / "quality_config.json")
    print(md)
    return 0


if __name__ == "__main__":
    run_cli(main)
