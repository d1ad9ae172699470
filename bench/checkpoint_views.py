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

import logging
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np

from gcad_dist.cli import ArgumentParser, UsageError, run_cli, setup_logging

from bench.few_anomalies import (ReplayConfig, StoredRun, add_replay_options, paired_table, quiet_replay_logs,
                                 replay_runs)

log = logging.getLogger("bench.checkpoint_views")


@dataclass
class CheckpointViewsConfig(ReplayConfig):
    """``bench.checkpoint_views``' settings (:class:`bench.few_anomalies.ReplayConfig`'s)."""


def viewed_candidates(metrics: dict[str, Any], names: list[str], scores: list[np.ndarray], judged: list[np.ndarray],
                      y: np.ndarray, val: np.ndarray, test: np.ndarray) -> dict[str, bool] | None:
    """The stored checkpoint candidate of a run made without ``--checkpoint-views`` (``metrics``: its metrics.json)
    passed through the product's :func:`gcad_dist.finetune.viewed_fit` in place (``scores`` and ``judged``, its
    cross-fitted selection scores): the views the run's checkpoint records, on the run's graph as fine-tuning prepared
    it. Returns which views joined, or None where there is no checkpoint candidate or its checkpoint records no view
    (nothing changed)."""
    import torch

    from gcad_dist.finetune import viewed_fit
    from gcad_dist.label_free_views import recorded_views
    from gcad_dist.metrics import evaluate
    from gcad_dist.score import load_checkpoint_model, prepare_data
    from gcad_dist.supervised import FitResult
    from partitioning.io import load_graph

    cfg = metrics["config"]
    if "checkpoint" not in names:
        return None
    loaded = load_checkpoint_model(cfg["checkpoint"])
    views = recorded_views(loaded.model)
    if not any(views.values()):
        return None
    graph = load_graph(cfg["graph"])
    data = prepare_data(graph, loaded, metrics["normalize"], source=cfg["graph"])
    raw_x = np.asarray(graph.x, dtype=np.float32)
    i = names.index("checkpoint")
    split = SimpleNamespace(val=torch.from_numpy(val), test=torch.from_numpy(test))
    res = FitResult(best_epoch=0, val=evaluate(y, scores[i], None, val), test=evaluate(y, scores[i], None, test),
                    history={}, state_dict={}, scores=scores[i], epochs_run=0, seconds=0.0, device="cpu",
                    selection_scores=judged[i])
    viewed, record = viewed_fit(res, raw_x, data, views, y, None, split)
    scores[i], judged[i] = viewed.scores, viewed.selection_scores
    return {k: bool(v and v.get("used")) for k, v in record.items() if k != "bare"}


def replay(run: Path, part: str = "test", few_anomalies: str | None = None) -> dict[str, Any]:
    """One fine-tuning run replayed with its checkpoint candidate bare (old) and viewed (new); module doc.
    ``few_anomalies``: the keep rule's mode below 10 validation anomalies instead of the run's own (for runs made
    before a later default; ``reproduced`` then compares with a run that chose otherwise)."""
    r = StoredRun.load(run, part, few_anomalies)
    if r.metrics["config"].get("checkpoint_views"):
        raise UsageError(f"{run}: fine-tuned with --checkpoint-views; the replay needs the bare candidate")
    out = r.old_arm(run.name)
    out["views"] = viewed_candidates(r.metrics, r.names, r.scores, r.judged, r.y, r.val, r.test)
    if out["views"] is None:
        out.update(new=out["old"], new_kept=out["old_kept"])
        return out
    out["new"], out["new_kept"], _ = r.blend()
    return out


def study(cfg: CheckpointViewsConfig) -> dict[str, list[dict[str, Any]]]:
    """Every fine-tuning run under ``cfg.runs`` replayed (:func:`replay`), by "<dataset> <label fraction>"."""
    return replay_runs(cfg.runs, lambda run: replay(run, cfg.part, cfg.few_anomalies))


def table(rows: dict[str, list[dict[str, Any]]], part: str = "test") -> str:
    """Markdown: one row per dataset and label fraction, both arms' mean AUROC / AUPRC, the change, the runs ahead /
    level / behind in AUROC, where the views joined; then the mean change over the rows and the worst row."""
    def joined(recs: list[dict[str, Any]]) -> str:
        views = [r["views"] for r in recs if r.get("views")]
        return (f"{sum(v.get('feature_view', False) for v in views)}, "
                f"{sum(v.get('signature_view', False) for v in views)} of {len(recs)}")

    return paired_table(rows, part, ("bare", "viewed"), ("views joined (feature, signature)", joined))


def build_parser() -> ArgumentParser:
    p = ArgumentParser(prog="python -m bench.checkpoint_views", description=__doc__.split("\n\n")[0])
    add_replay_options(p)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    cfg = CheckpointViewsConfig(runs=args.runs, part=args.part, few_anomalies=args.few_anomalies, verbose=args.verbose)
    setup_logging(cfg.verbose)
    quiet_replay_logs(cfg.verbose)
    print(table(study(cfg), cfg.part))
    return 0


if __name__ == "__main__":
    run_cli(main)
