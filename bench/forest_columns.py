"""``gcad_dist.train`` end to end, its forest view finished with two of the trees' inputs (``--arms``: by default those
before session 90, ``none``, and the local columns, ``local``), both from one run. ``python -m bench.forest_columns
--data-dir D --datasets NAME ... --seeds 0,1 --out O [--arms local labels]``.

For each dataset and seed, ``python -m gcad_dist.train`` runs with default flags (``--pretrain auto`` included: below
:data:`gcad_dist.train.FEW_ANOMALIES` labelled training anomalies it pre-trains without labels and fine-tunes). Where
the run reaches its forest view (:func:`gcad_dist.forest_view.add_forest_view`), the same fit is finished twice: with
``local=False`` (``--forest-columns none``) and ``local=True`` (``local``: the trees also read neighbour cosine and the
local kNN distance, session 89; the default since session 90); ``--arms local labels`` compares ``local`` with
``labels`` (the trees also read GCCAD's two neighbour-label columns where the fit has them; session 96, rejected).
The arm the run's own setting names (``--arm``, default ``local``; session 90's rule ran ``none``, the default then)
goes on to the run's checkpoint and ``metrics.json``; the other is only measured. So the paired change is the
columns' alone, on the same GCCAD fit, and the cost is one run where two runs would repeat the GCCAD fit.

Each (dataset, seed) writes ``O/<dataset>-s<seed>.json`` (both arms' validation and test AUROC / AUPRC, whether the
trees joined) and is skipped when that file exists (a stopped study resumes); the run folders are
``O/runs/<dataset>-s<seed>``. ``--part val`` prints the validation table only (test labels unread in the printout:
for a rule's guard on the shared graphs), ``test`` the test table, ``both`` both.
"""

from __future__ import annotations

import logging
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script or with -m from the repo

from gcad_dist.cli import ArgumentParser, UsageError, run_cli, setup_logging  # noqa: E402
from gcad_dist.forest_view import FOREST_COLUMNS  # noqa: E402

log = logging.getLogger("bench.forest_columns")

#: the trees' inputs a run itself can take: ``gcad_dist.train --forest-columns``' values
RUN_ARMS = FOREST_COLUMNS
#: the trees' inputs an arm can take: those, and ``labels`` (``add_forest_view(labels=True)``: the local columns and
#: GCCAD's two neighbour-label columns; session 96, rejected, so not a CLI value: a run itself cannot use it)
ARMS = (*RUN_ARMS, "labels")
PARTS = ("val", "test", "both")


@dataclass
class ForestColumnsConfig:
    """Settings of ``python -m bench.forest_columns``."""

    datasets: list[str] = field(default_factory=list)
    data_dir: str = "../shared/data"
    seeds: str = "0"
    out: str = "runs/forest_columns"
    arm: str = "local"  # the runs' own --forest-columns: gcad_dist.train's default (since session 90)
    arms: list[str] = field(default_factory=lambda: ["none", "local"])  # the two compared, the first the reference
    part: str = "both"
    threads: int = 1
    epochs: int | None = None  # None: gcad_dist.train's default cap
    verbose: bool = False


def _metrics(d: dict[str, Any]) -> dict[str, float]:
    return {k: float(d[k]) for k in ("auroc", "auprc")}


def both_arms(real: Callable[..., Any], sink: list[dict[str, Any]], run_arm: str = "local",
              arms: tuple[str, ...] = ("none", "local")) -> Callable[..., Any]:
    """A stand-in for ``add_forest_view`` (``real``) that finishes the fit under each of ``arms`` (:data:`ARMS`; the
    run's own ``run_arm`` among them), appends their metrics to ``sink`` and returns ``run_arm``'s outcome, so that
    the run goes on as that setting would."""
    if run_arm not in arms:
        raise ValueError(f"the run's arm {run_arm!r} is not among {arms}")

    def add_forest_view(res: Any, model: Any, data: Any, split: Any, seed: int, **kw: Any) -> Any:
        kw.pop("local", None)
        kw.pop("labels", None)
        out, kept = {}, None
        for arm in arms:
            r, m, rec = real(res, model, data, split, seed, local=arm != "none", labels=arm == "labels", **kw)
            out[arm] = {"val": _metrics(r.val), "test": _metrics(r.test), "joined": bool(rec.get("kept")),
                        "choice": rec.get("choice"), "forest_val_auroc": rec.get("forest_val_auroc")}
            if arm == run_arm:
                kept = (r, m, rec)
        sink.append(out)
        return kept

    return add_forest_view


