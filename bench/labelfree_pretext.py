"""Label-free GCCAD-pre with other pretext corruptions, judged on training + validation labels only.
``python -m bench.labelfree_pretext``.

Each variant is the harness's ``gccad-pre`` (:func:`gcad_dist.detectors.gccad_pre.fit_score`: whole-graph store,
pre-training on Ray in-process, whole-graph score) with some of its options changed, e.g. ``T5=pre_tails:0.05``
(``pretrain --push-tails 0.05``, the swaps cut to 0.10) or ``C5=pre_cliques:0.05``, or
``H2=pre_context_hops:2`` (``pretrain --context-hops 2``: the two-hop ball as the context; session 35), or
``D0=pre_degree_detrend:0`` (the score without session 46's degree detrend), or ``M=pre_sample_threshold:1000``
(neighbour-sampled minibatch pre-training for every graph above 1,000 nodes; ``pre_fanout`` sets the neighbours a
context samples, -1 all; session 72). The fits read no label, so
every labelled node outside the test split of :func:`gcad_dist.data.splits.make_split` (the harness's split of
that seed) is a fair judge: this script scores the training and validation nodes together (on books' 28
anomalies that is about 17 against the validation split's 6) and never reads a test label. The first variant is
the baseline of the paired columns. Each run's scores are kept under ``--out`` (a rerun only reports).
Session 30 used it for the tails corruption (BENCHMARKS.md).
"""

from __future__ import annotations

import argparse
import json
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from gcad_dist.cli import ArgumentParser, UsageError, run_cli, setup_logging

log = logging.getLogger("bench.labelfree_pretext")


def _flag(value: str) -> bool:
    """``1`` / ``0`` -> True / False (a variant's on/off option)."""
    if value not in ("0", "1"):
        raise ValueError(f"expected 0 or 1, got {value!r}")
    return value == "1"


#: the harness options a variant may set (the others stay at the recipe's defaults)
OPTIONS = {"pre_tails": float, "pre_cliques": float, "pre_epochs": int, "pre_ensemble": int, "pre_batch_size": int,
           "pre_context_hops": int, "pre_degree_detrend": _flag, "pre_sample_threshold": int, "pre_fanout": int}


def parse_variant(text: str) -> tuple[str, dict[str, Any]]:
    """``NAME`` or ``NAME=option:value[,option:value...]`` -> (name, options)."""
    name, _, rest = text.partition("=")
    opts: dict[str, Any] = {}
    for item in filter(None, rest.split(",")):
        key, _, value = item.partition(":")
        if key not in OPTIONS or not value:
            raise UsageError(f"--variants: {item!r} is not option:value with option one of {', '.join(OPTIONS)}")
        try:
            opts[key] = OPTIONS[key](value)
        except ValueError as e:
            raise UsageError(f"--variants: {item!r}: {e}") from e
    if not name:
        raise UsageError(f"--variants: {text!r} has no name")
    return name, opts


def run_one(data_dir: Path, dataset: str, seed: int, options: dict[str, Any], out: Path) -> np.ndarray:
    """The scores [N] of one gccad-pre fit (cached in ``out``)."""
    from gcad_dist.data.splits import make_split
    from gcad_dist.detectors import fit_score
    from gcad_dist.quality import _load

    if out.exists():
        return np.load(out)
    raw, _ = _load(data_dir / f"{dataset}.npz")
    split = make_split(raw, seed=seed)
    base = {k: None for k in OPTIONS}
    s = fit_score("gccad-pre", raw, split, seed, threads=1, device="cpu", **{**base, **options})
    out.parent.mkdir(parents=True, exist_ok=True)
    np.save(out, s)
    return s


def measured_nodes(raw: Any, seed: int, on_test: bool = False) -> np.ndarray:
    """The labelled nodes a label-free bench measures on: the training + validation nodes of the harness's split
    ``seed`` (no test label), or with ``on_test`` its test nodes (a report after a choice); bool [N]."""
    from gcad_dist.data.splits import make_split

    split = make_split(raw, seed=seed)
    part = split.test.numpy() if on_test else split.train.numpy() | split.val.numpy()
    return part & (raw.y.numpy() >= 0)


