"""Fresh generated graphs that no default saw, and how the shipped defaults do on them with a few labels.
``python -m bench.fresh_graphs make|table``.

The project is judged on graphs it was not tuned on. Each rule since session 73 was checked on ten or so graphs made
for it, after the rule was written; this bench makes such a family in one command and tabulates the question a user
with a few labels asks: does pre-training then fine-tuning beat training from scratch on the same labels, and both of
them the label-free one-liners?

``make`` writes ``OUT/<prefix><i>.npz`` for each of :data:`RECIPES` (``partitioning.synthetic`` options on top of
``--nodes``, ``--anomaly-fraction`` and generator seed ``--seed + i - 1``; same seed, same graph). ``table`` reads
``bench.pretrain_transfer`` folders of those graphs (``RUNS/<dataset>/{zs-s<seed>, ft<fraction>-s<seed>,
sc<fraction>-s<seed>}/metrics.json``) and gives per graph, on the test nodes of each seed's split: the label-free
score (zero-shot), fine-tuning, supervised GCCAD from scratch on the same labels, IsolationForest and neighbour cosine
(:mod:`gcad_dist.detectors`, as ``gcad_dist.quality`` runs them) on the same nodes, fine-tuning's change against
scratch with the seeds it is ahead, and the labelled training and validation anomalies. A seed missing an arm is
listed and left out.

    python -m bench.fresh_graphs make --out D --prefix m --seed 7901 --nodes 3000 --anomaly-fraction 0.03
    python -m bench.pretrain_transfer --datasets m1 --data-dir D --seeds 0,1,2 --label-fractions 0.1 --out R/pt_m1
    python -m bench.fresh_graphs table R/pt_m1 ... --data-dir D --fraction 0.1
"""

from __future__ import annotations

import json
import logging
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script or with -m from the repo

from gcad_dist.cli import ArgumentParser, DefaultsHelpFormatter, UsageError, run_cli, setup_logging  # noqa: E402

log = logging.getLogger("bench.fresh_graphs")

#: (what the graph holds, ``partitioning.synthetic`` options): session 79's family, m1-m8
RECIPES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("the default mix (swaps, contextual, cliques)", ()),
    ("contextual and camouflage", ("--anomaly-mix", "0", "1", "0", "1")),
    ("bag of words, the default mix", ("--feature-kind", "words", "--features", "300")),
    ("camouflage alone, half the links across communities", ("--anomaly-mix", "0", "0", "0", "1", "--mixing", "0.5")),
    ("swaps, contextual and camouflage in 10 communities",
     ("--anomaly-mix", "0.5", "0.5", "0", "0.5", "--communities", "10")),
    ("contextual at mean degree 6", ("--avg-degree", "6", "--anomaly-mix", "0", "1", "0", "0")),
    ("all four kinds, power law 2.2", ("--power-law-exponent", "2.2", "--anomaly-mix", "1", "1", "1", "1")),
    ("fraud rings and contextual", ("--clique-features", "shared", "--anomaly-mix", "0", "0.5", "0.5", "0")),
)
#: the arms of :func:`collect`, in table order (the run folders' prefixes: zs, ft, sc; then the one-liners)
ARMS = ("zero-shot", "fine-tuned", "scratch", "iforest", "nbr-cosine")


@dataclass
class FreshGraphsConfig:
    """``bench.fresh_graphs``' settings (``make``: out, prefix, seed, nodes, anomaly_fraction; ``table``: runs,
    data_dir, fraction, json)."""

    command: str = "table"
    out: str = "runs/fresh_graphs"
    prefix: str = "m"
    seed: int = 7901
    nodes: int = 3000
    anomaly_fraction: float = 0.03
    runs: list[str] = field(default_factory=list)
    data_dir: str = "runs/fresh_graphs"
    fraction: float = 0.1
    json: str | None = None
    verbose: bool = False


