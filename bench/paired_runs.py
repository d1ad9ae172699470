"""Two ``bench.pretrain_transfer`` folders compared run by run: what a change did to fine-tuning.
``python -m bench.paired_runs OLD NEW``.

Both folders hold the same graphs, seeds and label fractions, one run with the code before a change, one after
(``OUT/<dataset>/ft<fraction>-s<seed>/metrics.json``; the same pre-trained checkpoint copied into both, so that only
fine-tuning differs). For every dataset and fraction the table gives both arms' mean AUROC / AUPRC over the seeds
present in both, their mean change and on how many seeds the new arm is ahead in AUROC, on the ``--part`` asked for
(``val`` or ``test``), and a last row with the mean over the datasets of the per-dataset changes. ``--json`` writes
the same as a JSON file. Runs present in one folder only are listed and left out.
"""

from __future__ import annotations

import json
import logging
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from gcad_dist.cli import ArgumentParser, UsageError, run_cli, setup_logging

log = logging.getLogger("bench.paired_runs")

RUN = re.compile(r"^ft(?P<fraction>[0-9.]+)-s(?P<seed>\d+)$")
PARTS = ("val", "test")


@dataclass
class PairedRunsConfig:
    """``bench.paired_runs``' settings."""

    old: str = ""  # the baseline's bench.pretrain_transfer folder (or a folder of such folders)
    new: str = ""  # the change's
    part: str = "test"  # PARTS: which nodes' metrics
    json: str | None = None  # also write the table as JSON here
    verbose: bool = False


def runs(root: Path) -> dict[tuple[str, str, int], Path]:
    """``(dataset, fraction, seed) -> run folder`` for every fine-tuning run with a metrics.json under ``root`` (a
    pretrain_transfer folder ``root/<dataset>/ft*``, or a folder of them ``root/*/<dataset>/ft*``)."""
    found = {}
    for metrics in root.rglob("metrics.json"):
        m = RUN.match(metrics.parent.name)
        if m:
            found[(metrics.parent.parent.name, m["fraction"], int(m["seed"]))] = metrics.parent
    return found


def metric(run: Path, part: str) -> tuple[float, float]:
    """A run's (AUROC, AUPRC) on ``part`` (``val`` or ``test``), from its metrics.json."""
    m = json.loads((run / "metrics.json").read_text())[part]
    return float(m["auroc"]), float(m["auprc"])


def compare(old: Path, new: Path, part: str = "test") -> dict[str, Any]:
    """The paired table (module doc) as a dict: ``rows`` (one per dataset and fraction), ``mean`` (over the rows'
    changes) and ``unpaired`` (runs in one folder only)."""
    if part not in PARTS:
        raise UsageError(f"--part: one of {', '.join(PARTS)}, got {part!r}")
    a, b = runs(old), runs(new)
    if not a or not b:
        raise UsageError(f"no fine-tuning run (ft<fraction>-s<seed>/metrics.json) under {old if not a else new}")
    both = sorted(set(a) & set(b))
    groups: dict[tuple[str, str], list[int]] = {}
    for ds, frac, seed in both:
        groups.setdefault((ds, frac), []).append(seed)
    rows = []
    for (ds, frac), seeds in sorted(groups.items()):
        o = np.array([metric(a[(ds, frac, s)], part) for s in seeds])
        n = np.array([metric(b[(ds, frac, s)], part) for s in seeds])
        d = n - o
        rows.append({"dataset": ds, "fraction": float(frac), "seeds": seeds,
                     "old_auroc": float(o[:, 0].mean()), "old_auprc": float(o[:, 1].mean()),
                     "new_auroc": float(n[:, 0].mean()), "new_auprc": float(n[:, 1].mean()),
                     "d_auroc": float(d[:, 0].mean()), "d_auprc": float(d[:, 1].mean()),
                     "ahead": int((d[:, 0] > 0).sum()), "level": int((d[:, 0] == 0).sum())})
    mean = ({"d_auroc": float(np.mean([r["d_auroc"] for r in rows])),
             "d_auprc": float(np.mean([r["d_auprc"] for r in rows])),
             "worst_d_auroc": float(min(r["d_auroc"] for r in rows))} if rows else {})
    unpaired = sorted({*a, *b} - set(both))
    return {"part": part, "old": str(old), "new": str(new), "rows": rows, "mean": mean,
            "unpaired": [f"{ds}/ft{fr}-s{s}" for ds, fr, s in unpaired]}


def table(result: dict[str, Any]) -> str:
    """The comparison as a Markdown table."""
    lines = [f"{result['part']} AUROC / AUPRC, old -> new (mean over the seeds in both folders)", "",
             "| dataset | fraction | seeds | old | new | change | new ahead (AUROC) |", "|---|---|---|---|---|---|---|"]
    for r in result["rows"]:
        lines.append(f"| {r['dataset']} | {r['fraction']:g} | {len(r['seeds'])} | {r['old_auroc']:.3f} / "
                     f"{r['old_auprc']:.3f} | {r['new_auroc']:.3f} / {r['new_auprc']:.3f} | {r['d_auroc']:+.3f} / "
                     f"{r['d_auprc']:+.3f} | {r['ahead']}/{len(r['seeds'])}"
                     + (f" ({r['level']} level)" if r["level"] else "") + " |")
    if result["mean"]:
        m = result["mean"]
        lines.append(f"| **mean of the rows** | | | | | {m['d_auroc']:+.4f} / {m['d_auprc']:+.4f} | worst "
                     f"{m['worst_d_auroc']:+.3f} |")
    if result["unpaired"]:
        lines += ["", "in one folder only (left out): " + ", ".join(result["unpaired"])]
    return "\n".join(lines)


def build_parser() -> ArgumentParser:
    d = PairedRunsConfig()
    p = ArgumentParser(prog="python -m bench.paired_runs", description=__doc__.split("\n\n")[1])
    p.add_argument("old", help="the baseline's bench.pretrain_transfer --out folder (or a folder of such folders)")
    p.add_argument("new", help="the change's, with the same datasets, seeds and fractions")
    p.add_argument("--part", default=d.part, choices=PARTS, help="the nodes whose metrics are compared")
    p.add_argument("--json", default=d.json, help="also write the table as JSON to this file")
    p.add_argument("-v", "--verbose", action="store_true")
    return p


def main(argv: list[str] | None = None) -> int:
    cfg = PairedRunsConfig(**vars(build_parser().parse_args(argv)))
    setup_logging(cfg.verbose)
    old, new = Path(cfg.old), Path(cfg.new)
    for p in (old, new):
        if not p.is_dir():
            raise UsageError(f"{p}: not a folder")
    result = compare(old, new, cfg.part)
    print(table(result))
    if cfg.json:
        Path(cfg.json).write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    run_cli(main)
