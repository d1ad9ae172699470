"""GCCAD-pre scored without labels, through the project's own pipeline (label-free).

Two recipes, each a store build, pre-training on Ray Train (a private in-process instance, one worker,
seeded by the run's seed) and scoring; the build and pre-training see only ``x`` and ``edge_index``:

* ``local`` (detector ``gccad-pre``, the default): the whole graph as one part
  (``partitioning.build --k 1 --corruption-mix none``: every edge kept, nothing corrupted in the store);
  pre-training contrasts each node's input projection h^(0) with the mean of its neighbours' h^(0)
  (``--contrast local``) under a per-node logistic loss (``--loss logistic --tau 0.2``), on feature swaps
  drawn afresh at every step (``--swap-features 0.15``), five such models side by side (``--ensemble 5``, each with
  its own swaps); every node is scored on the whole graph, the mean over the five of 1 - cos(h^(0)_i, neighbours'
  mean). Why each part: BENCHMARKS.md ("A label-free GCCAD-pre that detects
  real anomalies"). The harness's ``--pre-cliques F`` adds planted cliques (``--plant-cliques F``) and cuts the
  swaps to 0.15 - F (BENCHMARKS.md, session 20; off by default); ``--pre-tails F`` does the same with feature
  tails (``--push-tails F``, global outliers; BENCHMARKS.md, session 30; off by default).
* ``paper`` (detector ``gccad-pre-paper``): METHOD.md section 4. K-means parts (``--k auto``), the paper's
  node injection, the graph contrast, and every node scored in its part with the part's 1-hop halo
  (``python -m gcad_dist.score --parts STORE``'s default context). Its settings, and so its run key, are
  those of earlier sessions' ``gccad-pre``.

Heavy (Ray start-up, tens of seconds at least): not in :mod:`gcad_dist.quality`'s default model list.
``bench.pretrain_transfer`` runs the same stages as subprocesses.
"""

from __future__ import annotations

import logging
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from gcad_dist.data.degree_cap import DENSE_LINKS, MAX_DEGREE
from gcad_dist.data.sharding import ShardConfig

log = logging.getLogger("gcad_dist.detectors.gccad_pre")

# The paper's recipe (earlier sessions' gccad-pre: these settings keep its run key).
#: ``corruption_mix``: ``partitioning.build --corruption-mix`` ("inject" = the paper's corrupt graphs).
CORRUPTION_MIX = "inject"
#: ``partitioning.build --cluster-hops``: K-means on features smoothed over 0..H hops (0 = the paper's)
CLUSTER_HOPS = 0
SETTINGS: dict[str, Any] = {"k": "auto", "build": "defaults (ratio 0.15, 1 corruption, normalize power)",
                            "corruption_mix": CORRUPTION_MIX,
                            "workers": 1, "lr": 5e-3, "pretrain": "PretrainConfig defaults", "context": "halo"}
if CLUSTER_HOPS:  # 0 (the paper's K-means on the features) was the only behaviour before the option existed
    SETTINGS["cluster_hops"] = CLUSTER_HOPS
PAPER_EPOCHS = 10

# The local recipe, the default.
#: pre-training settings of the local recipe (PretrainConfig fields; the rest are its defaults)
LOCAL_PRETRAIN: dict[str, Any] = {"contrast": "local", "loss": "logistic", "tau": 0.2, "swap_features": 0.15,
                                  "lr": 1e-3}
