"""Fine-tuning's checkpoint candidate with and without the checkpoint's label-free views, replayed from one set of
fits. ``python -m bench.checkpoint_views RUNS ...``.

Since session 73 fine-tuning's zero-shot candidate is the pre-trained checkpoint as ``gcad_dist.score`` scores it:
its contrast plus the label-free views the checkpoint records (the feature view's isolation forest, the signature
view). The fine-tuned checkpoint candidate kept its bare contrast, and with a training anomaly or two it often ranked
the anomalies far below the zero-shot one where the views carry the score. ``gcad_dist.finetune --checkpoint-views``
(session 77) scores it with the same views. The fits do not depend on that, so for every fine-tuning run of a
``bench.pretrain_transfer`` folder (``OUT/<dataset>/ft<fraction>-s<seed>``, run with ``--candidate-scores`` and
without ``--checkpoint-views``) this passes the stored checkpoint candidate's scores and cross-fitted selection scores
through the product's :func:`gcad_dist.finetune.viewed_fit` (the views the run's checkpoint records, on the run's
graph as fine-tuning prepared it), replays the product's :func:`gcad_dist.train.keep_candidates` with the run's
settings on both versions, combines the kept candidates as :func:`gcad_dist.train.combine_candidates` does, and prints
both arms' AUROC / AUPRC on the test nodes (``--part val``: validation, where the keep rule chose). ``reproduced``
checks the old arm against the run's ``metrics.json`` (a run whose forest view joined is not replayed by this and
shows as not reproduced).
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np

from gcad_dist.cli import ArgumentParser, UsageError, run_cli, setup_logging

from bench.few_anomalies import RUN_DIR, fine_tuning_runs, replayed_blend, run_key
from gcad_dist.train import FEW_VALIDATION_MODES

log = logging.getLogger("bench.checkpoint_views")


@dataclass
class CheckpointViewsConfig:
    """``bench.checkpoint_views``' settings."""

    runs: list[str] = field(default_factory=list)  # bench.pretrain_transfer --out folders (--candidate-scores)
    part: str = "test"  # the nodes measured: test or val
    few_anomalies: str | None = None  # the keep rule's few-anomaly mode; None: each run's own (its metrics.json)
    verbose: bool = False


def replay(run: Path, part: str = "test", few_anomalies: str | None = None) -> dict[str, Any]:
    """One fine-tuning run replayed with its checkpoint candidate bare (old) and viewed (new); module doc.
    ``few_anomalies``: the keep rule's mode below 10 validation anomalies instead of the run's own (for runs made
    before a later default; ``reproduced`` then compares with a run that chose otherwise)."""
    import torch

    from gcad_dist.finetune import viewed_fit
    from gcad_dist.label_free_views import recorded_views
    from gcad_dist.metrics import auprc, auroc, evaluate
    from gcad_dist.score import load_checkpoint_model, prepare_data
    from gcad_dist.supervised import FitResult
    from partitioning.io import load_graph

    metrics = json.loads((run / "metrics.json").read_text())
    cfg = metrics["config"]
    if cfg.get("checkpoint_views"):
        raise UsageError(f"{run}: fine-tuned with --checkpoint-views; the replay needs the bare candidate")
    z = np.load(run / "candidate_scores.npz", allow_pickle=True)
    names, y = [str(n) for n in z["names"]], np.asarray(z["y"])
    scores = [np.asarray(s) for s in z["scores"]]
    judged = [np.asarray(s) for s in (z["selection_scores"] if "selection_scores" in z.files else z["scores"])]
    val, measured = z["val"].astype(bool), z[part].astype(bool) & (y >= 0)
    seed = int(RUN_DIR.search(run.name).group("seed"))
    keep = {"cross_fitted": cfg.get("keep_rule", "cross-fitted") == "cross-fitted",
            "weighting": cfg.get("candidate_weights", "lift"), "rejoin": bool(cfg.get("rejoin", True)),
            "few": few_anomalies or cfg.get("few_anomalies", "average")}
    out: dict[str, Any] = {"run": run.name, "val_anomalies": int((y[val] == 1).sum())}
    old, out["old_kept"] = replayed_blend(names, scores, judged, y, val, seed, **keep)
    out["old"] = (auroc(y[measured], old[measured]), auprc(y[measured], old[measured]))
    test = z["test"].astype(bool) & (y >= 0)
    out["reproduced"] = bool(abs(auroc(y[test], old[test]) - metrics["test"]["auroc"]) < 1e-6)
    if "checkpoint" not in names:
        out.update(new=out["old"], new_kept=out["old_kept"], views=None)
        return out
    loaded = load_checkpoint_model(cfg["checkpoint"])
    views = recorded_views(loaded.model)
    if not any(views.values()):
        out.update(new=out["old"], new_kept=out["old_kept"], views=views)
        return out
    graph = load_graph(cfg["graph"])
    data = prepare_data(graph, loaded, metrics["normalize"], source=cfg["graph"])
    raw_x = np.asarray(graph.x, dtype=np.float32)
    i = names.index("checkpoint")
    split = SimpleNamespace(val=torch.from_numpy(val), test=torch.from_numpy(z["test"].astype(bool)))
    res = FitResult(best_epoch=0, val=evaluate(y, scores[i], None, val), test=evaluate(y, scores[i], None, test),
                    history={}, state_dict={}, scores=scores[i], epochs_run=0, seconds=0.0, device="cpu",
                    selection_scores=judged[i])
    viewed, record = viewed_fit(res, raw_x, data, views, y, None, split)
    scores[i], judged[i] = viewed.scores, viewed.selection_scores
    new, out["new_kept"] = replayed_blend(names, scores, judged, y, val, seed, **keep)
    out["new"] = (auroc(y[measured], new[measured]), auprc(y[measured], new[measured]))
    out["views"] = {k: bool(v and v.get("used")) for k, v in record.items() if k != "bare"}
    return out


