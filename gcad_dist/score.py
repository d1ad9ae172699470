"""Per-node anomaly scores of a graph under a checkpoint: ``python -m gcad_dist.score``.

Reads any gcad-dist checkpoint (pre-training ``runs/pre/final``, fine-tuning ``runs/ft/final``,
supervised ``gcad_dist.train`` output), applies the feature normalisation the model was trained
with (``extra["normalize"]`` in the checkpoint: pre-training records the store's, ``power`` for a
store built with the default ``partitioning.build --normalize`` since session 39; ``none`` when absent, i.e. raw
features), fitted on the scored graph's own statistics, and writes one Parquet row
per node: ``node_id`` (the node's index in the input graph), ``score`` (higher = more anomalous;
GCCAD: 1 - cos(h_i, q_g)), ``label`` when the graph has labels (null where unknown on a partly
labelled graph) and ``graph_id`` for multi-graph data (the part of each node with ``--parts``).
With labels, AUROC / AUPRC / Recall@K over the labelled nodes (all nodes of a fully labelled graph)
are printed, with how many labelled nodes they cover, and written beside the Parquet file as
``<out>.metrics.json``. Multi-graph data adds the per-graph mean, said with how many graphs it covers
(graphs whose labelled nodes hold both classes). With ``--parts`` the per-part mean (over the parts
that happen to contain an anomaly) is only logged and kept in the JSON under ``parts``: it is not a
figure of the graph.

Memory: scoring is exact and full-batch per graph (the context q_g needs every node of the graph).
Peak memory is dominated by the link predictor, about ``E x 3 x hidden x 4`` bytes per layer for E
directed edges (hidden 64: ~0.8 KB per edge, i.e. ~80 GB for 10^8 edges), so a single graph of
tens of millions of edges needs a GPU with enough memory or a large-memory CPU host. Multi-graph data
(``graph_id``) is scored ``--batch-size`` whole graphs at a time, which is exact and bounded. A label-free
(local recipe) checkpoint has no link predictor: its default scoring needs about 3 KB per node with 20 directed links
each (the generated 1M-node graph: 3.1 GB; 5M nodes and 100M links: 12 GB; session 55, when the contexts came to be
averaged over the features rather than over the five members' projections: 6.3 GB at 1M before). Running out of
memory ends with a one-line error that says so, not a stack trace.
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import json
import logging
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from gcad_dist.allocator import retain_freed_memory
from gcad_dist.cli import ArgumentParser, DefaultsHelpFormatter, UsageError, run_cli, setup_logging
from gcad_dist.data.label_inputs import LABEL_COLUMNS
from gcad_dist.provenance import environment
from partitioning.errors import GraphInputError
from partitioning.features import NORMALIZE_CHOICES as STORE_NORMALIZATIONS
from partitioning.features import POWER_ALL_ROWS, recorded_normalization

log = logging.getLogger("gcad_dist.score")

__all__ = ["ScoreConfig", "LoadedModel", "load_checkpoint_model", "prepare_data", "score_data", "score_graph",
           "score_parts_halo", "link_majority_parts", "score_metrics", "summary_text", "main"]

NORMALIZE_CHOICES = ("auto", *STORE_NORMALIZATIONS)  # auto = the checkpoint's own
# --parts --context: halo (default) = its own part plus the part's 1-hop halo (score_parts_halo); own = the
# node's K-means part alone; links = the part most of its neighbours are in (link_majority_parts)
CONTEXTS = ("halo", "own", "links")
#: ``--feature-view``: where the forest corroborates the contrast, or where the links say nothing about the features
#: (then the distance to the 5th nearest node in feature space: the local recipe's), on every graph, or never
FEATURE_VIEWS = ("auto", "always", "off")


@dataclass
class ScoreConfig:
    """Settings of ``python -m gcad_dist.score`` (one field per command-line option)."""

    checkpoint: str
    graph: str
    out: str
    batch_size: int = 0  # multi-graph data: graphs per forward pass (0 = all at once)
    parts: str | None = None  # store whose K-means parts give each node its context (large graphs)
    context: str = "halo"  # with --parts: "halo", "own" or "links" (see CONTEXTS)
    # the label-free local model's context when scoring: "1" = the neighbours, "2" = the two-hop ball, "auto" = the
    # ball switch (the ball when it makes a group stand out that the neighbours hide); None = as trained
    context_hops: str | None = None
    # the label-free local model: also scored against the loose context, larger robust z kept; None = as trained
    loose_context: bool | None = None
    # the label-free local model: an isolation forest on the raw features added where it corroborates the contrast
    # (gcad_dist.feature_view): "auto" (where it corroborates, or where the links say nothing about the features: there
    # the distance to the 5th nearest node in feature space instead), "always" or "off"; None = as trained
    feature_view: str | None = None
    # the label-free local model: the score's top nodes generalised by a cross-fitted linear classifier where it tells
    # them apart (gcad_dist.signature_view): "auto", "always" or "off"; None = as trained
    signature_view: str | None = None
    device: str = "auto"
    normalize: str = "auto"
    threads: int = 0
    verbose: bool = False


@dataclass
class LoadedModel:
    """A model rebuilt from a checkpoint directory."""

    model: torch.nn.Module
    config: Any  # GCCADConfig or BaselineConfig
    kind: str  # "gccad" or a baseline name
    extra: dict
    path: str

    @property
    def in_dim(self) -> int:
        return int(self.config.in_dim)

    @property
    def label_inputs(self) -> bool:
        """Trained with ``gcad_dist.train --label-inputs``: its last input columns are neighbour-label features."""
        return bool(self.extra.get("label_inputs", False))

    @property
    def normalize(self) -> str:
        """Feature normalisation the model was trained with (``none`` when the checkpoint does not say;
        ``power-all-rows`` for a ``power`` checkpoint written before session 40, which keeps its transform)."""
        return recorded_normalization(self.extra)

    @property
    def input_blocks(self) -> list[str]:
        """The feature normalisations its members read, one input block each (:class:`~gcad_dist.model.
        candidate_ensemble.CandidateEnsemble`), the checkpoint's own first; ``[normalize]`` for a one-block model."""
        from gcad_dist.checkpoint import INPUT_BLOCKS_KEY

        blocks = self.extra.get(INPUT_BLOCKS_KEY) or []
        return [self.normalize, *[str(b) for b in blocks[1:]]]


