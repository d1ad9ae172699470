"""``gcad_dist.train`` end to end, its final scores smoothed over the graph with the training labels
(:func:`gcad_dist.label_propagation.smooth_scores`, the Smooth step of Correct and Smooth) under several settings, all
from one run. ``python -m bench.score_smoothing --data-dir D --datasets NAME ... --seeds 0,1 --out O``.

For each dataset and seed, ``python -m gcad_dist.train`` runs with default flags (``--pretrain auto`` included). The
run's last step is its forest view (:func:`gcad_dist.forest_view.add_forest_view`, joined or not), so the fit that
step returns holds the scores the run writes: they are kept, with the labels, the masks of the split the fit used and
the graph, in ``O/arrays/<dataset>-s<seed>.npz``. Each variant (:data:`VARIANTS`: ``a<alpha>-<clamp>``) smooths those
scores; ``reference`` is the run itself. Only training labels enter a variant, so its validation and test figures
are paired with the run's on the same nodes.

Each (dataset, seed) writes ``O/<dataset>-s<seed>.json`` (each variant's validation and test AUROC / AUPRC) and is
skipped when that file exists (a stopped study resumes); variants missing from a stored record are recomputed from
its arrays without a run. ``--part val`` prints validation tables only (test labels unread in the printout), ``test``
test tables, ``both`` both; ``--variants`` picks the tables (default: all), each against ``reference``.
"""

from __future__ import annotations

import logging
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script or with -m from the repo

from gcad_dist.cli import ArgumentParser, UsageError, run_cli, setup_logging  # noqa: E402

log = logging.getLogger("bench.score_smoothing")

ALPHAS = (0.1, 0.3, 0.5)
#: the smoothing settings measured: ``a<alpha>-<clamp>`` (:data:`gcad_dist.label_propagation.CLAMPS` but none)
VARIANTS = tuple(f"a{a:g}-{c}" for c in ("anomalies", "both") for a in ALPHAS)
PARTS = ("val", "test", "both")


@dataclass
class ScoreSmoothingConfig:
    """Settings of ``python -m bench.score_smoothing``."""

    datasets: list[str] = field(default_factory=list)
    data_dir: str = "../shared/data"
    seeds: str = "0"
    out: str = "runs/score_smoothing"
    variants: list[str] = field(default_factory=lambda: list(VARIANTS))
    part: str = "both"
    threads: int = 1
    epochs: int | None = None  # None: gcad_dist.train's default cap
    verbose: bool = False


def parse_variant(name: str) -> tuple[float, str]:
    """``a0.3-both`` -> (0.3, "both")."""
    try:
        a, clamp = name.split("-", 1)
        return float(a[1:]), clamp
    except ValueError as e:
        raise UsageError(f"--variants: {name!r} is not a<alpha>-<clamp>") from e


def capture(real: Callable[..., Any], sink: list[dict[str, np.ndarray]]) -> Callable[..., Any]:
    """A stand-in for ``add_forest_view`` (``real``) that returns what it returns and appends to ``sink`` the final
    scores, the labels, the split's masks and the graph."""

    def add_forest_view(res: Any, model: Any, data: Any, split: Any, seed: int, **kw: Any) -> Any:
        out = real(res, model, data, split, seed, **kw)
        import torch

        a = lambda t: torch.as_tensor(t).cpu().numpy()  # noqa: E731
        sink.append({"scores": np.asarray(out[0].scores, dtype=np.float64), "y": a(data.y),
                     "train": a(split.train), "val": a(split.val), "test": a(split.test),
                     "edge_index": a(data.edge_index)})
        return out

    return add_forest_view


def measure(arrays: dict[str, np.ndarray], variants: list[str]) -> dict[str, Any]:
    """The run's (``reference``) and each variant's validation and test AUROC / AUPRC from captured ``arrays``."""
    from gcad_dist.label_propagation import smooth_scores
    from gcad_dist.metrics import evaluate

    y = arrays["y"]
    train = arrays["train"].astype(bool) & (y >= 0)

    def figures(s: np.ndarray) -> dict[str, dict[str, float]]:
        return {part: {k: float(evaluate(y, s, None, arrays[part].astype(bool))[k]) for k in ("auroc", "auprc")}
                for part in ("val", "test")}

    out = {"reference": figures(arrays["scores"])}
    for name in variants:
        alpha, clamp = parse_variant(name)
        out[name] = figures(smooth_scores(arrays["scores"], arrays["edge_index"], y, train, alpha, clamp))
    return out


