"""Fine-tuning's keep rule with few validation anomalies, replayed both ways: every candidate averaged, or those at or
below chance dropped. ``python -m bench.few_anomalies``.

With 1-9 validation anomalies the keep rule's bootstrap cannot drop a candidate, so before session 76
``gcad_dist.finetune`` averaged all of them alike; on books at 10% two candidates at chance diluted the scratch model.
``--few-anomalies above-chance`` (:func:`gcad_dist.train.keep_candidates`' ``few``) drops from that average each
candidate whose validation AUROC is at or below 0.5. The fits do not depend on that rule, so for every fine-tuning run
of a ``bench.pretrain_transfer`` folder (``OUT/<dataset>/ft<fraction>-s<seed>``, run with ``--candidate-scores``) this
replays the product's own ``keep_candidates`` on ``candidate_scores.npz`` with the run's settings (``--keep-rule``,
``--candidate-weights``, ``--rejoin`` from its ``metrics.json``), once with ``few="average"`` and once with
``few="above-chance"``, combines the kept candidates as :func:`gcad_dist.train.combine_candidates` does, and prints the
AUROC / AUPRC of both on the runs' test nodes (``--part val``: validation, where the rule chose). ``reproduced``
checks the replay of the run's own setting against its ``metrics.json``. Runs with 10 validation anomalies or more
are the same both ways by construction (the table says how many changed).
"""

from __future__ import annotations

import json
import logging
import re
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Callable

import numpy as np

from gcad_dist.cli import ArgumentParser, UsageError, run_cli, setup_logging

log = logging.getLogger("bench.few_anomalies")

RUN_DIR = re.compile(r"ft(?P<fraction>[0-9.e-]+)-s(?P<seed>\d+)$")
#: ``bench.train_rejoin --scores-dir``'s files
CONTRAST_FILE = re.compile(r"^(?P<dataset>.+)-s(?P<seed>\d+)\.npz$")
#: the arms compared by default (old, new), as ``gcad_dist.train.keep_candidates``' ``few``
ARMS = ("average", "above-chance")


@dataclass
class FewAnomaliesConfig:
    """``bench.few_anomalies``' settings."""

    runs: list[str] = field(default_factory=list)  # bench.pretrain_transfer --out folders
    arms: tuple[str, str] = ARMS  # (old, new): two of gcad_dist.train.FEW_VALIDATION_MODES
    contrasts: bool = False  # runs are bench.train_rejoin --scores-dir folders: gcad_dist.train's contrast rule
    part: str = "test"  # the nodes measured: test or val
    verbose: bool = False


def replayed_blend(names: list[str], scores: Any, judged: Any, y: np.ndarray, val: np.ndarray, seed: int,
                   **keep: Any) -> tuple[np.ndarray, str]:
    """The product's model-level choice replayed on stored candidate scores: :func:`gcad_dist.train.keep_candidates`
    (``**keep``) on the validation nodes ``val``, judged by ``judged`` (cross-fitted scores), and the kept candidates'
    weighted mean of standardised ``scores`` (:func:`gcad_dist.train.combine_candidates`' score); and the kept names."""
    from gcad_dist.model.candidate_ensemble import standardised_mean
    from gcad_dist.train import keep_candidates, selection_weights

    fits = [(SimpleNamespace(scores=s, selection_scores=t, best_epoch=0, val={}, test={}), None, None)
            for s, t in zip(scores, judged)]
    kept, record = keep_candidates(fits, y, val, seed=seed, names=names, **keep)
    blend, _ = standardised_mean([scores[i] for i in kept], selection_weights(record))
    return blend, record["chosen"]


