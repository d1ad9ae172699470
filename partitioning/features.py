"""Label-free feature normalisation of the build (``python -m partitioning.build --normalize``).

``standard`` z-scores every feature over all nodes of the input graph: ``(x - mean) / std`` with the
unbiased standard deviation (ddof=1, as ``torch.std`` in :func:`gcad_dist.train.normalize_features`,
the same transform at training and scoring time) and ``std == 0`` replaced by 1. The statistics are
accumulated in float64, one row block at a time (a 1M x 64 float32 graph is never held as float64),
and the normalised features are a new float32 array: the input (possibly a read-only memmap, or
shared with the caller) is never modified.
"""

from __future__ import annotations

from typing import Any

import numpy as np

NORMALIZE_CHOICES: tuple[str, ...] = ("standard", "none")
BLOCK_BYTES = 32 << 20  # float64 bytes of one row block


def manifest_normalization(manifest: dict[str, Any]) -> str:
    """``manifest["features"]["normalize"]`` of a store; ``none`` for stores written before the key existed."""
    features = manifest.get("features")
    return str(features.get("normalize", "none")) if isinstance(features, dict) else "none"


def describe_normalization(how: str) -> str:
    """One word for logs and summaries: ``raw`` or ``z-scored (standard)``."""
    return "raw" if how == "none" else f"z-scored ({how})"


def _block_rows(num_features: int, block_rows: int | None) -> int:
    if block_rows is not None:
        return max(1, int(block_rows))
    return max(1, BLOCK_BYTES // (8 * max(num_features, 1)))


def feature_stats(x: np.ndarray, block_rows: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Per-feature mean and unbiased std (ddof=1) of ``x`` [N, F] over all rows, float64 [F] each.

    One pass over row blocks, merged with Chan et al.'s pairwise update (numerically stable, unlike
    sum of squares). Fewer than 2 rows give std 0.
    """
    n, f = int(x.shape[0]), int(x.shape[1])
    step = _block_rows(f, block_rows)
    mean = np.zeros(f, dtype=np.float64)
    m2 = np.zeros(f, dtype=np.float64)  # sum of squared deviations from the running mean
    count = 0
    for start in range(0, n, step):
        b = np.array(x[start : start + step], dtype=np.float64)  # always a copy: centred in place below
        nb = b.shape[0]
        bmean = b.mean(axis=0)
        b -= bmean
        bm2 = np.einsum("ij,ij->j", b, b)
        delta = bmean - mean
        total = count + nb
        mean += delta * (nb / total)
        m2 += bm2 + delta * delta * (count * nb / total)
        count = total
    std = np.sqrt(m2 / (count - 1)) if count > 1 else np.zeros(f, dtype=np.float64)
    return mean, std


def standardize(x: np.ndarray, mean: np.ndarray, scale: np.ndarray, block_rows: int | None = None) -> np.ndarray:
    """``(x - mean) / scale`` as a new C-contiguous float32 array (computed in float64, block by block)."""
    n, f = int(x.shape[0]), int(x.shape[1])
    step = _block_rows(f, block_rows)
    mean = np.asarray(mean, dtype=np.float64)
    scale = np.asarray(scale, dtype=np.float64)
    out = np.empty((n, f), dtype=np.float32)
    for start in range(0, n, step):
        b = np.array(x[start : start + step], dtype=np.float64)
        b -= mean
        b /= scale
        out[start : start + b.shape[0]] = b
    return out


def normalize_store_features(
    x: np.ndarray, how: str, block_rows: int | None = None
) -> tuple[np.ndarray, dict[str, Any]]:
    """The features to store and their manifest entry (``manifest["features"]``).

    ``standard``: a new float32 array z-scored per feature; the entry records ``mean`` and ``std``
    (the divisor applied: the unbiased std, 1 for constant features), so that
    ``stored = (raw - mean) / std``. ``none``: ``x`` itself, unchanged.
    """
    if how == "none":
        return x, {"normalize": "none"}
    if how != "standard":
        raise ValueError(f"unknown feature normalisation {how!r} (choose from {', '.join(NORMALIZE_CHOICES)})")
    mean, std = feature_stats(x, block_rows)
    scale = np.where(std > 0, std, 1.0)
    out = standardize(x, mean, scale, block_rows)
    return out, {"normalize": "standard", "mean": mean.tolist(), "std": scale.tolist()}
