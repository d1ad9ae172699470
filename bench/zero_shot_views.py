"""Fine-tuning's blend replayed with its zero-shot candidate scored as ``gcad_dist.score`` scores the checkpoint.
``python -m bench.zero_shot_views``.

``gcad_dist.finetune``'s zero-shot candidate is the pre-trained model's own score; the label-free score of
``gcad_dist.score`` adds the feature and signature views where they join (session 72's lead: on graphs whose links say
little, books among them, the views lift that score far above the bare contrast). For every fine-tuning run of a
``bench.pretrain_transfer`` folder (``OUT/<dataset>/ft<fraction>-s<seed>``, run with ``--candidate-scores``), this
recomputes the shipped blend from ``candidate_scores.npz`` (the kept candidates' standardised mean with their weights,
as :func:`gcad_dist.train.combine_candidates` does; the ``reproduced`` column checks it against ``metrics.json``'s
test AUROC) and again with the zero-shot candidate's scores replaced by ``gcad_dist.score``'s for the same checkpoint
(``OUT/<dataset>/pretrain/final``, scored once per dataset into ``views_scores.csv``). The kept set and weights stay
as they were: where validation holds 10 anomalies or more, a built change would also move the selection. Measured on
the validation and test nodes together (the runs' graphs must be ones no choice was made on).

Since session 73 fine-tuning's zero-shot candidate is that viewed score (``gcad_dist.finetune --zero-shot-views``), so
the replay is meant for runs made before, or with ``--no-zero-shot-views``; on newer runs both columns agree.
``bench.paired_runs`` compares the built change with the old default run by run.
"""

from __future__ import annotations

import json
import logging
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from gcad_dist.cli import ArgumentParser, UsageError, run_cli, setup_logging

log = logging.getLogger("bench.zero_shot_views")


@dataclass
class ZeroShotViewsConfig:
    """``bench.zero_shot_views``'s settings."""

    out: str = "runs/pretrain_transfer"  # a bench.pretrain_transfer --out folder
    data_dir: str = "../shared/data"  # where <dataset>.npz are
    datasets: list[str] = field(default_factory=list)  # [] = every dataset folder with fine-tuning runs
    threads: int = 1
    verbose: bool = False


def views_scores(dataset_dir: Path, graph: Path, threads: int = 1) -> np.ndarray:
    """The pre-trained checkpoint's label-free score with its views, node by node (``gcad_dist.score``; cached in
    ``dataset_dir/views_scores.csv``)."""
    import pandas as pd

    cached = dataset_dir / "views_scores.csv"
    if not cached.is_file():
        checkpoint = dataset_dir / "pretrain" / "final"
        if not checkpoint.exists():
            raise UsageError(f"{dataset_dir}: no pre-trained checkpoint (pretrain/final)")
        subprocess.run([sys.executable, "-m", "gcad_dist.score", "--checkpoint", str(checkpoint), "--graph", str(graph),
                        "--out", str(cached), "--threads", str(threads)], check=True)
    return pd.read_csv(cached).sort_values("node_id")["score"].to_numpy(np.float64)


def replay(run: Path, views: np.ndarray) -> dict[str, Any]:
    """One fine-tuning run's blend as shipped and with the zero-shot candidate replaced by ``views``: AUROC / AUPRC on
    its validation + test nodes, and whether the recomputed blend reproduces the run's test AUROC."""
    from gcad_dist.metrics import auprc, auroc
    from gcad_dist.model.candidate_ensemble import standardised_mean

    z = np.load(run / "candidate_scores.npz", allow_pickle=True)
    metrics = json.loads((run / "metrics.json").read_text())
    names, scores, y = [str(n) for n in z["names"]], np.asarray(z["scores"], dtype=np.float64), z["y"]
    if "zero-shot" not in names:
        raise UsageError(f"{run}: no zero-shot candidate among {names}")
    if views.shape != (y.shape[0],):
        raise UsageError(f"{run}: {views.shape[0]} view scores for a graph of {y.shape[0]} nodes")
    selection = metrics["model_selection"]
    kept = [names.index(k) for k in selection["kept"]]
    weights = selection.get("weights")
    w = None if weights is None else [weights[names[i]] for i in kept]
    swapped = scores.copy()
    swapped[names.index("zero-shot")] = views
    test = z["test"].astype(bool) & (y >= 0)
    measured = (z["val"].astype(bool) | z["test"].astype(bool)) & (y >= 0)
    shipped, _ = standardised_mean([scores[i] for i in kept], w)
    variant, _ = standardised_mean([swapped[i] for i in kept], w)
    return {"run": run.name, "kept": " + ".join(selection["kept"]),
            "reproduced": bool(abs(auroc(y[test], shipped[test]) - metrics["test"]["auroc"]) < 1e-6),
            "shipped": (auroc(y[measured], shipped[measured]), auprc(y[measured], shipped[measured])),
            "views": (auroc(y[measured], variant[measured]), auprc(y[measured], variant[measured]))}