#: ``pretrain --plant-cliques`` of the local recipe (the harness's ``--pre-cliques``; 0 = none, the run key of
#: earlier sessions). Cliques take their share out of the swaps: the corrupted share stays ``swap_features``.
LOCAL_CLIQUES = 0.0
#: ``pretrain --push-tails`` of the local recipe (the harness's ``--pre-tails``; 0 = none, the run key of earlier
#: sessions). Like the cliques, the tails take their share out of the swaps.
LOCAL_TAILS = 0.0
LOCAL_EPOCHS = 3
#: ``pretrain --degree-detrend`` of the local recipe (the harness's ``--pre-degree-detrend``; False = the run key of
#: earlier sessions): the score's trend over log(1 + degree) removed (BENCHMARKS.md, session 46)
LOCAL_DEGREE_DETREND = True
#: ``pretrain --loose-context`` of the local recipe (the harness's ``--pre-loose-context``; False = the run key of
#: earlier sessions): each node also scored against its loose context, the larger robust z kept (session 48)
LOCAL_LOOSE_CONTEXT = False
#: ``pretrain --ball-switch`` of the local recipe (the harness's ``--pre-ball-switch``): at scoring, the two-hop ball
#: where it makes a group stand out that the neighbours hide (session 48; the default since session 49)
LOCAL_BALL_SWITCH = True
#: ``pretrain --feature-view`` of the local recipe (the harness's ``--pre-feature-view``): at scoring, an isolation
#: forest on the raw features added where it corroborates the contrast's top nodes (the default since session 50) or
#: where the links say nothing about the features (since session 52)
LOCAL_FEATURE_VIEW = True
#: ``pretrain --signature-view`` of the local recipe (the harness's ``--pre-signature-view``): at scoring, the score's
#: top nodes generalised by a cross-fitted linear classifier where it tells them apart (the default since session 60)
LOCAL_SIGNATURE_VIEW = True
#: seed nodes per minibatch of the local recipe (``pretrain --batch-size``; the harness's ``--pre-batch-size``)
LOCAL_BATCH_SIZE = 1024
#: ``pretrain --sample-threshold``'s default (the harness's ``--pre-sample-threshold``; ``DENSE_LINKS`` and
#: ``MAX_DEGREE``, from :mod:`gcad_dist.data.degree_cap`, are ``--pre-dense-links``' and ``--pre-max-degree``'s): at
#: these values a run's key is as it was before the options existed
SAMPLE_THRESHOLD = ShardConfig.sample_threshold
#: members of the recipe's ensemble (``pretrain --ensemble``; the harness's ``--pre-ensemble``, 1 = session 10's model)
LOCAL_ENSEMBLE = 5
LOCAL_SETTINGS: dict[str, Any] = {"recipe": "local", "k": 1, "corruption_mix": "none",
                                  "build": "defaults", "workers": 1,
                                  "pretrain": {**LOCAL_PRETRAIN, "others": "PretrainConfig defaults"},
                                  "context": "whole graph",
                                  # what the feature view adds, where it joins (part of the run key: session 88
                                  # changed it, so runs stored before are not reused)
                                  "feature_view_scores": "isolation forest where it corroborates; knn distance where "
                                                         "the links say nothing (session 88)"}


def _graph(data: Any) -> Any:
    """The PyG ``Data`` as a :class:`partitioning.graph.Graph` (features and CSR only, no labels)."""
    from partitioning.graph import Graph, csr_from_edges

    ei = data.edge_index.cpu().numpy()
    indptr, indices = csr_from_edges(ei[0], ei[1], int(data.num_nodes))
    return Graph(x=np.ascontiguousarray(data.x.cpu().numpy(), dtype=np.float32), indptr=indptr, indices=indices,
                 source="gcad_dist.quality (labels stripped)")


def _pipeline(data: Any, seed: int, threads: int, device: str, workdir: str | None, build_options: dict[str, Any],
              pretrain_options: dict[str, Any], score: Callable[[Any, Any, Path, str], np.ndarray]) -> np.ndarray:
    """Build a store of ``data``, pre-train on it (in-process Ray workers: one unless ``pretrain_options`` say), then
    ``score(loaded checkpoint, prepared data, store path, device)``; the store and checkpoint live in a temporary
    folder."""
    from gcad_dist.pretrain import PretrainConfig, run
    from gcad_dist.score import load_checkpoint_model, prepare_data
    from partitioning.build import BuildConfig, build

    os.environ.setdefault("RAY_DASHBOARD_STARTUP_TIMEOUT_S", "600")  # Ray's dashboard is slow on a loaded machine
    threads = max(1, threads)
    cuda = device.startswith("cuda")
    graph = _graph(data)
    with tempfile.TemporaryDirectory(prefix="gccad-pre-", dir=workdir) as tmp:
        store = Path(tmp) / "store.zarr"
        build(BuildConfig(graph=graph.source, out=str(store), seed=seed, threads=threads, plot=False, progress=False,
                          **build_options), graph=graph)
        run(PretrainConfig(store=str(store), out=str(Path(tmp) / "pre"), cpus_per_worker=threads,
                           seed=seed, overwrite=True, max_failures=0, gpus_per_worker=1.0 if cuda else 0.0,
                           **{"workers": 1, **pretrain_options}))
        loaded = load_checkpoint_model(Path(tmp) / "pre" / "final")
        prepared = prepare_data(graph, loaded)  # the store's normalisation, recorded in the checkpoint
        return score(loaded, prepared, store, "cuda" if cuda else "cpu")