def _dataclass_from_dict(cls: type, d: dict, source: str) -> Any:
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(d) - names)
    if unknown:
        log.warning("%s: ignoring unknown model-config keys %s (written by a newer version?)", source, unknown)
    try:
        return cls(**{k: v for k, v in d.items() if k in names})
    except (TypeError, ValueError) as e:
        raise GraphInputError(source, f"bad model config in checkpoint: {e}") from None


def load_checkpoint_model(checkpoint: str | Path) -> LoadedModel:
    """Rebuild the model stored in ``checkpoint`` (a directory with ``model.pt``, or the file).

    Raises:
        FileNotFoundError: no ``model.pt`` there.
        GraphInputError: unreadable file, unknown model kind, or weights that do not fit the config.
    """
    from gcad_dist.checkpoint import CANDIDATES_KEY, FOREST_KEY, SNAPSHOTS_KEY, load_model_file
    from gcad_dist.model.snapshots import SnapshotEnsemble

    src = str(checkpoint)
    try:
        ck = load_model_file(checkpoint)
    except (FileNotFoundError, GraphInputError):  # CheckpointError: refused unpickling, unreadable file
        raise
    except Exception as e:  # noqa: BLE001 - any unpickling / zip error is a bad user file
        raise GraphInputError(src, f"cannot read checkpoint ({type(e).__name__}: {str(e).splitlines()[0][:200]})") from None
    if not isinstance(ck, dict) or not {"config", "state_dict"} <= set(ck):
        raise GraphInputError(src, "not a gcad-dist checkpoint (model.pt lacks 'config' / 'state_dict')")
    extra = dict(ck.get("extra") or {})
    kind = str(extra.get("model", "gccad"))
    if kind == "gccad":
        from gcad_dist.model import GCCAD, GCCADConfig

        cfg = _dataclass_from_dict(GCCADConfig, ck["config"], src)
        model = GCCAD(cfg)
    else:
        from gcad_dist.model.baselines import BASELINES, BaselineConfig, build_baseline

        if kind not in BASELINES:
            raise GraphInputError(src, f"unknown model kind {kind!r} in checkpoint")
        cfg = _dataclass_from_dict(BaselineConfig, ck["config"], src)
        model = build_baseline(cfg)
    snapshots = ck.get(SNAPSHOTS_KEY) or []
    members = ck.get(CANDIDATES_KEY) or []
    try:
        if members:  # a candidate ensemble (gcad_dist.train --contrast auto): every kept candidate, standardised
            label_columns = LABEL_COLUMNS if extra.get("label_inputs") else 0
            model = _candidate_ensemble(members, model, kind, src,  # the model built above is its first member
                                        int(cfg.in_dim) - label_columns, label_columns)
        else:
            model.load_state_dict(ck["state_dict"])
            if len(snapshots) > 1:  # a snapshot ensemble: score with the mean over its states, as training did
                model = SnapshotEnsemble(model, snapshots)
        if ck.get(FOREST_KEY):  # gcad_dist.train's forest view: the model and the forest, blended by rank
            model = _forest_view(ck[FOREST_KEY], model, src)
    except RuntimeError as e:
        first = str(e).splitlines()[1].strip() if len(str(e).splitlines()) > 1 else str(e)
        raise GraphInputError(src, f"weights do not match the stored model config: {first[:200]}") from None
    model.eval()
    return LoadedModel(model=model, config=cfg, kind=kind, extra=extra, path=src)


def _candidate_ensemble(members: list[dict], primary: torch.nn.Module, kind: str, src: str, width: int = 0,
                        label_columns: int = 0) -> torch.nn.Module:
    """Rebuild a :class:`~gcad_dist.model.candidate_ensemble.CandidateEnsemble` from its checkpoint record;
    ``primary`` is the (unloaded) model of the checkpoint's top-level config, which is the first member's. Members
    that read input blocks of their own (a ``block`` each) get blocks of ``width`` columns and the ``label_columns``."""
    from gcad_dist.model import GCCAD, GCCADConfig
    from gcad_dist.model.candidate_ensemble import CandidateEnsemble
    from gcad_dist.model.snapshots import SnapshotEnsemble

    if kind != "gccad":
        raise GraphInputError(src, f"a candidate ensemble of model kind {kind!r}: only gccad has candidates")
    from gcad_dist.checkpoint import EXEMPLAR_KIND, ISOLATION_FOREST_KIND, MEMBER_STATE_KEYS
    from gcad_dist.model.exemplar import ExemplarScorer
    from gcad_dist.model.isolation_forest import IsolationForestScorer

    # gcad_dist.finetune's scorers without a GCCAD config: (module, what the message calls it)
    scorers = {ISOLATION_FOREST_KIND: (IsolationForestScorer, "isolation forest"),
               EXEMPLAR_KIND: (ExemplarScorer, "exemplar scorer")}
    built = []
    for i, rec in enumerate(members):
        if isinstance(rec, dict) and rec.get("kind") in scorers:
            cls, what = scorers[rec["kind"]]
            try:
                built.append(cls.from_state(rec[MEMBER_STATE_KEYS[rec["kind"]]]))
            except (KeyError, TypeError, ValueError) as e:
                raise GraphInputError(src, f"malformed {what} in checkpoint ({type(e).__name__}: {e})") from None
            if not {"mean", "std"} <= set(rec):
                raise GraphInputError(src, "malformed candidate ensemble in checkpoint (a member without mean, std)")
            continue
        if not isinstance(rec, dict) or not {"config", "states", "mean", "std"} <= set(rec) or not rec["states"]:
            raise GraphInputError(src, "malformed candidate ensemble in checkpoint (each member needs config, "
                                       "states, mean, std)")
        m = primary if i == 0 else GCCAD(_dataclass_from_dict(GCCADConfig, rec["config"], src))
        m.load_state_dict(rec["states"][0])
        built.append(SnapshotEnsemble(m, rec["states"]) if len(rec["states"]) > 1 else m)
    blocks = [int(r.get("block", 0)) for r in members] if any("block" in r for r in members) else None
    views = [r.get("views") for r in members]  # a member's label-free views (gcad_dist.finetune's zero-shot one)
    try:
        return CandidateEnsemble(built, [float(r["mean"]) for r in members], [float(r["std"]) for r in members],
                                 blocks=blocks, width=width, label_columns=label_columns, views=views)
    except ValueError as e:
        raise GraphInputError(src, f"malformed candidate ensemble in checkpoint ({e})") from None


