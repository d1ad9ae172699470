"""The forest view's trees on validation: RF-Graph alone (the trees before session 66, the baseline), the boosted trees
alone, and both with their ranks averaged (:class:`gcad_dist.model.tree_blend.TreeBlend`, the trees since), fitted on
the same training nodes of the same split, in the same run. The forest reads two hops of neighbour means since session
85 (``bench.forest_hops`` compares it with one).

Example (BENCHMARKS.md, session 66):
    python -m bench.tree_blend --data-dir DATA --datasets tolokers reddit inj_cora --seeds 5 6 7 8 9
    python -m bench.tree_blend --data-dir DATA --datasets tolokers reddit inj_cora --seeds 5 6 7 8 9 --label-fraction 0.1
      (session 67: the trees fitted on a tenth of the training labels, as ``gcad_dist.train --label-fraction 0.1``
      and ``gcad_dist.finetune`` fit them)

For each graph and seed: ``make_split(seed)`` of the z-scored graph (``gcad_dist.train``'s input and split); each
model fitted on the training nodes and measured on the validation nodes (no test label is read). The table gives each
graph's training and validation anomalies (their range over the seeds), its mean validation AUROC / AUPRC over the
seeds, the blend's change against the forest alone, and on how many seeds it is ahead in each.
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script or with -m from the repo

from gcad_dist.cli import ArgumentParser, UsageError, run_cli, setup_logging  # noqa: E402

log = logging.getLogger("bench.tree_blend")

MODELS = ("forest (baseline)", "boosted trees", "both, ranks averaged")


@dataclass
class TreeBlendBenchConfig:
    data_dir: str = "../shared/data"
    datasets: list[str] = field(default_factory=lambda: ["tolokers", "reddit", "inj_cora", "books"])
    seeds: list[int] = field(default_factory=lambda: [0, 1, 2])
    label_fraction: float = 1.0
    threads: int = 1
    verbose: bool = False


def build_parser() -> argparse.ArgumentParser:
    d = TreeBlendBenchConfig()
    p = ArgumentParser(prog="python -m bench.tree_blend", description=__doc__,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data-dir", default=d.data_dir, help="folder of the <name>.npz graphs (default: %(default)s)")
    p.add_argument("--datasets", nargs="+", default=d.datasets, help="graph names or paths (default: %(default)s)")
    p.add_argument("--seeds", nargs="+", type=int, default=d.seeds, help="split seeds (default: %(default)s)")
    p.add_argument("--label-fraction", type=float, default=d.label_fraction,
                   help="keep this fraction of the training labels (the seeded stratified sample of gcad_dist.train "
                        "--label-fraction and gcad_dist.finetune, which fit the forest view's trees on it; validation "
                        "untouched) (default: %(default)s)")
    p.add_argument("--threads", type=int, default=d.threads, help="threads of each fit (default: %(default)s)")
    p.add_argument("-v", "--verbose", action="store_true")
    return p


def measure(data: object, seed: int, threads: int, label_fraction: float = 1.0) -> dict[str, tuple[float, ...]]:
    """Validation (AUROC, AUPRC) of each of :data:`MODELS` on ``make_split(data, seed)``, the trees fitted on
    ``label_fraction`` of its training labels (:func:`~gcad_dist.data.splits.subsample_split`); also
    ``"anomalies"``: (training anomalies, validation anomalies)."""
    import torch

    from gcad_dist.data.splits import make_split, subsample_split
    from gcad_dist.metrics import auprc, auroc
    from gcad_dist.model.tree_blend import fit_tree_blend

    split, _ = subsample_split(make_split(data, seed=seed), data.y, label_fraction, seed=seed)  # 1: every label
    y = torch.as_tensor(data.y).numpy()
    train = split.train.numpy() & (y >= 0)
    val = split.val.numpy() & (y >= 0)
    try:
        blend = fit_tree_blend(data.x, data.edge_index, y, train, seed=seed, threads=threads)
    except ValueError as e:
        raise UsageError(f"seed {seed}: {e}") from None
    forest, boosted = blend.member_scores(data.x, data.edge_index)
    scores = (forest.numpy(), boosted.numpy(), blend(data.x, data.edge_index).numpy())
    yv = y[val]
    out: dict[str, tuple[float, ...]] = {name: (auroc(yv, s[val]), auprc(yv, s[val])) for name, s in zip(MODELS, scores)}
    out["anomalies"] = (int((y[train] == 1).sum()), int((yv == 1).sum()))
    return out


def _span(values: list[int]) -> str:
    """``7`` or ``5-9``: the sorted distinct counts over the seeds."""
    return f"{values[0]}" if len(values) == 1 else f"{values[0]}-{values[-1]}"


def main(argv: list[str] | None = None) -> int:
    import torch

    from gcad_dist.quality import _load, _resolve_dataset

    cfg = TreeBlendBenchConfig(**vars(build_parser().parse_args(argv)))
    setup_logging(cfg.verbose)
    if not 0.0 < cfg.label_fraction <= 1.0:
        raise UsageError(f"--label-fraction: must be in (0, 1], got {cfg.label_fraction}")
    torch.set_num_threads(max(1, cfg.threads))
    print("| graph | seeds | training / validation anomalies | " + " | ".join(f"{m}: AUROC / AUPRC" for m in MODELS)
          + " | both - forest | seeds ahead (AUROC, AUPRC) |")
    print("|---|---|---|" + "---|" * (len(MODELS) + 2))
    for name in cfg.datasets:
        _, data = _load(_resolve_dataset(Path(cfg.data_dir), name))
        if getattr(data, "y", None) is None:
            raise UsageError(f"--datasets: {name} has no labels")
        t0 = time.perf_counter()
        runs = [measure(data, s, cfg.threads, cfg.label_fraction) for s in cfg.seeds]
        mean = {m: np.mean([r[m] for r in runs], axis=0) for m in MODELS}
        base, both = MODELS[0], MODELS[-1]
        ahead = [sum(r[both][i] > r[base][i] for r in runs) for i in (0, 1)]
        change = mean[both] - mean[base]
        n_tr, n_val = (sorted({r["anomalies"][i] for r in runs}) for i in (0, 1))
        print(f"| {name} | {len(runs)} | {_span(n_tr)} / {_span(n_val)} | "
              + " | ".join(f"{mean[m][0]:.3f} / {mean[m][1]:.3f}" for m in MODELS)
              + f" | {change[0]:+.4f} / {change[1]:+.4f} | {ahead[0]}/{len(runs)}, {ahead[1]}/{len(runs)} |",
              flush=True)
        log.info("%s: %d seeds in %.1f s", name, len(runs), time.perf_counter() - t0)
    return 0


if __name__ == "__main__":
    run_cli(main)