def run_one(cfg: ForestColumnsConfig, dataset: str, seed: int) -> dict[str, Any]:
    """One default ``gcad_dist.train`` run of ``dataset`` at ``seed``, its forest view finished under both arms."""
    from bench.study import train_with_forest_view

    sink: list[dict[str, Any]] = []
    metrics = train_with_forest_view(cfg.data_dir, dataset, seed, cfg.out, cfg.threads, cfg.epochs,
                                     lambda real: both_arms(real, sink, cfg.arm, tuple(cfg.arms)),
                                     ["--forest-columns", cfg.arm])
    rec: dict[str, Any] = {"dataset": dataset, "seed": seed, "run_arm": cfg.arm,
                           "pretrained": bool((metrics.get("pretraining") or {}).get("used")),
                           "run": {"val": _metrics(metrics["val"]), "test": _metrics(metrics["test"])}}
    if sink:
        rec.update(sink[-1])
    else:  # no forest view in this run (e.g. many small graphs): both arms are the run
        for arm in cfg.arms:
            rec[arm] = {**rec["run"], "joined": False, "choice": None, "forest_val_auroc": None}
    return rec


def table(records: list[dict[str, Any]], part: str, arms: tuple[str, str] = ("none", "local")) -> str:
    """One Markdown row per dataset: both ``arms``' means over its seeds, the paired change (the second against the
    first), on how many seeds each arm's trees joined; then the mean change over the datasets (each dataset weighted
    alike) and the worst."""
    from bench.study import paired_table

    a, b = arms
    missing = sorted({f"{r['dataset']}-s{r['seed']}" for r in records if a not in r or b not in r})
    if missing:
        raise UsageError(f"--arms {a} {b}: the stored records {', '.join(missing)} lack an arm (another --out, or "
                         "delete them to re-run)")
    joined = (f"joined {a} / {b}", lambda rs: f"{sum(r[a]['joined'] for r in rs)} / "
              f"{sum(r[b]['joined'] for r in rs)} of {len(rs)}")
    return paired_table(records, arms, lambda r, arm: [r[arm][part]["auroc"], r[arm][part]["auprc"]], part,
                        after=[joined])


def build_parser() -> ArgumentParser:
    d = ForestColumnsConfig()
    p = ArgumentParser(prog="python -m bench.forest_columns", description=__doc__.split("\n\n")[0])
    p.add_argument("--datasets", nargs="+", required=True, help="graph names: DATA_DIR/<name>.npz")
    p.add_argument("--data-dir", default=d.data_dir, help="folder of the graphs (default: %(default)s)")
    p.add_argument("--seeds", default=d.seeds, help="comma-separated seeds, each also the stored split's index modulo "
                   "their count (default: %(default)s)")
    p.add_argument("--out", default=d.out, help="one JSON per (dataset, seed) here, and the runs' folders under runs/; "
                   "existing JSONs are reused (default: %(default)s)")
    p.add_argument("--arm", default=d.arm, choices=RUN_ARMS, help="the --forest-columns the runs themselves use (their "
                   "checkpoints and metrics.json), one of --arms; the other arm is measured beside it "
                   "(default: %(default)s)")
    p.add_argument("--arms", nargs=2, default=d.arms, choices=ARMS, metavar="ARM",
                   help=f"the two trees' inputs compared ({', '.join(ARMS)}; labels is measured only, not a "
                   "--forest-columns value), the second against the first "
                   "(default: %(default)s)")
    p.add_argument("--part", default=d.part, choices=PARTS, help="which table to print: val (test labels unread in the "
                   "printout), test or both (default: %(default)s)")
    p.add_argument("--epochs", type=int, default=d.epochs,
                   help="the fits' epoch cap (default: gcad_dist.train's; smaller only for quick checks)")
    p.add_argument("--threads", type=int, default=d.threads, help="torch threads of each run (default: %(default)s)")
    p.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    return p


def main(argv: list[str] | None = None) -> int:
    from bench.study import parse_seeds, run_study

    cfg = ForestColumnsConfig(**vars(build_parser().parse_args(argv)))
    if cfg.arms[0] == cfg.arms[1] or cfg.arm not in cfg.arms:
        raise UsageError(f"--arms: two different values, --arm ({cfg.arm}) one of them; got {' '.join(cfg.arms)}")
    seeds = parse_seeds(cfg.seeds)
    setup_logging(cfg.verbose)
    records = run_study(cfg.out, cfg.datasets, seeds, lambda ds, seed: run_one(cfg, ds, seed), desc="forest_columns")
    for part in ("val", "test") if cfg.part == "both" else (cfg.part,):
        print(table(records, part, tuple(cfg.arms)))
    return 0


if __name__ == "__main__":
    run_cli(main)