def study(cfg: CheckpointViewsConfig) -> dict[str, list[dict[str, Any]]]:
    """Every fine-tuning run under ``cfg.runs`` replayed (:func:`replay`), by "<dataset> <label fraction>"."""
    rows: dict[str, list[dict[str, Any]]] = {}
    for root in map(Path, cfg.runs):
        if not root.is_dir():
            raise UsageError(f"{root}: no such folder")
        for run in fine_tuning_runs(root):
            rows.setdefault(run_key(run), []).append(replay(run, cfg.part, cfg.few_anomalies))
    return rows


def table(rows: dict[str, list[dict[str, Any]]], part: str = "test") -> str:
    """Markdown: one row per dataset and label fraction, both arms' mean AUROC / AUPRC, the change, the runs ahead /
    level / behind in AUROC, where the views joined; then the mean change over the rows and the worst row."""
    lines = [f"| graph, labels | runs | validation anomalies | reproduced | bare ({part} AUROC / AUPRC) | viewed | "
             "change | ahead / level / behind | views joined (feature, signature) |", "|---|---|---|---|---|---|---|---|---|"]
    changes = []
    for key, recs in rows.items():
        a, b = np.mean([r["old"] for r in recs], axis=0), np.mean([r["new"] for r in recs], axis=0)
        d = [r["new"][0] - r["old"][0] for r in recs]
        ahead, behind = sum(x > 1e-9 for x in d), sum(x < -1e-9 for x in d)
        changes.append(b - a)
        joined = [r["views"] for r in recs if r.get("views")]
        lines.append(f"| {key} | {len(recs)} | {','.join(str(r['val_anomalies']) for r in recs)} | "
                     f"{sum(r['reproduced'] for r in recs)}/{len(recs)} | {a[0]:.3f} / {a[1]:.3f} | "
                     f"{b[0]:.3f} / {b[1]:.3f} | {b[0] - a[0]:+.4f} / {b[1] - a[1]:+.4f} | "
                     f"{ahead} / {len(recs) - ahead - behind} / {behind} | "
                     f"{sum(v.get('feature_view', False) for v in joined)}, "
                     f"{sum(v.get('signature_view', False) for v in joined)} of {len(recs)} |")
    c = np.array(changes)
    lines.append(f"\nmean change over {len(c)} rows: {c[:, 0].mean():+.4f} AUROC / {c[:, 1].mean():+.4f} AUPRC; "
                 f"worst row {c[:, 0].min():+.4f} AUROC")
    return "\n".join(lines)


def build_parser() -> ArgumentParser:
    d = CheckpointViewsConfig()
    p = ArgumentParser(prog="python -m bench.checkpoint_views", description=__doc__.split("\n\n")[0])
    p.add_argument("runs", nargs="+", help="bench.pretrain_transfer --out folders (fine-tuning with --candidate-scores)")
    p.add_argument("--part", default=d.part, choices=("test", "val"),
                   help="the nodes measured: test, or val (where the keep rule chose: optimistic, for a guard only)")
    p.add_argument("--few-anomalies", default=None, choices=FEW_VALIDATION_MODES,
                   help="the keep rule's mode with 1-9 validation anomalies (default: each run's own, from its "
                   "metrics.json; set it to replay runs made before a later default)")
    p.add_argument("-v", "--verbose", action="store_true")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    cfg = CheckpointViewsConfig(runs=args.runs, part=args.part, few_anomalies=args.few_anomalies, verbose=args.verbose)
    setup_logging(cfg.verbose)
    if not cfg.verbose:  # keep_candidates warns once per replayed choice, the views and the loader log each run
        for name in ("gcad_dist.train", "gcad_dist.finetune", "partitioning.io"):
            logging.getLogger(name).setLevel(logging.ERROR)
    print(table(study(cfg), cfg.part))
    return 0


if __name__ == "__main__":
    run_cli(main)
