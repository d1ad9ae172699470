"""gcad_dist.finetune's model-level keep rule on held-out validation halves, with and without one candidate.

Example (BENCHMARKS.md, session 36):
    python -m bench.pretrain_transfer --datasets inj_cora reddit tolokers --seeds 0,1,2 --label-fractions 0.1 \\
        --k 1 --epochs 3 --lr 1e-3 --threads 1 --candidate-scores --out runs/s36
    python -m bench.finetune_selection runs/s36 --without zero-shot

With ``--swap scratch:z`` the variant is not "without a candidate" but "that candidate's scores replaced by those of
the sibling run ``z<fraction>-s<seed>``" (e.g. ``gcad_dist.finetune --model scratch --normalize standard
--candidate-scores``, BENCHMARKS.md session 63); ``--cross-fitted`` judges each candidate by its cross-fitted scores,
as ``gcad_dist.finetune``'s default keep rule does. ``--weighting kept`` combines both variants' kept candidates with
the lift weights that ``gcad_dist.finetune`` uses since session 69 (``equal``, the default here: their mean); session
70 judged the L2-SP checkpoint candidate so (``--swap checkpoint:a --cross-fitted --weighting kept``). ``--pick``
makes the variant a per-run choice between the two: the sibling's candidate is used on a halving only where it ranks
the choosing half's anomalies better than the run's own (session 71: the anchor strength chosen on validation,
``--swap checkpoint:u --pick --cross-fitted --weighting kept``, not adopted).

With ``--add-isolation-forest DATA_DIR`` the variant is "one more candidate": the label-free isolation forest of the
feature view (:func:`gcad_dist.feature_view.forest_scores`, on the raw features of ``DATA_DIR/<dataset>.npz``), judged
as the zero-shot candidate is, by its own scores (it chose nothing on validation), and offered only where validation
holds at least :data:`gcad_dist.selection.MIN_POSITIVES` anomalies (with fewer the keep rule averages every
candidate: it could not drop a forest that ranks the anomalies low). Session 64 measured with it what
fine-tuning with very few labels leaves on graphs whose anomalies are extreme in a few attributes.

With ``--rejoin`` the variant is ``gcad_dist.finetune``'s keep rule (lift weights) with session 74's ``--rejoin``
(dropped candidates rejoin where the kept ones' mean with them ranks the choosing half's anomalies better), the
baseline the same rule without it; judge as the product does with ``--cross-fitted``.

With ``--lift-weights [lift|half-lift|kept]`` the variant is not a different candidate set but a different
combination: every candidate weighted by its AUPRC's lift over the base rate on the choosing half, ``max(0, AUPRC -
base rate)`` (judged as the keep rule judges it; half-lift: halfway between those weights, normalised, and equal ones
over every candidate; kept: the keep rule's kept candidates, weighted by their lift: :func:`lift_weights`), and the
weighted mean of the standardised scores measured on the other half;
equal weights with fewer than :data:`gcad_dist.selection.MIN_POSITIVES` anomalies on the choosing half or none above
the base rate (BENCHMARKS.md, session 69: neither adopted).

Reads every ``candidate_scores.npz`` under the given folders (``gcad_dist.finetune --candidate-scores``: each
candidate's scores of every node, the labels and the split masks; the run's folder is ``<dataset>/ft<fraction>-s<seed>``
as ``bench.pretrain_transfer`` names it). For each run, the validation nodes are split in stratified random halves
(``--halvings`` times, both directions): :func:`gcad_dist.train.keep_candidates` chooses on one half, with every
candidate and without the ``--without`` one, and the mean of the kept candidates' standardised scores is measured on
the other half (the method of sessions 25 and 28). Reads no test label. Prints one Markdown row per (dataset,
fraction): held-out AUROC / AUPRC of both variants, the paired change, the runs where the full set is ahead, and the
kept sets chosen most often.
"""

from __future__ import annotations

import argparse
import functools
import logging
import re
import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script or with -m from the repo

from gcad_dist.cli import ArgumentParser, UsageError, run_cli, setup_logging  # noqa: E402
from gcad_dist.selection import MIN_POSITIVES  # noqa: E402

