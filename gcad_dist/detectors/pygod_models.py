"""PyGOD DOMINANT and CoLA (label-free), trained full-batch without a neighbour sampler.

PyGOD 1.1.0's ``DeepDetector.fit`` always goes through ``NeighborLoader``, which needs pyg-lib or
torch-sparse even for full-batch training (``batch_size=0``, ``num_neigh=-1``). These subclasses keep
PyGOD's models, losses, scores and defaults (``init_model`` / ``forward_model`` are PyGOD's) and only
replace the loader by the whole graph as one batch, which is what that loader yields with those
settings. As in PyGOD's transductive use (``fit(data)`` then ``decision_score_``, e.g. the BOND
benchmark), the score of a node is the one computed in the last training epoch.

* DOMINANT (Ding et al., SDM 2019): GCN encoder (2 layers), GCN attribute decoder, inner-product
  structure decoder on the dense adjacency; score = ``alpha * ||x - x'|| + (1 - alpha) * ||a - a'||`` with
  ``alpha = 0.5``. Memory: dense N x N matrices (about 5 x N^2 x 4 bytes, ~3 GB at N = 12k).
* CoLA (Liu et al., TNNLS 2021) as PyGOD implements it: a 4-layer GCN embeds every node's neighbourhood,
  a bilinear discriminator scores (node features, embedding) pairs against pairs with shuffled features;
  score = negative-pair logit - positive-pair logit. (PyGOD's version: whole-neighbourhood GCN embeddings
  instead of the paper's RWR subgraphs of 4 nodes, one round instead of 256.)
"""

from __future__ import annotations

import copy
import logging
from typing import Any

import numpy as np
import torch

from gcad_dist.cli import UsageError

log = logging.getLogger("gcad_dist.detectors.pygod")

#: PyGOD 1.1.0 defaults, passed explicitly so that they are what the run key records.
_COMMON = {"hid_dim": 64, "num_layers": 4, "dropout": 0.0, "weight_decay": 0.0, "lr": 4e-3, "epoch": 100,
           "backbone": "GCN", "batch": "full", "score": "last training epoch"}
SETTINGS: dict[str, dict[str, Any]] = {"dominant": {**_COMMON, "weight": 0.5, "sigmoid_s": False}, "cola": dict(_COMMON)}
PYGOD_VERSION = "1.1.0"


def _gpu_index(device: str) -> int:
    if device == "cpu" or (device == "auto" and not torch.cuda.is_available()):
        return -1
    if device in ("auto", "cuda"):
        return 0
    return int(device.split(":", 1)[1])


def _full_batch_fit(det: Any, data: Any) -> torch.Tensor:
    """``DeepDetector.fit`` with the whole graph as the only batch; returns the last epoch's scores."""
    from tqdm.auto import tqdm

    det.process_graph(data)
    det.num_nodes, det.in_dim = data.x.shape
    det.batch_size = data.num_nodes
    batch = copy.copy(data)
    batch.batch_size = data.num_nodes
    batch.n_id = torch.arange(data.num_nodes)
    det.model = det.init_model(**det.kwargs)
    opt = torch.optim.Adam(det.model.parameters(), lr=det.lr, weight_decay=det.weight_decay)
    det.model.train()
    score = None
    for _ in tqdm(range(det.epoch), desc=type(det).__name__, unit="epoch", leave=False, disable=None):
        loss, score = det.forward_model(batch)
        opt.zero_grad()
        loss.backward()
        opt.step()
    det.decision_score_ = score
    return score


def _detector(model: str, gpu: int) -> Any:
    import pygod
    from pygod.detector import DOMINANT, CoLA
    from torch_geometric.nn import GCN
    from torch_geometric.utils import to_dense_adj

    if pygod.__version__ != PYGOD_VERSION:
        log.warning("pygod %s installed; these baselines were written for %s", pygod.__version__, PYGOD_VERSION)
    kw = {k: v for k, v in SETTINGS[model].items() if k not in ("backbone", "batch", "score")}

    class FullBatchDOMINANT(DOMINANT):
        def process_graph(self, data: Any) -> None:
            # PyGOD sizes the dense adjacency by the largest node id in edge_index: give it N explicitly.
            data.s = to_dense_adj(data.edge_index, max_num_nodes=data.num_nodes)[0]

    class FullBatchCoLA(CoLA):
        pass

    cls = FullBatchDOMINANT if model == "dominant" else FullBatchCoLA
    return cls(backbone=GCN, gpu=gpu, batch_size=0, num_neigh=-1, verbose=0, **kw)


def _check_memory(model: str, n: int, device: str) -> None:
    """DOMINANT holds about six dense N x N float32 matrices: refuse (MemoryError, before allocating) when that
    exceeds the free CPU memory; the harness records the run as failed and goes on."""
    if model != "dominant" or _gpu_index(device) >= 0:
        return
    import psutil

    need = 6 * 4 * n * n
    free = psutil.virtual_memory().available
    if need > free:
        raise MemoryError(f"DOMINANT on a graph of {n:,} nodes needs about {need / 2**30:.0f} GiB for DOMINANT's "
                         f"dense adjacency, {free / 2**30:.0f} GiB free")


def fit_score(data: Any, split: Any, seed: int, model: str = "dominant", threads: int = 1, device: str = "cpu",
              **_: Any) -> np.ndarray:
    """Fit PyGOD ``model`` (``dominant`` or ``cola``) on the whole graph (no labels); per-node scores."""
    try:
        import pygod  # noqa: F401
    except ImportError:
        raise UsageError(f"--models {model}: needs PyGOD (pip install -e \".[baselines]\")") from None
    if model not in SETTINGS:
        raise UsageError(f"--models: unknown PyGOD detector {model!r}")
    _check_memory(model, data.num_nodes, device)
    if threads > 0:
        torch.set_num_threads(threads)
    torch.manual_seed(seed)
    det = _detector(model, _gpu_index(device))
    return _full_batch_fit(det, data).double().numpy()
