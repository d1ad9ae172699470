"""Supervised GCCAD's forest view judged from fewer validation anomalies, both arms finished from one fit.
``python -m bench.forest_few --data-dir D --datasets NAME ... --seeds 0,1,2 --out O [--arms 10 1]``.

For each dataset and seed, :func:`gcad_dist.train.fit_candidates` fits ``gcad_dist.train``'s default candidates once,
and :func:`gcad_dist.train.finish_fit` (the product's own contrast selection, combination and forest view) finishes
them twice, with ``--forest-min-anomalies OLD`` and ``NEW`` (session 77). Only the forest view's decision can differ,
and only where validation holds between NEW and OLD - 1 anomalies, so the paired change is that setting's alone. Each
(dataset, seed) writes ``O/<dataset>-s<seed>.json`` (both arms' test and validation AUROC / AUPRC, whether the forest
joined) and is skipped when that file exists, so a stopped study resumes.

Prints one Markdown row per dataset: both arms' test AUROC / AUPRC over the seeds, the paired change, on how many
seeds the new arm's forest joined, and the validation anomalies; then the mean and worst change over the datasets.
"""

from __future__ import annotations

import logging
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script or with -m from the repo

from gcad_dist.cli import ArgumentParser, UsageError, run_cli, setup_logging  # noqa: E402

log = logging.getLogger("bench.forest_few")


@dataclass
class ForestFewConfig:
    """Settings of ``python -m bench.forest_few``."""

    datasets: list[str] = field(default_factory=list)
    data_dir: str = "../shared/data"
    seeds: str = "0,1,2"
    out: str = "runs/forest_few"
    arms: tuple[int, int] = (10, 1)  # (old, new) --forest-min-anomalies
    threads: int = 1
    epochs: int | None = None  # None: gcad_dist.train's default cap
    verbose: bool = False


def run_one(cfg: ForestFewConfig, dataset: str, seed: int) -> dict[str, Any]:
    """One fit of ``dataset`` at ``seed``, finished under both arms (module doc)."""
    from bench.train_rejoin import fit_default
    from gcad_dist.train import finish_fit

    tcfg, c = fit_default(cfg.data_dir, dataset, seed, cfg.threads, cfg.epochs)
    rec: dict[str, Any] = {"dataset": dataset, "seed": seed, "arms": list(cfg.arms)}
    for arm, least in zip(("old", "new"), cfg.arms):
        o = finish_fit(replace(tcfg, forest_min_anomalies=int(least)), c)
        fv = o.metrics.get("forest_view") or {}
        rec[arm] = {part: {k: o.metrics[part][k] for k in ("auroc", "auprc")} for part in ("test", "val")}
        rec[arm].update(joined=bool(fv.get("kept")), choice=fv.get("choice"), positives=fv.get("positives"),
                        p_gccad_better_auprc=fv.get("p_gccad_better_auprc"),
                        p_gccad_better_auroc=fv.get("p_gccad_better_auroc"))
    return rec


def table(records: list[dict[str, Any]]) -> str:
    """The Markdown table of the module doc."""
    from bench.study import paired_table

    positives = ("validation anomalies", lambda rs: ", ".join(str(r["new"]["positives"]) for r in rs))
    joined = ("new joined on", lambda rs: f"{sum(r['new']['joined'] for r in rs)} of {len(rs)}")
    return paired_table(records, ("old", "new"), lambda r, arm: [r[arm]["test"]["auroc"], r[arm]["test"]["auprc"]],
                        "test", before=[positives], after=[joined], order=lambda s: (len(s), s))


def study(cfg: ForestFewConfig) -> list[dict[str, Any]]:
    """Every (dataset, seed) of ``cfg``, run or read back from ``cfg.out`` (a record of other ``--arms`` is run
    again)."""
    from bench.study import parse_seeds, run_study

    return run_study(cfg.out, cfg.datasets, parse_seeds(cfg.seeds), lambda ds, seed: run_one(cfg, ds, seed),
                     reuse=lambda rec: rec.get("arms") == list(cfg.arms), desc="forest_few")


def build_parser() -> ArgumentParser:
    d = ForestFewConfig()
    p = ArgumentParser(prog="python -m bench.forest_few", description=__doc__.split("\n\n")[0])
    p.add_argument("--datasets", nargs="+", required=True, help="graph names: DATA_DIR/<name>.npz")
    p.add_argument("--data-dir", default=d.data_dir, help="folder of the graphs")
    p.add_argument("--seeds", default=d.seeds, help="comma-separated seeds")
    p.add_argument("--out", default=d.out, help="one JSON per (dataset, seed) here; existing ones are reused")
    p.add_argument("--arms", nargs=2, type=int, default=list(d.arms), metavar=("OLD", "NEW"),
                   help="the two --forest-min-anomalies values compared")
    p.add_argument("--threads", type=int, default=d.threads, help="torch threads of each fit")
    p.add_argument("--epochs", type=int, default=None, help="the fits' epoch cap (default: gcad_dist.train's; smaller "
                   "only for quick checks)")
    p.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    cfg = ForestFewConfig(**{**vars(args), "arms": tuple(args.arms)})
    setup_logging(cfg.verbose)
    if min(cfg.arms) < 1:
        raise UsageError("--arms: each value must be at least 1")
    import torch

    torch.set_num_threads(max(cfg.threads, 1))
    print(table(study(cfg)))
    return 0


if __name__ == "__main__":
    run_cli(main)
