"""Label-free feature normalisation of the build (``python -m partitioning.build --normalize``).

``standard`` z-scores every feature over all nodes of the input graph: ``(x - mean) / std`` with the
unbiased standard deviation (ddof=1, as ``torch.std`` in :func:`gcad_dist.train.normalize_features`,
the same transform at training and scoring time) and ``std == 0`` replaced by 1. The statistics are
accumulated in float64, one row block at a time (a 1M x 64 float32 graph is never held as float64),
and the normalised features are a new float32 array: the input (possibly a read-only memmap, or
shared with the caller) is never modified.

``power`` first z-scores, then maps each column through the Yeo-Johnson power transform with its own
exponent (maximum likelihood, fitted on at most :data:`POWER_FIT_ROWS` rows drawn with a fixed seed), then
z-scores again. A heavy-tailed column (counts, amounts, degrees) comes out close to Gaussian, so a few extreme
values no longer dominate its column; a near-Gaussian column keeps its shape (exponent near 1), and a column
with two values is the same after the final z-score as under ``standard`` (any increasing map of two values).
Still label-free; the manifest records the three steps' statistics.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

NORMALIZE_CHOICES: tuple[str, ...] = ("standard", "power", "none")
BLOCK_BYTES = 32 << 20  # float64 bytes of one row block
#: ``power``: rows the Yeo-Johnson exponents are fitted on (a seeded sample of a larger graph)
POWER_FIT_ROWS = 50_000
#: ``power``: fitted exponents are clipped to this range, so that (1 + |z|) ** exponent stays finite in float64
#: for the z-scores a graph can hold (|z| <= sqrt(N)); the transform is rescaled in float64 before it is stored
POWER_LAMBDA_BOUND = 40.0


def manifest_normalization(manifest: dict[str, Any]) -> str:
    """``manifest["features"]["normalize"]`` of a store; ``none`` for stores written before the key existed."""
    features = manifest.get("features")
    return str(features.get("normalize", "none")) if isinstance(features, dict) else "none"


def describe_normalization(how: str) -> str:
    """A few words for logs and summaries: ``raw``, ``z-scored (standard)`` or ``power-transformed, z-scored (power)``."""
    if how == "none":
        return "raw"
    return f"power-transformed, z-scored ({how})" if how == "power" else f"z-scored ({how})"


def _block_rows(num_features: int, block_rows: int | None) -> int:
    if block_rows is not None:
        return max(1, int(block_rows))
    return max(1, BLOCK_BYTES // (8 * max(num_features, 1)))


BlockTransform = Callable[[np.ndarray], np.ndarray]


def _block(x: np.ndarray, start: int, step: int, transform: BlockTransform | None) -> np.ndarray:
    """Rows ``start:start + step`` of ``x`` as a new float64 array, through ``transform`` when given."""
    b = np.array(x[start : start + step], dtype=np.float64)  # always a copy: modified in place by the callers
    return b if transform is None else np.asarray(transform(b), dtype=np.float64)


def feature_stats(x: np.ndarray, block_rows: int | None = None,
                  transform: BlockTransform | None = None) -> tuple[np.ndarray, np.ndarray]:
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
        b = _block(x, start, step, transform)
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


def standardize(x: np.ndarray, mean: np.ndarray, scale: np.ndarray, block_rows: int | None = None,
                transform: BlockTransform | None = None, out: np.ndarray | None = None) -> np.ndarray:
    """``(transform(x) - mean) / scale`` (``transform`` per row block, default none) as a C-contiguous float32 array,
    computed in float64 block by block: a new one, or ``out`` ([N, F] float32, which may be ``x`` itself: each block
    is read before it is written)."""
    n, f = int(x.shape[0]), int(x.shape[1])
    step = _block_rows(f, block_rows)
    mean = np.asarray(mean, dtype=np.float64)
    scale = np.asarray(scale, dtype=np.float64)
    out = np.empty((n, f), dtype=np.float32) if out is None else out
    for start in range(0, n, step):
        b = _block(x, start, step, transform)
        b -= mean
        b /= scale
        out[start : start + b.shape[0]] = b
    return out


def yeo_johnson(z: np.ndarray, lambdas: np.ndarray) -> np.ndarray:
    """The Yeo-Johnson transform of ``z`` [n, F] with one exponent per column, in float64 (a new array).

    ``z >= 0``: ((z + 1) ** l - 1) / l, or log1p(z) where l == 0; ``z < 0``: -((1 - z) ** (2 - l) - 1) / (2 - l),
    or -log1p(-z) where l == 2 (scikit-learn's ``PowerTransformer`` formula, vectorised over columns)."""
    z = np.asarray(z, dtype=np.float64)
    lam = np.broadcast_to(np.asarray(lambdas, dtype=np.float64), z.shape)
    pos = z >= 0
    out = np.empty_like(z)
    zp, lp = z[pos], lam[pos]
    near0 = np.abs(lp) < 1e-8
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        out[pos] = np.where(near0, np.log1p(zp), np.expm1(lp * np.log1p(zp)) / np.where(near0, 1.0, lp))
        zn, ln = -z[~pos], 2.0 - lam[~pos]
        near2 = np.abs(ln) < 1e-8
        out[~pos] = -np.where(near2, np.log1p(zn), np.expm1(ln * np.log1p(zn)) / np.where(near2, 1.0, ln))
    return out


def fit_power_lambdas(z: np.ndarray, seed: int = 0) -> np.ndarray:
    """Yeo-Johnson exponents [F] of the columns of ``z`` (maximum likelihood, scikit-learn's fit), on at most
    :data:`POWER_FIT_ROWS` rows drawn with ``seed``; clipped to +-:data:`POWER_LAMBDA_BOUND`; 1 (identity) for a
    constant column."""
    import warnings

    from sklearn.preprocessing import PowerTransformer

    n = int(z.shape[0])
    rows = np.sort(np.random.default_rng(seed).choice(n, POWER_FIT_ROWS, replace=False)) if n > POWER_FIT_ROWS else None
    sample = np.asarray(z if rows is None else z[rows], dtype=np.float64)
    lambdas = np.ones(sample.shape[1])
    varying = np.ptp(sample, axis=0) > 0 if sample.shape[0] else np.zeros(sample.shape[1], dtype=bool)
    if varying.any():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # overflow warnings of the likelihood search at extreme exponents
            pt = PowerTransformer(method="yeo-johnson", standardize=False).fit(sample[:, varying])
        lambdas[varying] = pt.lambdas_
    return np.clip(np.nan_to_num(lambdas, nan=1.0), -POWER_LAMBDA_BOUND, POWER_LAMBDA_BOUND)


def power_normalize(x: np.ndarray, block_rows: int | None = None) -> tuple[np.ndarray, dict[str, Any]]:
    """``power``: z-score, Yeo-Johnson per column, z-score again; (float32 array, manifest entry with the
    statistics of each step: ``mean``/``std`` of the input, ``lambdas``, ``mean2``/``std2`` after the transform).

    The transformed values stay in float64 until the second z-score (two passes over row blocks: statistics, then
    the output), so an exponent far from 1 cannot overflow float32 before the rescaling."""
    mean, std = feature_stats(x, block_rows)
    scale = np.where(std > 0, std, 1.0)
    z = standardize(x, mean, scale, block_rows)
    lambdas = fit_power_lambdas(z)

    def transform(b: np.ndarray) -> np.ndarray:
        return yeo_johnson(b, lambdas)

    mean2, std2 = feature_stats(z, block_rows, transform)
    if not (np.isfinite(mean2).all() and np.isfinite(std2).all()):  # not seen on any graph; a clear error if it is
        raise ValueError("the power transform overflowed on these features; use --normalize standard")
    scale2 = np.where(std2 > 0, std2, 1.0)
    standardize(z, mean2, scale2, block_rows, transform, out=z)  # in place: z is a new float32 array
    return z, {"normalize": "power", "mean": mean.tolist(), "std": scale.tolist(), "lambdas": lambdas.tolist(),
               "mean2": mean2.tolist(), "std2": scale2.tolist()}


def normalize_store_features(
    x: np.ndarray, how: str, block_rows: int | None = None
) -> tuple[np.ndarray, dict[str, Any]]:
    """The features to store and their manifest entry (``manifest["features"]``).

    ``standard``: a new float32 array z-scored per feature; the entry records ``mean`` and ``std``
    (the divisor applied: the unbiased std, 1 for constant features), so that
    ``stored = (raw - mean) / std``. ``power``: :func:`power_normalize`. ``none``: ``x`` itself, unchanged.
    """
    if how == "none":
        return x, {"normalize": "none"}
    if how == "power":
        return power_normalize(x, block_rows)
    if how != "standard":
        raise ValueError(f"unknown feature normalisation {how!r} (choose from {', '.join(NORMALIZE_CHOICES)})")
    mean, std = feature_stats(x, block_rows)
    scale = np.where(std > 0, std, 1.0)
    out = standardize(x, mean, scale, block_rows)
    return out, {"normalize": "standard", "mean": mean.tolist(), "std": scale.tolist()}