def make(out: Path, prefix: str = "m", seed: int = 7901, nodes: int = 3000,
         anomaly_fraction: float = 0.03) -> list[Path]:
    """Write one graph per recipe of :data:`RECIPES` as ``out/<prefix><i>.npz`` (generator seed ``seed + i - 1``);
    the paths written."""
    from partitioning.synthetic import main as synthetic

    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for i, (what, options) in enumerate(RECIPES, start=1):
        path = out / f"{prefix}{i}.npz"
        synthetic(["--out", str(path), "--nodes", str(nodes), "--anomaly-fraction", str(anomaly_fraction),
                   "--seed", str(seed + i - 1), *options])
        log.info("%s: %s", path.name, what)
        paths.append(path)
    return paths


def _graph_row(ds: str, runs: list[tuple[int, Path]], path: Path) -> tuple[dict[str, Any] | None, list[str]]:
    """One graph's record of :func:`collect` from its fine-tuning runs ``(seed, ft folder)`` (None if no seed has
    every arm), and the runs left out for want of an arm."""
    from bench.paired_runs import metric
    from gcad_dist.data.splits import make_split
    from gcad_dist.detectors import fit_score
    from gcad_dist.metrics import auprc, auroc
    from partitioning.io import load_graph

    data = load_graph(path).to_data()
    y = data.y.numpy()
    lines = {name: fit_score(name, data, None, 0) for name in ARMS[3:]}  # label-free: every seed alike
    per: dict[str, list[tuple[float, float]]] = {a: [] for a in ARMS}
    seeds, anomalies, missing = [], [], []
    for seed, ft in runs:  # the zero-shot and scratch runs share the fine-tuning run's seed
        other = {"zero-shot": ft.parent / f"zs-s{seed}", "scratch": ft.parent / f"sc{ft.name[2:]}"}
        if not all((p / "metrics.json").is_file() for p in other.values()):
            missing.append(f"{ds}/{ft.name}")
            continue
        split = make_split(data, seed=seed)
        test, val = split.test.numpy(), split.val.numpy()
        metrics = json.loads((ft / "metrics.json").read_text())
        stored = ft / "candidate_scores.npz"  # the run's own masks, where it kept them
        same = (np.array_equal(np.load(stored)["test"].astype(bool), test) if stored.is_file()
                else int(test.sum()) == metrics["split"]["test"])
        if not same:
            raise UsageError(f"{ft}: its test split is not make_split(seed={seed}) of {path}")
        per["fine-tuned"].append((float(metrics["test"]["auroc"]), float(metrics["test"]["auprc"])))
        for a, p in other.items():
            per[a].append(metric(p, "test"))
        for a in ARMS[3:]:
            per[a].append((auroc(y[test], lines[a][test]), auprc(y[test], lines[a][test])))
        seeds.append(seed)
        anomalies.append((metrics["labels"]["train_labelled_anomalies"], int(y[val].sum())))
    if not seeds:
        return None, missing
    return {"dataset": ds, "seeds": seeds, "anomalies": anomalies,
            **{a: np.asarray(v).mean(axis=0).tolist() for a, v in per.items()},
            "ahead": int(sum(f[0] > s[0] for f, s in zip(per["fine-tuned"], per["scratch"])))}, missing


def collect(roots: list[Path], data_dir: Path, fraction: float) -> dict[str, Any]:
    """Per dataset (:data:`ARMS` per seed, on each seed's test nodes) the records of :func:`table`; ``missing``: the
    seeds left out for want of an arm."""
    from bench.paired_runs import runs

    rows, missing = [], []
    for root in roots:
        by_graph: dict[str, list[tuple[int, Path]]] = {}
        for (ds, frac, seed), run in sorted(runs(root).items()):
            if float(frac) == fraction:
                by_graph.setdefault(ds, []).append((seed, run))
        for ds, found in by_graph.items():
            path = data_dir / f"{ds}.npz"
            if not path.is_file():
                raise UsageError(f"--data-dir: {path} does not exist (the graph of {root / ds})")
            row, left_out = _graph_row(ds, found, path)
            missing += left_out
            rows += [row] if row else []
    if not rows:
        raise UsageError(f"no complete fine-tuning run at fraction {fraction:g} under {', '.join(map(str, roots))}")
    return {"fraction": fraction, "rows": rows, "missing": missing}