log = logging.getLogger("bench.finetune_selection")

CANDIDATE_FILE = "candidate_scores.npz"
#: the candidate ``--add-isolation-forest`` adds
ISOLATION_FOREST = "isolation-forest"
RUN_DIR = re.compile(r"ft(?P<fraction>[0-9.e-]+)-s(?P<seed>\d+)$")


@dataclass
class SelectionConfig:
    """Settings of ``python -m bench.finetune_selection``."""

    runs: list[str] = field(default_factory=list)
    without: str = "zero-shot"
    swap: str | None = None  # "NAME:PREFIX": NAME's scores replaced by the sibling run PREFIX<fraction>-s<seed>'s
    add_isolation_forest: str | None = None  # DATA_DIR: the label-free isolation forest as one more candidate
    cross_fitted: bool = False  # judge candidates by their cross-fitted scores (gcad_dist.finetune's default rule)
    lift_weights: str | None = None  # "lift" / "half-lift" / "kept": compare the keep rule with those weights
    # compare gcad_dist.finetune's keep rule (lift weights) with and without --rejoin (session 74)
    rejoin: bool = False
    # with --swap: how both variants weight their kept candidates, "equal" (before session 69) or "kept" (the lift
    # weights over the kept set, gcad_dist.finetune's default since session 69)
    weighting: str = "equal"
    # with --swap: the variant uses the sibling's candidate only on the halvings where it ranks the choosing half's
    # anomalies better than the run's own (its cross-fitted scores with --cross-fitted), as a per-run choice between
    # two fits of one candidate would (e.g. two --anchor strengths); with < MIN_POSITIVES anomalies there, the run's
    # own candidate stays
    pick: bool = False
    halvings: int = 10
    seed: int = 0
    verbose: bool = False


