"""Supervised GCCAD's contrast keep rule with and without ``--rejoin``, both finished from one fit.
``python -m bench.train_rejoin --data-dir D --datasets NAME ... --seeds 0,1,2 --out O``.

For each dataset and seed, :func:`gcad_dist.train.fit_candidates` fits ``gcad_dist.train``'s default candidates (its
``--contrast auto`` contrasts) once, and :func:`gcad_dist.train.finish_fit` (the product's own selection, combination
and forest view) finishes them twice: ``--no-rejoin`` (the baseline) and ``--rejoin`` (session 75). Only the choice
of the kept contrasts differs, so the paired change is the rule's alone. Each (dataset, seed) writes
``O/<dataset>-s<seed>.json`` and is skipped when that file exists (a stopped study resumes).

Two measures:

* ``test``: the run's test AUROC / AUPRC (the forest view included, as ``metrics.json``'s ``test``);
* ``halves``: GCCAD's part alone (before the forest view) on held-out validation halves: the validation nodes are
  split in stratified random halves (``--halvings`` times, both ways), :func:`gcad_dist.train.keep_candidates`
  chooses on one half and the weighted mean of the kept contrasts' standardised scores is measured on the other
  (``bench.finetune_selection``'s method). Reads no test label.

``--part`` says which table to print (``halves`` keeps the test split unread, for a rule's guard). Prints one Markdown
row per dataset: both arms' means over the seeds, the paired change, and on how many seeds a contrast rejoined.
"""

from __future__ import annotations

import logging
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script or with -m from the repo

from gcad_dist.cli import ArgumentParser, UsageError, run_cli, setup_logging  # noqa: E402

log = logging.getLogger("bench.train_rejoin")

PARTS = ("test", "halves", "both")
ARMS = ("old", "new")


@dataclass
class TrainRejoinConfig:
    """Settings of ``python -m bench.train_rejoin``."""

    datasets: list[str] = field(default_factory=list)
    data_dir: str = "../shared/data"
    seeds: str = "0,1,2"
    out: str = "runs/train_rejoin"
    part: str = "both"
    halvings: int = 10
    threads: int = 1
    epochs: int | None = None  # None: gcad_dist.train's default cap
    scores_dir: str | None = None  # also write each contrast's scores here (<dataset>-s<seed>.npz)
    verbose: bool = False


def halves_metrics(fits: list[Any], y: np.ndarray, val: np.ndarray, rejoin: bool, halvings: int,
                   seed: int) -> tuple[float, float]:
    """GCCAD's kept contrasts chosen on one validation half and measured on the other (module doc): the mean
    AUROC / AUPRC over ``2 * halvings`` (choose, measure) pairs."""
    from bench.finetune_selection import halves
    from gcad_dist.metrics import auprc, auroc
    from gcad_dist.model.candidate_ensemble import standardised_mean
    from gcad_dist.train import keep_candidates, selection_weights

    out = []
    for a, b in halves(y, val, halvings, seed):
        choose = np.zeros(len(y), dtype=bool)
        choose[a] = True
        kept, record = keep_candidates(fits, y, choose, seed=seed, rejoin=rejoin)
        scores, _ = standardised_mean([fits[i][0].scores for i in kept], selection_weights(record))
        out.append((auroc(y[b], scores[b]), auprc(y[b], scores[b])))
    m = np.mean(out, axis=0)
    return float(m[0]), float(m[1])


def fit_default(data_dir: str, dataset: str, seed: int, threads: int, epochs: int | None) -> tuple[Any, Any]:
    """``gcad_dist.train``'s default candidates fitted once on ``data_dir/<dataset>.npz`` at ``seed``: (its config,
    :func:`gcad_dist.train.fit_candidates`' result), for a study that finishes them under several settings."""
    from gcad_dist.train import TrainConfig, fit_candidates

    path = Path(data_dir) / f"{dataset}.npz"
    if not path.is_file():
        raise UsageError(f"--datasets: {path} not found")
    tcfg = TrainConfig(graph=str(path), out="", seed=seed, threads=threads, progress=False, plots=False)
    if epochs is not None:
        tcfg = replace(tcfg, epochs=epochs)
    return tcfg, fit_candidates(tcfg, None, None)