def _arms(z: Any, seed: int, part: str, **keep: Any) -> dict[str, Any]:
    """Every ``FEW_VALIDATION_MODES`` mode's kept candidates and the AUROC / AUPRC of their blend on ``part``'s nodes,
    from a candidate-scores file ``z`` (``gcad_dist.finetune.write_candidate_scores``' format), chosen by
    ``keep_candidates(**keep)`` on its validation nodes (:func:`replayed_blend`); also the blends' test AUROC
    (``"test_auroc"``)."""
    from gcad_dist.metrics import auprc, auroc
    from gcad_dist.train import FEW_VALIDATION_MODES

    names, y = [str(n) for n in z["names"]], np.asarray(z["y"])
    scores = np.asarray(z["scores"], dtype=np.float64)
    judged = np.asarray(z["selection_scores"], dtype=np.float64) if "selection_scores" in z.files else scores
    val, measured = z["val"].astype(bool), z[part].astype(bool) & (y >= 0)
    test = z["test"].astype(bool) & (y >= 0)
    out: dict[str, Any] = {"val_anomalies": int((y[val] == 1).sum())}
    for arm in FEW_VALIDATION_MODES:
        blend, kept = replayed_blend(names, scores, judged, y, val, seed, few=arm, **keep)
        out[arm] = {"kept": kept, "test_auroc": auroc(y[test], blend[test]),
                    "metrics": (auroc(y[measured], blend[measured]), auprc(y[measured], blend[measured]))}
    return out


def replay(run: Path, part: str = "test") -> dict[str, Any]:
    """One fine-tuning run's model-level choice replayed with each ``FEW_VALIDATION_MODES`` mode (:func:`_arms`, with
    the run's ``--keep-rule``, ``--candidate-weights`` and ``--rejoin``), and whether the run's own mode reproduces its
    ``metrics.json`` test AUROC."""
    config = json.loads((run / "metrics.json").read_text())
    cfg = config.get("config", {})
    arms = _arms(np.load(run / "candidate_scores.npz", allow_pickle=True), int(RUN_DIR.search(run.name).group("seed")),
                 part, cross_fitted=cfg.get("keep_rule", "cross-fitted") == "cross-fitted",
                 weighting=cfg.get("candidate_weights", "lift"), rejoin=bool(cfg.get("rejoin", True)))
    out = {"run": run.name, **arms}
    own = out[cfg.get("few_anomalies", "average")]
    out["reproduced"] = bool(abs(own["test_auroc"] - config["test"]["auroc"]) < 1e-6)
    return out


def replay_contrasts(scores: Path, part: str = "test") -> dict[str, Any]:
    """``gcad_dist.train``'s contrast-level choice replayed with each mode (:func:`_arms`, its keep rule's settings:
    plain scores, alike, no rejoin) from ``bench.train_rejoin --scores-dir``'s ``<dataset>-s<seed>.npz``. Where the
    study's record ``<dataset>-s<seed>.json`` lies beside it (``--scores-dir`` = ``--out``), ``reproduced`` checks the
    ``average`` mode against its ``old`` arm (the forest view, which joins only from 10 validation anomalies, must not
    have)."""
    seed = int(CONTRAST_FILE.search(scores.name).group("seed"))
    out = {"run": scores.stem, **_arms(np.load(scores, allow_pickle=True), seed, part)}
    record = scores.with_suffix(".json")
    if record.is_file():
        old = json.loads(record.read_text())["old"]
        out["reproduced"] = bool(not old.get("forest_view")
                                 and abs(out["average"]["test_auroc"] - old["test"]["auroc"]) < 1e-6)
    return out


def study(cfg: FewAnomaliesConfig) -> dict[str, list[dict[str, Any]]]:
    """Every fine-tuning run under ``cfg.runs`` replayed (:func:`replay`), by "<dataset> <label fraction>"."""
    rows: dict[str, list[dict[str, Any]]] = {}
    for root in map(Path, cfg.runs):
        if not root.is_dir():
            raise UsageError(f"{root}: no such folder")
        if cfg.contrasts:
            files = sorted(p for p in root.glob("*-s*.npz") if CONTRAST_FILE.search(p.name))
            if not files:
                raise UsageError(f"{root}: no <dataset>-s<seed>.npz (bench.train_rejoin --scores-dir)")
            for f in files:
                rows.setdefault(CONTRAST_FILE.search(f.name).group("dataset"), []).append(replay_contrasts(f, cfg.part))
            continue
        for run in fine_tuning_runs(root):
            rows.setdefault(run_key(run), []).append(replay(run, cfg.part))
    return rows


