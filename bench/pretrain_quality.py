"""GCCAD-pre without labels: pre-train on a generated graph's corrupt subgraphs, score the real graph.

Example (BENCHMARKS.md):
    python -m bench.pretrain_quality --nodes 100000 --k 20 --epochs 2 --out /tmp/pq100k
    python -m bench.pretrain_quality --graph /tmp/h1big.npz --store /tmp/big.zarr --epochs 1 --out /tmp/pq1m

Steps: generate a graph with planted anomalies (:mod:`partitioning.synthetic`) unless ``--graph`` is given;
build its store (``python -m partitioning.build``) unless ``--store`` exists; run ``gcad_dist.pretrain``
(Ray Train) on it; then score the original graph with the pre-trained model and report the AUROC / AUPRC
of the score against the generator's planted labels, which training never saw:

* ``per part``: each K-means part of the store is one graph (its own context q), as in pre-training;
* ``link parts``: each node is scored in the part most of its neighbours belong to
  (:func:`gcad_dist.score.link_majority_parts`): the context its links tie it to;
* ``halo parts``: each node in its own part, with the part's 1-hop halo (the nodes of other parts its
  nodes link to) as message-passing inputs (:func:`gcad_dist.score.score_parts_halo`);
* ``whole graph``: one context over the whole graph (:func:`gcad_dist.score.score_graph`), only for
  graphs up to ``--whole-graph-max`` nodes (full-batch memory);
* ``corrupt``: AUROC of injected-node detection on the store's own corrupt subgraphs (the training task).
"""

from __future__ import annotations

import argparse
import json
import logging
import subprocess
import sys
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script or with -m from the repo

from gcad_dist.cli import ArgumentParser, UsageError, run_cli, setup_logging  # noqa: E402
from partitioning.synthetic import ANOMALY_TYPES  # noqa: E402

log = logging.getLogger("bench.pretrain_quality")


@dataclass
class QualityConfig:
    out: str
    graph: str | None = None
    store: str | None = None
    nodes: int = 100_000
    avg_degree: float = 20.0
    k: str = "20"
    seed: int = 0
    workers: int = 1
    epochs: int = 2
    batch_size: int = 1024
    fanouts: str = "10,5"
    sample_threshold: int = 50_000
    max_steps_per_epoch: int = 0
    hidden: int = 64
    conv: str = "gin"
    lr: float = 1e-3
    whole_graph_max: int = 200_000
    reuse_pretrain: bool = False


#: partitioning.synthetic's codes, named for the report (every planted kind, the camouflage one included)
ANOMALY_NAMES = {code: name.replace("_", " ") + (" (cliques)" if name == "structural" else "")
                 for code, name in ANOMALY_TYPES.items() if code}


def _anomaly_types(path: Path) -> np.ndarray | None:
    """The generator's ``anomaly_type`` array when the graph file has one (``.npz`` from partitioning.synthetic)."""
    if path.suffix != ".npz":
        return None
    with np.load(path) as z:
        return np.asarray(z["anomaly_type"]) if "anomaly_type" in z.files else None


def _auc(y: np.ndarray, s: np.ndarray) -> tuple[float, float]:
    from sklearn.metrics import average_precision_score, roc_auc_score

    return float(roc_auc_score(y, s)), float(average_precision_score(y, s))