def table(rows: dict[str, list[dict[str, Any]]]) -> str:
    """Markdown: one row per dataset and label fraction, means over its runs, the change and the runs ahead in
    AUROC."""
    lines = ["| graph, labels | runs | reproduced | blend as shipped | zero-shot with views | change | runs ahead |",
             "|---|---|---|---|---|---|---|"]
    for ds, recs in rows.items():
        a, b = np.mean([r["shipped"] for r in recs], axis=0), np.mean([r["views"] for r in recs], axis=0)
        ahead = sum(r["views"][0] > r["shipped"][0] for r in recs)
        lines.append(f"| {ds} | {len(recs)} | {sum(r['reproduced'] for r in recs)}/{len(recs)} | {a[0]:.3f} / "
                     f"{a[1]:.3f} | {b[0]:.3f} / {b[1]:.3f} | {b[0] - a[0]:+.4f} / {b[1] - a[1]:+.4f} | "
                     f"{ahead}/{len(recs)} |")
    return "\n".join(lines)


def study(cfg: ZeroShotViewsConfig) -> dict[str, list[dict[str, Any]]]:
    """Every fine-tuning run of ``cfg.out``'s datasets, replayed (:func:`replay`), by "<dataset> <label fraction>"."""
    out = Path(cfg.out)
    datasets = cfg.datasets or sorted(p.name for p in out.iterdir() if p.is_dir() and any(p.glob("ft*-s*")))
    rows: dict[str, list[dict[str, Any]]] = {}
    for ds in datasets:
        runs = sorted(r for r in (out / ds).glob("ft*-s*") if (r / "candidate_scores.npz").is_file())
        if not runs:
            raise UsageError(f"{out / ds}: no fine-tuning run with candidate_scores.npz (--candidate-scores)")
        graph = Path(cfg.data_dir) / f"{ds}.npz"
        if not graph.is_file():
            raise UsageError(f"--data-dir: no {ds}.npz in {cfg.data_dir}")
        views = views_scores(out / ds, graph, cfg.threads)
        for r in runs:  # one row per label fraction: ft<fraction>-s<seed>
            rows.setdefault(f"{ds} {r.name[2:].rsplit('-s', 1)[0]}", []).append(replay(r, views))
    return rows


def build_parser() -> ArgumentParser:
    d = ZeroShotViewsConfig()
    p = ArgumentParser(prog="python -m bench.zero_shot_views", description=__doc__.split("\n\n")[0])
    p.add_argument("out", help="a bench.pretrain_transfer --out folder (fine-tuning run with --candidate-scores)")
    p.add_argument("--data-dir", default=d.data_dir, help="folder of the graphs, <dataset>.npz")
    p.add_argument("--datasets", nargs="+", default=d.datasets, help="datasets under OUT (default: every one)")
    p.add_argument("--threads", type=int, default=d.threads, help="CPU threads of gcad_dist.score")
    p.add_argument("-v", "--verbose", action="store_true")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    cfg = ZeroShotViewsConfig(out=args.out, data_dir=args.data_dir, datasets=args.datasets, threads=args.threads,
                              verbose=args.verbose)
    setup_logging(cfg.verbose)
    if not Path(cfg.out).is_dir():
        raise UsageError(f"{cfg.out}: no such folder")
    print(table(study(cfg)))
    return 0


if __name__ == "__main__":
    run_cli(main)
