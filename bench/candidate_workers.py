"""Wall time of ``--contrast auto``'s three fits: one after another against side by side (``--candidate-workers``).

    python -m bench.candidate_workers --datasets inj_cora books --workers 2 3 --threads 1

For each graph (``<data-dir>/<name>.npz`` or a path) and seed, ``gcad_dist.train``'s default run (``train_one``,
default flags but ``--threads``) is timed with ``--candidate-workers 1`` (the baseline, in this process) and with
each ``--workers`` value (Ray tasks; the Ray start-up is inside the time). The table gives the wall seconds, the
speed-up over the baseline of the same run, and whether the side-by-side run reproduced the baseline's kept
candidates and test scores (max absolute difference of the scores). Run it on an idle machine with at least
``workers x threads`` cores: a task that waits for a core measures the machine, not the code.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

import numpy as np

from gcad_dist.cli import ArgumentParser, DefaultsHelpFormatter, UsageError, run_cli, setup_logging

log = logging.getLogger("bench.candidate_workers")


def timed_run(graph: Path, seed: int, workers: int, threads: int):
    """(wall seconds, TrainOutcome) of a default ``gcad_dist.train`` run with ``workers`` candidate workers."""
    from gcad_dist.train import TrainConfig, train_one

    cfg = TrainConfig(graph=str(graph), out="", seed=seed, threads=threads, candidate_workers=workers,
                      progress=False, plots=False)
    t0 = time.perf_counter()
    outcome = train_one(cfg)
    return time.perf_counter() - t0, outcome


def main(argv: list[str] | None = None) -> int:
    p = ArgumentParser(prog="python -m bench.candidate_workers", description=__doc__.split("\n\n")[0],
                       formatter_class=DefaultsHelpFormatter)
    p.add_argument("--datasets", nargs="+", default=["inj_cora"], help="dataset names or graph paths")
    p.add_argument("--data-dir", default="../shared/data", help="folder of the <name>.npz datasets")
    p.add_argument("--seeds", nargs="+", type=int, default=[0], help="seeds (split and initialisation)")
    p.add_argument("--workers", nargs="+", type=int, default=[3], help="--candidate-workers values to time (> 1)")
    p.add_argument("--threads", type=int, default=1, help="torch threads per fit (>= 1)")
    p.add_argument("-v", "--verbose", action="store_true")
    args = p.parse_args(argv)
    setup_logging(args.verbose)
    if args.threads < 1 or any(w < 2 for w in args.workers):
        raise UsageError("--threads must be >= 1 and every --workers value >= 2")
    rows = []
    for name in args.datasets:
        path = Path(name) if name.endswith(".npz") else Path(args.data_dir) / f"{name}.npz"
        if not path.exists():
            raise UsageError(f"--datasets: {path} not found")
        for seed in args.seeds:
            base_s, base = timed_run(path, seed, 1, args.threads)
            rows.append((path.stem, seed, 1, base_s, 1.0, "baseline", ""))
            for w in args.workers:
                s, o = timed_run(path, seed, w, args.threads)
                same = o.metrics["contrast_selection"]["kept"] == base.metrics["contrast_selection"]["kept"]
                diff = float(np.abs(o.fit.scores - base.fit.scores).max())
                rows.append((path.stem, seed, w, s, base_s / s, "yes" if same else "NO", f"{diff:.1e}"))
    print("| graph | seed | candidate workers | wall s | speed-up | same kept | max score difference |")
    print("|---|---|---|---|---|---|---|")
    for g, seed, w, s, r, same, diff in rows:
        print(f"| {g} | {seed} | {w} | {s:.1f} | {r:.2f}x | {same} | {diff} |")
    return 0


if __name__ == "__main__":
    run_cli(main)
