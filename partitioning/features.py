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
A value held by more than half of a column's rows (the zeros of sparse counts or of a bag of words) is left out
of that column's exponent fit, which its other values decide (:func:`fit_power_lambdas`).
Still label-free; the manifest records the three steps' statistics. The exponents maximise scipy's Yeo-Johnson
likelihood (the optimum of scikit-learn's ``PowerTransformer``), all columns at once (:func:`yeo_johnson_mle`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

NORMALIZE_CHOICES: tuple[str, ...] = ("standard", "power", "none")
BLOCK_BYTES = 32 << 20  # float64 bytes of one row block
BLOCK_THREADS = 8  # row blocks in flight at once: each holds a few block-sized float64 temporaries
#: ``power``: rows the Yeo-Johnson exponents are fitted on (a seeded sample of a larger graph)
POWER_FIT_ROWS = 50_000
#: ``power``: fitted exponents are clipped to this range, so that (1 + |z|) ** exponent stays finite in float64
#: for the z-scores a graph can hold (|z| <= sqrt(N)); the transform is rescaled in float64 before it is stored
POWER_LAMBDA_BOUND = 40.0
#: ``power`` as it was before session 40 (every row in the exponent fit): the name under which stores and
#: checkpoints written then are read, so that they keep their transform; accepted wherever a normalisation is
POWER_ALL_ROWS = "power-all-rows"
KNOWN_NORMALIZATIONS: tuple[str, ...] = (*NORMALIZE_CHOICES, POWER_ALL_ROWS)
#: key and value marking today's ``power`` (a majority value left out of the exponent fit) in a manifest's
#: ``features`` entry and in a checkpoint's ``extra``; ``power`` without it is :data:`POWER_ALL_ROWS`
POWER_FIT_KEY, POWER_FIT = "power_fit", "majority-excluded"
_YJ_NEAR = 1e-8  # |exponent| (or |2 - exponent|) below which Yeo-Johnson takes its log1p form
_YJ_GRID = 13  # evenly spaced exponents of the coarse search over each column's interval, ...
_YJ_GRID_DENSE = np.array([-1.0, 0.0, 0.5, 1.0, 1.5, 2.0, 3.0])  # ... and these, where most optima lie
_YJ_BLOCK_BYTES = 8 << 20  # the exponent fit's column blocks: [n, block] float64 arrays of at most this and BLOCK_BYTES
_YJ_MAX_STEPS = 200  # cap on the Brent steps after the grid (all columns converge in about 10-40)


def recorded_normalization(record: dict[str, Any]) -> str:
    """The normalisation a manifest's ``features`` entry or a checkpoint's ``extra`` records (its ``normalize``;
    ``none`` when absent): ``power`` without the :data:`POWER_FIT_KEY` marker was written before session 40 and is
    :data:`POWER_ALL_ROWS`, so that it is reproduced as it was."""
    how = str(record.get("normalize", "none"))
    return POWER_ALL_ROWS if how == "power" and record.get(POWER_FIT_KEY) != POWER_FIT else how


def mark_normalization(record: dict[str, Any]) -> dict[str, Any]:
    """``record`` (a checkpoint's ``extra``) with the :data:`POWER_FIT_KEY` marker added where it says ``power``."""
    return {**record, POWER_FIT_KEY: POWER_FIT} if record.get("normalize") == "power" else record


def manifest_normalization(manifest: dict[str, Any]) -> str:
    """The normalisation of a store's features (:func:`recorded_normalization` of ``manifest["features"]``);
    ``none`` for stores written before the key existed."""
    features = manifest.get("features")
    return recorded_normalization(features) if isinstance(features, dict) else "none"


def describe_normalization(how: str) -> str:
    """A few words for logs and summaries: ``raw``, ``z-scored (standard)`` or ``power-transformed, z-scored (power)``."""
    if how == "none":
        return "raw"
    return f"power-transformed, z-scored ({how})" if how in ("power", POWER_ALL_ROWS) else f"z-scored ({how})"


def _block_rows(num_features: int, block_rows: int | None) -> int:
    if block_rows is not None:
        return max(1, int(block_rows))
    return max(1, BLOCK_BYTES // (8 * max(num_features, 1)))


BlockTransform = Callable[[np.ndarray], np.ndarray]


def _block(x: np.ndarray, start: int, step: int, transform: BlockTransform | None) -> np.ndarray:
    """Rows ``start:start + step`` of ``x`` as a new float64 array, through ``transform`` when given."""
    b = np.array(x[start : start + step], dtype=np.float64)  # always a copy: modified in place by the callers
    return b if transform is None else np.asarray(transform(b), dtype=np.float64)


def _over_blocks(fn: Callable[[int], Any], n: int, step: int, threads: int) -> list[Any]:
    """``[fn(start) for start in range(0, n, step)]``, on ``threads`` threads (at most :data:`BLOCK_THREADS`) when
    more than one (NumPy's array operations release the GIL); the results in block order either way."""
    starts = range(0, n, step)
    threads = min(threads, BLOCK_THREADS, len(starts))
    if threads <= 1:
        return [fn(start) for start in starts]
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=threads) as pool:
        return list(pool.map(fn, starts))


def feature_stats(x: np.ndarray, block_rows: int | None = None,
                  transform: BlockTransform | None = None, threads: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """Per-feature mean and unbiased std (ddof=1) of ``x`` [N, F] over all rows, float64 [F] each.

    One pass over row blocks (each block's moments on ``threads`` threads), merged in block order with Chan et al.'s
    pairwise update (numerically stable, unlike sum of squares; the same numbers on any number of threads). Fewer
    than 2 rows give std 0.
    """
    n, f = int(x.shape[0]), int(x.shape[1])
    step = _block_rows(f, block_rows)

    def moments(start: int) -> tuple[int, np.ndarray, np.ndarray]:
        b = _block(x, start, step, transform)
        bmean = b.mean(axis=0)
        b -= bmean
        return b.shape[0], bmean, np.einsum("ij,ij->j", b, b)

    mean = np.zeros(f, dtype=np.float64)
    m2 = np.zeros(f, dtype=np.float64)  # sum of squared deviations from the running mean
    count = 0
    for nb, bmean, bm2 in _over_blocks(moments, n, step, threads):
        delta = bmean - mean
        total = count + nb
        mean += delta * (nb / total)
        m2 += bm2 + delta * delta * (count * nb / total)
        count = total
    std = np.sqrt(m2 / (count - 1)) if count > 1 else np.zeros(f, dtype=np.float64)
    return mean, std


def standardize(x: np.ndarray, mean: np.ndarray, scale: np.ndarray, block_rows: int | None = None,
                transform: BlockTransform | None = None, out: np.ndarray | None = None, threads: int = 1) -> np.ndarray:
    """``(transform(x) - mean) / scale`` (``transform`` per row block, default none) as a C-contiguous float32 array,
    computed in float64 block by block (blocks on ``threads`` threads): a new one, or ``out`` ([N, F] float32, which
    may be ``x`` itself: each block is read before it is written, and blocks do not overlap)."""
    n, f = int(x.shape[0]), int(x.shape[1])
    step = _block_rows(f, block_rows)
    mean = np.asarray(mean, dtype=np.float64)
    scale = np.asarray(scale, dtype=np.float64)
    out = np.empty((n, f), dtype=np.float32) if out is None else out

    def one(start: int) -> None:
        b = _block(x, start, step, transform)
        b -= mean
        b /= scale
        out[start : start + b.shape[0]] = b

    _over_blocks(one, n, step, threads)
    return out


def yeo_johnson(z: np.ndarray, lambdas: np.ndarray) -> np.ndarray:
    """The Yeo-Johnson transform of ``z`` [n, F] with one exponent per column, in float64 (a new array).

    ``z >= 0``: ((z + 1) ** l - 1) / l, or log1p(z) where l == 0; ``z < 0``: -((1 - z) ** (2 - l) - 1) / (2 - l),
    or -log1p(-z) where l == 2 (scikit-learn's ``PowerTransformer`` formula, vectorised over columns). Both sides
    are one expression, expm1(d * s) / d with d = l or l - 2 and s = log1p(z) or -log1p(-z) (the same floats as
    the two formulas), so there is no boolean indexing of the entries."""
    z = np.asarray(z, dtype=np.float64)
    lam = np.asarray(lambdas, dtype=np.float64)
    neg = z < 0
    d = np.subtract(lam, 2.0 * neg)  # l where z >= 0, l - 2 = -(2 - l) where z < 0
    slog = np.negative(z, where=neg, out=z.copy())
    np.log1p(slog, out=slog)
    np.negative(slog, out=slog, where=neg)  # log1p(z) where z >= 0, -log1p(-z) where z < 0
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        out = d * slog
        np.expm1(out, out=out)
        out /= d
    if (np.abs(lam) < _YJ_NEAR).any() or (np.abs(lam - 2.0) < _YJ_NEAR).any():
        near = np.abs(d) < _YJ_NEAR  # the log1p forms
        out[near] = slog[near]
    return out


class _YJColumns:
    """Columns prepared for the Yeo-Johnson likelihood: values ``v`` [F, m] (a column per row) with non-negative
    weights ``w`` [F, m] (a 0/1 mask, or how often a distinct value occurs; None: all 1), reduced to what every
    evaluation reuses: sign(v) * log1p(|v|) and 2 * (v < 0)."""

    def __init__(self, v: np.ndarray, w: np.ndarray | None) -> None:
        neg = v < 0
        self.slog = np.log1p(np.abs(v))
        np.negative(self.slog, out=self.slog, where=neg)
        self.two_neg = 2.0 * neg
        self.w = w
        self.sqrt_w = None if w is None else np.sqrt(w)
        if w is None:
            self.n = np.full(v.shape[0], float(v.shape[1]))
            self.jac = self.slog.sum(axis=1)
        else:
            self.n = w.sum(axis=1)
            self.jac = np.einsum("ij,ij->i", w, self.slog)
        self._buffers: tuple[np.ndarray, np.ndarray] | None = None

    def take(self, cols: np.ndarray) -> _YJColumns:
        """The columns ``cols`` only (new arrays)."""
        out = object.__new__(_YJColumns)
        out.slog, out.two_neg = self.slog[cols], self.two_neg[cols]
        out.w = None if self.w is None else self.w[cols]
        out.sqrt_w = None if self.sqrt_w is None else self.sqrt_w[cols]
        out.n, out.jac, out._buffers = self.n[cols], self.jac[cols], None
        return out

    def neg_llf(self, lam: np.ndarray) -> np.ndarray:
        """Minus scipy's ``yeojohnson_llf`` of each column at its own exponent ``lam`` [F]: +inf where the variance
        of the transformed column is below the smallest normal float (scipy's -inf likelihood) or not finite."""
        if self._buffers is None:
            self._buffers = (np.empty_like(self.slog), np.empty_like(self.slog))
        d, psi = self._buffers
        np.subtract(lam[:, None], self.two_neg, out=d)  # the exponent on z >= 0; minus the exponent on z < 0
        np.multiply(d, self.slog, out=psi)
        np.expm1(psi, out=psi)
        with np.errstate(divide="ignore", invalid="ignore"):
            psi /= d  # expm1(l log1p(z)) / l for z >= 0, -expm1((2 - l) log1p(-z)) / (2 - l) for z < 0
        small = (np.abs(lam) < _YJ_NEAR) | (np.abs(lam - 2.0) < _YJ_NEAR)
        if small.any():  # log1p form of yeo_johnson where the exponent is (near) 0
            c = np.flatnonzero(small)
            psi[c] = np.where(np.abs(d[c]) < _YJ_NEAR, self.slog[c], psi[c])
        if self.w is None:
            mean = psi.mean(axis=1)
        else:
            mean = np.einsum("ij,ij->i", self.w, psi) / self.n
        psi -= mean[:, None]
        if self.sqrt_w is not None:
            psi *= self.sqrt_w
        var = np.einsum("ij,ij->i", psi, psi) / self.n
        ok = np.isfinite(var) & (var >= np.finfo(np.float64).smallest_normal)
        with np.errstate(invalid="ignore", over="ignore"):
            llf = -0.5 * self.n * np.log(np.where(ok, var, 1.0)) + (lam - 1.0) * self.jac
        return np.where(ok & np.isfinite(llf), -llf, np.inf)


def _yj_bounds(max_abs: np.ndarray, all_neg: np.ndarray, any_neg: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """scipy's overflow-safe search interval of ``yeojohnson_normmax`` per column, within +-POWER_LAMBDA_BOUND."""
    eps, tiny, huge = np.finfo(np.float64).eps, np.finfo(np.float64).tiny, np.finfo(np.float64).max
    log1p_max = np.log1p(20.0 * max_abs)
    lb = ((np.log(tiny) - np.log(eps)) / 2) / log1p_max
    ub = ((np.log(huge) + np.log(eps)) / 2) / log1p_max
    lb, ub = (np.where(all_neg, 2.0 - ub, np.where(any_neg, np.maximum(2.0 - ub, lb), lb)),
              np.where(all_neg, 2.0 - lb, np.where(any_neg, np.minimum(2.0 - lb, ub), ub)))
    return np.maximum(lb, -POWER_LAMBDA_BOUND), np.minimum(ub, POWER_LAMBDA_BOUND)


def _yj_maximize(cols: _YJColumns, lb: np.ndarray, ub: np.ndarray) -> np.ndarray:
    """Exponents [F] maximising each column's likelihood in [lb, ub]: the best point of a coarse grid, then
    scipy's bounded Brent search (``fminbound``: golden section and parabolic steps) in the grid cell around
    it, all columns at once; a column stops when its bracket is within xtol 1.48e-8 (scipy's tolerance)."""
    f_cols = lb.shape[0]
    u = np.linspace(0.0, 1.0, _YJ_GRID)[:, None]
    grid = np.sort(np.r_[lb + (ub - lb) * u, np.clip(np.broadcast_to(_YJ_GRID_DENSE[:, None],
                                                                   (_YJ_GRID_DENSE.size, f_cols)), lb, ub)], axis=0)
    fgrid = np.stack([cols.neg_llf(g) for g in grid])
    at = np.arange(f_cols)
    k = np.argmin(fgrid, axis=0)
    x, fx = grid[k, at], fgrid[k, at]
    ia = (grid < x).sum(axis=0) - 1  # the grid points either side of the best one (the grid is sorted)
    ib = grid.shape[0] - (grid > x).sum(axis=0)
    has_a, has_b = ia >= 0, ib < grid.shape[0]
    ia, ib = np.maximum(ia, 0), np.minimum(ib, grid.shape[0] - 1)
    a, fa = np.where(has_a, grid[ia, at], x), np.where(has_a, fgrid[ia, at], fx)
    b, fb = np.where(has_b, grid[ib, at], x), np.where(has_b, fgrid[ib, at], fx)
    first = has_a & (~has_b | (fa <= fb))
    w, fw = np.where(first, a, b), np.where(first, fa, fb)  # the better neighbour: second best point
    v, fv = np.where(first, b, a), np.where(first, fb, fa)  # the other (x itself at the end of the interval)
    # scipy's _minimize_scalar_bounded, vectorised: x best so far, w second best, v previous w
    golden_mean, sqrt_eps, xatol = 0.5 * (3.0 - np.sqrt(5.0)), np.sqrt(2.2e-16), 1.48e-8
    e = b - a  # the first step may be parabolic (through the three grid points)
    rat = np.zeros(f_cols)
    work, cur = cols, np.arange(f_cols)  # columns evaluated each step: compacted as columns converge
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        for _ in range(_YJ_MAX_STEPS):
            xm = 0.5 * (a + b)
            tol1 = sqrt_eps * np.abs(x) + xatol / 3.0
            tol2 = 2.0 * tol1
            active = np.abs(x - xm) > tol2 - 0.5 * (b - a)
            if not active.any():
                break
            if active.sum() < 0.6 * cur.size:
                keep = active[cur]
                cur, work = cur[keep], work.take(np.flatnonzero(keep))
            r = (x - w) * (fx - fv)
            q = (x - v) * (fx - fw)
            p = (x - v) * q - (x - w) * r
            q = 2.0 * (q - r)
            p = np.where(q > 0.0, -p, p)
            q = np.abs(q)
            parabolic = ((np.abs(e) > tol1) & (np.abs(p) < np.abs(0.5 * q * e)) & (p > q * (a - x))
                         & (p < q * (b - x)))
            step = np.where(parabolic, p / np.where(parabolic, q, 1.0), 0.0)
            near_end = ((x + step - a) < tol2) | ((b - x - step) < tol2)
            step = np.where(parabolic & near_end, tol1 * (np.sign(xm - x) + (xm == x)), step)
            e_golden = np.where(x >= xm, a - x, b - x)
            e = np.where(parabolic, rat, e_golden)
            rat = np.where(parabolic, step, golden_mean * e_golden)
            xu = x + (np.sign(rat) + (rat == 0)) * np.maximum(np.abs(rat), tol1)
            fu = np.full(f_cols, np.inf)
            fu[cur] = work.neg_llf(xu[cur])
            better, right = fu <= fx, xu >= x
            a_new = np.where(better, np.where(right, x, a), np.where(right, a, xu))
            b_new = np.where(better, np.where(right, b, x), np.where(right, xu, b))
            to_w = ~better & ((fu <= fw) | (w == x))
            to_v = ~better & ~to_w & ((fu <= fv) | (v == x) | (v == w))
            v_new = np.where(better | to_w, w, np.where(to_v, xu, v))
            fv_new = np.where(better | to_w, fw, np.where(to_v, fu, fv))
            w_new = np.where(better, x, np.where(to_w, xu, w))
            fw_new = np.where(better, fx, np.where(to_w, fu, fw))
            x_new, fx_new = np.where(better, xu, x), np.where(better, fu, fx)
            upd = active
            a, b = np.where(upd, a_new, a), np.where(upd, b_new, b)
            v, fv = np.where(upd, v_new, v), np.where(upd, fv_new, fv)
            w, fw = np.where(upd, w_new, w), np.where(upd, fw_new, fw)
            x, fx = np.where(upd, x_new, x), np.where(upd, fx_new, fx)
    return x


def _yj_fit_block(block: np.ndarray, include: np.ndarray | None) -> np.ndarray:
    """:func:`yeo_johnson_mle` of one column block: ``block`` float64 [f, n], a column per row (a new array: sorted
    in place), ``include`` bool [f, n] or None (all rows)."""
    f, n = block.shape
    lambdas = np.ones(f)
    with np.errstate(invalid="ignore"):
        bad = ~np.isfinite(block if include is None else np.where(include, block, 0.0)).all(axis=1)
    count = np.full(f, n) if include is None else include.sum(axis=1)
    if include is not None:
        block[~include] = np.inf  # excluded rows sort last
    block.sort(axis=1)  # the order of the values does not change a likelihood; equal values become runs
    plain = include is None and not bad.any()  # every value is included
    inside = None if plain else (np.arange(n) < count[:, None]) & ~bad[:, None]  # the included values
    starts = np.empty((f, n), dtype=bool)  # the first of each run of equal included values
    starts[:, :1] = True
    np.not_equal(block[:, 1:], block[:, :-1], out=starts[:, 1:])
    if inside is not None:
        starts &= inside
    distinct = starts.sum(axis=1)
    fit = (distinct > 1) & (count > 1)
    if not fit.any():
        return lambdas
    # scikit-learn's test for a constant column (the error bound of a two-pass variance): identity as well
    values = block if inside is None else np.where(inside, block, 0.0)
    mean = values.sum(axis=1) / np.maximum(count, 1)
    dev = values - mean[:, None]
    if inside is not None:
        dev *= inside
    var = np.einsum("ij,ij->i", dev, dev) / np.maximum(count, 1)
    del dev
    eps = np.finfo(np.float64).eps
    fit &= ~(var <= count * eps * var + (count * mean * eps) ** 2)
    ends = np.abs(block[np.arange(f)[:, None], np.c_[np.zeros(f, dtype=np.intp), np.maximum(count - 1, 0)]])
    lb, ub = _yj_bounds(np.where(fit, ends.max(axis=1), 1.0),  # sorted: the extremes are at the ends
                        block[np.arange(f), np.maximum(count - 1, 0)] < 0, block[:, 0] < 0)
    fit &= lb <= ub  # empty only for values beyond 1e200 of both signs (not z-scores): identity
    # a column with few distinct values is fitted on (value, multiplicity) pairs; columns of similar numbers of
    # distinct values together (within a factor 4), the others as they are (excluded rows weigh 0)
    group = np.where(distinct <= n // 2, np.ceil(np.log2(np.maximum(distinct, 2)) / 2), np.inf)
    for g in np.unique(group[fit]):
        c = np.flatnonzero(fit & (group == g))
        if np.isinf(g):
            v = values if c.size == f else values[c]
            w = None if inside is None else inside[c].astype(np.float64)
        else:
            col, pos = np.nonzero(starts[c])
            first = np.r_[0, np.cumsum(distinct[c])[:-1]]
            rank = np.arange(col.size) - first[col]
            end = np.r_[pos[1:], 0]
            end[first + distinct[c] - 1] = count[c]
            v, w = np.zeros((2, c.size, int(distinct[c].max())))
            v[col, rank] = block[c[col], pos]
            w[col, rank] = end - pos
        lambdas[c] = _yj_maximize(_YJColumns(v, w), lb[c], ub[c])
    return lambdas


def majority_rows(block: np.ndarray) -> np.ndarray | None:
    """Rows [f, n] of ``block`` (a column per row) that hold a value shared by more than half of their column's
    rows (a point mass: the zeros of a sparse count or bag-of-words column), or None where no column has one.

    Such a value, if any, is the column's median (a value above half the rows must fill the middle position), so
    one partial sort per block finds it."""
    n = block.shape[1]
    if n < 3:
        return None
    mid = np.partition(block, n // 2, axis=1)[:, n // 2]
    hit = block == mid[:, None]
    major = 2 * hit.sum(axis=1) > n
    if not major.any():
        return None
    hit &= major[:, None]
    return hit


def yeo_johnson_mle(z: np.ndarray, mask: np.ndarray | None = None, rows: np.ndarray | None = None,
                    exclude_majority: bool = False) -> np.ndarray:
    """Maximum-likelihood Yeo-Johnson exponents [F] of the columns of ``z`` [N, F] (scipy's
    ``yeojohnson_normmax``, vectorised): each column's ``yeojohnson_llf`` maximised over scipy's overflow-safe
    interval within +-:data:`POWER_LAMBDA_BOUND`, by a grid and a bounded Brent search, all columns at once.

    ``mask`` (bool [N, F], optional): a column's likelihood over its True rows only. ``rows`` (optional): fit on
    ``z[rows]`` (and ``mask[rows]``), read a column block at a time. Exponent 1 (identity) for a column whose
    included values are constant (or fewer than 2) or hold a NaN or an infinity. ``exclude_majority``: a value held
    by more than half of a column's rows (:func:`majority_rows`, over all its rows) is left out of that column's
    likelihood, which its other values then decide. Works on column blocks whose [n, block] float64 arrays hold
    at most 8 MB (and :data:`BLOCK_BYTES`) each."""
    n = int(z.shape[0]) if rows is None else len(rows)
    f = int(z.shape[1])
    if mask is not None and tuple(mask.shape) != tuple(z.shape):
        raise ValueError(f"mask shape {tuple(mask.shape)} differs from the features' {tuple(z.shape)}")
    lambdas = np.ones(f)
    if n < 2:
        return lambdas
    step = max(1, min(BLOCK_BYTES, _YJ_BLOCK_BYTES) // (8 * n))
    for c0 in range(0, f, step):
        cols = slice(c0, min(f, c0 + step))
        block = np.array((z[:, cols] if rows is None else z[rows, cols]).T, dtype=np.float64, order="C")
        include = None
        if mask is not None:
            include = np.array((mask[:, cols] if rows is None else mask[rows, cols]).T, dtype=bool, order="C")
        if exclude_majority and (major := majority_rows(block)) is not None:
            include = ~major if include is None else include & ~major
        lambdas[cols] = _yj_fit_block(block, include)
    return lambdas


def fit_power_lambdas(z: np.ndarray, seed: int = 0, exclude_majority: bool = True) -> np.ndarray:
    """Yeo-Johnson exponents [F] of the columns of ``z`` (maximum likelihood: :func:`yeo_johnson_mle`, the
    optimum scikit-learn's ``PowerTransformer`` looks for), on at most :data:`POWER_FIT_ROWS` rows drawn with
    ``seed``; clipped to +-:data:`POWER_LAMBDA_BOUND`; 1 (identity) for a constant column.

    A value held by more than half of a column's rows (the zeros of a sparse count or bag-of-words column) is left
    out of its likelihood: a point mass has no Gaussian shape to fit, and with it in the fit the exponent runs to
    an extreme that keeps little more than "zero or not" (inj_cora: 988 of 1,433 columns at -40; 4 without it).
    The exponent is then the one that makes the column's other values most nearly Gaussian, and the transform is
    applied to the whole column as before. ``exclude_majority=False``: every row in the fit (before session 40,
    :data:`POWER_ALL_ROWS`)."""
    n = int(z.shape[0])
    rows = np.sort(np.random.default_rng(seed).choice(n, POWER_FIT_ROWS, replace=False)) if n > POWER_FIT_ROWS else None
    lambdas = yeo_johnson_mle(z, rows=rows, exclude_majority=exclude_majority)
    return np.clip(np.nan_to_num(lambdas, nan=1.0), -POWER_LAMBDA_BOUND, POWER_LAMBDA_BOUND)


def power_normalize(x: np.ndarray, block_rows: int | None = None,
                    exclude_majority: bool = True, threads: int = 1) -> tuple[np.ndarray, dict[str, Any]]:
    """``power``: z-score, Yeo-Johnson per column, z-score again; (float32 array, manifest entry with the
    statistics of each step: ``mean``/``std`` of the input, ``lambdas``, ``mean2``/``std2`` after the transform).
    ``exclude_majority=False``: :data:`POWER_ALL_ROWS`, the exponents fitted on every row (before session 40).

    The transformed values stay in float64 until the second z-score (two passes over row blocks: statistics, then
    the output), so an exponent far from 1 cannot overflow float32 before the rescaling. ``threads``: row blocks
    at once (the same numbers on any number)."""
    mean, std = feature_stats(x, block_rows, threads=threads)
    scale = np.where(std > 0, std, 1.0)
    z = standardize(x, mean, scale, block_rows, threads=threads)
    lambdas = fit_power_lambdas(z, exclude_majority=exclude_majority)

    def transform(b: np.ndarray) -> np.ndarray:
        return yeo_johnson(b, lambdas)

    mean2, std2 = feature_stats(z, block_rows, transform, threads=threads)
    if not (np.isfinite(mean2).all() and np.isfinite(std2).all()):  # not seen on any graph; a clear error if it is
        raise ValueError("the power transform overflowed on these features; use --normalize standard")
    scale2 = np.where(std2 > 0, std2, 1.0)
    standardize(z, mean2, scale2, block_rows, transform, out=z, threads=threads)  # in place: z is a new float32 array
    how = {"normalize": "power", POWER_FIT_KEY: POWER_FIT} if exclude_majority else {"normalize": POWER_ALL_ROWS}
    return z, {**how, "mean": mean.tolist(), "std": scale.tolist(), "lambdas": lambdas.tolist(),
               "mean2": mean2.tolist(), "std2": scale2.tolist()}


def normalize_store_features(
    x: np.ndarray, how: str, block_rows: int | None = None, threads: int = 1
) -> tuple[np.ndarray, dict[str, Any]]:
    """The features to store and their manifest entry (``manifest["features"]``).

    ``standard``: a new float32 array z-scored per feature; the entry records ``mean`` and ``std``
    (the divisor applied: the unbiased std, 1 for constant features), so that
    ``stored = (raw - mean) / std``. ``power``: :func:`power_normalize` (``power-all-rows``: as before session
    40). ``none``: ``x`` itself, unchanged. ``threads``: row blocks at once (the same numbers on any number).
    """
    if how == "none":
        return x, {"normalize": "none"}
    if how in ("power", POWER_ALL_ROWS):
        return power_normalize(x, block_rows, exclude_majority=how == "power", threads=threads)
    if how != "standard":
        raise ValueError(f"unknown feature normalisation {how!r} (choose from {', '.join(NORMALIZE_CHOICES)})")
    mean, std = feature_stats(x, block_rows, threads=threads)
    scale = np.where(std > 0, std, 1.0)
    out = standardize(x, mean, scale, block_rows, threads=threads)
    return out, {"normalize": "standard", "mean": mean.tolist(), "std": scale.tolist()}