@dataclass
class StoredRun:
    """A ``bench.pretrain_transfer --candidate-scores`` fine-tuning run as the replays read it (:meth:`load`): its
    ``metrics.json``, candidates, scores and cross-fitted selection scores (``judged``; lists, to be swapped in place),
    labels, masks (``val``; ``test`` and ``measured``, the labelled nodes of the part measured) and the keep rule's
    settings as the run chose (``keep``, with the few-anomaly mode overridable)."""

    metrics: dict[str, Any]
    names: list[str]
    scores: list[np.ndarray]
    judged: list[np.ndarray]
    y: np.ndarray
    masks: dict[str, np.ndarray]  # the split's train / val / test masks as stored
    val: np.ndarray
    test: np.ndarray
    measured: np.ndarray
    seed: int
    keep: dict[str, Any]

    @classmethod
    def load(cls, run: Path, part: str = "test", few_anomalies: str | None = None) -> "StoredRun":
        cfg = (metrics := json.loads((run / "metrics.json").read_text()))["config"]
        z = np.load(run / "candidate_scores.npz", allow_pickle=True)
        y = np.asarray(z["y"])
        masks = {k: z[k].astype(bool) for k in ("train", "val", "test")}
        return cls(metrics=metrics, names=[str(n) for n in z["names"]], scores=[np.asarray(s) for s in z["scores"]],
                   judged=[np.asarray(s) for s in (z["selection_scores"] if "selection_scores" in z.files
                                                   else z["scores"])],
                   y=y, masks=masks, val=masks["val"], test=masks["test"] & (y >= 0),
                   measured=z[part].astype(bool) & (y >= 0), seed=int(RUN_DIR.search(run.name).group("seed")),
                   keep={"cross_fitted": cfg.get("keep_rule", "cross-fitted") == "cross-fitted",
                         "weighting": cfg.get("candidate_weights", "lift"), "rejoin": bool(cfg.get("rejoin", True)),
                         "few": few_anomalies or cfg.get("few_anomalies", "average")})

    def blend(self, names: list[str] | None = None, scores: list[np.ndarray] | None = None,
              judged: list[np.ndarray] | None = None) -> tuple[tuple[float, float], str, np.ndarray]:
        """The product's choice replayed (:func:`replayed_blend`) on the run's candidates (or those given): the blend's
        (AUROC, AUPRC) on the measured nodes, the kept names and the blend."""
        from gcad_dist.metrics import auprc, auroc

        blend, kept = replayed_blend(names or self.names, self.scores if scores is None else scores,
                                     self.judged if judged is None else judged, self.y, self.val, self.seed,
                                     **self.keep)
        m = self.measured
        return (auroc(self.y[m], blend[m]), auprc(self.y[m], blend[m])), kept, blend

    def old_arm(self, name: str) -> dict[str, Any]:
        """The record of the run's own candidates replayed: ``run``, ``val_anomalies``, ``old``, ``old_kept`` and
        ``reproduced`` (the replay's test AUROC equals the run's ``metrics.json`` to 1e-6)."""
        from gcad_dist.metrics import auroc

        out: dict[str, Any] = {"run": name, "val_anomalies": int((self.y[self.val] == 1).sum())}
        out["old"], out["old_kept"], blend = self.blend()
        out["reproduced"] = bool(abs(auroc(self.y[self.test], blend[self.test]) - self.metrics["test"]["auroc"]) < 1e-6)
        return out


