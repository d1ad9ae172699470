"""The two-hop ball's mean on a dense graph: the sorted-unique chunks against the membership matrix, same run.

    python -m bench.dense_ball                                    # generated graphs: 12,000 nodes of mean degree 700, and
                                                                  # 20,000 of mean degree 20 (where the matrix is not taken)
    python -m bench.dense_ball --graph G.npz [--graph H.npz ...]  # your graphs instead
    python -m bench.dense_ball --device cuda                      # on a GPU

Scoring a label-free checkpoint computes every node's two-hop ball (the ball switch's other context, and the context
itself with ``--context-hops 2``): the neighbours and up to 10 sampled neighbours of each, every node once
(:func:`gcad_dist.model.ball.ball_mean`). Until session 58 the balls were deduplicated by a sorted ``unique`` over the
composed edges, a chunk of targets at a time; on a dense graph (mean degree 700: 7,000 composed edges a node) that was
most of the scoring time. Since then, where the composed edges average at least
:data:`gcad_dist.model.ball.DENSE_BALL_SHARE` of the nodes a target, the balls are a membership matrix a block of
targets at a time (a sparse product and one dense one). Both paths give the same balls; the table gives each
path's seconds (the median of ``--repeats``, with the second hop's sample, which both share, timed apart), the
ratio to the unique path, which path the automatic choice takes, and the largest difference of the two means.
"""

from __future__ import annotations

import argparse
import logging
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script or with -m from the repo

from gcad_dist.cli import ArgumentParser, UsageError, run_cli, setup_logging  # noqa: E402

log = logging.getLogger("bench.dense_ball")

#: the generated graphs without --graph: (nodes, mean degree)
GENERATED = ((12_000, 700), (20_000, 20))


@dataclass
class DenseBallConfig:
    """Settings of ``python -m bench.dense_ball``."""

    graph: list[str] = field(default_factory=list)  # empty: the GENERATED graphs
    fanout: int = 10
    repeats: int = 3
    threads: int = 1
    device: str = "cpu"


def _graphs(cfg: DenseBallConfig) -> list[tuple[str, Any]]:
    from partitioning.io import load_graph
    from partitioning.synthetic import SyntheticConfig, generate

    if cfg.graph:
        for g in cfg.graph:
            if not Path(g).exists():
                raise UsageError(f"--graph: {g} does not exist")
        return [(Path(g).name, load_graph(g)) for g in cfg.graph]
    return [(f"generated, {n:,} nodes, mean degree {d}",
             generate(SyntheticConfig(nodes=n, avg_degree=float(d), seed=0)))
            for n, d in GENERATED]


def measure(x: torch.Tensor, edge_index: torch.Tensor, fanout: int, repeats: int) -> dict[str, Any]:
    """Seconds of the second hop's sample and of each path (medians; on ``x``'s device, synchronised), the automatic
    choice, the largest difference."""
    from gcad_dist.model import ball

    n = x.size(0)
    sync = torch.cuda.synchronize if x.is_cuda else (lambda: None)
    gen = lambda: torch.Generator().manual_seed(ball.SCORE_SEED)  # noqa: E731
    row: dict[str, Any] = {"nodes": n, "links": int(edge_index.size(1))}
    t = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        ball.sample_in_edges(edge_index, n, fanout, gen())
        sync()
        t.append(time.perf_counter() - t0)
    row["sample_s"] = statistics.median(t)
    means = {}
    for name, dense in (("unique", False), ("matrix", True)):
        t = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            means[name], _ = ball.ball_mean(x, edge_index, n, fanout, gen(), dense=dense)
            sync()
            t.append(time.perf_counter() - t0)
        row[f"{name}_s"] = statistics.median(t) - row["sample_s"]
    calls: list[int] = []
    real = ball._dense_ball_sums
    ball._dense_ball_sums = lambda *a: calls.append(1) or real(*a)  # which path the automatic choice takes
    try:
        ball.ball_mean(x, edge_index, n, fanout, gen())
    finally:
        ball._dense_ball_sums = real
    row["auto"] = "matrix" if calls else "unique"
    row["max_diff"] = float((means["unique"] - means["matrix"]).abs().max())
    return row


def table(rows: list[dict[str, Any]]) -> str:
    """Markdown: per graph, each path's seconds and the ratio to the unique path."""
    lines = ["| graph | links | second hop's sample s | unique s | matrix s | matrix vs unique | automatic | max diff |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        ratio = r["unique_s"] / r["matrix_s"] if r["matrix_s"] > 0 else float("nan")
        lines.append(f"| {r['graph']} | {r['links']:,} | {r['sample_s']:.2f} | {r['unique_s']:.2f} | {r['matrix_s']:.2f} "
                     f"| {ratio:.2f}x {'faster' if ratio >= 1 else 'slower'} | {r['auto']} | {r['max_diff']:.1e} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    d = DenseBallConfig()
    p = ArgumentParser(prog="python -m bench.dense_ball", description=__doc__.split("\n\n")[0],
                       formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--graph", action="append", default=[], help="a graph (.npz, .pt or folder); repeat for more "
                   "(default: two generated graphs, one dense, one sparse)")
    p.add_argument("--fanout", type=int, default=d.fanout, help="second-hop neighbours per neighbour")
    p.add_argument("--repeats", type=int, default=d.repeats, help="timed runs of each path (the median is reported)")
    p.add_argument("--threads", type=int, default=d.threads, help="torch threads")
    p.add_argument("--device", default=d.device, choices=["cpu", "cuda"], help="where the balls are computed")
    cfg = DenseBallConfig(**vars(p.parse_args(argv)))
    if cfg.fanout < 1 or cfg.repeats < 1 or cfg.threads < 1:
        raise UsageError("--fanout, --repeats and --threads must be >= 1")
    if cfg.device == "cuda" and not torch.cuda.is_available():
        raise UsageError("--device cuda: no CUDA device here")
    setup_logging()
    torch.set_num_threads(cfg.threads)
    rows = []
    for name, g in _graphs(cfg):
        x = torch.as_tensor(g.x, dtype=torch.float32).to(cfg.device)
        ei = torch.as_tensor(g.edge_index(), dtype=torch.long).to(cfg.device)
        log.info("%s: %d nodes, %d links", name, x.size(0), ei.size(1))
        rows.append({"graph": name, **measure(x, ei, cfg.fanout, cfg.repeats)})
    print(table(rows))
    return 0


if __name__ == "__main__":
    run_cli(main)
