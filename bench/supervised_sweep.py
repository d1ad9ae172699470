"""Validation-only sweep of supervised GCCAD settings: ``python -m bench.supervised_sweep``.

Used to choose the defaults of ``gcad_dist.train`` / ``gcad_dist.finetune`` without reading a test
label: every run trains on the train split, selects its epoch on validation AUPRC and records only
validation metrics (the test split is never scored here). Variants are ``name=key:value,...`` with
keys ``link_eval`` (threshold|expected), ``score_space`` (encoder|projection), ``edge_update``
(0|1), ``lr``, ``epochs``, ``patience``, ``snapshots`` (1 = the single best epoch), ``weight_decay``,
``loss`` (contrastive|ce), ``conv``, ``dropout``, ``tau`` (the contrastive temperature), ``hidden``, ``num_layers``, ``contrast``
(graph|neighbors|ego), ``ensemble`` (N models, seeds ``seed + 1000 m``, m = 0..N-1, each choosing its own
epoch on validation; their scores' ranks averaged, then scored on validation).

    python -m bench.supervised_sweep --datasets tolokers reddit --seeds 0 1 \\
        --variants base= expected=link_eval:expected --out runs/sweep

Each run's JSON goes to ``<out>/<dataset>/<variant>/seed<s>.json`` (resumable; keyed by the variant's
settings, so a changed variant under the same name is rerun); the table is the mean over seeds. A second table
compares every variant with the first one (or ``--paired-with NAME``) seed by seed: the mean change in validation
AUROC / AUPRC over the seeds both ran, and on how many of them the variant is ahead.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np
import torch

from gcad_dist.cli import ArgumentParser, UsageError, run_cli, setup_logging
from gcad_dist.supervised import SupervisedConfig

log = logging.getLogger("bench.supervised_sweep")

MODEL_KEYS = {"link_eval": str, "score_space": str, "edge_update": lambda v: bool(int(v)), "loss": str,
              "conv": str, "dropout": float, "link_loss_weight": float, "contrast": str, "tau": float,
              "hidden": int, "num_layers": int, "jump": str}
FIT_KEYS = {"lr": float, "epochs": int, "patience": int, "weight_decay": float, "eval_every": int,
            "snapshots": int, "ensemble": int}


def parse_variant(spec: str) -> tuple[str, dict[str, Any], dict[str, Any]]:
    """``name=key:value,key:value`` -> (name, model overrides, fit overrides)."""
    name, _, rest = spec.partition("=")
    model_o: dict[str, Any] = {}
    fit_o: dict[str, Any] = {}
    for item in filter(None, rest.split(",")):
        key, _, value = item.partition(":")
        if key in MODEL_KEYS:
            model_o[key] = MODEL_KEYS[key](value)
        elif key in FIT_KEYS:
            fit_o[key] = FIT_KEYS[key](value)
        else:
            raise UsageError(f"--variants: unknown key {key!r} in {spec!r}")
    return name, model_o, fit_o


#: defaults of the runs already on disk, whose keys hash the overrides only
LEGACY_FIT = {"epochs": 200}


def variant_key(model_o: dict, fit_o: dict) -> str:
    """Cache key of a variant: its overrides, plus every default that differs from :data:`LEGACY_FIT` (so a
    changed default never reuses runs made under the old one, and the old runs keep their keys)."""
    d = SupervisedConfig()
    changed = {k: getattr(d, k) for k, v in LEGACY_FIT.items() if k not in fit_o and getattr(d, k) != v}
    return hashlib.sha1(json.dumps([model_o, {**changed, **fit_o}], sort_keys=True).encode()).hexdigest()[:8]


def run_one(data: Any, dataset: str, seed: int, model_o: dict, fit_o: dict) -> dict[str, Any]:
    """Train one GCCAD variant on the train split, select on validation; validation metrics only."""
    from gcad_dist.data.splits import make_split
    from gcad_dist.model import GCCAD, GCCADConfig
    from gcad_dist.supervised import fit_supervised

    from gcad_dist.metrics import evaluate

    split = make_split(data, seed=seed)
    d = SupervisedConfig()  # gcad_dist.train's defaults
    # snapshots is in the run key: runs before session 13 scored with the single best epoch
    fit = {"epochs": d.epochs, "lr": d.lr, "patience": d.patience, "snapshots": d.snapshots, **fit_o}
    members = int(fit.pop("ensemble", 1))
    # the test split is replaced by an empty mask: nothing here can read a test label
    empty = torch.zeros_like(split.test)
    t0 = time.perf_counter()
    ranks, epochs = [], []
    for m in range(members):
        torch.manual_seed(seed + 1000 * m)
        np.random.seed(seed + 1000 * m)
        mcfg = GCCADConfig(in_dim=data.num_features, **model_o)
        model = GCCAD(mcfg)
        scfg = SupervisedConfig(seed=seed + 1000 * m, progress=False, **fit)
        res = fit_supervised(model, data, (split.train, split.val, empty), scfg)
        ranks.append(np.argsort(np.argsort(res.scores)) / max(1, len(res.scores) - 1))
        epochs.append(res.best_epoch)
    val = res.val if members == 1 else evaluate(data.y, np.mean(ranks, 0), mask=split.val)
    if members > 1:
        fit["ensemble"] = members
    return {"dataset": dataset, "seed": seed, "model": asdict(mcfg), "fit": fit, "val": val,
            "best_epoch": epochs[0], "member_epochs": epochs, "epochs_run": res.epochs_run,
            "seconds": round(time.perf_counter() - t0, 2)}


def paired_rows(runs: dict[str, dict[int, dict[str, Any]]], reference: str) -> list[tuple[str, int, float, float, int, int]]:
    """``runs[variant][seed]`` (run records) of one dataset -> per variant other than ``reference``: (variant, seeds
    both ran, mean change in val AUROC, in val AUPRC, seeds with a higher AUROC, seeds with a higher AUPRC)."""
    rows = []
    ref = runs.get(reference, {})
    for name, by_seed in runs.items():
        seeds = sorted(set(by_seed) & set(ref))
        if name == reference or not seeds:
            continue
        d = {m: np.array([by_seed[s]["val"][m] - ref[s]["val"][m] for s in seeds]) for m in ("auroc", "auprc")}
        rows.append((name, len(seeds), float(d["auroc"].mean()), float(d["auprc"].mean()),
                     int((d["auroc"] > 0).sum()), int((d["auprc"] > 0).sum())))
    return rows


def main(argv: list[str] | None = None) -> int:
    p = ArgumentParser(prog="python -m bench.supervised_sweep", description=__doc__.split("\n\n")[0],
                       formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--datasets", nargs="+", default=["tolokers", "reddit"], help="names in --data-dir or paths")
    p.add_argument("--data-dir", default="../shared/data")
    p.add_argument("--seeds", nargs="+", type=int, default=[0])
    p.add_argument("--variants", nargs="+", default=["base="], help="name=key:value,... (see module doc)")
    p.add_argument("--out", default="runs/sweep")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--paired-with", default=None, metavar="NAME",
                   help="the variant the others are compared with seed by seed (None: the first of --variants)")
    p.add_argument("--report-only", action="store_true")
    p.add_argument("-v", "--verbose", action="store_true")
    a = p.parse_args(argv)
    setup_logging(a.verbose)
    torch.set_num_threads(a.threads)
    from gcad_dist.train import load_labelled

    variants = [parse_variant(v) for v in a.variants]
    reference = a.paired_with or variants[0][0]
    if reference not in {v[0] for v in variants}:
        raise UsageError(f"--paired-with {reference}: not among --variants ({' '.join(v[0] for v in variants)})")
    out = Path(a.out)
    rows = []
    by_dataset: dict[str, dict[str, dict[int, dict[str, Any]]]] = {}
    for ds in a.datasets:
        path = Path(ds) if Path(ds).suffix else Path(a.data_dir) / f"{ds}.npz"
        name = path.stem
        data = None
        for vname, model_o, fit_o in variants:
            key = variant_key(model_o, fit_o)
            vals = []
            for seed in a.seeds:
                f = out / name / f"{vname}-{key}" / f"seed{seed}.json"
                if f.exists():
                    r = json.loads(f.read_text())
                elif a.report_only:
                    continue
                else:
                    if data is None:
                        data = load_labelled(str(path))
                    r = run_one(data, name, seed, model_o, fit_o)
                    f.parent.mkdir(parents=True, exist_ok=True)
                    f.write_text(json.dumps(r, indent=1))
                    log.info("%s %s seed %d: val AUROC %.4f AUPRC %.4f (epoch %d, %.0f s)", name, vname, seed,
                             r["val"]["auroc"], r["val"]["auprc"], r["best_epoch"], r["seconds"])
                vals.append(r)
                by_dataset.setdefault(name, {}).setdefault(vname, {})[seed] = r
            if vals:
                rows.append((name, vname, len(vals), np.mean([r["val"]["auroc"] for r in vals]),
                             np.mean([r["val"]["auprc"] for r in vals]), np.mean([r["seconds"] for r in vals])))
    print("| dataset | variant | seeds | val AUROC | val AUPRC | s/run |\n|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r[0]} | {r[1]} | {r[2]} | {r[3]:.4f} | {r[4]:.4f} | {r[5]:.0f} |")
    paired = [(ds, row) for ds, runs in by_dataset.items() for row in paired_rows(runs, reference)]
    if paired:
        print(f"\n| dataset | variant - {reference} | seeds | val AUROC change | val AUPRC change | seeds ahead (AUROC, AUPRC) |\n"
              "|---|---|---|---|---|---|")
        for ds, (v, n, da, dp, wa, wp) in paired:
            print(f"| {ds} | {v} | {n} | {da:+.4f} | {dp:+.4f} | {wa}, {wp} of {n} |")
    return 0


if __name__ == "__main__":
    run_cli(main)
