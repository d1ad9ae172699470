"""Reference detectors run by :mod:`gcad_dist.quality` beside the GNNs, on the same graphs and splits.

One API for all: :func:`fit_score(name, data, split, seed, **options) <fit_score>` -> anomaly scores
``float64 [N]`` for every node (higher = more anomalous). The harness evaluates them on the split's
test nodes only, like the GNNs.

| name | labels used | what |
|---|---|---|
| ``iforest`` | none | scikit-learn ``IsolationForest`` on the node features (published defaults) |
| ``knn`` | none | distance to the 5th nearest node in z-scored feature space (PyOD ``KNN``'s defaults; FAISS) |
| ``nbr-cosine`` | none | ``1 - cos(x_i, mean of the neighbours' x)`` on z-scored features |
| ``local-knn`` | none | distance to the 2nd most alike neighbour in z-scored feature space (the links as the kNN candidates) |
| ``dominant`` | none | PyGOD 1.1.0 DOMINANT (defaults), full-batch (extra ``baselines``) |
| ``cola`` | none | PyGOD 1.1.0 CoLA (defaults), full-batch (extra ``baselines``) |
| ``gccad-pre`` | none | GCCAD-pre, local recipe: whole-graph store -> Ray pre-training (local contrast, per-step swaps) -> score |
| ``gccad-pre-paper`` | none | GCCAD-pre, the paper's: K-means store (``--k auto``) -> Ray pre-training -> halo scoring by parts |
| ``trees`` | train | random forest on ``[x, mean of neighbours' x, degree, 2-hop mean]`` (GADBench RF-Graph) |
| ``boosted-trees`` | train | gradient-boosted trees on the one-hop features (XGB-Graph's analogue: scikit-learn's ``HistGradientBoostingClassifier``, library defaults) |

Label-free detectors never see labels: :func:`fit_score` hands them a copy of the graph holding only
``x`` and ``edge_index`` (no ``y``, masks or split) and fits them on all nodes.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from gcad_dist.cli import UsageError

__all__ = ["DetectorSpec", "DETECTORS", "fit_score", "strip_labels", "settings_of", "check_available"]


@dataclass(frozen=True)
class DetectorSpec:
    """One reference detector.

    ``labels``: ``"none"`` (label-free, fitted on all nodes) or ``"train"`` (supervised on the train split).
    ``features``: ``"raw"`` (the file's features) or ``"standard"`` (z-scored over all nodes, as the GNNs get).
    ``settings``: the detector's fixed, result-affecting settings (part of :mod:`gcad_dist.quality`'s run key).
    ``options``: the harness options it reads (``fit_score`` keyword arguments; also part of the run key).
    ``requires``: (module, extra) pairs it needs beyond the base install.
    ``entry``: the module's function that fits and scores. ``option_defaults``: an option's value when the
    harness leaves it unset (None). ``late_options``: options added after runs were cached, each with the value
    those runs had without it; at that value an option is left out of the run key, so that those runs keep theirs.
    """

    name: str
    labels: str
    features: str
    module: str
    description: str
    settings: dict[str, Any] = field(default_factory=dict)
    options: tuple[str, ...] = ()
    requires: tuple[tuple[str, str], ...] = ()
    entry: str = "fit_score"
    option_defaults: dict[str, Any] = field(default_factory=dict)
    late_options: dict[str, Any] = field(default_factory=dict)

    def function(self) -> Callable[..., np.ndarray]:
        return getattr(importlib.import_module(f"gcad_dist.detectors.{self.module}"), self.entry)


def _specs() -> dict[str, DetectorSpec]:
    from gcad_dist.detectors import gccad_pre, isolation, knn, local_knn, neighbor_cosine, pygod_models, tree_ensemble
    from partitioning.build import BuildConfig

    specs = [
        DetectorSpec("iforest", "none", "raw", "isolation", "IsolationForest on x", isolation.SETTINGS),
        DetectorSpec("knn", "none", "standard", "knn", "distance to the 5th nearest node in feature space",
                     knn.SETTINGS, requires=(("faiss", "cpu"),)),
        DetectorSpec("nbr-cosine", "none", "standard", "neighbor_cosine", "1 - cos(x_i, mean of neighbours' x)",
                     neighbor_cosine.SETTINGS),
        DetectorSpec("local-knn", "none", "standard", "local_knn", "distance to the 2nd most alike neighbour",
                     local_knn.SETTINGS),
        DetectorSpec("dominant", "none", "raw", "pygod_models", "PyGOD DOMINANT", pygod_models.SETTINGS["dominant"],
                     requires=(("pygod", "baselines"),)),
        DetectorSpec("cola", "none", "raw", "pygod_models", "PyGOD CoLA", pygod_models.SETTINGS["cola"],
                     requires=(("pygod", "baselines"),)),
        DetectorSpec("gccad-pre", "none", "raw", "gccad_pre", "GCCAD-pre, local recipe, whole graph",
                     gccad_pre.LOCAL_SETTINGS, options=("pre_epochs", "pre_ensemble", "pre_cliques", "pre_tails",
                                                       "pre_batch_size", "pre_context_hops", "pre_normalize",
                                                       "pre_degree_detrend", "pre_loose_context",
                                                       "pre_ball_switch", "pre_feature_view",
                                                       "pre_signature_view", "pre_dense_links",
                                                       "pre_sample_threshold", "pre_fanout", "pre_lr",
                                                       "pre_max_degree", "pre_workers"),
                     requires=(("faiss", "cpu"), ("ray", "base")),
                     option_defaults={"pre_epochs": gccad_pre.LOCAL_EPOCHS, "pre_ensemble": gccad_pre.LOCAL_ENSEMBLE,
                                      "pre_cliques": gccad_pre.LOCAL_CLIQUES, "pre_tails": gccad_pre.LOCAL_TAILS,
                                      "pre_batch_size": gccad_pre.LOCAL_BATCH_SIZE, "pre_context_hops": 1,
                                      "pre_normalize": BuildConfig.normalize,
                                      "pre_degree_detrend": gccad_pre.LOCAL_DEGREE_DETREND,
                                      "pre_loose_context": gccad_pre.LOCAL_LOOSE_CONTEXT,
                                      "pre_ball_switch": gccad_pre.LOCAL_BALL_SWITCH,
                                      "pre_feature_view": gccad_pre.LOCAL_FEATURE_VIEW,
                                      "pre_signature_view": gccad_pre.LOCAL_SIGNATURE_VIEW,
                                      "pre_dense_links": gccad_pre.DENSE_LINKS,
                                      "pre_sample_threshold": gccad_pre.SAMPLE_THRESHOLD, "pre_fanout": None,
                                      "pre_lr": None, "pre_max_degree": gccad_pre.MAX_DEGREE, "pre_workers": 1},
                     late_options={"pre_cliques": 0.0, "pre_tails": 0.0, "pre_batch_size": 1024,
                                   "pre_context_hops": 1, "pre_degree_detrend": False,
                                   "pre_loose_context": False, "pre_ball_switch": False,
                                   "pre_feature_view": False, "pre_signature_view": False,
                                   "pre_dense_links": gccad_pre.DENSE_LINKS,
                                   "pre_sample_threshold": gccad_pre.SAMPLE_THRESHOLD, "pre_fanout": None,
                                   "pre_lr": None, "pre_max_degree": gccad_pre.MAX_DEGREE, "pre_workers": 1}),
        DetectorSpec("gccad-pre-paper", "none", "raw", "gccad_pre", "GCCAD-pre (the paper's) scored by parts",
                     gccad_pre.SETTINGS, options=("pre_epochs",), requires=(("faiss", "cpu"), ("ray", "base")),
                     entry="fit_score_paper", option_defaults={"pre_epochs": gccad_pre.PAPER_EPOCHS}),
        DetectorSpec("trees", "train", "standard", "tree_ensemble",
                     "random forest on [x, mean nbr x, degree, 2-hop mean]",
                     tree_ensemble.SETTINGS, options=("label_inputs",), option_defaults={"label_inputs": False},
                     late_options={"label_inputs": False}),
        DetectorSpec("boosted-trees", "train", "standard", "tree_ensemble",
                     "gradient-boosted trees on [x, mean nbr x, degree]", tree_ensemble.BOOSTED_SETTINGS,
                     options=("label_inputs",), entry="fit_score_boosted", option_defaults={"label_inputs": False}),
    ]
    return {s.name: s for s in specs}


DETECTORS: dict[str, DetectorSpec] = _specs()


def check_available(name: str) -> str | None:
    """None when the detector can run here, else a one-line reason naming the extra to install."""
    for module, extra in DETECTORS[name].requires:
        try:
            importlib.import_module(module)
        except ImportError:
            how = f'pip install -e ".[{extra}]"' if extra != "base" else "pip install -e ."
            return f"{name} needs the Python package {module!r}, which is not installed ({how})"
    return None


def settings_of(name: str, options: dict[str, Any] | None = None) -> dict[str, Any]:
    """The result-affecting settings of a detector run: its fixed settings plus the options it reads."""
    spec = DETECTORS[name]
    s: dict[str, Any] = {"features": spec.features, "labels": spec.labels, **spec.settings}
    for k in spec.options:
        v = (options or {}).get(k)
        v = spec.option_defaults.get(k) if v is None else v
        if not (k in spec.late_options and v == spec.late_options[k]):
            s[k] = v
    return s


def strip_labels(data: Any) -> Any:
    """A new PyG ``Data`` with only ``x`` and ``edge_index`` (no labels, masks, split or graph ids)."""
    from torch_geometric.data import Data

    return Data(x=data.x, edge_index=data.edge_index, num_nodes=data.num_nodes)


def fit_score(name: str, data: Any, split: Any, seed: int, **options: Any) -> np.ndarray:
    """Fit detector ``name`` and return the anomaly score of every node (float64 [N]).

    Label-free detectors get :func:`strip_labels` of ``data`` and no split; supervised ones get both.
    ``options``: the harness options the detector reads (``DETECTORS[name].options``; one left out takes its
    ``option_defaults`` value), plus ``threads`` and ``device`` which every detector accepts.
    """
    if name not in DETECTORS:
        raise UsageError(f"--models: unknown detector {name!r} (choose from {', '.join(DETECTORS)})")
    why = check_available(name)
    if why:
        raise UsageError(f"--models: {why}")
    spec = DETECTORS[name]
    options = {**{k: spec.option_defaults[k] for k in spec.options if k in spec.option_defaults}, **options}
    missing = [k for k in spec.options if k not in options]
    if missing:
        raise TypeError(f"{name}: missing options {missing}")
    if spec.labels == "none":
        data, split = strip_labels(data), None
    torch.manual_seed(seed)
    np.random.seed(seed)
    kwargs = {k: options[k] for k in (*spec.options, "threads", "device") if k in options}
    if spec.module == "pygod_models":
        kwargs["model"] = name
    scores = np.asarray(spec.function()(data, split, seed, **kwargs), dtype=np.float64).ravel()
    if scores.shape != (data.num_nodes,):
        raise RuntimeError(f"{name}: returned {scores.shape} scores for {data.num_nodes} nodes")
    if not np.isfinite(scores).all():
        bad = int((~np.isfinite(scores)).sum())
        raise RuntimeError(f"{name}: {bad} non-finite scores")
    return scores