def halves(y: np.ndarray, val: np.ndarray, halvings: int, seed: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """``halvings`` stratified random splits of the validation nodes into halves, each used both ways:
    [(choose on, measure on)] as index arrays."""
    rng = np.random.default_rng(seed)
    idx = np.flatnonzero(val)
    out = []
    for _ in range(halvings):
        pos, neg = rng.permutation(idx[y[idx] == 1]), rng.permutation(idx[y[idx] == 0])
        a = np.concatenate([pos[: len(pos) // 2], neg[: len(neg) // 2]])
        b = np.concatenate([pos[len(pos) // 2:], neg[len(neg) // 2:]])
        out += [(a, b), (b, a)]
    return out


#: ``--lift-weights``: each variant's share of equal weights
LIFT_SHRINK = {"lift": 0.0, "half-lift": 0.5, "kept": 0.0}


def lift_weights(val_auprc: list[float], base_rate: float, shrink: float = 0.0) -> np.ndarray:
    """Each candidate's weight ``max(0, AUPRC - base_rate)``, normalised to sum 1, then moved ``shrink`` of the way to
    equal weights; all 0: equal weights."""
    w = np.clip(np.asarray(val_auprc, dtype=np.float64) - base_rate, 0.0, None)
    equal = np.full(len(w), 1.0 / len(w))
    return shrink * equal + (1.0 - shrink) * w / w.sum() if w.sum() > 0 else equal


def held_out(names: list[str], scores: np.ndarray, y: np.ndarray, val: np.ndarray, halvings: int = 10,
             seed: int = 0, selection: np.ndarray | None = None,
             lift: str | None = None, per_halving: bool = False,
             rejoin: bool | None = None) -> tuple[np.ndarray, Counter]:
    """Mean held-out (AUROC, AUPRC) of the keep rule over ``names``' candidates, and how often each kept set was
    chosen. ``scores``: [C, N]; ``selection``: [C, N] cross-fitted scores to judge them by (None: their scores); only
    the validation nodes' labels are read. ``lift`` ("lift", "half-lift", "kept"): the candidates (kept: those the
    keep rule keeps) weighted by their AUPRC's lift over the choosing half's base rate (the kept set is then those of
    weight above 0). ``per_halving``: the [2 * halvings, 2] metrics of each (choose, measure) pair, in
    :func:`halves`' order, instead of their mean. ``rejoin`` (True / False; None: not this mode): the kept candidates
    and weights as :func:`gcad_dist.train.keep_candidates` gives them with ``weighting="lift"`` and that ``rejoin``
    (``gcad_dist.finetune``'s rule since session 69, with or without session 74's ``--rejoin``)."""
    from gcad_dist.metrics import auprc, auroc
    from gcad_dist.model.candidate_ensemble import standardised_mean, standardised_scores
    from gcad_dist.train import keep_candidates

    judged = scores if selection is None else selection
    fits = [(SimpleNamespace(scores=s, selection_scores=t, best_epoch=0, val={}, test={}), None, None)
            for s, t in zip(scores, judged)]
    z = standardised_scores(list(scores))[0] if lift or rejoin is not None else None
    metrics, kept_sets = [], Counter()
    for i, (choose, measure) in enumerate(halves(y, val, halvings, seed)):
        mask = np.zeros(y.shape[0], dtype=bool)
        mask[choose] = True
        if rejoin is not None:
            _, rec = keep_candidates(fits, y, mask, seed=i, names=names, cross_fitted=selection is not None,
                                     weighting="lift", rejoin=rejoin)
            w = np.array([rec["weights"].get(n, 0.0) for n in names])
            combined = w @ z
            kept_name = " + ".join(rec["kept"])
        elif lift:
            among = list(range(len(names)))
            if lift == "kept":
                among, _ = keep_candidates(fits, y, mask, seed=i, names=names, cross_fitted=selection is not None)
            w = np.zeros(len(names))
            w[among] = lift_weights([auprc(y[choose], judged[k][choose]) for k in among], float(y[choose].mean()),
                                    LIFT_SHRINK[lift])
            if int(y[choose].sum()) < MIN_POSITIVES:
                w[among] = 1.0 / len(among)
            combined = w @ z
            kept_name = " + ".join(n for n, wi in zip(names, w) if wi > 0)
        else:
            kept, _ = keep_candidates(fits, y, mask, seed=i, names=names, cross_fitted=selection is not None)
            combined, _ = standardised_mean([scores[k] for k in kept])
            kept_name = " + ".join(names[k] for k in kept)
        metrics.append((auroc(y[measure], combined[measure]), auprc(y[measure], combined[measure])))
        kept_sets[kept_name] += 1
    per = np.asarray(metrics)
    return (per if per_halving else per.mean(axis=0)), kept_sets


def picks(y: np.ndarray, val: np.ndarray, own: np.ndarray, other: np.ndarray, halvings: int,
          seed: int) -> np.ndarray:
    """``--pick``: for each (choose, measure) pair of :func:`halves`, whether ``other`` ranks the choosing half's
    anomalies better (AUPRC) than ``own``, with at least MIN_POSITIVES of them there (else ``own`` stays). Reads the
    choosing halves' labels only."""
    from gcad_dist.metrics import auprc

    out = []
    for choose, _ in halves(y, val, halvings, seed):
        yc = (y[choose] == 1).astype(np.int64)
        out.append(bool(yc.sum() >= MIN_POSITIVES and auprc(yc, other[choose]) > auprc(yc, own[choose])))
    return np.asarray(out, dtype=bool)


def study(cfg: SelectionConfig) -> list[dict[str, Any]]:
    """One record per run found: dataset, fraction, seed, both variants' held-out metrics and kept sets."""
    files = sorted(f for r in cfg.runs for f in Path(r).rglob(CANDIDATE_FILE)
                   if not (cfg.swap and f.parent.name.startswith(cfg.swap.split(":", 1)[1])))
    if not files:
        raise UsageError(f"no candidate_scores.npz under {cfg.runs} (run gcad_dist.finetune --candidate-scores)")
    records = []
    for f in files:
        m = RUN_DIR.search(f.parent.name)
        d = np.load(f)
        names = [str(n) for n in d["names"]]
        y, val, scores = d["y"].astype(np.int64), d["val"].astype(bool), d["scores"]
        sel = d["selection_scores"] if cfg.cross_fitted and "selection_scores" in d.files else None
        if cfg.cross_fitted and sel is None:
            raise UsageError(f"--cross-fitted: {f} holds no selection_scores (written before session 44?)")
        if cfg.add_isolation_forest and ISOLATION_FOREST in names:
            raise UsageError(f"--add-isolation-forest: {f} already holds the {ISOLATION_FOREST} candidate "
                             f"(gcad_dist.finetune since session 65); compare with --without {ISOLATION_FOREST}")
        if cfg.add_isolation_forest:  # "full" = with the forest as one more candidate, "without" = the run as it is
            part, part_sets = held_out(names, scores, y, val, cfg.halvings, cfg.seed, sel)
            if int((y[val] == 1).sum()) < MIN_POSITIVES:  # the keep rule could not drop it: not offered
                full, full_sets = part, part_sets
            else:
                forest = _isolation_forest(Path(cfg.add_isolation_forest), f.parent.parent.name, d["y"])
                more = np.concatenate([scores, forest[None]])
                full, full_sets = held_out(names + [ISOLATION_FOREST], more, y, val, cfg.halvings, cfg.seed,
                                           None if sel is None else np.concatenate([sel, forest[None]]))
        elif cfg.rejoin:  # "full" = the keep rule with --rejoin, "without" = without (both with the lift weights)
            full, full_sets = held_out(names, scores, y, val, cfg.halvings, cfg.seed, sel, rejoin=True)
            part, _ = held_out(names, scores, y, val, cfg.halvings, cfg.seed, sel, rejoin=False)
        elif cfg.lift_weights:  # "full" = the candidates weighted by their lift, "without" = the keep rule as run
            full, full_sets = held_out(names, scores, y, val, cfg.halvings, cfg.seed, sel, lift=cfg.lift_weights)
            part, _ = held_out(names, scores, y, val, cfg.halvings, cfg.seed, sel)
        elif cfg.swap:  # "full" = the candidates swapped in, "without" = the run as it is
            name, prefix = cfg.swap.split(":", 1)
            other = f.parent.parent / f"{prefix}{m['fraction']}-s{m['seed']}" / CANDIDATE_FILE if m else None
            if name not in names or other is None or not other.exists():
                log.warning("%s: no %r candidate or no sibling run %s; skipped", f, name, other)
                continue
            o = np.load(other)
            if not (np.array_equal(o["y"], d["y"]) and np.array_equal(o["val"], d["val"])):
                raise UsageError(f"--swap: {other} has other labels or another validation split than {f}")
            j, k = names.index(name), [str(n) for n in o["names"]].index(name)
            swapped = scores.copy()
            swapped[j] = o["scores"][k]
            swapped_sel = None
            if sel is not None:
                swapped_sel = sel.copy()
                swapped_sel[j] = o["selection_scores"][k]
            lift = None if cfg.weighting == "equal" else cfg.weighting
            full, full_sets = held_out(names, swapped, y, val, cfg.halvings, cfg.seed, swapped_sel, lift=lift,
                                       per_halving=cfg.pick)
            part, _ = held_out(names, scores, y, val, cfg.halvings, cfg.seed, sel, lift=lift, per_halving=cfg.pick)
            if cfg.pick:
                use = picks(y, val, (scores if sel is None else sel)[j],
                            (swapped if swapped_sel is None else swapped_sel)[j], cfg.halvings, cfg.seed)
                full, part = np.where(use[:, None], full, part).mean(axis=0), part.mean(axis=0)
                full_sets = Counter({f"{name} swapped in on {use.mean():.0%} of the choosing halves": len(use)})
        else:
            if cfg.without not in names:
                log.warning("%s: no %r candidate among %s; skipped", f, cfg.without, names)
                continue
            keep = [i for i, n in enumerate(names) if n != cfg.without]
            full, full_sets = held_out(names, scores, y, val, cfg.halvings, cfg.seed, sel)
            part, _ = held_out([names[i] for i in keep], scores[keep], y, val, cfg.halvings, cfg.seed,
                               None if sel is None else sel[keep])
        records.append({"dataset": f.parent.parent.name, "fraction": m["fraction"] if m else "?",
                        "seed": int(m["seed"]) if m else -1, "full": full, "without": part,
                        "val_anomalies": int((y[val] == 1).sum()), "kept": full_sets})
        log.info("%s: held-out AUROC / AUPRC with %s %.4f / %.4f, without %.4f / %.4f", f.parent,
                 "rejoin" if cfg.rejoin else f"{cfg.lift_weights} weights" if cfg.lift_weights else ISOLATION_FOREST if cfg.add_isolation_forest
                 else cfg.swap or cfg.without, *full, *part)
    return records


def _isolation_forest(data_dir: Path, dataset: str, y: np.ndarray) -> np.ndarray:
    """The feature view's isolation-forest scores [N] of ``data_dir/<dataset>.npz``'s raw features; its labels must be
    the run's ``y`` (the same graph, the same node order)."""
    path = data_dir / f"{dataset}.npz"
    if not path.is_file():
        raise UsageError(f"--add-isolation-forest: no {dataset}.npz in {data_dir}")
    st = path.stat()
    gy, forest = _graph_forest(str(path.resolve()), st.st_mtime_ns, st.st_size)
    if gy.shape != y.shape or not np.array_equal(np.where(gy < 0, -1, gy), np.where(y < 0, -1, y)):
        raise UsageError(f"--add-isolation-forest: {path} has other labels than the run's candidate scores")
    return forest


@functools.lru_cache(maxsize=4)
def _graph_forest(path: str, mtime_ns: int, size: int) -> tuple[np.ndarray, np.ndarray]:
    """(labels, isolation-forest scores) of the graph at ``path``: read and fitted once for all its runs (the forest
    is seeded, so every run of a graph gets the same scores); ``mtime_ns`` and ``size`` key the cache to the file's
    contents."""
    from gcad_dist.feature_view import forest_scores
    from partitioning.io import load_graph

    g = load_graph(path)
    gy = np.asarray(g.y if g.y is not None else [], dtype=np.int64)
    return gy, forest_scores(np.asarray(g.x, dtype=np.float32))


def table(records: list[dict[str, Any]], without: str, swap: str | None = None,
          added: str | None = None, lift: str | None = None, pick: bool = False, rejoin: bool = False) -> str:
    """Markdown: one row per (dataset, fraction), means over its runs, then the mean over the rows. With ``swap``
    the columns are the runs as they are and with the swapped candidate (with ``pick``, swapped in where the choosing
    half prefers it); with ``added`` (a candidate's name), as they are and with that candidate added."""
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for r in records:
        groups.setdefault((r["dataset"], r["fraction"]), []).append(r)
    base, variant = (("without rejoin", "with rejoin") if rejoin else ("as run", f"{lift}-weighted") if lift else ("as run", f"with {added}") if added else ("as run", f"{swap.split(':')[0]} {'picked' if pick else 'swapped'}") if swap
                     else (f"without {without}", f"with {without}"))
    lines = [f"| graph | labels | runs | val anomalies | {base} | {variant} | change | runs ahead "
             "(AUPRC) | kept most often |", "|---|---|---|---|---|---|---|---|---|"]
    changes = []
    for (name, frac), rs in sorted(groups.items()):
        full, part = np.mean([r["full"] for r in rs], 0), np.mean([r["without"] for r in rs], 0)
        ahead = sum(r["full"][1] > r["without"][1] for r in rs)
        kept = sum((r["kept"] for r in rs), Counter()).most_common(2)
        changes.append(full - part)
        lines.append(f"| {name} | {frac} | {len(rs)} | {np.mean([r['val_anomalies'] for r in rs]):.0f} | "
                     f"{part[0]:.3f} / {part[1]:.3f} | {full[0]:.3f} / {full[1]:.3f} | "
                     f"{full[0] - part[0]:+.3f} / {full[1] - part[1]:+.3f} | {ahead}/{len(rs)} | "
                     + ", ".join(f"{k} ({n})" for k, n in kept) + " |")
    mean = np.mean(changes, 0)
    lines.append(f"\nMean change over the {len(changes)} rows: AUROC {mean[0]:+.4f}, AUPRC {mean[1]:+.4f}")
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    d = SelectionConfig()
    p = ArgumentParser(prog="python -m bench.finetune_selection", description=__doc__.split("\n\n")[0],
                       formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("runs", nargs="+",
                   help="folders searched for candidate_scores.npz (gcad_dist.finetune --candidate-scores)")
    p.add_argument("--without", default=d.without, help="the candidate left out of the baseline variant")
    p.add_argument("--swap", default=d.swap, metavar="NAME:PREFIX",
                   help="compare the runs as they are with NAME's scores replaced by those of the sibling run "
                        "PREFIX<fraction>-s<seed> (instead of --without)")
    p.add_argument("--add-isolation-forest", default=d.add_isolation_forest, metavar="DATA_DIR",
                   help="compare the runs as they are with the label-free isolation forest (the feature view's, on the "
                        "raw features of DATA_DIR/<dataset>.npz) as one more candidate (instead of --without)")
    p.add_argument("--lift-weights", nargs="?", const="lift", default=d.lift_weights, choices=tuple(LIFT_SHRINK),
                   help="compare the keep rule as run with every candidate weighted by its validation AUPRC's lift over "
                        "the base rate (half-lift: halfway between those weights and equal ones; kept: the keep rule's "
                        "kept candidates weighted by their lift) (instead of --without)")
    p.add_argument("--rejoin", action="store_true",
                   help="compare gcad_dist.finetune's keep rule (lift weights) with and without --rejoin: dropped "
                        "candidates rejoining where the kept ones' mean with them ranks the choosing half's anomalies "
                        "better (session 74) (instead of --without)")
    p.add_argument("--weighting", default=d.weighting, choices=("equal", "kept"),
                   help="with --swap: how both variants weight the candidates they keep (equal: their mean; kept: "
                        "their validation lift, gcad_dist.finetune's --candidate-weights lift)")
    p.add_argument("--pick", action="store_true",
                   help="with --swap: the variant takes the sibling's candidate only where it ranks the choosing half's "
                        "anomalies better than the run's own (cross-fitted with --cross-fitted; the run's below 10 "
                        "anomalies there): a per-run choice between two fits of one candidate")
    p.add_argument("--cross-fitted", action="store_true",
                   help="judge candidates by their cross-fitted scores (gcad_dist.finetune's default keep rule)")
    p.add_argument("--halvings", type=int, default=d.halvings,
                   help="stratified halvings of validation (each used both ways)")
    p.add_argument("--seed", type=int, default=d.seed, help="seed of the halvings")
    p.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    return p


def main(argv: list[str] | None = None) -> int:
    cfg = SelectionConfig(**vars(build_parser().parse_args(argv)))
    if cfg.swap is not None and (":" not in cfg.swap or not all(cfg.swap.split(":", 1))):
        raise UsageError(f"--swap: expected NAME:PREFIX (e.g. scratch:z), got {cfg.swap!r}")
    if sum([cfg.swap is not None, cfg.add_isolation_forest is not None, cfg.lift_weights is not None,
            cfg.rejoin]) > 1:
        raise UsageError("--swap, --add-isolation-forest, --lift-weights and --rejoin: give one of them")
    if cfg.pick and cfg.swap is None:
        raise UsageError("--pick: only with --swap (it chooses between a run's candidate and its sibling's)")
    if cfg.weighting != "equal" and cfg.swap is None:
        raise UsageError("--weighting: only with --swap (--lift-weights compares the weightings themselves)")
    if cfg.halvings < 1:
        raise UsageError(f"--halvings: must be >= 1, got {cfg.halvings}")
    setup_logging(cfg.verbose)
    if not cfg.verbose:  # keep_candidates logs every choice, and warns on small validation halves: 20 a run
        logging.getLogger("gcad_dist.train").setLevel(logging.ERROR)
    print(table(study(cfg), cfg.without, cfg.swap, ISOLATION_FOREST if cfg.add_isolation_forest else None,
                cfg.lift_weights, cfg.pick, cfg.rejoin))
    return 0


if __name__ == "__main__":
    run_cli(main)
