"""gcad_dist.finetune's model-level keep rules compared on validation nodes no run has seen (a nested hold-out).

``bench/finetune_selection.py`` halves the validation split of finished runs, but those runs chose their epochs on
the whole of it, so both halves already flatter the trained candidates. Here the runs never see half of it:

    python -m bench.keep_rule_holdout prepare --graph ../shared/data/reddit.npz --out /tmp/ho/reddit.npz --seeds 3
    # fine-tune on the prepared copy (its split S = seed), writing candidate_scores.npz, e.g.
    python -m gcad_dist.finetune --checkpoint PRE/final --graph /tmp/ho/reddit.npz --label-fraction 0.1 \\
        --seed 0 --candidate-scores --out runs/ho/reddit/ft0.1-s0
    python -m bench.keep_rule_holdout evaluate runs/ho --holds /tmp/ho

``prepare`` writes a copy of the graph whose split masks are, for each seed s of ``0..S-1``, the split that
``gcad_dist.finetune --seed s`` would make on the original (its given split ``s % S'`` or the seeded stratified
40/20/40 split) with the validation part cut to one stratified half V1 (seed ``1000 + s``); the other half V2 is in
no mask of the copy (``<out stem>.hold.npy``, bool [S, N]). ``evaluate`` reads every ``candidate_scores.npz`` under
the run folders (the folder ``<graph>/ft<fraction>-s<seed>``; ``<graph>.hold.npy`` in ``--holds``), lets each rule of
:data:`RULES` choose on V1 (:func:`gcad_dist.train.keep_candidates`, plain or cross-fitted), and measures the
kept candidates' standardised mean on V2, with each candidate's own V2 figures beside it. Reads no test label.

``evaluate --on-test`` instead lets both rules choose on each run's whole validation split and measures on its test
split (runs on the original graph, no ``prepare``): a report read after a rule was chosen, never a way to choose one.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import sys
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script or with -m from the repo

from bench.finetune_selection import RUN_DIR  # noqa: E402
from gcad_dist.cli import ArgumentParser, UsageError, run_cli, setup_logging  # noqa: E402

log = logging.getLogger("bench.keep_rule_holdout")

#: rule name -> keep_candidates(cross_fitted=...)
RULES = {"validation": False, "cross-fitted": True}
HOLD_SEED = 1000  # V1 / V2 of seed s are validation_folds(..., seed=HOLD_SEED + s)


@dataclass
class HoldoutConfig:
    """Settings of ``python -m bench.keep_rule_holdout``."""

    command: str = "evaluate"
    graph: str = ""
    out: str = ""
    seeds: int = 3
    train_frac: float = 0.4
    val_frac: float = 0.2
    runs: list[str] = field(default_factory=list)
    holds: str | None = None
    on_test: bool = False
    verbose: bool = False


def prepare(graph_path: str, out: str, seeds: int = 3, train: float = 0.4, val: float = 0.2) -> dict[str, Any]:
    """Write the copy with halved validation masks and its hold masks; returns per-seed counts."""
    from gcad_dist.data.splits import make_split
    from gcad_dist.selection import validation_folds
    from partitioning.errors import GraphInputError
    from partitioning.io import load_graph, save_npz

    if seeds < 1:
        raise UsageError(f"--seeds: must be >= 1, got {seeds}")
    g = load_graph(graph_path)
    if g.y is None:
        raise GraphInputError(graph_path, "has no labels (y): nothing to hold out")
    if g.graph_id is not None:
        raise GraphInputError(graph_path, "holds many graphs (graph_id): the cross-fitted rule is per node")
    y = g.y.astype(np.int64)
    n = g.num_nodes
    data = g.to_data()
    masks = {k: np.zeros((seeds, n), dtype=bool) for k in ("train", "val", "test")}
    hold = np.zeros((seeds, n), dtype=bool)
    counts = []
    for s in range(seeds):
        split = make_split(data, seed=s, train=train, val=val)  # what gcad_dist.finetune --seed s splits
        tr, va, te = (np.asarray(split.train), np.asarray(split.val), np.asarray(split.test))
        folds = validation_folds(y, va, seed=HOLD_SEED + s)
        if folds is None:
            raise GraphInputError(graph_path, f"split {s}: validation holds too few anomalies to halve")
        masks["train"][s], masks["val"][s], masks["test"][s] = tr, folds == 0, te
        hold[s] = folds == 1
        counts.append({"seed": s, "v1_anomalies": int((y[folds == 0] == 1).sum()),
                       "v2_anomalies": int((y[folds == 1] == 1).sum())})
    save_npz(dataclasses.replace(g, masks=masks), out)
    np.save(_hold_path(out), hold)
    log.info("%s -> %s: %s", graph_path, out, "; ".join(
        f"seed {c['seed']}: {c['v1_anomalies']} / {c['v2_anomalies']} validation anomalies in V1 / V2" for c in counts))
    return {"counts": counts}


def _hold_path(out: str | Path) -> Path:
    p = Path(out)
    return p.with_name(p.name[: -len(".npz")] + ".hold.npy" if p.name.endswith(".npz") else p.name + ".hold.npy")


def held_out(names: list[str], scores: np.ndarray, selection: np.ndarray, y: np.ndarray, val: np.ndarray,
             hold: np.ndarray, seed: int = 0) -> dict[str, Any]:
    """Each rule's kept set (chosen on ``val``) and its held-out (AUROC, AUPRC) on ``hold``; each candidate's too."""
    from gcad_dist.metrics import auprc, auroc
    from gcad_dist.model.candidate_ensemble import standardised_mean
    from gcad_dist.train import keep_candidates

    fits = [(SimpleNamespace(scores=s, selection_scores=c, best_epoch=0, val={}, test={}), None, None)
            for s, c in zip(scores, selection)]
    out: dict[str, Any] = {"rules": {}, "candidates": {}}
    for rule, cross in RULES.items():
        kept, _ = keep_candidates(fits, y, val, seed=seed, names=names, cross_fitted=cross)
        combined, _ = standardised_mean([scores[k] for k in kept])
        out["rules"][rule] = {"kept": " + ".join(names[k] for k in kept),
                              "metrics": (auroc(y[hold], combined[hold]), auprc(y[hold], combined[hold]))}
    for name, s in zip(names, scores):
        out["candidates"][name] = (auroc(y[hold], s[hold]), auprc(y[hold], s[hold]))
    return out


def evaluate(runs: list[str], holds: str | None, on_test: bool = False) -> list[dict[str, Any]]:
    """One record per run found under ``runs``; with ``on_test`` the held-out nodes are each run's test split."""
    files = sorted(f for r in runs for f in Path(r).rglob("candidate_scores.npz"))
    if not files:
        raise UsageError(f"no candidate_scores.npz under {runs} (run gcad_dist.finetune --candidate-scores)")
    records = []
    for f in files:
        m = RUN_DIR.search(f.parent.name)
        if m is None:
            log.warning("%s: not in a ft<fraction>-s<seed> folder; skipped", f)
            continue
        graph, seed = f.parent.parent.name, int(m["seed"])
        d = np.load(f)
        if "selection_scores" not in d.files:
            raise UsageError(f"{f}: no selection_scores (written by a gcad_dist.finetune before session 44)")
        y, val = d["y"].astype(np.int64), d["val"].astype(bool)
        if on_test:
            hold = d["test"].astype(bool)
        else:
            hold_file = Path(holds) / f"{graph}.hold.npy"
            if not hold_file.exists():
                raise UsageError(f"--holds: no {hold_file.name} in {holds} (bench.keep_rule_holdout prepare)")
            hold = np.load(hold_file)[seed]
            if (hold & (val | d["train"].astype(bool) | d["test"].astype(bool))).any():
                raise UsageError(f"{f}: its split overlaps the held-out nodes of {hold_file} (another preparation?)")
        r = held_out([str(n) for n in d["names"]], d["scores"], d["selection_scores"], y, val, hold, seed)
        records.append({"graph": graph, "fraction": m["fraction"], "seed": seed,
                        "v1_anomalies": int((y[val] == 1).sum()), "v2_anomalies": int((y[hold] == 1).sum()), **r})
        log.info("%s: %s", f.parent, "; ".join(f"{k}: {v['kept']} {v['metrics'][0]:.4f} / {v['metrics'][1]:.4f}"
                                              for k, v in r["rules"].items()))
    return records


