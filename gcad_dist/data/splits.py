"""Train / validation / test splits: the dataset's own masks, or a seeded stratified random split.

* Given masks (e.g. tolokers' 10 standard splits, ``bool [S, N]``): split ``seed % S`` is used
  (or an explicit ``split_index``).
* Otherwise a stratified random split by label, default 40 / 20 / 40 % (train / val / test), as
  GADBench uses for its fully supervised setting. Each class is split in these proportions, so
  every part gets its share of the (rare) anomalies.
* Multi-graph data (``graph_id`` given): whole graphs go to one part; graphs are stratified by
  whether they contain a labelled anomaly.
* Partly labelled graphs (``y == -1`` = unknown): only labelled nodes are split; an unlabelled node
  is in none of train / val / test. Given masks are intersected with the labelled nodes.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

log = logging.getLogger(__name__)

__all__ = ["Split", "stratified_split", "split_from_masks", "make_split", "subsample_labels", "subsample_split"]


@dataclass
class Split:
    """Boolean node masks (torch, [N]) of the three parts; disjoint."""

    train: torch.Tensor
    val: torch.Tensor
    test: torch.Tensor
    source: str = "random"  # "given[<index>]" or "random(seed=..)"

    def __iter__(self):  # allows ``train, val, test = split``
        return iter((self.train, self.val, self.test))

    def to(self, device: Any) -> "Split":
        return Split(self.train.to(device), self.val.to(device), self.test.to(device), self.source)

    def sizes(self) -> dict[str, int]:
        return {"train": int(self.train.sum()), "val": int(self.val.sum()), "test": int(self.test.sum())}


def _np(a: Any) -> np.ndarray:
    if hasattr(a, "detach"):
        a = a.detach().cpu().numpy()
    return np.asarray(a)


def _stratified_assign(strata: np.ndarray, fractions: tuple[float, float], seed: int) -> np.ndarray:
    """Part id (0 train, 1 val, 2 test) per item, each stratum split in the given proportions."""
    n = strata.size
    rng = np.random.default_rng(seed)
    perm = rng.permutation(n)
    # Sort the random permutation by stratum (stable): rank within stratum is then random.
    order = perm[np.argsort(strata[perm], kind="stable")]
    s_sorted = strata[order]
    _, start, counts = np.unique(s_sorted, return_index=True, return_counts=True)
    stratum_idx = np.searchsorted(s_sorted[start], s_sorted)
    rank = np.arange(n) - start[stratum_idx]
    cnt = counts[stratum_idx]
    n_train = np.round(cnt * fractions[0]).astype(np.int64)
    n_val = np.round(cnt * (fractions[0] + fractions[1])).astype(np.int64) - n_train
    part_sorted = np.where(rank < n_train, 0, np.where(rank < n_train + n_val, 1, 2))
    part = np.empty(n, dtype=np.int64)
    part[order] = part_sorted
    return part


def stratified_split(
    y: Any,
    seed: int = 0,
    train: float = 0.4,
    val: float = 0.2,
    graph_id: Any | None = None,
) -> Split:
    """Seeded stratified random split of nodes (or of whole graphs when ``graph_id`` is given).

    Only labelled nodes are split: a node with ``y < 0`` (unknown) is in no part, and a graph with no
    labelled node is in no part.

    Args:
        y: labels [N] (1 = anomaly, 0 = normal, -1 = unknown).
        seed: random seed; the same seed gives the same split.
        train, val: fractions; the rest is test. Both > 0 and train + val < 1.
        graph_id: graph id per node for multi-graph data, or None.
    """
    if not (0 < train < 1 and 0 < val < 1 and train + val < 1):
        raise ValueError(f"bad split fractions train={train} val={val} (need 0 < train, val and train + val < 1)")
    y_np = _np(y).astype(np.int64).ravel()
    labelled = y_np >= 0
    part = np.full(y_np.size, -1, dtype=np.int64)  # -1: in no part (unknown label)
    if graph_id is None:
        part[labelled] = _stratified_assign(y_np[labelled], (train, val), seed)
    else:
        g = _np(graph_id).astype(np.int64).ravel()
        uniq, inv = np.unique(g, return_inverse=True)
        has_anomaly = np.bincount(inv, weights=y_np == 1, minlength=uniq.size) > 0
        has_label = np.bincount(inv, weights=labelled, minlength=uniq.size) > 0
        graph_part = np.full(uniq.size, -1, dtype=np.int64)
        graph_part[has_label] = _stratified_assign(has_anomaly[has_label].astype(np.int64), (train, val), seed)
        part = np.where(labelled, graph_part[inv], -1)
    t = torch.from_numpy(part)
    return Split(t == 0, t == 1, t == 2, source=f"random(seed={seed},{train:g}/{val:g}/{1 - train - val:g})")


def split_from_masks(train_masks: Any, val_masks: Any, test_masks: Any, index: int, labelled: Any | None = None) -> Split:
    """Pick split ``index`` from given masks ``[S, N]`` (or ``[N]`` for a single split).

    ``labelled`` (bool [N]): keep only these nodes in every part, with a warning when the masks held others.
    """
    ms = [torch.as_tensor(_np(m)).bool() for m in (train_masks, val_masks, test_masks)]
    if ms[0].dim() == 1:
        ms = [m.unsqueeze(0) for m in ms]
    S = ms[0].shape[0]
    if not 0 <= index < S:
        raise ValueError(f"split index {index} out of range (the data has {S} splits)")
    tr, va, te = (m[index].clone() for m in ms)
    if bool((tr & va).any() | (tr & te).any() | (va & te).any()):
        raise ValueError(f"given split {index} is not disjoint")
    if labelled is not None:
        lab = torch.as_tensor(_np(labelled)).bool().reshape(-1)
        dropped = {name: int((m & ~lab).sum()) for name, m in (("train", tr), ("val", va), ("test", te))}
        if any(dropped.values()):
            log.warning("given split %d includes %d unlabelled nodes (train %d, val %d, test %d); they are left out",
                        index, sum(dropped.values()), dropped["train"], dropped["val"], dropped["test"])
        tr, va, te = tr & lab, va & lab, te & lab
    return Split(tr, va, te, source=f"given[{index}]")


def make_split(
    data: Any,
    seed: int = 0,
    split_index: int | None = None,
    train: float = 0.4,
    val: float = 0.2,
    use_given: bool = True,
) -> Split:
    """Split of a PyG ``Data``: its ``train_mask/val_mask/test_mask`` if present (index
    ``split_index``, default ``seed % S``), else a stratified random split seeded by ``seed``
    (by graph when ``data.graph_id`` is present). Either way only nodes with a known label
    (``y >= 0``) are in a part."""
    y = getattr(data, "y", None)
    if use_given and all(hasattr(data, f"{k}_mask") and getattr(data, f"{k}_mask") is not None
                         for k in ("train", "val", "test")):
        tm = data.train_mask
        S = 1 if tm.dim() == 1 else tm.shape[0]
        idx = seed % S if split_index is None else split_index
        return split_from_masks(data.train_mask, data.val_mask, data.test_mask, idx,
                                labelled=None if y is None else _np(y) >= 0)
    if split_index is not None:
        raise ValueError(f"split index {split_index} given but the graph has no train/val/test split masks")
    if y is None:
        raise ValueError("graph has no labels (y): cannot make a supervised split")
    return stratified_split(y, seed=seed, train=train, val=val, graph_id=getattr(data, "graph_id", None))


def subsample_labels(train_mask: Any, y: Any, fraction: float, seed: int = 0) -> torch.Tensor:
    """Stratified, seeded subsample of the training nodes (the label budget of fine-tuning and of
    ``gcad_dist.train --label-fraction``: the same mask, labels, fraction and seed give the same nodes).

    Each class c keeps ``max(1, round(fraction * n_c))`` of its ``n_c`` training nodes (classes
    absent from the training split stay absent). ``fraction == 1`` returns the mask unchanged.

    Args:
        train_mask: bool [N] training nodes (nodes with an unknown label are dropped).
        y: labels [N] (1 = anomaly, -1 = unknown).
        fraction: in (0, 1].
        seed: the same seed gives the same subsample.

    Returns:
        bool tensor [N], a subset of ``train_mask``.
    """
    if not (0 < fraction <= 1) or math.isnan(fraction):
        raise ValueError(f"label fraction must be in (0, 1], got {fraction}")
    labels = torch.as_tensor(y).cpu().numpy().astype(np.int64)
    mask = torch.as_tensor(train_mask).bool().cpu().numpy() & (labels >= 0)  # unknown labels (-1) never count
    if fraction == 1:
        return torch.from_numpy(mask.copy())
    idx = np.flatnonzero(mask)
    cls = labels[idx]
    rng = np.random.default_rng(seed)
    perm = rng.permutation(idx.size)
    order = perm[np.argsort(cls[perm], kind="stable")]  # grouped by class, random within a class
    c_sorted = cls[order]
    _, start, counts = np.unique(c_sorted, return_index=True, return_counts=True)
    which = np.searchsorted(c_sorted[start], c_sorted)
    rank = np.arange(order.size) - start[which]
    keep_n = np.maximum(1, np.round(counts * fraction).astype(np.int64))
    keep = np.zeros(mask.size, dtype=bool)
    keep[idx[order[rank < keep_n[which]]]] = True
    return torch.from_numpy(keep)


def subsample_split(split: Split, y: Any, fraction: float, seed: int = 0) -> tuple[Split, dict[str, int]]:
    """``split`` with its training part cut to :func:`subsample_labels` (validation and test untouched),
    and the label budget: ``train_labelled`` / ``train_labelled_anomalies`` (kept) and ``train_total`` /
    ``train_total_anomalies`` (the whole training part). Shared by ``gcad_dist.finetune`` and
    ``gcad_dist.train --label-fraction``, so both train on the same nodes for the same split and seed."""
    yt = torch.as_tensor(y)
    train = subsample_labels(split.train, yt, fraction, seed=seed).to(split.train.device)
    budget = {
        "train_labelled": int(train.sum()),
        "train_labelled_anomalies": int((yt[train.cpu()] == 1).sum()),
        "train_total": int(split.train.sum()),
        "train_total_anomalies": int((yt[split.train.cpu()] == 1).sum()),
    }
    return Split(train, split.val, split.test, split.source), budget