def main(argv: list[str] | None = None) -> int:
    p = ArgumentParser(prog="python -m bench.pretrain_quality", description=__doc__.split("\n\n")[0],
                       formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    d = QualityConfig(out="")
    p.add_argument("--out", required=True, help="working folder (graph, store, pre-training run, results.json)")
    p.add_argument("--graph", default=None, help="labelled graph to use instead of generating one")
    p.add_argument("--store", default=None, help="store of that graph (built when absent)")
    p.add_argument("--nodes", type=int, default=d.nodes, help="nodes of the generated graph")
    p.add_argument("--avg-degree", type=float, default=d.avg_degree, help="mean degree of the generated graph")
    p.add_argument("--k", default=d.k, help="K-means parts for the store build (or 'auto')")
    p.add_argument("--seed", type=int, default=d.seed, help="generator / build / training seed")
    p.add_argument("--workers", type=int, default=d.workers, help="Ray Train workers")
    p.add_argument("--epochs", type=int, default=d.epochs, help="pre-training epochs")
    p.add_argument("--batch-size", type=int, default=d.batch_size, help="seed nodes per worker per step")
    p.add_argument("--fanouts", default=d.fanouts, help="neighbours per hop")
    p.add_argument("--sample-threshold", type=int, default=d.sample_threshold,
                   help="subgraphs above this many nodes are neighbour-sampled")
    p.add_argument("--max-steps-per-epoch", type=int, default=d.max_steps_per_epoch, help="0 = whole store")
    p.add_argument("--hidden", type=int, default=d.hidden, help="hidden width")
    p.add_argument("--conv", default=d.conv, help="node-update convolution")
    p.add_argument("--lr", type=float, default=d.lr, help="peak learning rate")
    p.add_argument("--whole-graph-max", type=int, default=d.whole_graph_max,
                   help="also score the whole graph as one context when it has at most this many nodes")
    p.add_argument("--reuse-pretrain", action="store_true",
                   help="evaluate the model already in <out>/pre/final instead of pre-training again")
    cfg = QualityConfig(**vars(p.parse_args(argv)))
    setup_logging()
    out = Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)

    from partitioning.io import load_graph, save_npz

    graph_path = Path(cfg.graph) if cfg.graph else out / f"synthetic_{cfg.nodes}.npz"
    if not graph_path.exists():
        if cfg.graph:
            raise UsageError(f"--graph: {cfg.graph} does not exist")
        from partitioning.synthetic import SyntheticConfig, synthesize

        log.info("generating a %d-node graph", cfg.nodes)
        sg = synthesize(SyntheticConfig(nodes=cfg.nodes, avg_degree=cfg.avg_degree, seed=cfg.seed))
        save_npz(sg.graph, graph_path, extra=sg.extra_arrays())
    store = Path(cfg.store) if cfg.store else out / "store.zarr"
    if not store.exists():
        log.info("building the store %s", store)
        subprocess.run([sys.executable, "-m", "partitioning.build", "--graph", str(graph_path), "--out", str(store),
                        "--k", cfg.k, "--seed", str(cfg.seed), "--no-plot", "--no-progress"], check=True)

    from gcad_dist.pretrain import PretrainConfig, run

    final = out / "pre" / "final"
    if cfg.reuse_pretrain and (final / "model.pt").exists():
        m = json.loads((out / "pre" / "metrics.json").read_text())
        summary = {"global_step": m["history"][-1]["step"], "reused": True}
        log.info("reusing the pre-trained model in %s", final)
    else:
        summary = run(PretrainConfig(
            store=str(store), out=str(out / "pre"), workers=cfg.workers, epochs=cfg.epochs, batch_size=cfg.batch_size,
            fanouts=cfg.fanouts, sample_threshold=cfg.sample_threshold, max_steps_per_epoch=cfg.max_steps_per_epoch,
            hidden=cfg.hidden, conv=cfg.conv, lr=cfg.lr, seed=cfg.seed, overwrite=True, max_failures=0,
        ))

    from gcad_dist.score import load_checkpoint_model, prepare_data, score_data
    from partitioning.store.reader import StoreReader

    graph = load_graph(graph_path)
    if graph.y is None:
        raise UsageError(f"--graph: {graph_path} has no labels to evaluate against")
    if (graph.y < 0).any():
        raise UsageError(f"--graph: {graph_path} is partly labelled; this benchmark needs every node's label "
                         "(use gcad_dist.score, which evaluates on the labelled nodes)")
    y = graph.y.astype(np.int64)
    loaded = load_checkpoint_model(out / "pre" / "final")
    reader = StoreReader(str(store))
    results: dict = {"config": asdict(cfg), "pretrain": summary, "anomalies": int(y.sum()), "nodes": int(y.size)}
    torch.set_num_threads(max(1, torch.get_num_threads()))

    kinds = _anomaly_types(graph_path)
    node_part = reader.node_part()
    if node_part is not None:
        from gcad_dist.score import link_majority_parts, score_parts_halo

        data = prepare_data(graph, loaded)

        def in_parts(parts: np.ndarray) -> np.ndarray:
            data.graph_id = torch.from_numpy(parts.astype(np.int64))
            return score_data(loaded.model, data, device="cpu", batch_size=1)

        scorers = {"per_part": lambda: in_parts(node_part),
                   "link_part": lambda: in_parts(link_majority_parts(data.edge_index, node_part)),
                   "halo_part": lambda: score_parts_halo(loaded.model, data, node_part, device="cpu")}
        for key, scorer in scorers.items():
            s = scorer()
            results[f"{key}_auroc"], results[f"{key}_auprc"] = _auc(y, s)
            if kinds is not None:  # AUROC of each planted kind against the normal nodes
                results[f"{key}_auroc_by_kind"] = {
                    name: _auc((kinds == code)[(kinds == code) | (kinds == 0)], s[(kinds == code) | (kinds == 0)])[0]
                    for code, name in ANOMALY_NAMES.items() if (kinds == code).any()}
    if graph.num_nodes <= cfg.whole_graph_max:
        data = prepare_data(graph, loaded)
        s = score_data(loaded.model, data, device="cpu")
        results["whole_auroc"], results["whole_auprc"] = _auc(y, s)
    # The training task itself, on a few corrupt subgraphs (injected nodes = 1), and what the link
    # remover does there at evaluation (keep iff p > 0.5), per layer, for edges between two own nodes
    # and for edges between an own and an injected node.
    ys, ss = [], []
    kept = np.zeros((2, loaded.model.config.num_layers))
    edges = np.zeros(2)
    model = loaded.model.eval()
    for i in range(min(len(reader), 5)):
        sub = reader.get(i)
        # store features are already in the checkpoint's space (normalised at build): no second z-score
        d = prepare_data(sub, loaded, normalize="none", source=f"subgraph {i}")
        with torch.no_grad():
            o = model(d.x, d.edge_index)
            ss.append(model.score(o).float().numpy())
        yi = sub.y.numpy().astype(bool)
        y_src, y_dst = yi[d.edge_index[0].numpy()], yi[d.edge_index[1].numpy()]
        mixed, both_own = torch.from_numpy(y_src != y_dst), torch.from_numpy(~y_src & ~y_dst)
        for row, sel in enumerate((both_own, mixed)):
            edges[row] += int(sel.sum())
            for layer, p in enumerate(o.edge_probs):
                kept[row, layer] += int(((p > 0.5) & sel).sum())
        ys.append(yi.astype(np.int64))
    results["corrupt_auroc"], results["corrupt_auprc"] = _auc(np.concatenate(ys), np.concatenate(ss))
    if o.edge_probs:
        results["edge_keep_share"] = {"own-own": (kept[0] / max(edges[0], 1)).tolist(),
                                      "own-injected": (kept[1] / max(edges[1], 1)).tolist()}

    (out / "results.json").write_text(json.dumps(results, indent=2))
    print(f"\nGCCAD-pre, no labels: {graph_path} ({y.size:,} nodes, {int(y.sum()):,} planted anomalies), "
          f"{cfg.epochs} epoch(s), {summary.get('global_step', '?')} steps on {cfg.workers} worker(s)")
    print("\n| evaluation | AUROC | AUPRC |\n|---|---|---|")
    for key, name in (("per_part", "planted anomalies, context per K-means part"),
                      ("link_part", "planted anomalies, context = the part of the node's neighbours"),
                      ("halo_part", "planted anomalies, context per K-means part, links into other parts kept"),
                      ("whole", "planted anomalies, one context for the whole graph"),
                      ("corrupt", "injected nodes of the corrupt subgraphs (training task)")):
        if f"{key}_auroc" in results:
            print(f"| {name} | {results[f'{key}_auroc']:.3f} | {results[f'{key}_auprc']:.3f} |")
    if "edge_keep_share" in results:
        k = results["edge_keep_share"]
        print("\nshare of corrupt-subgraph edges the link remover keeps at evaluation, per layer: own-own "
              + ", ".join(f"{v:.3f}" for v in k["own-own"]) + "; own-injected " + ", ".join(f"{v:.3f}" for v in k["own-injected"]))
    for key in ("per_part", "link_part", "halo_part"):
        if f"{key}_auroc_by_kind" in results:
            kinds_txt = ", ".join(f"{k} {v:.3f}" for k, v in results[f"{key}_auroc_by_kind"].items())
            print(f"\nAUROC by planted kind ({key.replace('_', ' ')}): {kinds_txt}")
    return 0


if __name__ == "__main__":
    run_cli(main)
