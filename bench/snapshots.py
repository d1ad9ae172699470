"""The snapshot ensemble against the single best epoch, same fits: ``python -m bench.snapshots``.

Each (dataset, model, seed) is trained once, as ``gcad_dist.quality`` trains it (``gcad_dist.train``'s defaults,
``--contrast auto`` for GCCAD). A fit keeps its best single state's scores beside the snapshot ensemble's
(:attr:`gcad_dist.supervised.FitResult.best_scores`), and the training trajectory does not depend on
``--snapshots`` (patience follows the best single evaluation; evaluation draws no random number), so one fit
gives both rules exactly, the baseline measured in the same run:

* ``single``: the scores of the evaluation with the best validation AUPRC (``--snapshots 1``, the rule before
  session 13);
* ``snapshots``: the mean over the ``--snapshots`` best evaluations (the default).

With ``--contrast auto`` each rule makes its own choice between the candidates, on its own validation scores.
Test metrics are computed after the rules have chosen; nothing here chooses anything on them.

    python -m bench.snapshots --datasets inj_cora books reddit --models gccad sage gin --seeds 0 1 2 3 4 \\
        --out runs/snapshots

One JSON line per run goes to ``<out>/runs.jsonl`` (a rerun skips the runs already there); the table is printed
at the end: mean over seeds of each rule's test AUROC / AUPRC, and the difference.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from gcad_dist.cli import ArgumentParser, UsageError, run_cli, setup_logging

log = logging.getLogger("bench.snapshots")

RULES = ("single", "snapshots")


def run_one(path: Path, model: str, seed: int, snapshots: int, data: Any) -> dict[str, Any]:
    """Fit once; the validation and test metrics of each rule, each after its own choice of contrast."""
    from gcad_dist.metrics import evaluate
    from gcad_dist.quality import QualityConfig, train_config
    from gcad_dist.train import choose_contrast, fit_candidates

    cfg = dataclasses.replace(train_config(QualityConfig(snapshots=snapshots), path, model, seed), threads=1)
    t0 = time.perf_counter()
    c = fit_candidates(cfg, data=data)
    y = c.data.y.cpu().numpy()
    known = y >= 0
    val_m, test_m = c.split.val.cpu().numpy() & known, c.split.test.cpu().numpy() & known
    row: dict[str, Any] = {"dataset": path.stem, "model": model, "seed": seed, "size": snapshots,
                           "seconds": round(time.perf_counter() - t0, 1)}
    for rule in RULES:
        fits = []
        for res, m, mc in c.fits:
            s = res.best_scores if rule == "single" else res.scores
            fits.append((dataclasses.replace(res, scores=s, val=evaluate(y, s, mask=val_m)), m, mc))
        chosen = choose_contrast(fits, c.data.y, c.split.val, seed=seed)[0] if len(fits) > 1 else 0
        res, _, mc = fits[chosen]
        test = evaluate(y, res.scores, mask=test_m)  # read once the rule has chosen
        row[rule] = {"contrast": getattr(mc, "contrast", None), "val_auroc": res.val["auroc"],
                     "val_auprc": res.val["auprc"], "test_auroc": test["auroc"], "test_auprc": test["auprc"]}
    row["snapshot_epochs"] = c.fits[0][0].snapshot_epochs
    return row


def table(rows: list[dict[str, Any]]) -> str:
    """Markdown: per dataset and model, mean test AUROC / AUPRC of each rule over seeds, and the difference."""
    lines = ["| dataset | model | seeds | single best epoch: AUROC / AUPRC | snapshot ensemble | difference |",
             "|---|---|---|---|---|---|"]
    keys = sorted({(r["dataset"], r["model"]) for r in rows}, key=lambda k: (k[0], k[1] != "gccad", k[1]))
    for ds, model in keys:
        rs = [r for r in rows if r["dataset"] == ds and r["model"] == model]
        m = {rule: (np.nanmean([r[rule]["test_auroc"] for r in rs]), np.nanmean([r[rule]["test_auprc"] for r in rs]))
             for rule in RULES}
        d = (m["snapshots"][0] - m["single"][0], m["snapshots"][1] - m["single"][1])
        lines.append(f"| {ds} | {model} | {len(rs)} | {m['single'][0]:.4f} / {m['single'][1]:.4f} | "
                     f"{m['snapshots'][0]:.4f} / {m['snapshots'][1]:.4f} | {d[0]:+.4f} / {d[1]:+.4f} |")
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    p = ArgumentParser(prog="python -m bench.snapshots", description=__doc__.split("\n\n")[0],
                       formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--datasets", nargs="+", default=["inj_cora", "books", "reddit"],
                   help="names in --data-dir or paths of labelled graphs")
    p.add_argument("--models", nargs="+", default=["gccad", "sage", "gin"], help="gcad_dist.train --model values")
    p.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2, 3, 4])
    p.add_argument("--snapshots", type=int, default=5, help="size of the snapshot ensemble")
    p.add_argument("--data-dir", default="../shared/data")
    p.add_argument("--out", default="runs/snapshots", help="folder for runs.jsonl")
    p.add_argument("--verbose", action="store_true")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    setup_logging(args.verbose)
    if args.snapshots < 2:
        raise UsageError(f"--snapshots: must be >= 2 to compare with the single best epoch, got {args.snapshots}")
    from gcad_dist.quality import _load, _resolve_dataset

    torch.set_num_threads(1)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    runs = out / "runs.jsonl"
    rows = [json.loads(line) for line in runs.read_text().splitlines() if line.strip()] if runs.exists() else []
    done = {(r["dataset"], r["model"], r["seed"], r["size"]) for r in rows}
    for name in args.datasets:
        path = _resolve_dataset(Path(args.data_dir), name)
        if not path.exists():
            raise UsageError(f"--datasets: {path} does not exist")
        _, standard = _load(path)
        for model in args.models:
            for seed in args.seeds:
                if (path.stem, model, seed, args.snapshots) in done:
                    continue
                row = run_one(path, model, seed, args.snapshots, standard)
                log.info("%s %s seed %d: single %.4f / %.4f, snapshots %.4f / %.4f (%.0f s)", path.stem, model, seed,
                         row["single"]["test_auroc"], row["single"]["test_auprc"], row["snapshots"]["test_auroc"],
                         row["snapshots"]["test_auprc"], row["seconds"])
                with runs.open("a") as f:
                    f.write(json.dumps(row) + "\n")
                rows.append(row)
    names = {_resolve_dataset(Path(args.data_dir), n).stem for n in args.datasets}
    print(table([r for r in rows if r["dataset"] in names and r["model"] in args.models
                 and r["seed"] in args.seeds and r["size"] == args.snapshots]))
    return 0


if __name__ == "__main__":
    run_cli(main)