def table(records: list[dict[str, Any]], on_test: bool = False) -> str:
    """Markdown: per graph, both rules' held-out means and the change; then each candidate's held-out means."""
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for r in records:
        groups.setdefault((r["graph"], r["fraction"]), []).append(r)
    a, b = RULES
    v1, v2, held = ("validation", "test", "test") if on_test else ("V1", "V2", "held-out")
    lines = [f"| graph | labels | runs | {v1} / {v2} anomalies | {held}, {a} | {held}, {b} | change | kept ({a}) | "
             f"kept ({b}) |", "|---|---|---|---|---|---|---|---|---|"]
    changes = []
    for (graph, frac), rs in sorted(groups.items()):
        ma, mb = (np.mean([r["rules"][k]["metrics"] for r in rs], 0) for k in (a, b))
        changes.append(mb - ma)
        lines.append(f"| {graph} | {frac} | {len(rs)} | {np.mean([r['v1_anomalies'] for r in rs]):.0f} / "
                     f"{np.mean([r['v2_anomalies'] for r in rs]):.0f} | {ma[0]:.3f} / {ma[1]:.3f} | {mb[0]:.3f} / "
                     f"{mb[1]:.3f} | {mb[0] - ma[0]:+.4f} / {mb[1] - ma[1]:+.4f} | "
                     + "; ".join(r["rules"][a]["kept"] for r in rs) + " | "
                     + "; ".join(r["rules"][b]["kept"] for r in rs) + " |")
    mean = np.mean(changes, 0)
    lines.append(f"\nMean change over the {len(changes)} graphs ({b} - {a}): AUROC {mean[0]:+.4f}, AUPRC {mean[1]:+.4f}")
    names = list(dict.fromkeys(n for r in records for n in r["candidates"]))
    lines += ["", f"Each candidate alone on {v2} (mean AUROC / AUPRC over the runs):", "",
              "| graph | labels | " + " | ".join(names) + " |", "|---|---|" + "---|" * len(names)]
    for (graph, frac), rs in sorted(groups.items()):
        cells = []
        for n in names:
            v = [r["candidates"][n] for r in rs if n in r["candidates"]]
            cells.append(f"{np.mean([x[0] for x in v]):.3f} / {np.mean([x[1] for x in v]):.3f}" if v else "-")
        lines.append(f"| {graph} | {frac} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    d = HoldoutConfig()
    p = ArgumentParser(prog="python -m bench.keep_rule_holdout", description=__doc__.split("\n\n")[0],
                       formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)
    pp = sub.add_parser("prepare", help="write a graph copy with halved validation masks and its hold masks",
                        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    pp.add_argument("--graph", required=True, help="the labelled graph (any format partitioning.io reads)")
    pp.add_argument("--out", required=True, help="the copy, DIR/NAME.npz (hold masks: DIR/NAME.hold.npy)")
    pp.add_argument("--seeds", type=int, default=d.seeds, help="splits 0..S-1, one per fine-tuning --seed")
    pp.add_argument("--train-frac", type=float, default=d.train_frac, help="random split (graphs without masks)")
    pp.add_argument("--val-frac", type=float, default=d.val_frac, help="random split (graphs without masks)")
    pe = sub.add_parser("evaluate", help="both keep rules on V1, measured on V2 (or on validation, measured on test)",
                        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    pe.add_argument("runs", nargs="+", help="folders searched for candidate_scores.npz")
    where = pe.add_mutually_exclusive_group(required=True)
    where.add_argument("--holds", help="the folder of prepare's NAME.hold.npy files")
    where.add_argument("--on-test", action="store_true",
                       help="runs on the original graph: choose on the whole validation split, measure on test "
                            "(a report after the choice, never a way to make it)")
    for q in (pp, pe):
        q.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    return p


def main(argv: list[str] | None = None) -> int:
    cfg = HoldoutConfig(**vars(build_parser().parse_args(argv)))
    setup_logging(cfg.verbose)
    if cfg.command == "prepare":
        if not cfg.out.endswith(".npz"):
            raise UsageError(f"--out: must end with .npz, got {cfg.out!r}")
        prepare(cfg.graph, cfg.out, cfg.seeds, cfg.train_frac, cfg.val_frac)
        return 0
    if not cfg.verbose:
        logging.getLogger("gcad_dist.train").setLevel(logging.ERROR)
    print(table(evaluate(cfg.runs, cfg.holds, cfg.on_test), cfg.on_test))
    return 0


if __name__ == "__main__":
    run_cli(main)
