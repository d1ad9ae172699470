"""The forest view's blend with other settings of its boosted trees, against the library defaults it ships with.

The forest view's trees (:class:`gcad_dist.model.tree_blend.TreeBlend`) average the ranks of a random forest and of
scikit-learn's ``HistGradientBoostingClassifier`` with the library's defaults. GADBench searched XGB-Graph's
hyper-parameters; this bench measures whether a setting other than the defaults makes a better blend. For each graph,
label fraction and seed: ``make_split(seed)`` of the z-scored graph (``gcad_dist.train``'s input and split), the
training labels subsampled as ``gcad_dist.train --label-fraction`` does, one forest fitted, then one boosted-trees fit
per setting of :data:`SETTINGS`, each blended with that forest as the product blends them
(:func:`~gcad_dist.model.tree_blend.blend_trees`) and measured on the validation nodes (no test label is read).

Example (BENCHMARKS.md, session 69):
    python -m bench.boosted_settings --data-dir DATA --datasets tolokers reddit inj_cora books --seeds 0 1 2 3 4 \\
        --label-fractions 1 0.1

The table gives, per graph and fraction, the training / validation anomalies, the forest alone, the shipped blend
(``defaults``) and each other setting's blend with its change against the shipped one (AUROC / AUPRC, means over the
seeds); the last row the mean change over the rows with at least 10 validation anomalies (fewer cannot tell settings
apart) and the worst row.
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script or with -m from the repo

from bench.tree_blend import _span  # noqa: E402
from gcad_dist.cli import ArgumentParser, UsageError, run_cli, setup_logging  # noqa: E402

log = logging.getLogger("bench.boosted_settings")

#: the settings compared: ``HistGradientBoostingClassifier`` keyword arguments ("defaults" is what ships)
SETTINGS: dict[str, dict[str, Any]] = {
    "defaults": {},
    "slow": {"learning_rate": 0.05, "max_iter": 200},  # half the step, twice the trees
    "regularised": {"min_samples_leaf": 50, "l2_regularization": 1.0},
    "colsample": {"max_features": 0.5},  # half the features at each split, as XGBoost's colsample
    "small-trees": {"max_leaf_nodes": 15, "learning_rate": 0.05, "max_iter": 300, "max_features": 0.5},
    "early-stop": {"early_stopping": True, "max_iter": 300},  # on a tenth of the training nodes, at any size
}
#: rows with fewer validation anomalies are shown but left out of the summary
MIN_VAL_ANOMALIES = 10


@dataclass
class BoostedSettingsBenchConfig:
    data_dir: str = "../shared/data"
    datasets: list[str] = field(default_factory=lambda: ["tolokers", "reddit", "inj_cora", "books"])
    seeds: list[int] = field(default_factory=lambda: [0, 1, 2])
    label_fractions: list[float] = field(default_factory=lambda: [1.0])
    settings: list[str] = field(default_factory=lambda: list(SETTINGS))
    threads: int = 1
    verbose: bool = False


def build_parser() -> argparse.ArgumentParser:
    d = BoostedSettingsBenchConfig()
    p = ArgumentParser(prog="python -m bench.boosted_settings", description=__doc__,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data-dir", default=d.data_dir, help="folder of the <name>.npz graphs (default: %(default)s)")
    p.add_argument("--datasets", nargs="+", default=d.datasets, help="graph names or paths (default: %(default)s)")
    p.add_argument("--seeds", nargs="+", type=int, default=d.seeds, help="split seeds (default: %(default)s)")
    p.add_argument("--label-fractions", nargs="+", type=float, default=d.label_fractions,
                   help="fractions of the training labels the trees are fitted on (gcad_dist.train --label-fraction's "
                        "stratified sample; validation untouched) (default: %(default)s)")
    p.add_argument("--settings", nargs="+", default=d.settings, choices=list(SETTINGS), metavar="NAME",
                   help=f"settings compared, 'defaults' always first: {', '.join(SETTINGS)} (default: all)")
    p.add_argument("--threads", type=int, default=d.threads, help="threads of each fit (default: %(default)s)")
    p.add_argument("-v", "--verbose", action="store_true")
    return p


def measure(data: Any, seed: int, label_fraction: float, settings: list[str],
            threads: int = 1) -> dict[str, tuple[float, ...]]:
    """Validation (AUROC, AUPRC) of the forest alone (``"forest"``) and of its blend with the boosted trees of each
    of ``settings``, all fitted on ``label_fraction`` of ``make_split(data, seed)``'s training labels; also
    ``"anomalies"``: (training anomalies, validation anomalies)."""
    import torch

    from gcad_dist.data.splits import make_split, subsample_split
    from gcad_dist.metrics import auprc, auroc
    from gcad_dist.model.boosted_trees import fit_boosted_trees
    from gcad_dist.model.forest import FOREST_HOPS, feature_columns, fit_forest, graph_features, mean_leaf_value
    from gcad_dist.model.tree_blend import blend_trees

    split, _ = subsample_split(make_split(data, seed=seed), data.y, label_fraction, seed=seed)
    y = torch.as_tensor(data.y).numpy()
    train = split.train.numpy() & (y >= 0)
    val = split.val.numpy() & (y >= 0)
    feats = graph_features(data.x, data.edge_index, hops=FOREST_HOPS)  # the forest's; the boosted trees read one hop
    rows = feats.numpy()
    one_hop = rows[:, :feature_columns(data.x.shape[1])]
    try:
        forest = fit_forest(data.x, data.edge_index, y, train, seed=seed, threads=threads, feats=rows)
    except ValueError as e:
        raise UsageError(f"seed {seed}, label fraction {label_fraction}: {e}") from None
    yv = y[val]
    f = mean_leaf_value(forest, feats, forest.proba).numpy()
    out: dict[str, tuple[float, ...]] = {"forest": (auroc(yv, f[val]), auprc(yv, f[val])),
                                         "anomalies": (int((y[train] == 1).sum()), int((yv == 1).sum()))}
    for name in settings:
        boosted = fit_boosted_trees(data.x, data.edge_index, y, train, seed, threads, feats=one_hop,
                                    params=SETTINGS[name])
        s = blend_trees(forest, boosted, feats)(data.x, data.edge_index).numpy()
        out[name] = (auroc(yv, s[val]), auprc(yv, s[val]))
    return out


def main(argv: list[str] | None = None) -> int:
    import torch

    from gcad_dist.quality import _load, _resolve_dataset

    cfg = BoostedSettingsBenchConfig(**vars(build_parser().parse_args(argv)))
    setup_logging(cfg.verbose)
    if any(not 0.0 < f <= 1.0 for f in cfg.label_fractions):
        raise UsageError(f"--label-fractions: each must be in (0, 1], got {cfg.label_fractions}")
    settings = ["defaults", *(s for s in dict.fromkeys(cfg.settings) if s != "defaults")]
    torch.set_num_threads(max(1, cfg.threads))
    others = settings[1:]
    print("| graph | label fraction | seeds | training / validation anomalies | forest alone | defaults (shipped) | "
          + " | ".join(f"{s} (change)" for s in others) + " |")
    print("|---|---|---|---|---|---|" + "---|" * len(others))
    changes: dict[str, list[np.ndarray]] = {s: [] for s in others}
    for name in cfg.datasets:
        _, data = _load(_resolve_dataset(Path(cfg.data_dir), name))
        if getattr(data, "y", None) is None:
            raise UsageError(f"--datasets: {name} has no labels")
        for fraction in cfg.label_fractions:
            t0 = time.perf_counter()
            runs = [measure(data, seed, fraction, settings, cfg.threads) for seed in cfg.seeds]
            mean = {k: np.mean([r[k] for r in runs], axis=0) for k in ("forest", *settings)}
            n_tr, n_val = (sorted({r["anomalies"][i] for r in runs}) for i in (0, 1))
            cells = []
            for s in others:
                change = mean[s] - mean["defaults"]
                if n_val[0] >= MIN_VAL_ANOMALIES:
                    changes[s].append(change)
                cells.append(f"{mean[s][0]:.3f} / {mean[s][1]:.3f} ({change[0]:+.4f} / {change[1]:+.4f})")
            print(f"| {name} | {fraction:g} | {len(runs)} | {_span(n_tr)} / {_span(n_val)} | "
                  f"{mean['forest'][0]:.3f} / {mean['forest'][1]:.3f} | "
                  f"{mean['defaults'][0]:.3f} / {mean['defaults'][1]:.3f} | " + " | ".join(cells) + " |", flush=True)
            log.info("%s at %g: %d seeds in %.1f s", name, fraction, len(runs), time.perf_counter() - t0)
    if others and all(changes[s] for s in others):
        print(f"| mean change over rows with >= {MIN_VAL_ANOMALIES} validation anomalies (worst row) | | | | | | "
              + " | ".join("{:+.4f} / {:+.4f} ({:+.4f} / {:+.4f})".format(*np.mean(changes[s], axis=0),
                                                                          *np.min(changes[s], axis=0)) for s in others)
              + " |")
    return 0


if __name__ == "__main__":
    run_cli(main)
