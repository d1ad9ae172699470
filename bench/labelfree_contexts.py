"""Why GCCAD-pre does not detect real anomalies without labels: one pre-trained model, scored against
several contexts, validation AUROC only. ``python -m bench.labelfree_contexts``.

Per (graph, corruption mix, seed): the label-free pipeline of :mod:`gcad_dist.detectors.gccad_pre` (store
with ``--k auto`` and the given ``--corruption-mix``, pre-training on Ray in-process, lr 5e-3), then every
node is scored with each of these contexts, from the same checkpoint:

* ``halo``: its K-means part's context, the part's 1-hop halo passing messages (``score --parts``' default);
* ``links``: the context of the part most of its neighbours are in (``score --parts --context links``);
* ``global``: one context for the whole graph (``score`` without ``--parts``);
* ``nbr-enc`` / ``nbr-proj``: a *local* context, the mean of its neighbours' final embeddings (encoder /
  projection space), score 1 - cos(h_i, mean_j h_j);
* ``nbr-l0``: the same on the pre-trained input projection (before any message passing);
* ``edge-l<k>``: mean of 1 - p_ij over its edges, p the link predictor of layer k (its "suspicious links");
* ``nbr-cosine``: the label-free one-liner on the features themselves, for reference.

``--contrasts``, ``--swaps``, ``--hidden`` and ``--jumps`` set pre-training's ``--contrast``,
``--swap-features``, ``--hidden`` and ``--jump``. Only validation nodes of ``make_split(seed=0)`` are scored
against their labels: no test label is read.
Checkpoints are kept under ``--out`` so that a rerun only scores.
"""

from __future__ import annotations

import argparse
import copy
import itertools
import json
import logging
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from gcad_dist.cli import ArgumentParser, run_cli, setup_logging

log = logging.getLogger("bench.labelfree_contexts")

CONTEXTS = ("halo", "links", "global", "nbr-enc", "nbr-proj", "nbr-l0", "edge-l0", "edge-l1", "nbr-cosine")


def neighbour_contrast(h: torch.Tensor, edge_index: torch.Tensor) -> np.ndarray:
    """1 - cos(h_i, mean of h_j over i's neighbours) [N]: the ``nbr-cosine`` detector on the rows of ``h``."""
    from torch_geometric.data import Data

    from gcad_dist.detectors.neighbor_cosine import fit_score

    return fit_score(Data(x=h.detach(), edge_index=edge_index, num_nodes=h.size(0)), None, 0)


def edge_suspicion(p: torch.Tensor, edge_index: torch.Tensor, n: int) -> np.ndarray:
    """Mean of 1 - p_ij over the edges into each node [N]."""
    dst = edge_index[1]
    deg = torch.bincount(dst, minlength=n).clamp_min(1).float()
    return (torch.zeros(n).index_add_(0, dst, 1 - p.float()) / deg).numpy()


def run_one(dataset: str, mix: str, seed: int, epochs: int, out: Path, hops: int = 0,
            contrast: str = "graph", swap: float = 0.0, hidden: int = 64, jump: str = "last",
            loss: str = "contrastive", tau: float = 0.1, lr: float | None = None) -> dict[str, Any]:
    """Pre-train (unless cached) and score with every context; validation AUROC per context."""
    from gcad_dist.data.splits import make_split
    from gcad_dist.detectors.gccad_pre import SETTINGS, _graph
    from gcad_dist.metrics import auroc
    from gcad_dist.pretrain import PretrainConfig, run
    from gcad_dist.quality import _load
    from gcad_dist.score import link_majority_parts, load_checkpoint_model, prepare_data, score_data, score_parts_halo
    from partitioning.build import BuildConfig, build
    from partitioning.store.reader import StoreReader

    path = Path(dataset) if dataset.endswith(".npz") else Path(f"../shared/data/{dataset}.npz")
    _, std = _load(path)
    split = make_split(std, seed=0)
    y = std.y.numpy()
    val = split.val.numpy() & (y >= 0)
    work = out / (f"{path.stem}-{mix.replace(',', '+')}-e{epochs}-s{seed}" + (f"-h{hops}" if hops else "")
                  + (f"-c{contrast}" if contrast != "graph" else "") + (f"-sw{swap:g}" if swap else "")
                  + (f"-hid{hidden}" if hidden != 64 else "") + (f"-j{jump}" if jump != "last" else "")
                  + (f"-l{loss}" if loss != "contrastive" else "") + (f"-t{tau:g}" if tau != 0.1 else "")
                  + (f"-lr{lr:g}" if lr is not None else ""))
    graph = _graph(std)
    store = work / "store.zarr"
    t0 = time.perf_counter()
    if not (work / "pre" / "final" / "model.pt").exists():
        work.mkdir(parents=True, exist_ok=True)
        build(BuildConfig(graph=graph.source, out=str(store), k=None, seed=seed, threads=1, plot=False,
                          progress=False, corruption_mix=mix, overwrite=True, cluster_hops=hops), graph=graph)
        run(PretrainConfig(store=str(store), out=str(work / "pre"), workers=1, cpus_per_worker=1, epochs=epochs,
                           lr=SETTINGS["lr"] if lr is None else lr, seed=seed, overwrite=True, max_failures=0, progress=False,
                           contrast=contrast, swap_features=swap, hidden=hidden, jump=jump,
                           loss=loss, tau=tau))
    pre_s = time.perf_counter() - t0
    loaded = load_checkpoint_model(work / "pre" / "final")
    model = loaded.model.eval()
    data = prepare_data(graph, loaded)
    node_part = StoreReader(str(store)).node_part()
    s: dict[str, np.ndarray] = {"halo": score_parts_halo(model, data, node_part, device="cpu")}
    linked = copy.copy(data)
    linked.graph_id = torch.from_numpy(link_majority_parts(data.edge_index, node_part).astype(np.int64))
    s["links"] = score_data(model, linked, device="cpu")
    with torch.no_grad():
        o = model(data.x, data.edge_index)
        s["global"] = model.score(o).numpy()
        s["nbr-enc"] = neighbour_contrast(o.h, data.edge_index)
        s["nbr-proj"] = neighbour_contrast(model.head(o.h), data.edge_index)
        s["nbr-l0"] = neighbour_contrast(model.encoder.input_proj(data.x), data.edge_index)
        for k, p in enumerate(o.edge_probs):
            s[f"edge-l{k}"] = edge_suspicion(p, data.edge_index, data.num_nodes)
        s["nbr-cosine"] = neighbour_contrast(data.x, data.edge_index)
    res = {c: round(auroc(y[val], v[val]), 4) for c, v in s.items()}
    edges_kept = StoreReader(str(store)).manifest["partition"].get("edges_kept")
    return {"dataset": path.stem, "mix": mix, "hops": hops, "contrast": contrast, "swap": swap, "hidden": hidden,
            "jump": jump, "loss": loss, "tau": tau, "lr": SETTINGS["lr"] if lr is None else lr,
            "edges_kept": edges_kept, "seed": seed, "epochs": epochs, "val_nodes": int(val.sum()),
            "val_anomalies": int((y[val] == 1).sum()), "pretrain_s": round(pre_s, 1), "val_auroc": res}