def saved_scores(cfg: Any, keys: tuple[str, ...], fit: Any) -> Any:
    """For each dataset and seed of a saved-scores bench's settings ``cfg`` (``out``, ``data_dir``, ``datasets``,
    ``seeds``, ``no_train``, ``threads``): yield (dataset, labelled graph, seed, {key: scores [N]}), the scores read
    from ``OUT/DATASET-SEED.npz`` and fitted first where missing (``fit(graph, seed, threads)`` -> [len(keys), N];
    :class:`UsageError` instead with ``no_train``)."""
    from gcad_dist.quality import _load

    out, data_dir = Path(cfg.out), Path(cfg.data_dir)
    out.mkdir(parents=True, exist_ok=True)
    for ds in cfg.datasets:
        path = data_dir / f"{ds}.npz"
        if not path.is_file():
            raise UsageError(f"--datasets: no {ds}.npz in {data_dir}")
        raw, _ = _load(path)
        for seed in cfg.seeds:
            f = out / f"{ds}-{seed}.npz"
            if not f.is_file():
                if cfg.no_train:
                    raise UsageError(f"--no-train: no {f.name} in {out}")
                np.savez(f, **dict(zip(keys, fit(raw, seed, cfg.threads))))
            with np.load(f) as z:
                scores = {k: z[k] for k in keys}
            if scores[keys[0]].shape != (raw.num_nodes,):
                raise UsageError(f"{f}: {scores[keys[0]].shape[0]} scores for a graph of {raw.num_nodes} nodes")
            yield ds, raw, seed, scores