@dataclass
class ReplayConfig:
    """The settings every replay of stored fine-tuning runs shares (``bench.checkpoint_views``, ``bench.exemplar``)."""

    runs: list[str] = field(default_factory=list)  # bench.pretrain_transfer --out folders (--candidate-scores)
    part: str = "test"  # the nodes measured: test or val
    few_anomalies: str | None = None  # the keep rule's few-anomaly mode; None: each run's own (its metrics.json)
    verbose: bool = False


def add_replay_options(p: ArgumentParser) -> None:
    """:class:`ReplayConfig`'s command-line options."""
    from gcad_dist.train import FEW_VALIDATION_MODES

    p.add_argument("runs", nargs="+", help="bench.pretrain_transfer --out folders (fine-tuning with --candidate-scores)")
    p.add_argument("--part", default=ReplayConfig.part, choices=("test", "val"),
                   help="the nodes measured: test, or val (where the keep rule chose: optimistic, for a guard only)")
    p.add_argument("--few-anomalies", default=None, choices=FEW_VALIDATION_MODES,
                   help="the keep rule's mode with 1-9 validation anomalies (default: each run's own, from its "
                   "metrics.json; set it to replay runs made before a later default)")
    p.add_argument("-v", "--verbose", action="store_true")


def replay_runs(roots: list[str], replay: Callable[[Path], dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """``replay`` of every fine-tuning run under the ``roots`` (:func:`fine_tuning_runs`), by "<dataset> <label
    fraction>" (:func:`run_key`); a usage error for a folder that is not there."""
    rows: dict[str, list[dict[str, Any]]] = {}
    for root in map(Path, roots):
        if not root.is_dir():
            raise UsageError(f"{root}: no such folder")
        for run in fine_tuning_runs(root):
            rows.setdefault(run_key(run), []).append(replay(run))
    return rows


def quiet_replay_logs(verbose: bool) -> None:
    """Unless ``verbose``: the product's loggers that speak once per replayed run (keep_candidates' warnings, the
    views, the graph loader) to errors only."""
    if not verbose:
        for name in ("gcad_dist.train", "gcad_dist.finetune", "partitioning.io"):
            logging.getLogger(name).setLevel(logging.ERROR)


def fine_tuning_runs(root: Path) -> list[Path]:
    """The fine-tuning runs of a ``bench.pretrain_transfer --candidate-scores`` folder (``root/<dataset>/ft<fraction>-
    s<seed>`` with ``candidate_scores.npz`` and ``metrics.json``); a usage error where there is none."""
    found = sorted(p for p in root.glob("*/ft*-s*") if RUN_DIR.search(p.name)
                   and (p / "candidate_scores.npz").is_file() and (p / "metrics.json").is_file())
    if not found:
        raise UsageError(f"{root}: no fine-tuning run with candidate_scores.npz (bench.pretrain_transfer "
                         "--candidate-scores)")
    return found


def run_key(run: Path) -> str:
    """A fine-tuning run's table row: "<dataset> <label fraction>"."""
    return f"{run.parent.name} {RUN_DIR.search(run.name).group('fraction')}"


def paired_table(rows: dict[str, list[dict[str, Any]]], part: str, arms: tuple[str, str],
                 last: tuple[str, Callable[[list[dict[str, Any]]], str]]) -> str:
    """Markdown for a replay of two arms on the same fits (each record: ``old`` and ``new`` (AUROC, AUPRC),
    ``val_anomalies``, ``reproduced``): one row per dataset and label fraction, both arms' means, the change, the runs
    ahead / level / behind in AUROC and a last column (``last``: its header and its cell from a row's records); then
    the mean change over the rows and the worst row."""
    lines = [f"| graph, labels | runs | validation anomalies | reproduced | {arms[0]} ({part} AUROC / AUPRC) | "
             f"{arms[1]} | change | ahead / level / behind | {last[0]} |", "|---|---|---|---|---|---|---|---|---|"]
    changes = []
    for key, recs in rows.items():
        a, b = np.mean([r["old"] for r in recs], axis=0), np.mean([r["new"] for r in recs], axis=0)
        d = [r["new"][0] - r["old"][0] for r in recs]
        ahead, behind = sum(x > 1e-9 for x in d), sum(x < -1e-9 for x in d)
        changes.append(b - a)
        lines.append(f"| {key} | {len(recs)} | {','.join(str(r['val_anomalies']) for r in recs)} | "
                     f"{sum(r['reproduced'] for r in recs)}/{len(recs)} | {a[0]:.3f} / {a[1]:.3f} | "
                     f"{b[0]:.3f} / {b[1]:.3f} | {b[0] - a[0]:+.4f} / {b[1] - a[1]:+.4f} | "
                     f"{ahead} / {len(recs) - ahead - behind} / {behind} | {last[1](recs)} |")
    c = np.array(changes)
    lines.append(f"\nmean change over {len(c)} rows: {c[:, 0].mean():+.4f} AUROC / {c[:, 1].mean():+.4f} AUPRC; "
                 f"worst row {c[:, 0].min():+.4f} AUROC")
    return "\n".join(lines)


def table(rows: dict[str, list[dict[str, Any]]], part: str = "test", arms: tuple[str, str] = ARMS) -> str:
    """Markdown: one row per dataset and label fraction, both arms' mean AUROC / AUPRC, the change, the runs ahead /
    level / behind in AUROC and the kept sets of the new arm; then the mean change over the rows and the worst row
    (:func:`paired_table`)."""
    old, new = arms
    paired = {key: [{"old": r[old]["metrics"], "new": r[new]["metrics"], "val_anomalies": r["val_anomalies"],
                     "reproduced": r.get("reproduced", False), "kept": r[new]["kept"]} for r in recs]
              for key, recs in rows.items()}
    return paired_table(paired, part, arms, (f"kept by {new}", lambda recs: "; ".join(r["kept"] for r in recs)))


def build_parser() -> ArgumentParser:
    d = FewAnomaliesConfig()
    p = ArgumentParser(prog="python -m bench.few_anomalies", description=__doc__.split("\n\n")[0])
    p.add_argument("runs", nargs="+",
                   help="bench.pretrain_transfer --out folders (fine-tuning with --candidate-scores)")
    p.add_argument("--arms", nargs=2, default=list(d.arms), metavar=("OLD", "NEW"),
                   help="the two --few-anomalies modes compared (default: %(default)s)")
    p.add_argument("--contrasts", action="store_true",
                   help="RUNS are bench.train_rejoin --scores-dir folders (<dataset>-s<seed>.npz, with the study's "
                   "<dataset>-s<seed>.json copied beside them to check the replay): replay gcad_dist.train's contrast "
                   "keep rule instead of fine-tuning's")
    p.add_argument("--part", default=d.part, choices=("test", "val"),
                   help="the nodes measured: test, or val (where the rule chose: optimistic, for a guard only)")
    p.add_argument("-v", "--verbose", action="store_true")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from gcad_dist.train import FEW_VALIDATION_MODES

    bad = [a for a in args.arms if a not in FEW_VALIDATION_MODES]
    if bad:
        raise UsageError(f"--arms: unknown mode {bad[0]!r} (choose from {', '.join(FEW_VALIDATION_MODES)})")
    cfg = FewAnomaliesConfig(runs=args.runs, arms=tuple(args.arms), contrasts=args.contrasts, part=args.part,
                             verbose=args.verbose)
    setup_logging(cfg.verbose)
    if not cfg.verbose:  # keep_candidates warns once per replayed choice
        logging.getLogger("gcad_dist.train").setLevel(logging.ERROR)
    print(table(study(cfg), cfg.part, cfg.arms))
    return 0


if __name__ == "__main__":
    run_cli(main)