def run_one(cfg: ScoreSmoothingConfig, dataset: str, seed: int) -> dict[str, Any]:
    """One default ``gcad_dist.train`` run of ``dataset`` at ``seed``; its arrays saved and its variants measured."""
    from bench.study import train_with_forest_view

    sink: list[dict[str, np.ndarray]] = []
    metrics = train_with_forest_view(cfg.data_dir, dataset, seed, cfg.out, cfg.threads, cfg.epochs,
                                     lambda real: capture(real, sink))
    if not sink:
        raise RuntimeError(f"{dataset} seed {seed}: the run has no forest view step, so nothing was captured")
    arrays_dir = Path(cfg.out) / "arrays"
    arrays_dir.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(arrays_dir / f"{dataset}-s{seed}.npz", **sink[-1])
    return {"dataset": dataset, "seed": seed, "pretrained": bool((metrics.get("pretraining") or {}).get("used")),
            **measure(sink[-1], list(VARIANTS))}


def completed(cfg: ScoreSmoothingConfig, rec: dict[str, Any]) -> dict[str, Any]:
    """``rec`` with the variants of ``cfg`` it lacks measured from its stored arrays."""
    missing = [v for v in cfg.variants if v not in rec]
    if not missing:
        return rec
    f = Path(cfg.out) / "arrays" / f"{rec['dataset']}-s{rec['seed']}.npz"
    if not f.is_file():
        raise UsageError(f"{rec['dataset']} seed {rec['seed']}: variants {missing} not stored and {f} missing")
    with np.load(f) as z:
        arrays = {k: z[k] for k in z.files}
    rec.update({k: v for k, v in measure(arrays, missing).items() if k != "reference"})
    return rec


def table(records: list[dict[str, Any]], part: str, variant: str) -> str:
    """One Markdown row per dataset: the run and ``variant``, their means over its seeds and the paired change;
    then the mean change over the datasets (each weighted alike) and the worst."""
    from bench.study import paired_table

    return paired_table(records, ("reference", variant),
                        lambda r, arm: [r[arm][part]["auroc"], r[arm][part]["auprc"]], part)


def build_parser() -> ArgumentParser:
    d = ScoreSmoothingConfig()
    p = ArgumentParser(prog="python -m bench.score_smoothing", description=__doc__.split("\n\n")[0])
    p.add_argument("--datasets", nargs="+", required=True, help="graph names: DATA_DIR/<name>.npz")
    p.add_argument("--data-dir", default=d.data_dir, help="folder of the graphs (default: %(default)s)")
    p.add_argument("--seeds", default=d.seeds, help="comma-separated seeds, each also the stored split's index modulo "
                   "their count (default: %(default)s)")
    p.add_argument("--out", default=d.out, help="one JSON per (dataset, seed) here, the runs' folders under runs/ and "
                   "their captured arrays under arrays/; existing JSONs are reused (default: %(default)s)")
    p.add_argument("--variants", nargs="+", default=d.variants, metavar="aALPHA-CLAMP",
                   help="the settings tabulated, each against the run (default: all of " + " ".join(VARIANTS) + ")")
    p.add_argument("--part", default=d.part, choices=PARTS, help="which tables to print: val (test labels unread in "
                   "the printout), test or both (default: %(default)s)")
    p.add_argument("--epochs", type=int, default=d.epochs,
                   help="the fits' epoch cap (default: gcad_dist.train's; smaller only for quick checks)")
    p.add_argument("--threads", type=int, default=d.threads, help="torch threads of each run (default: %(default)s)")
    p.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    return p


def main(argv: list[str] | None = None) -> int:
    from bench.study import parse_seeds, run_study
    from gcad_dist.label_propagation import CLAMPS

    cfg = ScoreSmoothingConfig(**vars(build_parser().parse_args(argv)))
    for v in cfg.variants:
        alpha, clamp = parse_variant(v)
        if clamp not in CLAMPS or not 0 <= alpha < 1:
            raise UsageError(f"--variants: {v!r}: alpha in [0, 1) and a clamp of {', '.join(CLAMPS)}")
    seeds = parse_seeds(cfg.seeds)
    setup_logging(cfg.verbose)
    records = run_study(cfg.out, cfg.datasets, seeds, lambda ds, seed: run_one(cfg, ds, seed), desc="score_smoothing")
    records = [completed(cfg, r) for r in records]
    for part in ("val", "test") if cfg.part == "both" else (cfg.part,):
        for v in cfg.variants:
            print(f"\n{v}, {part}\n")
            print(table(records, part, v))
    return 0


if __name__ == "__main__":
    run_cli(main)