def _forest_view(record: dict, model: torch.nn.Module, src: str) -> torch.nn.Module:
    """Rebuild a :class:`~gcad_dist.model.rank_blend.RankBlend` of ``model`` and the checkpoint's forest."""
    from gcad_dist.model.rank_blend import EmpiricalCDF, RankBlend
    from gcad_dist.model.tree_blend import trees_from_state

    try:
        forest = trees_from_state(record["forest"])  # the trees blend since session 66, a random forest before
        cdfs = [EmpiricalCDF(c["values"], c["cdf"]) for c in record["cdfs"]]
        return RankBlend([model, forest], cdfs, weights=record.get("weights"))  # absent before session 62: equal
    except (KeyError, TypeError, ValueError) as e:
        raise GraphInputError(src, f"malformed forest view in checkpoint ({type(e).__name__}: {e})") from None


def _resolve_normalize(requested: str, loaded: LoadedModel) -> str:
    """``auto``: the checkpoint's own normalisation; any other choice as it is (also ``power-all-rows``, which
    ``auto`` resolves to for a session-39 checkpoint)."""
    if requested not in NORMALIZE_CHOICES and requested != POWER_ALL_ROWS:
        raise UsageError(f"--normalize: unknown value {requested!r} (choose from {', '.join(NORMALIZE_CHOICES)})")
    return loaded.normalize if requested == "auto" else requested


def prepare_data(graph: Any, loaded: LoadedModel, normalize: str = "auto", source: str | None = None):
    """The graph as a PyG ``Data`` with the model's feature normalisation; checks the feature width.

    ``graph`` is a path, a :class:`partitioning.graph.Graph` or a PyG ``Data``.
    """
    from gcad_dist.train import normalize_features
    from partitioning.graph import Graph
    from partitioning.io import load_graph

    if isinstance(graph, (str, Path)):
        source = source or str(graph)
        graph = load_graph(graph)
    if isinstance(graph, Graph):
        source = source or graph.source
        data = graph.to_data()
    else:
        data = copy.copy(graph)  # shallow: x is replaced below, the caller's Data is not modified
        source = source or "<data>"
    label_cols = LABEL_COLUMNS if loaded.label_inputs else 0
    if data.num_features + label_cols != loaded.in_dim:
        raise GraphInputError(
            source,
            f"has {data.num_features} node features but the checkpoint {loaded.path} expects "
            f"{loaded.in_dim - label_cols} (the model must be used on graphs with the features it was trained on)",
        )
    blocks = loaded.input_blocks
    if len(blocks) > 1:  # members reading differently normalised features: one block each, side by side
        if normalize not in ("auto", *blocks[:1]):
            raise UsageError(f"--normalize {normalize}: the checkpoint {loaded.path} holds models trained on "
                             f"differently normalised features ({', '.join(blocks)}); each reads its own, so "
                             "--normalize must be auto")
        raw = data.x.float()
        data.x = torch.cat([normalize_features(raw, how) for how in blocks], dim=1)
    else:
        data.x = normalize_features(data.x.float(), _resolve_normalize(normalize, loaded))
    if label_cols:
        data = _with_known_labels(data, source)
    return data


def _with_known_labels(data: Any, source: str) -> Any:
    """A model trained with ``--label-inputs`` reads, for each node, its neighbours known to be anomalous: here every
    node the graph labels 1 (none when it has no labels)."""
    from gcad_dist.data.label_inputs import neighbour_label_features

    y = getattr(data, "y", None)
    if y is None:
        log.warning("%s: the model was trained with label inputs but the graph has no labels; every node's label "
                    "columns are 0 (no neighbour known to be anomalous)", source)
        anomalous = torch.zeros(data.num_nodes, dtype=torch.bool)
    else:
        anomalous = torch.as_tensor(y) == 1
        log.info("%s: label inputs from the %d nodes the graph labels anomalous", source, int(anomalous.sum()))
    feats = neighbour_label_features(data.edge_index, int(data.num_nodes), anomalous)
    data.x = torch.cat([data.x, feats.to(data.x.dtype)], dim=1)
    return data


def _resolve_device(device: str) -> torch.device:
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device != "cpu" and not device.startswith("cuda"):
        raise UsageError(f"--device: unknown device {device!r} (auto, cpu, cuda, cuda:N)")
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise UsageError(f"--device: {device} requested but no CUDA device is available")
    return torch.device(device)


@torch.no_grad()
def link_majority_parts(edge_index: torch.Tensor, node_part: np.ndarray) -> np.ndarray:
    """Re-assign every node to the part that most of its neighbours belong to (ties: lowest part id;
    nodes without neighbours keep their own part).

    K-means parts group nodes by *features*. A node whose features belong to another community (the
    anomaly GCCAD looks for) is therefore put into the part of its features, where it looks normal;
    scoring it in the part where its *links* are compares it with the context it is inconsistent
    with. Label-free: uses only the graph and the store's parts. Vectorised (one bincount over
    node x part keys).
    """
    part = np.asarray(node_part, dtype=np.int64)
    n = part.size
    k = int(part.max()) + 1 if n else 0
    src = edge_index[0].numpy().astype(np.int64)
    dst = edge_index[1].numpy().astype(np.int64)
    votes = np.bincount(dst * k + part[src], minlength=n * k).reshape(n, k)
    out = votes.argmax(axis=1)
    isolated = votes.max(axis=1) == 0
    out[isolated] = part[isolated]
    return out.astype(np.int32)