def fit_score(data: Any, split: Any, seed: int, pre_epochs: int | None = None, pre_ensemble: int | None = None,
              pre_cliques: float | None = None, pre_tails: float | None = None, pre_batch_size: int | None = None,
              pre_context_hops: int | None = None, pre_normalize: str | None = None,
              pre_degree_detrend: bool | None = None, pre_loose_context: bool | None = None,
              pre_ball_switch: bool | None = None, pre_feature_view: bool | None = None,
              pre_signature_view: bool | None = None,
              pre_dense_links: int | None = None, pre_sample_threshold: int | None = None,
              pre_fanout: int | None = None, pre_lr: float | None = None, pre_max_degree: int | None = None,
              pre_workers: int | None = None, threads: int = 1,
              device: str = "cpu", workdir: str | None = None,
              scorer: Callable[[Any, Any, Path, str], np.ndarray] | None = None, **_: Any) -> np.ndarray:
    """The local recipe: whole-graph store, local logistic pre-training with per-step swaps, whole-graph
    score; float [N]. ``pre_epochs`` None = :data:`LOCAL_EPOCHS`, ``pre_ensemble`` None = :data:`LOCAL_ENSEMBLE`,
    ``pre_cliques`` (``pretrain --plant-cliques``, with the swaps cut by as much) None = :data:`LOCAL_CLIQUES`,
    ``pre_tails`` (``pretrain --push-tails``, the swaps cut by as much again) None = :data:`LOCAL_TAILS`,
    ``pre_batch_size`` None = :data:`LOCAL_BATCH_SIZE`, ``pre_context_hops`` (``pretrain --context-hops``) None = 1,
    ``pre_normalize`` (``partitioning.build --normalize``) None = the build's default, ``pre_degree_detrend``
    (``pretrain --degree-detrend``) None = the recipe's (on since session 46), ``pre_loose_context`` (``pretrain
    --loose-context``) None = the recipe's, ``pre_ball_switch`` (``pretrain --ball-switch``) None = the recipe's,
    ``pre_feature_view`` (``pretrain --feature-view``, applied to the default scorer's score) None = the recipe's,
    ``pre_signature_view`` (``pretrain --signature-view``, applied after it) None = the recipe's,
    ``pre_dense_links`` (``pretrain --dense-links``), ``pre_max_degree`` (``--max-degree``), ``pre_sample_threshold``
    (``pretrain --sample-threshold``), ``pre_fanout`` (neighbours a minibatch seed's context samples, ``pretrain --fanouts``; -1 = all) and ``pre_lr``
    (``pretrain --lr``) None = pre-training's defaults; ``pre_workers`` (``pretrain --workers``, each of ``threads``
    threads) None = 1.
    ``scorer(loaded checkpoint, prepared
    data, store path, device)`` replaces the whole-graph score (``bench.two_scale_context`` scores twice)."""
    from gcad_dist.score import score_data, with_views

    cliques = LOCAL_CLIQUES if pre_cliques is None else pre_cliques
    tails = LOCAL_TAILS if pre_tails is None else pre_tails
    share = LOCAL_PRETRAIN["swap_features"]
    if not 0 <= cliques <= share:
        raise ValueError(f"pre_cliques must be in [0, {share}], got {cliques}")
    if not 0 <= tails <= share - cliques:
        raise ValueError(f"pre_tails must be in [0, {share} - pre_cliques], got {tails}")
    pretrain = {**LOCAL_PRETRAIN, "epochs": LOCAL_EPOCHS if pre_epochs is None else pre_epochs,
                "ensemble": LOCAL_ENSEMBLE if pre_ensemble is None else pre_ensemble, "plant_cliques": cliques,
                "push_tails": tails, "swap_features": round(share - cliques - tails, 6),
                "batch_size": LOCAL_BATCH_SIZE if pre_batch_size is None else pre_batch_size}
    if pre_context_hops not in (None, 1):  # absent at 1: the run key of earlier sessions
        pretrain["context_hops"] = pre_context_hops
    pretrain["degree_detrend"] = LOCAL_DEGREE_DETREND if pre_degree_detrend is None else bool(pre_degree_detrend)
    loose = LOCAL_LOOSE_CONTEXT if pre_loose_context is None else bool(pre_loose_context)
    if loose:  # absent when off: the run key of earlier sessions
        pretrain["loose_context"] = True
    switch = LOCAL_BALL_SWITCH if pre_ball_switch is None else bool(pre_ball_switch)
    if switch or LOCAL_BALL_SWITCH:  # absent when off and the recipe's is off (earlier sessions' pre-training)
        pretrain["ball_switch"] = switch and not loose and pretrain.get("context_hops", 1) == 1
    view = LOCAL_FEATURE_VIEW if pre_feature_view is None else bool(pre_feature_view)
    if view or LOCAL_FEATURE_VIEW:  # absent when off and the recipe's is off (earlier sessions' pre-training)
        pretrain["feature_view"] = view
    signature = LOCAL_SIGNATURE_VIEW if pre_signature_view is None else bool(pre_signature_view)
    if signature or LOCAL_SIGNATURE_VIEW:  # absent when off and the recipe's is off (earlier sessions' pre-training)
        pretrain["signature_view"] = signature
    for name, value, default in (("dense_links", pre_dense_links, DENSE_LINKS),
                                 ("max_degree", pre_max_degree, MAX_DEGREE),
                                 ("sample_threshold", pre_sample_threshold, SAMPLE_THRESHOLD)):
        if value is not None and value != default:  # absent at the default: the run key of earlier sessions
            pretrain[name] = int(value)
    if pre_fanout is not None:
        pretrain["fanouts"] = str(int(pre_fanout))
    if pre_lr is not None:
        pretrain["lr"] = float(pre_lr)
    if pre_workers not in (None, 1):  # absent at 1: the run key of earlier sessions
        pretrain["workers"] = int(pre_workers)
    build = {"k": 1, "corruption_mix": "none"}
    if pre_normalize is not None:
        build["normalize"] = pre_normalize
    if scorer is None:
        def scorer(loaded: Any, prepared: Any, _store: Path, dev: str) -> np.ndarray:
            scores = score_data(loaded.model, prepared, device=dev)
            return with_views(loaded.model, scores, prepared, data.x.detach().cpu().numpy())[0]

    return _pipeline(data, seed, threads, device, workdir, build, pretrain, scorer)


def fit_score_paper(data: Any, split: Any, seed: int, pre_epochs: int | None = None, threads: int = 1,
                    device: str = "cpu", workdir: str | None = None, corruption_mix: str = CORRUPTION_MIX,
                    cluster_hops: int = CLUSTER_HOPS, **_: Any) -> np.ndarray:
    """The paper's recipe: a K-means store of ``data`` (corruption kinds ``corruption_mix``), pre-training on it,
    every node scored by parts (halo); float [N]. ``pre_epochs`` None = :data:`PAPER_EPOCHS`."""
    from gcad_dist.score import score_parts_halo
    from partitioning.store.reader import StoreReader

    def score(loaded: Any, prepared: Any, store: Path, dev: str) -> np.ndarray:
        return score_parts_halo(loaded.model, prepared, StoreReader(str(store)).node_part(), device=dev)

    return _pipeline(data, seed, threads, device, workdir,
                     {"k": None, "corruption_mix": corruption_mix, "cluster_hops": cluster_hops},
                     {"epochs": PAPER_EPOCHS if pre_epochs is None else pre_epochs, "lr": SETTINGS["lr"]}, score)