def table(result: dict[str, Any]) -> str:
    """:func:`collect` as Markdown: one row per graph, and the mean of fine-tuning's change over the graphs."""
    lines = [f"test AUROC / AUPRC, {100 * result['fraction']:g}% of the training labels (mean over the seeds)", "",
             "| graph | seeds | training / validation anomalies | " + " | ".join(ARMS)
             + " | fine-tuned - scratch (ahead) |", "|---|---|---|" + "---|" * (len(ARMS) + 1)]
    for r in result["rows"]:
        d = np.subtract(r["fine-tuned"], r["scratch"])
        counts = ", ".join(sorted({f"{a} / {b}" for a, b in r["anomalies"]}))
        lines.append(f"| {r['dataset']} | {len(r['seeds'])} | {counts} | "
                     + " | ".join(f"{r[a][0]:.3f} / {r[a][1]:.3f}" for a in ARMS)
                     + f" | {d[0]:+.3f} / {d[1]:+.3f} ({r['ahead']}/{len(r['seeds'])}) |")
    d = np.mean([np.subtract(r["fine-tuned"], r["scratch"]) for r in result["rows"]], axis=0)
    lines.append("| **mean over the graphs** " + "| " * (len(ARMS) + 2) + f"| {d[0]:+.4f} / {d[1]:+.4f} |")
    if result["missing"]:
        lines += ["", "left out (an arm missing): " + ", ".join(result["missing"])]
    return "\n".join(lines)


def build_parser() -> ArgumentParser:
    d = FreshGraphsConfig()
    p = ArgumentParser(prog="python -m bench.fresh_graphs", description=__doc__.split("\n\n")[1])
    sub = p.add_subparsers(dest="command", required=True)
    mk = sub.add_parser("make", help="write one graph per recipe", formatter_class=DefaultsHelpFormatter)
    mk.add_argument("--out", default=d.out, help="folder of the graphs")
    mk.add_argument("--prefix", default=d.prefix, help="file names: <prefix><i>.npz")
    mk.add_argument("--seed", type=int, default=d.seed, help="generator seed of the first graph (+1 per recipe)")
    mk.add_argument("--nodes", type=int, default=d.nodes, help="nodes per graph")
    mk.add_argument("--anomaly-fraction", type=float, default=d.anomaly_fraction, help="share of anomalies")
    tb = sub.add_parser("table", help="tabulate bench.pretrain_transfer folders of the graphs",
                        formatter_class=DefaultsHelpFormatter)
    tb.add_argument("runs", nargs="+", help="bench.pretrain_transfer --out folders")
    tb.add_argument("--data-dir", default=d.data_dir, help="folder of the graphs (<dataset>.npz)")
    tb.add_argument("--fraction", type=float, default=d.fraction, help="the label fraction to tabulate")
    tb.add_argument("--json", default=d.json, help="also write the records as JSON to this file")
    for q in (mk, tb):
        q.add_argument("-v", "--verbose", action="store_true")
    return p


def main(argv: list[str] | None = None) -> int:
    cfg = FreshGraphsConfig(**vars(build_parser().parse_args(argv)))
    setup_logging(cfg.verbose)
    if cfg.command == "make":
        if cfg.nodes < 100 or not 0 < cfg.anomaly_fraction <= 0.5:
            raise UsageError("--nodes: at least 100, --anomaly-fraction: in (0, 0.5]")
        make(Path(cfg.out), cfg.prefix, cfg.seed, cfg.nodes, cfg.anomaly_fraction)
        return 0
    for r in cfg.runs:
        if not Path(r).is_dir():
            raise UsageError(f"{r}: not a folder")
    result = collect([Path(r) for r in cfg.runs], Path(cfg.data_dir), cfg.fraction)
    print(table(result))
    if cfg.json:
        Path(cfg.json).write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    run_cli(main)
