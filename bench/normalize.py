"""Cost of the build's feature normalisations (``partitioning.build --normalize``): standard against power.

Example (BENCHMARKS.md, session 39):
    python -m bench.normalize --nodes 1000000 --features 64 --heavy 16 --repeats 3

Times :func:`partitioning.features.normalize_store_features` for each method on one array: ``--nodes`` x
``--features`` Gaussian columns, of which the first ``--heavy`` are made log-normal (a count's or an amount's
tail), or on a graph's features (``--graph``). ``power-sklearn`` is ``power`` with the former exponent fit
(scikit-learn's ``PowerTransformer``, a scipy search per column) in place of the vectorised one. The methods run
alternately, so machine load affects them alike; the table gives the median CPU seconds and wall seconds, and the
ratios to ``standard`` and to ``power-sklearn``; a last line times the two exponent fits alone.
"""

from __future__ import annotations

import argparse
import logging
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script or with -m from the repo

from gcad_dist.cli import ArgumentParser, UsageError, run_cli, setup_logging  # noqa: E402

log = logging.getLogger("bench.normalize")
METHODS = ("standard", "power", "power-sklearn")


def _sklearn_fit_power_lambdas(z: np.ndarray, seed: int = 0, **_: object) -> np.ndarray:
    """The former :func:`partitioning.features.fit_power_lambdas` (session 39): scikit-learn's Yeo-Johnson fit, one
    column at a time, every row in it (the reference)."""
    import warnings

    from sklearn.preprocessing import PowerTransformer

    from partitioning.features import POWER_FIT_ROWS, POWER_LAMBDA_BOUND

    n = int(z.shape[0])
    rows = np.sort(np.random.default_rng(seed).choice(n, POWER_FIT_ROWS, replace=False)) if n > POWER_FIT_ROWS else None
    sample = np.asarray(z if rows is None else z[rows], dtype=np.float64)
    lambdas = np.ones(sample.shape[1])
    varying = np.ptp(sample, axis=0) > 0 if sample.shape[0] else np.zeros(sample.shape[1], dtype=bool)
    if varying.any():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            pt = PowerTransformer(method="yeo-johnson", standardize=False).fit(sample[:, varying])
        lambdas[varying] = pt.lambdas_
    return np.clip(np.nan_to_num(lambdas, nan=1.0), -POWER_LAMBDA_BOUND, POWER_LAMBDA_BOUND)


def _normalize(x: np.ndarray, method: str) -> None:
    """``normalize_store_features(x, method)``; ``power-sklearn``: ``power`` with the scikit-learn exponent fit."""
    from partitioning import features

    if method != "power-sklearn":
        features.normalize_store_features(x, method)
        return
    fit = features.fit_power_lambdas
    features.fit_power_lambdas = _sklearn_fit_power_lambdas
    try:
        features.normalize_store_features(x, "power")
    finally:
        features.fit_power_lambdas = fit


@dataclass
class NormalizeBenchConfig:
    """Settings of ``python -m bench.normalize``."""

    graph: str | None = None
    nodes: int = 1_000_000
    features: int = 64
    heavy: int = 16
    repeats: int = 3
    seed: int = 0


def features(cfg: NormalizeBenchConfig) -> np.ndarray:
    """The array to normalise: the graph's features, or the generated columns."""
    if cfg.graph:
        from partitioning.io import load_graph

        return load_graph(cfg.graph).x
    x = np.random.default_rng(cfg.seed).normal(size=(cfg.nodes, cfg.features)).astype(np.float32)
    x[:, : cfg.heavy] = np.exp(x[:, : cfg.heavy])
    return x


def main(argv: list[str] | None = None) -> int:
    from partitioning.features import feature_stats, fit_power_lambdas, standardize

    d = NormalizeBenchConfig()
    p = ArgumentParser(prog="python -m bench.normalize", description=__doc__.split("\n\n")[0],
                       formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--graph", default=None, help="time on this graph's features instead of generated ones")
    p.add_argument("--nodes", type=int, default=d.nodes, help="rows of the generated array")
    p.add_argument("--features", type=int, default=d.features, help="columns of the generated array")
    p.add_argument("--heavy", type=int, default=d.heavy, help="generated columns made log-normal")
    p.add_argument("--repeats", type=int, default=d.repeats, help="timed runs per method")
    p.add_argument("--seed", type=int, default=d.seed, help="seed of the generated array")
    cfg = NormalizeBenchConfig(**vars(p.parse_args(argv)))
    if cfg.nodes < 2 or cfg.features < 1 or not 0 <= cfg.heavy <= cfg.features or cfg.repeats < 1:
        raise UsageError("--nodes must be >= 2, --features and --repeats >= 1, --heavy in [0, --features]")
    setup_logging()
    import sklearn.preprocessing  # noqa: F401  (imported before the clocks start: power-sklearn times the fit only)

    x = features(cfg)
    cpu: dict[str, list[float]] = {m: [] for m in METHODS}
    wall: dict[str, list[float]] = {m: [] for m in METHODS}
    for _ in range(cfg.repeats):
        for m in METHODS:
            c0, w0 = time.process_time(), time.perf_counter()
            _normalize(x, m)
            cpu[m].append(time.process_time() - c0)
            wall[m].append(time.perf_counter() - w0)
    mean, std = feature_stats(x)
    z = standardize(x, mean, np.where(std > 0, std, 1.0))  # the input of the exponent fit in power_normalize
    fits: dict[str, list[float]] = {"vectorised": [], "scikit-learn": []}
    for _ in range(cfg.repeats):
        for name, fit in (("vectorised", fit_power_lambdas), ("scikit-learn", _sklearn_fit_power_lambdas)):
            c0 = time.process_time()
            fit(z)
            fits[name].append(time.process_time() - c0)
    base, old = max(statistics.median(cpu["standard"]), 1e-9), max(statistics.median(cpu["power-sklearn"]), 1e-9)
    print(f"features: {x.shape[0]:,} x {x.shape[1]}" + ("" if cfg.graph else f", {cfg.heavy} log-normal columns"))
    print("| method | CPU s (median) | wall s (median) | CPU vs standard | CPU vs power-sklearn |")
    print("|---|---|---|---|---|")
    for m in METHODS:
        c = statistics.median(cpu[m])
        print(f"| {m} | {c:.2f} | {statistics.median(wall[m]):.2f} | {c / base:.1f}x | {c / old:.2f}x |")
    new_fit, old_fit = statistics.median(fits["vectorised"]), statistics.median(fits["scikit-learn"])
    print(f"exponent fit alone (CPU s, median): vectorised {new_fit:.2f}, scikit-learn {old_fit:.2f} "
          f"({old_fit / max(new_fit, 1e-9):.1f}x faster)")
    return 0


if __name__ == "__main__":
    raise SystemExit(run_cli(main))
