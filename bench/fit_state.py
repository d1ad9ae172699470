"""What writing a fit's training state costs (``gcad_dist.train --checkpoint-interval``, :mod:`gcad_dist.fit_state`).

Example (BENCHMARKS.md):
    python -m bench.fit_state --graph ../shared/data/tolokers.npz --epochs 20 --rounds 2 --threads 1

Runs :func:`gcad_dist.supervised.fit_supervised` (GCCAD, graph contrast, default settings, ``--epochs`` epochs, no
early stop) without a state and with its state written at every epoch end (``--checkpoint-interval 0``, the worst
case; the default of 60 s writes once a minute), alternately, ``--rounds`` times each, in one process. Prints the
seconds per epoch of each, their ratio, the state file's size and the time of one write, which bounds what the
default interval costs (one write a minute).
"""

from __future__ import annotations

import argparse
import logging
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script or with -m from the repo

from gcad_dist.allocator import retain_freed_memory  # noqa: E402
from gcad_dist.cli import ArgumentParser, UsageError, run_cli, setup_logging  # noqa: E402

log = logging.getLogger("bench.fit_state")


@dataclass
class FitStateBenchConfig:
    """Settings of ``python -m bench.fit_state``."""

    graph: str
    epochs: int = 20
    rounds: int = 2
    threads: int = 1


def main(argv: list[str] | None = None) -> int:
    p = ArgumentParser(prog="python -m bench.fit_state", description=__doc__.split("\n\n")[0],
                       formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    d = FitStateBenchConfig(graph="")
    p.add_argument("--graph", required=True, help="labelled graph (.npz, .pt or folder)")
    p.add_argument("--epochs", type=int, default=d.epochs, help="epochs of each fit (evaluation every 5)")
    p.add_argument("--rounds", type=int, default=d.rounds, help="fits of each kind, alternated")
    p.add_argument("--threads", type=int, default=d.threads, help="torch threads")
    cfg = FitStateBenchConfig(**vars(p.parse_args(argv)))
    if cfg.epochs < 1 or cfg.rounds < 1:
        raise UsageError(f"--epochs and --rounds: must be >= 1, got {cfg.epochs} and {cfg.rounds}")
    setup_logging()
    retain_freed_memory()
    torch.set_num_threads(cfg.threads)
    from gcad_dist.data.splits import make_split
    from gcad_dist.supervised import SupervisedConfig, fit_supervised
    from gcad_dist.train import build_model, load_labelled

    data = load_labelled(cfg.graph)
    split = make_split(data, seed=0)
    base = SupervisedConfig(epochs=cfg.epochs, patience=0, device="cpu", progress=False)
    times: dict[str, list[float]] = {"no state": [], "state every epoch": []}
    size = 0
    for r in range(cfg.rounds):
        for kind in times:
            torch.manual_seed(0)
            model, _ = build_model("gccad", data.num_features, contrast="graph", jump="cat")
            with tempfile.TemporaryDirectory() as tmp:
                scfg = base if kind == "no state" else SupervisedConfig(**{**base.__dict__, "state_dir": tmp,
                                                                           "state_interval": 0})
                t = time.perf_counter()
                fit_supervised(model, data, split, scfg, state_name="fit")
                times[kind].append((time.perf_counter() - t) / cfg.epochs)
                if kind != "no state":
                    size = (Path(tmp) / "fit.pt").stat().st_size
            log.info("round %d %s: %.3f s/epoch", r + 1, kind, times[kind][-1])
    base_s = statistics.median(times["no state"])
    print(f"\n{cfg.graph}: {data.num_nodes} nodes, {data.edge_index.shape[1]} edges; {cfg.epochs} epochs a fit, "
          f"{cfg.rounds} fits each, {cfg.threads} thread(s)")
    print("| fit | s / epoch (median) | each fit | / no state |")
    print("|---|---|---|---|")
    for kind, ts in times.items():
        med = statistics.median(ts)
        print(f"| {kind} | {med:.3f} | {', '.join(f'{t:.3f}' for t in ts)} | {med / base_s:.3f}x |")
    extra = statistics.median(times["state every epoch"]) - base_s
    print(f"\nstate file {size / 2**20:.2f} MiB; one write costs about {1000 * extra:.0f} ms (the difference per "
          f"epoch); at the default interval of 60 s that is {100 * extra / 60:.2f}% of the run")
    return 0


if __name__ == "__main__":
    run_cli(main)