def score_parts_halo(model: torch.nn.Module, data: Any, node_part: np.ndarray, device: str = "auto") -> np.ndarray:
    """Score every node in its own part *with the part's 1-hop halo*: the subgraph induced by the part's
    nodes and every node of another part they link to; the context covers the part's own nodes only.

    With ``own`` parts, a node's links into other parts are cut, so its embedding ignores part of its
    neighbourhood (structural anomalies such as cliques of random nodes consist mostly of such links).
    The halo restores the full 1-hop neighbourhood of every scored node, as in pre-training's corrupt
    subgraphs, where own nodes keep their links to the injected nodes of other parts. Halo nodes are
    message-passing inputs only: they are neither in the context sums nor scored here. One forward pass
    per part (a loop over parts; everything inside is vectorised).
    """
    from torch_geometric.utils import subgraph

    from gcad_dist.model import GCCAD
    from gcad_dist.model.snapshots import base_model

    dev = _resolve_device(device)
    model = model.to(dev).eval()
    part = torch.as_tensor(np.asarray(node_part), dtype=torch.long)
    n = data.num_nodes
    src, dst = data.edge_index[0], data.edge_index[1]
    ew = getattr(data, "edge_weight", None)
    scores = np.empty(n, dtype=np.float32)
    order = torch.argsort(part, stable=True)
    counts = torch.bincount(part, minlength=int(part.max()) + 1 if n else 0).tolist()
    part_src = part.index_select(0, src)
    crossing = part_src != part.index_select(0, dst)  # edges leaving their source's part, gathered once
    start = 0
    for k, c in enumerate(counts):
        own = order[start : start + c]
        start += c
        if c == 0:
            continue
        halo = torch.unique(dst[crossing & (part_src == k)])
        nodes = torch.cat([own, halo])
        ei, sub_w = subgraph(nodes, data.edge_index, edge_attr=ew, relabel_nodes=True, num_nodes=n)
        kwargs: dict[str, Any] = {}
        if sub_w is not None:
            kwargs["edge_weight"] = sub_w.to(dev)
        if isinstance(base_model(model), GCCAD):
            mask = torch.zeros(nodes.numel(), dtype=torch.bool)
            mask[:c] = True
            kwargs["context_mask"] = mask.to(dev)
        with torch.no_grad():
            out = model(data.x.index_select(0, nodes).to(dev), ei.to(dev), **kwargs)
            s = model.score(out).float()
        scores[own.numpy()] = s[:c].cpu().numpy()
    return scores


def score_data(model: torch.nn.Module, data: Any, device: str = "auto", batch_size: int = 0) -> np.ndarray:
    """Anomaly score of every node of ``data`` (eval mode; deterministic edge decisions).

    Single graph: one full-batch forward. Multi-graph data (``data.graph_id``): ``batch_size`` whole
    graphs per forward (0 = all together); exact either way, since contexts are per graph.
    """
    from gcad_dist.supervised import predict

    dev = _resolve_device(device)
    model = model.to(dev).eval()
    gid = getattr(data, "graph_id", None)
    if gid is None or batch_size <= 0:
        d = copy.copy(data)  # .to() moves a Data's tensors in place: the caller's data stays where it is
        if gid is not None:
            # graph ids may be arbitrary integers: relabel to 0..G-1 for the model's batch vector
            d.graph_id = torch.unique(gid, return_inverse=True)[1]
        return predict(model, d.to(dev)).cpu().numpy().astype(np.float32)

    # Group whole graphs: chunk c holds graphs [c*batch_size, (c+1)*batch_size) in id order.
    from torch_geometric.utils import subgraph

    uniq, inv = torch.unique(gid, return_inverse=True)
    chunk = inv // batch_size
    scores = np.empty(data.num_nodes, dtype=np.float32)
    n_chunks = int(chunk.max()) + 1 if chunk.numel() else 0
    for c in range(n_chunks):
        nodes = (chunk == c).nonzero().flatten()
        ei, _ = subgraph(nodes, data.edge_index, relabel_nodes=True, num_nodes=data.num_nodes)
        from torch_geometric.data import Data

        part = Data(x=data.x[nodes], edge_index=ei, graph_id=inv[nodes] - c * batch_size)
        scores[nodes.numpy()] = predict(model, part.to(dev)).cpu().numpy()
    return scores


def _context_parts(store: str, data: Any, context: str) -> np.ndarray:
    """The part each node is scored in (``--parts`` / ``--context``); UsageError when the store does not
    belong to the graph."""
    from partitioning.store.format import StoreError
    from partitioning.store.reader import StoreReader

    try:
        node_part = StoreReader(store).node_part()
    except StoreError as e:
        raise UsageError(f"--parts: {e}") from e
    if node_part is None:
        raise UsageError(f"--parts: {store} holds no node_part array (built from many small graphs?)")
    if node_part.size != data.num_nodes:
        raise UsageError(f"--parts: {store} was built from a graph of {node_part.size} nodes, "
                         f"this graph has {data.num_nodes}")
    if context in ("own", "halo"):
        return node_part
    return link_majority_parts(data.edge_index, node_part)


def score_graph(checkpoint_dir: str | Path, graph: Any, device: str = "auto", normalize: str = "auto",
                batch_size: int = 0) -> np.ndarray:
    """Per-node anomaly scores (float32 [N], node order of ``graph``) under the checkpoint.

    ``graph``: a path (anything :func:`partitioning.io.load_graph` reads), a ``Graph`` or a PyG ``Data``.
    Raises GraphInputError when the graph's feature width differs from the model's ``in_dim``.
    """
    from partitioning.graph import Graph
    from partitioning.io import load_graph

    loaded = load_checkpoint_model(checkpoint_dir)
    if isinstance(graph, (str, Path)):
        graph = load_graph(graph)
    data = prepare_data(graph, loaded, normalize)
    scores = score_data(loaded.model, data, device=device, batch_size=batch_size)
    raw = graph.x if isinstance(graph, Graph) else graph.x.detach().cpu().numpy()
    return with_views(loaded.model, scores, data, raw)[0]


def with_views(model: torch.nn.Module, scores: np.ndarray, data: Any, x_raw: np.ndarray, feature_always: bool = False,
               signature_always: bool = False) -> tuple[np.ndarray, dict[str, Any] | None, dict[str, Any] | None]:
    """``scores`` with the label-free views ``model`` records (:func:`gcad_dist.label_free_views.apply_views`: the
    feature view, then the signature view, on the raw features ``x_raw`` and the links of ``data``), as
    :func:`score_graph` and ``score`` apply them; and their records (None where a view is not recorded). A model that
    records none (an ensemble, whose members carry their own views; a supervised model) keeps ``scores``."""
    from gcad_dist.label_free_views import apply_views, recorded_views

    return apply_views(scores, x_raw, data.edge_index, data.num_nodes, **recorded_views(model),
                       feature_always=feature_always, signature_always=signature_always)