def table(rows: list[dict[str, Any]]) -> str:
    """Markdown: one row per (graph, mix, seed), one column per context."""
    cols = [c for c in CONTEXTS if any(c in r["val_auroc"] for r in rows)]
    lines = ["| graph (val nodes / anomalies) | mix | cluster hops | contrast | edges kept | seed | " + " | ".join(cols)
             + " |", "|---|---|---|---|---|---|" + "---|" * len(cols)]
    for r in rows:
        v = r["val_auroc"]
        ek = r.get("edges_kept")
        lines.append(f"| {r['dataset']} ({r['val_nodes']} / {r['val_anomalies']}) | {r['mix']} | {r.get('hops', 0)} | "
                     f"{r.get('contrast', 'graph')}{' swap ' + format(r['swap'], 'g') if r.get('swap') else ''}"
                     f"{' hidden ' + str(r['hidden']) if r.get('hidden', 64) != 64 else ''}"
                     f"{' jump ' + r['jump'] if r.get('jump', 'last') != 'last' else ''}"
                     f"{' ' + r['loss'] + ' tau ' + format(r['tau'], 'g') if r.get('loss', 'contrastive') != 'contrastive' else ''}"
                     f"{' lr ' + format(r['lr'], 'g') if r.get('lr') not in (None, 5e-3) else ''} | "
                     f"{'' if ek is None else f'{100 * ek:.0f}%'} | {r['seed']} | "
                     + " | ".join(f"{v[c]:.3f}" if c in v else "" for c in cols) + " |")
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    p = ArgumentParser(prog="python -m bench.labelfree_contexts", description=__doc__.split("\n\n")[0],
                       formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--datasets", nargs="+", default=["inj_cora", "books"],
                   help="names under ../shared/data or .npz paths")
    p.add_argument("--mixes", nargs="+", default=["inject", "inject,features,edges"], help="--corruption-mix values")
    p.add_argument("--cluster-hops", nargs="+", type=int, default=[0], help="partitioning.build --cluster-hops values")
    p.add_argument("--contrasts", nargs="+", default=["graph"], choices=["graph", "neighbors", "ego", "local"],
                   help="pretrain --contrast values (with a local contrast, 'global' and 'halo' score with it)")
    p.add_argument("--swaps", nargs="+", type=float, default=[0.0], help="pretrain --swap-features values")
    p.add_argument("--hidden", nargs="+", type=int, default=[64], help="pretrain --hidden values")
    p.add_argument("--jumps", nargs="+", default=["last"], choices=["last", "cat"], help="pretrain --jump values")
    p.add_argument("--losses", nargs="+", default=["contrastive"], choices=["contrastive", "logistic"],
                   help="pretrain --loss values")
    p.add_argument("--taus", nargs="+", type=float, default=[0.1], help="pretrain --tau values")
    p.add_argument("--lr", type=float, default=None, help="pre-training learning rate (default: the harness's)")
    p.add_argument("--seeds", nargs="+", type=int, default=[0], help="build / pre-training seeds")
    p.add_argument("--epochs", type=int, default=10, help="pre-training epochs")
    p.add_argument("--out", default="runs/lf", help="checkpoints, stores and results.jsonl")
    p.add_argument("--verbose", action="store_true")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    setup_logging(args.verbose)
    torch.set_num_threads(1)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    for ds, mix, hops, contrast, swap, hidden, jump, loss, tau, seed in itertools.product(
            args.datasets, args.mixes, args.cluster_hops, args.contrasts, args.swaps, args.hidden, args.jumps,
            args.losses, args.taus, args.seeds):
        r = run_one(ds, mix, seed, args.epochs, out, hops, contrast, swap, hidden, jump, loss, tau, args.lr)
        log.info("%s", json.dumps(r))
        with open(out / "results.jsonl", "a") as f:
            f.write(json.dumps(r) + "\n")
        rows.append(r)
    print(table(rows))
    return 0


if __name__ == "__main__":
    run_cli(main)
