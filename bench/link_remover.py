"""Does GCCAD's link remover tell the edges it should cut? ``python -m bench.link_remover`` (validation only).

METHOD.md's link predictor gives each edge a keep probability p, trained by a binary cross-entropy towards 1 on
edges between two normal nodes and 0 on edges between a normal and an anomalous node ("mixed"). This trains
``gcad_dist.train``'s graph candidate with its defaults (``--contrast graph``: the candidate that has a link
remover) on one seeded split and, for the state that is kept (best validation AUPRC), reports per layer:

* the mean p over normal-normal and over mixed edges, and the AUROC of p as a test of normal-normal against
  mixed (1 = every normal-normal edge kept more than every mixed one, 0.5 = no separation, below 0.5 = the wrong
  way round); on the edges with both ends in the train split (those the link loss saw) and on the edges with an
  end in the validation split;
* the link loss at the first epoch and at the kept one, and the node-level validation AUROC / AUPRC.

No test label is read: the test mask is replaced by an empty one before training.

    python -m bench.link_remover --datasets inj_cora tolokers --seeds 0 1
"""

from __future__ import annotations

import argparse
import logging
from pathlib import Path
from typing import Any

import numpy as np
import torch

from gcad_dist.cli import ArgumentParser, UsageError, run_cli, setup_logging

log = logging.getLogger("bench.link_remover")


def separation(p: np.ndarray, normal_normal: np.ndarray) -> float:
    """AUROC of ``p`` for normal-normal (positive) against mixed (negative) edges; NaN when one group is empty."""
    from gcad_dist.metrics import auroc

    return auroc(normal_normal.astype(np.int64), p)


def edge_groups(edge_index: np.ndarray, y: np.ndarray, part: np.ndarray, both: bool) -> tuple[np.ndarray, np.ndarray]:
    """(selected edges, normal-normal among them): labelled, non-loop, normal-normal or mixed edges with both ends
    (``both``) or at least one end in ``part``."""
    s, d = edge_index
    inside = (part[s] & part[d]) if both else (part[s] | part[d])
    normal_normal = (y[s] == 0) & (y[d] == 0)
    mixed = ((y[s] == 0) & (y[d] == 1)) | ((y[s] == 1) & (y[d] == 0))
    sel = inside & (normal_normal | mixed) & (s != d)
    return sel, normal_normal[sel]


def run_one(path: Path, seed: int, **overrides: Any) -> list[dict[str, Any]]:
    """Train the graph candidate on ``path``'s split ``seed`` and measure its link predictor (see the module doc);
    ``overrides`` replace :class:`gcad_dist.train.TrainConfig` fields (e.g. ``epochs``)."""
    from gcad_dist.data.splits import make_split
    from gcad_dist.train import TrainConfig, fit_models, load_labelled, supervised_config

    data = load_labelled(str(path))
    # no label inputs unless asked: session 16's figures are of the model without them, and this study calls the fit
    # directly (gcad_dist.train.fit_candidates would add their columns)
    cfg = TrainConfig(graph=str(path), out="", seed=seed, contrast="graph", progress=False, plots=False,
                      **{"label_inputs": False, **overrides})
    split = make_split(data, seed=seed)
    # the test split is replaced by an empty mask: nothing here can read a test label
    fit, model, _ = fit_models(cfg, data, (split.train, split.val, torch.zeros_like(split.test)),
                               supervised_config(cfg))[0]
    model.eval()  # the kept (best validation AUPRC) state is loaded
    with torch.no_grad():
        out = model(data.x, data.edge_index)
    y = data.y.numpy()
    ei = out.edge_index.numpy()
    link = fit.history.get("loss_link", [float("nan")])
    rows = []
    for name, part, both in (("train (both ends)", split.train.numpy(), True), ("validation", split.val.numpy(), False)):
        sel, nn = edge_groups(ei, y, part, both)
        for layer, logits in enumerate(out.edge_logits):
            p = torch.sigmoid(logits).numpy()[sel[: logits.numel()]]
            rows.append({"dataset": path.stem, "seed": seed, "edges": name, "layer": layer,
                         "p_normal": float(p[nn].mean()), "p_mixed": float(p[~nn].mean()),
                         "auroc_p": separation(p, nn), "mixed": int((~nn).sum()),
                         "link_first": float(link[0]), "link_kept": float(link[fit.best_epoch - 1]),
                         "best_epoch": fit.best_epoch, "val_auroc": fit.val["auroc"], "val_auprc": fit.val["auprc"]})
    return rows


def table(rows: list[dict[str, Any]]) -> str:
    head = ("| graph | seed | edges | layer | mean p, normal-normal | mean p, mixed | AUROC of p | mixed edges | "
            "link BCE first / kept epoch | kept epoch | node val AUROC / AUPRC |")
    lines = [head, "|" + "---|" * 11]
    for r in rows:
        lines.append(f"| {r['dataset']} | {r['seed']} | {r['edges']} | {r['layer']} | {r['p_normal']:.3f} | "
                     f"{r['p_mixed']:.3f} | {r['auroc_p']:.3f} | {r['mixed']} | {r['link_first']:.3f} / "
                     f"{r['link_kept']:.3f} | {r['best_epoch']} | {r['val_auroc']:.4f} / {r['val_auprc']:.4f} |")
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    p = ArgumentParser(prog="python -m bench.link_remover", description=__doc__.split("\n\n")[0],
                       formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--datasets", nargs="+", default=["inj_cora"], help="names in --data-dir, or paths")
    p.add_argument("--data-dir", default="../shared/data")
    p.add_argument("--seeds", nargs="+", type=int, default=[0])
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("-v", "--verbose", action="store_true")
    return p


def main(argv: list[str] | None = None) -> int:
    a = build_parser().parse_args(argv)
    setup_logging(a.verbose)
    torch.set_num_threads(a.threads)
    rows = []
    for ds in a.datasets:
        path = Path(ds) if Path(ds).suffix else Path(a.data_dir) / f"{ds}.npz"
        if not path.exists():
            raise UsageError(f"--datasets: {path} does not exist")
        for seed in a.seeds:
            rows += run_one(path, seed)
            log.info("%s seed %d done", path.stem, seed)
    print(table(rows))
    return 0


if __name__ == "__main__":
    run_cli(main)