def write_scores(path: str | Path, scores: np.ndarray, y: np.ndarray | None = None,
                 graph_id: np.ndarray | None = None) -> Path:
    """Parquet with columns node_id (int64), score (float32)[, label (int8; null where unknown, y < 0)]
    [, graph_id (int64)]; CSV with the same columns (an empty field where the label is unknown) when ``path`` ends
    in ``.csv``."""
    import pyarrow as pa
    import pyarrow.csv as pcsv
    import pyarrow.parquet as pq

    cols = {"node_id": pa.array(np.arange(scores.size, dtype=np.int64)), "score": pa.array(scores.astype(np.float32))}
    if y is not None:
        y = np.asarray(y)
        unknown = y < 0
        cols["label"] = pa.array(y.astype(np.int8), mask=unknown if unknown.any() else None)
    if graph_id is not None:
        cols["graph_id"] = pa.array(np.asarray(graph_id).astype(np.int64))
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    if path.suffix.lower() == ".csv":
        pcsv.write_csv(pa.table(cols), tmp)
    else:
        if path.suffix.lower() not in (".parquet", ".pq"):
            log.warning("%s: written as Parquet (name it .csv for CSV)", path)
        pq.write_table(pa.table(cols), tmp)
    tmp.replace(path)
    return path


def build_parser() -> argparse.ArgumentParser:
    d = ScoreConfig(checkpoint="", graph="", out="")
    p = ArgumentParser(
        prog="python -m gcad_dist.score",
        description="Score every node of a graph with a gcad-dist checkpoint and write node_id, score "
                    "(and label / graph_id when present) to Parquet. With labels, print AUROC, AUPRC and "
                    "Recall@K over the labelled nodes (all nodes when every label is known). With a label-free "
                    "(local contrast) model, a node without neighbours has no context and is scored at the median "
                    "of the other nodes' scores, and (for a checkpoint of pretrain --degree-detrend, the local "
                    "recipe's default since session 46) the scores' trend over log(1 + degree) is removed first, "
                    "over the nodes scored together. A model trained with label inputs (the GCCAD default of "
                    "gcad_dist.train and gcad_dist.finetune from 10 labelled training anomalies) reads which of a "
                    "node's neighbours the graph labels anomalous (1); label the nodes you know, leave the others "
                    "-1 or unlabelled. Its printed metrics are then optimistic: the labels scored are also inputs "
                    "of their neighbours (judge such a model by gcad_dist.train's test split).",
        formatter_class=DefaultsHelpFormatter,
    )
    p.add_argument("--checkpoint", required=True, help="checkpoint directory (with model.pt), e.g. runs/pre/final or runs/ft/final")
    p.add_argument("--graph", required=True, help="graph to score: .npz, torch-saved PyG Data (.pt) or folder; "
                                                  "its feature width must equal the model's")
    p.add_argument("--out", required=True, help="output file: Parquet, or CSV if it ends in .csv; columns node_id, "
                   "score, label (if the graph has labels), graph_id (multi-graph data). Metrics, if labels exist, go "
                   "to <out>.metrics.json")
    p.add_argument("--batch-size", type=int, default=d.batch_size,
                   help="multi-graph data: whole graphs per forward pass (0 = all at once). A single graph is "
                        "always scored full-batch (exact context); see the module doc for its memory need")
    p.add_argument("--parts", default=None, metavar="STORE",
                   help="store built from this graph (python -m partitioning.build): score part by part, each node "
                        "against the context of a part instead of one context for the whole graph (less memory; "
                        "what pre-training saw)")
    p.add_argument("--context", default=None, choices=CONTEXTS,
                   help=f"with --parts (default: {d.context}): 'halo' scores each node against the context of its own K-means part, with "
                        "its links into other parts kept (the part plus the nodes of other parts it links to, as "
                        "pre-training's corrupt subgraphs keep the links to injected nodes); 'own' in its part alone "
                        "(links across parts cut); 'links' in the part most of its neighbours belong to. No context is "
                        "best everywhere: halo beat own on every generated graph measured, but on one real graph it "
                        "scored AUROC 0.33 where links and scoring without --parts gave 0.76, and links fell to "
                        "chance on generated 1M-node graphs. With a labelled sample, compare them (README, "
                        "'Scoring a large graph'; BENCHMARKS.md)")
    p.add_argument("--context-hops", default=None, choices=("1", "2", "auto"),
                   help="label-free local checkpoints (pretrain's local recipe) only: contrast each node with its "
                        "neighbours (1) or with its two-hop ball, the neighbours and up to 10 neighbours of each (2), "
                        "or choose between them without labels (auto: the ball when it makes a group of nodes stand "
                        "out that the neighbours hide, pretrain --ball-switch; the choice is logged and written to the "
                        "metrics file). Default: as trained (pretrain --context-hops and --ball-switch): auto for "
                        "checkpoints of the local recipe since session 49, 1 for older ones. The ball helps where "
                        "anomalies are groups of alike accounts that link to one another (fraud rings, weibo-like "
                        "bursts): such a group is most of its members' neighbours, and the ball reaches past it. On "
                        "generated graphs of rings and weibo-like groups the neighbours scored AUROC 0.43-0.94 and the "
                        "ball 0.95-1.00 (DOMINANT: 0.90-0.94); on the shared real graphs' training and validation "
                        "labels the ball was lower on inj_cora (0.845 against 0.931), reddit and tolokers, higher on "
                        "books. auto kept the neighbours on inj_cora, books, reddit, tolokers, disney and 17 "
                        "generated graphs without alike groups; it chose the ball on enron (where the ball scored "
                        "higher) and on 9 of 12 generated graphs with alike groups, among them every one where the "
                        "neighbours scored below 0.9 (BENCHMARKS.md, sessions 47-49). If you expect fraud rings, 2 "
                        "takes the ball always")
    p.add_argument("--loose-context", action=argparse.BooleanOptionalAction, default=d.loose_context,
                   help="label-free local checkpoints with --context-hops 1 only: also contrast each node with its "
                        "loose context (its neighbours weighted by (1 + their common neighbours)^-2: links inside a "
                        "dense group count little) and keep the larger of the two robust z-scores. Default: as "
                        "trained (pretrain --loose-context, off by default) (BENCHMARKS.md, session 48)")
    p.add_argument("--feature-view", default=d.feature_view, choices=FEATURE_VIEWS,
                   help="label-free local checkpoints only: fit an isolation forest on the graph's raw features and add "
                        "its robust z-score to the contrast's. auto: where the two agree on what stands out (the forest "
                        "ranks the contrast's top 1%% of nodes at AUROC >= 0.75 against the others), or where the graph's "
                        "links say nothing about the features (the Spearman correlation of a column across an edge: "
                        "its 90th percentile over the columns below 0.06: there, with no context to corroborate it, each "
                        "node's distance to its 5th nearest node in z-scored feature space is added instead of the "
                        "forest, the stronger global score on such graphs, BENCHMARKS.md session 88); both logged, and "
                        "written to the metrics file as \"feature_view\"; always: on every graph; off: the contrast "
                        "alone. "
                        "The forest finds nodes extreme in a few attributes that agree with their neighbours otherwise "
                        "(camouflaged fraud), which a contrast hardly sees; added everywhere, it cost inj_cora 0.11-0.14 "
                        "AUROC and tolokers 0.08-0.09, and auto never added it there. auto stayed off on some generated "
                        "graphs where it would have helped (camouflage alone or with swaps): if you expect such "
                        "anomalies, compare always with auto on a labelled sample. Default: as trained (pretrain "
                        "--feature-view): auto for checkpoints of the local recipe since session 50, off for older "
                        "ones (BENCHMARKS.md, session 50)")
    p.add_argument("--signature-view", default=d.signature_view, choices=FEATURE_VIEWS,
                   help="label-free local checkpoints only: take the top 5%% of the score as pseudo anomalies and learn "
                        "them with a logistic regression on each node's raw features, its neighbours' mean features "
                        "and its degree, cross-fitted over 5 folds. auto: where it tells them at AUROC >= 0.85 (they "
                        "share a signature), its rank is added to the score's rank; logged, and written to the metrics "
                        "file as \"signature_view\"; always: on every graph; off: the score as it is. On the design "
                        "graphs it joined on reddit, books and enron and nowhere else (BENCHMARKS.md, session 60). "
                        "Default: as trained (pretrain --signature-view): auto for checkpoints of the local recipe "
                        "since session 60, off for older ones")
    p.add_argument("--device", default=d.device, help="auto (CUDA when available), cpu, cuda, cuda:N")
    p.add_argument("--normalize", default=d.normalize, choices=NORMALIZE_CHOICES,
                   help="feature normalisation: auto = what the checkpoint was trained with (extra['normalize']: "
                        "pre-training records its store's, power by default since session 39; none if unrecorded, e.g. "
                        "older checkpoints); standard = z-score over all nodes of this graph; power = z-score, a "
                        "Yeo-Johnson transform per column fitted on this graph, z-score; none = raw")
    p.add_argument("--threads", type=int, default=d.threads, help="torch CPU threads (0 = torch default)")
    p.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    return p