def saved_scores_parser(prog: str, doc: str, d: Any) -> argparse.ArgumentParser:
    """The command line of a saved-scores bench (:func:`saved_scores`) whose settings' defaults are ``d``."""
    p = ArgumentParser(prog=prog, description=doc.split("\n\n")[0],
                       formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--out", default=d.out, help="folder of the saved scores (DATASET-SEED.npz)")
    p.add_argument("--datasets", nargs="+", default=d.datasets, help="graphs under --data-dir (NAME.npz)")
    p.add_argument("--seeds", nargs="+", type=int, default=d.seeds, help="the harness's seeds (split and training)")
    p.add_argument("--data-dir", default=d.data_dir, help="folder of the labelled graphs")
    p.add_argument("--on-test", action="store_true", help="measure on the test split (a report after the choice)")
    p.add_argument("--no-train", action="store_true", help="only tabulate saved scores (a missing one is an error)")
    p.add_argument("--threads", type=int, default=d.threads, help="CPU threads of each pre-training run")
    p.add_argument("-v", "--verbose", action="store_true")
    return p


@dataclass
class SavedScoresConfig:
    """The settings every saved-scores bench shares (:func:`saved_scores`); each bench subclasses it with its own
    ``out``."""

    out: str = "runs/saved_scores"
    datasets: list[str] = field(default_factory=lambda: ["inj_cora", "books", "reddit", "tolokers"])
    seeds: list[int] = field(default_factory=lambda: [0, 1, 2])
    data_dir: str = "../shared/data"
    on_test: bool = False
    no_train: bool = False
    threads: int = 1
    verbose: bool = False


def saved_scores_main(prog: str, doc: str, config: type, run: Any, table: Any, argv: list[str] | None) -> int:
    """A saved-scores bench's ``main``: parse ``argv`` into ``config`` (its settings dataclass), then print
    ``table(run(cfg), cfg.on_test)``."""
    cfg = config(**vars(saved_scores_parser(prog, doc, config()).parse_args(argv)))
    setup_logging(cfg.verbose)
    print(table(run(cfg), cfg.on_test))
    return 0


def evaluate_train_val(data_dir: Path, dataset: str, seed: int, scores: np.ndarray) -> dict[str, float]:
    """AUROC / AUPRC over the labelled training and validation nodes of the harness's split ``seed``."""
    from gcad_dist.metrics import evaluate
    from gcad_dist.quality import _load

    raw, _ = _load(data_dir / f"{dataset}.npz")
    y = raw.y.numpy().astype(np.int64)
    mask = measured_nodes(raw, seed)
    r = evaluate(y, scores, None, mask)
    return {"auroc": float(r["auroc"]), "auprc": float(r["auprc"]), "anomalies": int((y[mask] == 1).sum())}


def table(rows: list[dict[str, Any]], names: list[str]) -> str:
    """Mean per (dataset, variant) and the paired difference with the first variant, seed by seed."""
    lines = ["| dataset | variant | seeds | AUROC / AUPRC (train + val) | paired AUROC / AUPRC difference | seeds ahead |",
             "|---|---|---|---|---|---|"]
    by = {(r["dataset"], r["variant"], r["seed"]): r for r in rows}
    for ds in dict.fromkeys(r["dataset"] for r in rows):
        for name in names:
            seeds = sorted(s for (d, v, s) in by if d == ds and v == name)
            if not seeds:
                continue
            a = np.array([[by[ds, name, s]["auroc"], by[ds, name, s]["auprc"]] for s in seeds])
            paired = [s for s in seeds if (ds, names[0], s) in by]
            if name == names[0] or not paired:
                diff, ahead = "", ""
            else:
                d = np.array([[by[ds, name, s]["auroc"] - by[ds, names[0], s]["auroc"],
                               by[ds, name, s]["auprc"] - by[ds, names[0], s]["auprc"]] for s in paired])
                diff = f"{d[:, 0].mean():+.3f} / {d[:, 1].mean():+.4f}"
                ahead = f"{int((d[:, 0] > 0).sum())}/{len(paired)}"
            lines.append(f"| {ds} | {name} | {len(seeds)} | {a[:, 0].mean():.3f} / {a[:, 1].mean():.4f} | {diff} | {ahead} |")
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    p = ArgumentParser(prog="python -m bench.labelfree_pretext", description=__doc__.split("\n\n")[0],
                       formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--datasets", nargs="+", default=["books", "inj_cora", "reddit", "tolokers"],
                   help="graphs under --data-dir (NAME.npz)")
    p.add_argument("--data-dir", default="../shared/data", help="folder of the labelled graphs")
    p.add_argument("--variants", nargs="+", default=["B", "T5=pre_tails:0.05"],
                   help=f"NAME or NAME=option:value,...; options: {', '.join(OPTIONS)}; the first is the baseline")
    p.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2], help="seeds (split, store and pre-training)")
    p.add_argument("--out", default="runs/labelfree_pretext", help="scores (NAME/DATASET-SEED.npy), results.jsonl")
    p.add_argument("-v", "--verbose", action="store_true")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    setup_logging(args.verbose)
    variants = dict(parse_variant(v) for v in args.variants)
    data_dir, out = Path(args.data_dir), Path(args.out)
    for ds in args.datasets:
        if not (data_dir / f"{ds}.npz").is_file():
            raise UsageError(f"--datasets: no {ds}.npz in {data_dir}")
    torch.set_num_threads(1)
    rows = []
    for ds in args.datasets:
        for seed in args.seeds:
            for name, opts in variants.items():
                t0 = time.perf_counter()
                s = run_one(data_dir, ds, seed, opts, out / name / f"{ds}-{seed}.npy")
                r = {"dataset": ds, "seed": seed, "variant": name, "options": opts,
                     **evaluate_train_val(data_dir, ds, seed, s), "seconds": round(time.perf_counter() - t0, 1)}
                log.info("%s", json.dumps(r))
                rows.append(r)
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "results.jsonl", "w") as f:
        f.writelines(json.dumps(r) + "\n" for r in rows)
    print(table(rows, list(variants)))
    return 0


if __name__ == "__main__":
    run_cli(main)
