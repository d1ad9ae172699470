"""What the view benches share: their common command-line options and loading a graph that must carry labels."""

from __future__ import annotations

import argparse
from typing import Any

from gcad_dist.cli import UsageError


def add_common_arguments(p: argparse.ArgumentParser, defaults: Any) -> None:
    """``--graph``, ``--repeats``, ``--threads`` and ``-v`` (``defaults``: the bench's settings dataclass)."""
    p.add_argument("--graph", required=True, help="graph file with labels y (partitioning.io.load_graph)")
    p.add_argument("--repeats", type=int, default=defaults.repeats, help="runs of each step (default: %(default)s)")
    p.add_argument("--threads", type=int, default=defaults.threads, help="torch / BLAS threads (default: %(default)s)")
    p.add_argument("-v", "--verbose", action="store_true")


def load_labelled_graph(path: str, repeats: int, threads: int, why: str) -> tuple[Any, Any]:
    """(graph, PyG Data) of ``path``, after checking ``repeats`` and setting torch's ``threads``; a graph without
    labels is refused with ``why`` (what the bench needs them for)."""
    import torch

    from partitioning.io import load_graph

    if repeats < 1:
        raise UsageError(f"--repeats: must be >= 1, got {repeats}")
    torch.set_num_threads(max(1, threads))
    g = load_graph(path)
    if g.y is None:
        raise UsageError(f"--graph: {path} has no labels y ({why})")
    return g, g.to_data()