def _local_config(loaded: LoadedModel, option: str) -> Any:
    """The model config of ``loaded``'s label-free local model; :class:`UsageError` naming ``option`` for any other
    model (its context is its layers')."""
    cfg = getattr(loaded.model, "config", None)
    if getattr(cfg, "contrast", None) != "local" or getattr(cfg, "passes_messages", True):
        what = loaded.kind if getattr(cfg, "contrast", None) is None else f"{loaded.kind} ({cfg.contrast} contrast)"
        raise UsageError(f"{option}: applies to label-free local checkpoints (pretrain's local recipe); "
                         f"{loaded.path} holds a {what} model")
    return cfg


def set_context_hops(loaded: LoadedModel, hops: int | str) -> None:
    """Score ``loaded``'s label-free local model with ``hops`` (1: the neighbours, 2: the two-hop ball, "auto": the
    ball switch between them, :func:`gcad_dist.model.ball.ball_reveals_group`) as its context, whatever it was
    trained with; :class:`UsageError` for any other model (its context is its layers')."""
    cfg = _local_config(loaded, "--context-hops")
    auto = str(hops) == "auto"
    if not auto and str(hops) not in ("1", "2"):
        raise UsageError(f"--context-hops: must be 1, 2 or auto, got {hops}")
    n = 1 if auto else int(hops)
    if n != cfg.context_hops or auto != cfg.ball_switch:
        log.info("--context-hops %s: scoring with %s, the checkpoint recorded %s", hops,
                 "the ball switch" if auto else "the two-hop ball" if n == 2 else "the neighbours",
                 "the ball switch" if cfg.ball_switch else "the two-hop ball" if cfg.context_hops == 2
                 else "the neighbours")
    cfg.context_hops, cfg.ball_switch = n, auto
    if auto:
        cfg.loose_context = False


def _report_ball_switch(model: torch.nn.Module) -> dict[str, Any] | None:
    """Log the ball switch's choices of a scoring (once, however many graphs or parts were scored) and return them
    for the metrics file; None when the model has no ball switch."""
    from gcad_dist.model.ball import switch_phrase

    last, counts = getattr(model, "last_context", None), getattr(model, "context_choices", None)
    if last is None or counts is None:
        return None
    total = sum(counts.values())
    if total == 1:
        log.info("ball switch: %s", switch_phrase(last["context"] == "ball", last["stand_out_neighbours"],
                                                   last["stand_out_ball"]))
        return dict(last)
    log.info("ball switch: %d of %d graphs or parts scored with the two-hop ball, %d with the neighbours (each part "
             "chooses from its own nodes' scores)", counts["ball"], total, counts["neighbours"])
    return {"context": "per part", "ball": counts["ball"], "neighbours": counts["neighbours"]}


def set_loose_context(loaded: LoadedModel, on: bool) -> None:
    """Score ``loaded``'s label-free local model with (``on``) or without the loose context beside its neighbours
    (:mod:`gcad_dist.model.loose_context`), whatever it was trained with; :class:`UsageError` for any other model or
    with the two-hop ball as context."""
    cfg = _local_config(loaded, "--loose-context")
    if on and cfg.context_hops != 1:
        raise UsageError("--loose-context: a second context beside the neighbours; this checkpoint scores with the "
                         "two-hop ball (--context-hops 2): pass --context-hops 1 too, or leave --loose-context off")
    if on != cfg.loose_context:
        log.info("--%sloose-context: scoring %s the loose context, the checkpoint recorded %s", "" if on else "no-",
                 "with" if on else "without", "it" if cfg.loose_context else "none")
    if on and cfg.ball_switch:
        log.info("--loose-context: the ball switch the checkpoint recorded is off (pass --context-hops auto without "
                 "--loose-context for it)")
        cfg.ball_switch = False
    cfg.loose_context = on