def run_one(cfg: TrainRejoinConfig, dataset: str, seed: int) -> dict[str, Any]:
    """One fit of ``dataset`` at ``seed``, finished with and without ``--rejoin`` (module doc)."""
    import torch

    from gcad_dist.train import finish_fit

    tcfg, c = fit_default(cfg.data_dir, dataset, seed, cfg.threads, cfg.epochs)
    y = torch.as_tensor(c.data.y).cpu().numpy()
    val = torch.as_tensor(c.split.val).cpu().numpy()
    rec: dict[str, Any] = {"dataset": dataset, "seed": seed, "contrasts": len(c.fits)}
    if cfg.scores_dir:  # each contrast's scores, for replays of other contrast-level rules without a refit
        from gcad_dist.finetune import write_candidate_scores
        from gcad_dist.train import candidate_name

        write_candidate_scores(Path(cfg.scores_dir) / f"{dataset}-s{seed}.npz",
                               [candidate_name(m_cfg, c.fits[0][2].norm) for _, _, m_cfg in c.fits],
                               [f.scores for f, _, _ in c.fits], y, c.split, [f.selection_scores for f, _, _ in c.fits])
    for arm, rejoin in zip(ARMS, (False, True)):
        o = finish_fit(replace(tcfg, rejoin=rejoin), c)
        sel = o.metrics.get("contrast_selection") or {}
        rec[arm] = {"test": {k: o.metrics["test"][k] for k in ("auroc", "auprc")},
                    "val": {k: o.metrics["val"][k] for k in ("auroc", "auprc")},
                    "kept": sel.get("kept"), "weights": sel.get("weights"),
                    "rejoined": [s["candidate"] for s in sel.get("rejoined", [])],
                    "forest_view": bool((o.metrics.get("forest_view") or {}).get("kept")),
                    "halves": (halves_metrics(c.fits, y, val, rejoin, cfg.halvings, seed)
                               if len(c.fits) > 1 else None)}
    return rec


def table(records: list[dict[str, Any]], part: str) -> str:
    """The Markdown table (module doc) for ``part`` (``test`` or ``halves``)."""
    from bench.study import paired_table

    def pair(r: dict[str, Any], arm: str) -> list[float]:
        if part == "test":
            return [r[arm]["test"]["auroc"], r[arm]["test"]["auprc"]]
        return r[arm]["halves"] or [np.nan, np.nan]

    ahead = ("new ahead (AUPRC)", lambda rs: f"{sum(pair(r, 'new')[1] > pair(r, 'old')[1] for r in rs)} of {len(rs)}")
    rejoined = ("rejoined on", lambda rs: f"{sum(bool(r['new']['rejoined']) for r in rs)} of {len(rs)}")
    return paired_table(records, ("old", "new"), pair, part, after=[ahead, rejoined])


def build_parser() -> ArgumentParser:
    d = TrainRejoinConfig()
    p = ArgumentParser(prog="python -m bench.train_rejoin", description=__doc__.split("\n\n")[0])
    p.add_argument("--datasets", nargs="+", required=True, help="graph names: DATA_DIR/<name>.npz")
    p.add_argument("--data-dir", default=d.data_dir, help="folder of the graphs (default: %(default)s)")
    p.add_argument("--seeds", default=d.seeds, help="comma-separated seeds (default: %(default)s)")
    p.add_argument("--out", default=d.out, help="one JSON per (dataset, seed) here; existing ones are reused "
                   "(default: %(default)s)")
    p.add_argument("--part", default=d.part, choices=PARTS,
                   help="which table to print: test, halves (validation halves, GCCAD's part; reads no test label "
                   "in the printout) or both (default: %(default)s)")
    p.add_argument("--halvings", type=int, default=d.halvings, help="validation halvings, each used both ways "
                   "(default: %(default)s)")
    p.add_argument("--scores-dir", default=d.scores_dir,
                   help="also write each contrast's scores of every node (plain and cross-fitted), the labels and the "
                   "split there, one <dataset>-s<seed>.npz per run in gcad_dist.finetune --candidate-scores' format, for "
                   "offline replays of contrast-level rules")
    p.add_argument("--epochs", type=int, default=d.epochs,
                   help="the fits' epoch cap (default: gcad_dist.train's; smaller only for quick checks)")
    p.add_argument("--threads", type=int, default=d.threads, help="torch threads of each fit (default: %(default)s)")
    p.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    return p


def main(argv: list[str] | None = None) -> int:
    cfg = TrainRejoinConfig(**vars(build_parser().parse_args(argv)))
    from bench.study import parse_seeds, run_study

    seeds = parse_seeds(cfg.seeds)
    if cfg.halvings < 1:
        raise UsageError("--halvings: at least 1")
    setup_logging(cfg.verbose)
    if not cfg.verbose:  # the halves' keep rule logs every choice, and warns on small validation halves: 20 a run
        logging.getLogger("gcad_dist.train").setLevel(logging.ERROR)
    records = run_study(cfg.out, cfg.datasets, seeds, lambda ds, seed: run_one(cfg, ds, seed), desc="train_rejoin")
    for part in ("test", "halves") if cfg.part == "both" else (cfg.part,):
        print(table(records, part))
    return 0


if __name__ == "__main__":
    run_cli(main)
