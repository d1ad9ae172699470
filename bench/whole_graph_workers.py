"""Several workers on a whole-graph store: each on a share of the target nodes against every worker on every node.

    python -m bench.whole_graph_workers --out /tmp/wgw                     # 12,000 nodes of mean degree 700
    python -m bench.whole_graph_workers --out /tmp/wgw --graph ../shared/data/tolokers.npz --steps 40

A graph under ``--sample-threshold`` nodes is stored whole (``partitioning.build --k 1``) and pre-trained with
whole-graph steps. Until session 59 every worker of such a run trained every node at every step, so extra workers
added nothing. Now each worker takes a fixed share of the target nodes, their contexts and loss terms, and the
workers' averaged gradients make the one whole-graph step (:mod:`gcad_dist.data.target_shard`). Modes, each a
``gcad_dist.pretrain`` subprocess of ``--threads`` threads a worker, side by side in one run:

* ``1 worker``;
* ``W workers, every node (before)``: ``--workers W --no-shard-targets``, the same-run baseline;
* ``W workers, split targets (default)``: ``--workers W``.

Timed: ``--steps`` steps of one epoch (seconds a step between the first and last progress events: without Ray's
start-up and the first step's loading), and ratios to the baseline and to one worker. With ``--full``: each mode's
default 3-epoch run per ``--seeds`` seed, scored by ``gcad_dist.score`` (AUROC / AUPRC over every node with the
graph's labels, none read by the runs). Output: a Markdown table and ``OUT/whole_graph_workers.json``.
"""

from __future__ import annotations

import json
import logging
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script or with -m from the repo

from bench.dense_pretrain import _pretrain, add_run_options, full_cell, full_runs, graph_and_store  # noqa: E402
from gcad_dist.cli import ArgumentParser, DefaultsHelpFormatter, UsageError, run_cli, setup_logging  # noqa: E402

log = logging.getLogger("bench.whole_graph_workers")


@dataclass
class WholeGraphWorkersConfig:
    """Settings of ``python -m bench.whole_graph_workers``."""

    out: str = "runs/whole_graph_workers"
    graph: str | None = None  # an .npz graph; None = generate one (nodes, avg_degree)
    nodes: int = 12_000
    avg_degree: int = 700
    workers: int = 2
    steps: int = 30
    full: bool = False
    seeds: list[int] = field(default_factory=lambda: [0])
    threads: int = 1
    stage_timeout: int = 3600


def modes(cfg: WholeGraphWorkersConfig) -> list[tuple[str, int, list[str]]]:
    """(name, workers, extra pretrain flags): the baseline (every worker every node) first."""
    w = cfg.workers
    return [(f"{w} workers, every node (before)", w, ["--no-shard-targets"]), ("1 worker", 1, []),
            (f"{w} workers, split targets (default)", w, [])]


def run(cfg: WholeGraphWorkersConfig) -> dict[str, Any]:
    if cfg.workers < 2:
        raise UsageError(f"--workers: at least 2 to compare with one, got {cfg.workers}")
    out = Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)
    graph, store = graph_and_store(cfg, out)
    rows = []
    for i, (mode, workers, extra) in enumerate(modes(cfg)):
        rows.append({"mode": mode, "workers": workers,
                     "timed": _pretrain(cfg, store, out / f"timed{i}", extra, 0, cfg.steps, workers),
                     "full": full_runs(cfg, graph, store, out, i, extra, workers) if cfg.full else []})
    result = {"settings": asdict(cfg), "graph": str(graph), "rows": rows}
    (out / "whole_graph_workers.json").write_text(json.dumps(result, indent=1))
    return result


def table(result: dict[str, Any]) -> str:
    """Markdown: each mode's seconds a step and its ratios to the baseline and to one worker; with --full, each seed's
    3-epoch run and scores."""
    rows = result["rows"]
    sps = [r["timed"].get("s_per_step") for r in rows]
    base, one = sps[0], sps[1]
    lines = ["| mode | s / step | vs every node | vs 1 worker | 3-epoch runs: seed: pre-training s, AUROC / AUPRC |",
             "|---|---|---|---|---|"]
    for r, s in zip(rows, sps):
        if s is None:
            cells = ["failed" if r["timed"]["rc"] else "", "", ""]
        else:
            cells = [f"{s:.3f}", "baseline" if r is rows[0] else (f"{base / s:.2f}x faster" if base else ""),
                     f"{one / s:.2f}x" if one else ""]
        full = full_cell(r["full"])
        lines.append(f"| {r['mode']} | {' | '.join(cells)} | {full} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    d = WholeGraphWorkersConfig()
    p = ArgumentParser(prog="python -m bench.whole_graph_workers", description=__doc__.split("\n\n")[0],
                       formatter_class=DefaultsHelpFormatter)
    add_run_options(p, d)
    p.add_argument("--workers", type=int, default=d.workers, help="workers of the multi-worker modes (at least 2)")
    p.add_argument("-v", "--verbose", action="store_true")
    a = p.parse_args(argv)
    setup_logging(a.verbose)
    cfg = WholeGraphWorkersConfig(out=a.out, graph=a.graph, nodes=a.nodes, avg_degree=a.avg_degree,
                                  workers=a.workers, steps=a.steps, full=a.full, seeds=a.seeds, threads=a.threads,
                                  stage_timeout=a.stage_timeout)
    result = run(cfg)
    print(table(result))


if __name__ == "__main__":
    run_cli(main)