def set_view(loaded: LoadedModel, view: str, how: str) -> None:
    """Score ``loaded``'s label-free local model with ``view`` (``"feature_view"``: :mod:`gcad_dist.feature_view`;
    ``"signature_view"``: :mod:`gcad_dist.signature_view`) as ``how`` says (one of :data:`FEATURE_VIEWS`), whatever it
    was trained with; :class:`UsageError` for any other model. ``always`` is passed to :func:`with_views`
    by the caller."""
    option = "--" + view.replace("_", "-")
    if how not in FEATURE_VIEWS:
        raise UsageError(f"{option}: must be one of {', '.join(FEATURE_VIEWS)}, got {how!r}")
    cfg = _local_config(loaded, option)
    on = how != "off"
    recorded = getattr(cfg, view)
    if on != recorded or how == "always":
        log.info("%s %s: the checkpoint recorded %s", option, how, "auto" if recorded else "off")
    setattr(cfg, view, on)


def main(argv: list[str] | None = None) -> int:
    from partitioning.io import load_graph

    cfg = ScoreConfig(**vars(build_parser().parse_args(argv)))
    setup_logging(cfg.verbose)
    if cfg.context is None:
        cfg.context = ScoreConfig.context
    elif not cfg.parts:
        log.warning("--context %s: applies with --parts only (scoring part by part); ignored", cfg.context)
    if cfg.batch_size < 0:
        raise UsageError(f"--batch-size: must be >= 0, got {cfg.batch_size}")
    out = Path(cfg.out)
    if out.is_dir():
        raise UsageError(f"--out: {out} is a directory; give a file name such as {out / 'scores.parquet'}")
    if cfg.threads > 0:
        torch.set_num_threads(cfg.threads)
    retain_freed_memory()
    _resolve_device(cfg.device)
    t0 = time.perf_counter()
    loaded = load_checkpoint_model(cfg.checkpoint)
    if cfg.context_hops == "auto" and cfg.loose_context:
        raise UsageError("--context-hops auto chooses between the neighbours and the two-hop ball; --loose-context is "
                         "another context: pass one of them")
    if cfg.context_hops is not None:
        set_context_hops(loaded, cfg.context_hops)
    if cfg.loose_context is not None:
        set_loose_context(loaded, cfg.loose_context)
    if cfg.feature_view is not None:
        set_view(loaded, "feature_view", cfg.feature_view)
    if cfg.signature_view is not None:
        set_view(loaded, "signature_view", cfg.signature_view)
    graph = load_graph(cfg.graph)
    raw_x = graph.x  # the raw features stay for the feature view; the graph's CSR goes once data has its links
    data = prepare_data(graph, loaded, cfg.normalize, source=cfg.graph)
    del graph
    log.info("scoring %s (%d nodes, %d directed edges) with %s model from %s",
             cfg.graph, data.num_nodes, data.edge_index.shape[1], loaded.kind, cfg.checkpoint)
    if getattr(getattr(loaded.model, "config", None), "contrast", None) == "local":
        if getattr(loaded.model.config, "context_hops", 1) == 2:
            log.info("context: each node's two-hop ball (its neighbours and up to %d of each one's), %s",
                     loaded.model.config.context_fanout,
                     "as trained (pretrain --context-hops 2)" if cfg.context_hops is None else "--context-hops 2")
        if getattr(loaded.model.config, "ball_switch", False):
            log.info("context: the neighbours, or the two-hop ball where it makes a group stand out that the "
                     "neighbours hide (%s)", "as trained (pretrain --ball-switch)" if cfg.context_hops is None
                     else "--context-hops auto")
        if getattr(loaded.model.config, "loose_context", False):
            log.info("each node is also contrasted with its loose context (neighbours weighted by (1 + common "
                     "neighbours)^-2), and the larger of the two robust z-scores kept (%s)",
                     "as trained (pretrain --loose-context)" if cfg.loose_context is None else "--loose-context")
        if getattr(loaded.model.config, "feature_view", False):
            log.info("an isolation forest on the raw features joins the score %s (%s)",
                     "on this graph" if cfg.feature_view == "always"
                     else "where it corroborates the contrast's top nodes (where the links say nothing about the "
                          "features, the distance to the 5th nearest node in feature space instead)",
                     "as trained (pretrain --feature-view)" if cfg.feature_view is None
                     else f"--feature-view {cfg.feature_view}")
        if getattr(loaded.model.config, "degree_detrend", False):
            log.info("the score's trend over log(1 + degree) is removed, as pre-training recorded (pretrain "
                     "--degree-detrend): a node is compared with nodes of every degree on the same footing")
        alone = int((torch.bincount(data.edge_index[1], minlength=data.num_nodes) == 0).sum())
        if alone:
            log.info("%d node(s) have no neighbour, so no context to contrast with: each is scored at the median of "
                     "the other nodes' scores (neither flagged nor cleared)", alone)
    batch_size = cfg.batch_size
    if cfg.parts:
        data.graph_id = torch.from_numpy(_context_parts(cfg.parts, data, cfg.context).astype(np.int64))
        batch_size = batch_size or 1
    try:
        if cfg.parts and cfg.context == "halo":
            scores = score_parts_halo(loaded.model, data, data.graph_id.numpy(), device=cfg.device)
        else:
            scores = score_data(loaded.model, data, device=cfg.device, batch_size=batch_size)
    except (torch.OutOfMemoryError, MemoryError, RuntimeError) as e:
        if not out_of_memory(e):
            raise
        raise UsageError(out_of_memory_advice(e, data, cfg.device, loaded)) from None
    context = _report_ball_switch(loaded.model)
    scores, view, signature = with_views(loaded.model, scores, data, raw_x, feature_always=cfg.feature_view == "always",
                                         signature_always=cfg.signature_view == "always")
    if view is not None:
        from gcad_dist.feature_view import feature_view_phrase

        log.info("feature view: %s", feature_view_phrase(view))
    if signature is not None:
        from gcad_dist.signature_view import signature_view_phrase

        log.info("signature view: %s", signature_view_phrase(signature))
    y = None if getattr(data, "y", None) is None else data.y.numpy()
    gid = None if getattr(data, "graph_id", None) is None else data.graph_id.numpy()
    write_scores(out, scores, y, gid)
    secs = time.perf_counter() - t0
    head = f"{data.num_nodes} nodes scored in {secs:.1f} s -> {out}"
    m = score_metrics(y, scores, gid, grouping="parts" if cfg.parts else "graphs")
    if m is None:
        from partitioning.graph import label_counts

        why = "no labels" if y is None else f"labelled nodes ({label_counts(y)['labelled']}) lack one of the classes"
        print(f"{head} ({why}: no metrics)")
        return 0
    m["seconds"] = round(secs, 3)
    m["environment"] = environment(cfg.device)
    if context is not None:
        m["context"] = context
    if view is not None:
        m["feature_view"] = view
    if signature is not None:
        m["signature_view"] = signature
    if cfg.parts:
        m["parts"]["context"] = cfg.context
        log.info("per K-means part (a diagnostic, not a figure of the graph): %s",
                 _group_phrase(m["parts"], "parts"))
    mpath = out.with_name(out.name + ".metrics.json")
    mpath.write_text(json.dumps(_finite(m), indent=1))
    print(f"{head} | {summary_text(m)}")
    return 0


