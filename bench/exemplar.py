"""Fine-tuning's candidates with and without the exemplar candidate, replayed from one set of fits.
``python -m bench.exemplar RUNS ...``.

``gcad_dist.finetune --exemplar auto`` (session 78) offers one more candidate: each node's cosine similarity to the
nearest kept training anomaly on the z-scored raw features (:mod:`gcad_dist.model.exemplar`), where that score ranks
the validation anomalies above chance at one-sided 5%. The fits do not depend on it, so for every fine-tuning run of a
``bench.pretrain_transfer`` folder (``OUT/<dataset>/ft<fraction>-s<seed>``, run with ``--candidate-scores`` and
``--exemplar off`` or before session 78) this builds the candidate with the product's
:func:`gcad_dist.finetune.exemplar_offer` (the run's graph, split and kept training labels: the same
:func:`gcad_dist.data.splits.subsample_split`), replays the product's :func:`gcad_dist.train.keep_candidates` with the
run's settings on the candidates without it (old) and with it where it is offered (new), combines the kept candidates
as :func:`gcad_dist.train.combine_candidates` does, and prints both arms' AUROC / AUPRC on the test nodes (``--part
val``: validation, where the keep rule chose). ``reproduced`` checks the old arm against the run's ``metrics.json`` (a
run whose forest view joined is not replayed by this and shows as not reproduced).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from gcad_dist.cli import ArgumentParser, UsageError, run_cli, setup_logging

from bench.few_anomalies import (ReplayConfig, StoredRun, add_replay_options, paired_table, quiet_replay_logs,
                                 replay_runs)

log = logging.getLogger("bench.exemplar")


@dataclass
class ExemplarConfig(ReplayConfig):
    """``bench.exemplar``'s settings."""

    # a run made without --checkpoint-views gets its checkpoint candidate viewed first, in both arms (session 77's
    # default; bench.checkpoint_views.viewed_candidates)
    checkpoint_views: bool = False


def replay(run: Path, part: str = "test", few_anomalies: str | None = None,
           checkpoint_views: bool = False) -> dict[str, Any]:
    """One fine-tuning run replayed without (old) and with (new) the exemplar candidate; module doc.
    ``few_anomalies``: the keep rule's mode below 10 validation anomalies instead of the run's own, and
    ``checkpoint_views``: the checkpoint candidate of a run made without them viewed in both arms (for runs made
    before a later default; ``reproduced`` then compares with a run that chose otherwise)."""
    import torch

    from gcad_dist.data.splits import Split, subsample_split
    from gcad_dist.finetune import EXEMPLAR, FinetuneConfig, exemplar_offer
    from partitioning.io import load_graph

    r = StoredRun.load(run, part, few_anomalies)
    cfg = r.metrics["config"]
    if EXEMPLAR in r.names:
        raise UsageError(f"{run}: fine-tuned with --exemplar auto; the replay needs the candidates without it")
    views = {}
    if checkpoint_views and not cfg.get("checkpoint_views"):  # both arms with today's checkpoint candidate
        from bench.checkpoint_views import viewed_candidates

        views["views"] = viewed_candidates(r.metrics, r.names, r.scores, r.judged, r.y, r.val, r.test)
    out = {**r.old_arm(run.name), **views}
    split = Split(*(torch.from_numpy(r.masks[k]) for k in ("train", "val", "test")))
    sub, _ = subsample_split(split, torch.from_numpy(r.y), float(cfg["label_fraction"]), seed=int(cfg["seed"]))
    graph = load_graph(cfg["graph"])
    out["offer"], fit = exemplar_offer(FinetuneConfig(checkpoint=cfg["checkpoint"], graph=cfg["graph"],
                                                      exemplar="auto"),
                                       r.names, np.asarray(graph.x, dtype=np.float32), r.y, None, split, sub.train, None)
    if fit is None:
        out.update(new=out["old"], new_kept=out["old_kept"])
        return out
    s = fit[0].scores
    out["new"], out["new_kept"], _ = r.blend([*r.names, EXEMPLAR], [*r.scores, s], [*r.judged, s])
    return out


def study(cfg: ExemplarConfig) -> dict[str, list[dict[str, Any]]]:
    """Every fine-tuning run under ``cfg.runs`` replayed (:func:`replay`), by "<dataset> <label fraction>"."""
    return replay_runs(cfg.runs, lambda run: replay(run, cfg.part, cfg.few_anomalies, cfg.checkpoint_views))


def table(rows: dict[str, list[dict[str, Any]]], part: str = "test") -> str:
    """Markdown: one row per dataset and label fraction, both arms' mean AUROC / AUPRC, the change, the runs ahead /
    level / behind in AUROC, on how many runs the exemplar was offered and kept; then the mean change and the worst
    row."""
    from gcad_dist.finetune import EXEMPLAR

    def offered(recs: list[dict[str, Any]]) -> str:
        kept = sum(EXEMPLAR in str(r["new_kept"]).split(" + ") for r in recs)
        return f"{sum(bool(r['offer']['offered']) for r in recs)}, {kept} of {len(recs)}"

    return paired_table(rows, part, ("without", "with the exemplar"), ("exemplar offered, kept", offered))


def build_parser() -> ArgumentParser:
    p = ArgumentParser(prog="python -m bench.exemplar", description=__doc__.split("\n\n")[0])
    add_replay_options(p)
    p.add_argument("--checkpoint-views", action="store_true",
                   help="runs made without gcad_dist.finetune --checkpoint-views (before session 77): score their "
                   "checkpoint candidate with the checkpoint's label-free views first, in both arms")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    cfg = ExemplarConfig(runs=args.runs, part=args.part, few_anomalies=args.few_anomalies,
                         checkpoint_views=args.checkpoint_views, verbose=args.verbose)
    setup_logging(cfg.verbose)
    quiet_replay_logs(cfg.verbose)
    print(table(study(cfg), cfg.part))
    return 0


if __name__ == "__main__":
    run_cli(main)