def out_of_memory(e: BaseException) -> bool:
    """Whether ``e`` says an allocation failed (CUDA, or torch's / NumPy's CPU allocator)."""
    return isinstance(e, (torch.OutOfMemoryError, MemoryError)) or "can't allocate memory" in str(e)


def out_of_memory_advice(e: BaseException, data: Any, device: str, loaded: LoadedModel) -> str:
    """The error a user gets when scoring runs out of memory: what was being scored, what it needs, what to try."""
    first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    n, links = int(data.num_nodes), int(data.edge_index.shape[1])
    local = getattr(getattr(loaded.model, "config", None), "contrast", None) == "local"
    need = ("a label-free checkpoint's default scoring needs about 3 KB per node (3.1 GB for 1M nodes and 20M "
            "directed links, 12 GB for 5M nodes and 100M links; 2.8 GB at 1M with --context-hops 1 --feature-view "
            "off)" if local else
            "the link predictor needs about 0.8 KB per directed link per layer; --parts STORE scores part by part")
    return (f"out of memory scoring {n:,} nodes and {links:,} directed links on {device} ({first}). {need}. Score on "
            "a device with more memory (--device cpu on a host with more RAM than the GPU has), or split the graph")


def _finite(v: Any) -> Any:
    """NaN / inf -> None, recursively (JSON)."""
    if isinstance(v, float) and not math.isfinite(v):
        return None
    if isinstance(v, dict):
        return {k: _finite(x) for k, x in v.items()}
    return v


def _group_phrase(group: dict[str, Any], unit: str) -> str:
    from gcad_dist.metrics import group_mean_phrase

    return group_mean_phrase({"graphs_used": group["with_both_classes"], "auroc_graph_mean": group["auroc_mean"],
                              "auprc_graph_mean": group["auprc_mean"]}, unit, total=group["total"])


def score_metrics(y: np.ndarray | None, scores: np.ndarray, graph_id: np.ndarray | None = None,
                  grouping: str = "graphs") -> dict[str, Any] | None:
    """Metrics of ``scores`` over the nodes with a known label (``y >= 0``); None when the labelled nodes
    lack a class (or there are no labels).

    Returns :func:`gcad_dist.metrics.evaluate` pooled over the labelled nodes (``num_nodes`` = labelled
    nodes evaluated) plus ``nodes_scored``, ``labelled`` and ``anomalies``. With ``graph_id``:
    ``grouping="graphs"`` (real multi-graph data) adds the per-graph means at the top level
    (``auroc_graph_mean``, ``graphs_used`` = graphs whose labelled nodes hold both classes,
    ``graphs_total``); ``grouping="parts"`` (``--parts``) puts the per-part means under ``parts``
    instead, so they are not mistaken for a figure of the graph.
    """
    from gcad_dist.metrics import evaluate
    from partitioning.graph import label_counts

    if y is None:
        return None
    c = label_counts(y)
    if c["anomalies"] == 0 or c["normal"] == 0:
        return None
    m: dict[str, Any] = evaluate(y, scores)
    m.update({"nodes_scored": int(np.asarray(scores).size), "labelled": c["labelled"], "anomalies": c["anomalies"]})
    if graph_id is not None:
        g = evaluate(y, scores, graph_id)
        total = int(np.unique(np.asarray(graph_id)).size)
        if grouping == "parts":
            m["parts"] = {"total": total, "with_both_classes": g["graphs_used"], "auroc_mean": g["auroc_graph_mean"],
                          "auprc_mean": g["auprc_graph_mean"], "recall_at_k_mean": g["recall_at_k_graph_mean"]}
        else:
            for k in ("auroc_graph_mean", "auprc_graph_mean", "recall_at_k_graph_mean", "graphs_used", "graphs_skipped"):
                m[k] = g[k]
            m["graphs_total"] = total
    return m


def summary_text(m: dict[str, Any]) -> str:
    """The metrics part of the summary line: the labelled-node figures first, saying how many nodes they
    cover; for multi-graph data the per-graph mean, saying how many graphs it covers."""
    from gcad_dist.metrics import group_mean_phrase

    n, lab = m["nodes_scored"], m["labelled"]
    if lab == n:
        where = f"all {n:,} nodes ({m['anomalies']:,} anomalies)"
    else:
        where = f"the {lab:,} labelled nodes of {n:,} ({100.0 * lab / max(n, 1):.1f}%; {m['anomalies']:,} anomalies)"
    text = f"metrics on {where}: AUROC {m['auroc']:.4f} AUPRC {m['auprc']:.4f} Rec@K {m['recall_at_k']:.4f}"
    if "graphs_used" in m:
        text += " | per graph, " + group_mean_phrase(m, "graphs", total=m["graphs_total"])
    return text


if __name__ == "__main__":
    run_cli(main)
