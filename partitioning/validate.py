"""Checks on user-supplied arrays and options, each failing with a one-line ``GraphInputError``.

Every check takes the ``source`` (a file name, or an option name such as ``--corrupt-ratio``) that the
message should name, and returns the array in the canonical dtype the rest of the project expects:

- :func:`validate_features`  -> float32 [N, F], C-contiguous, all finite, N > 0, F > 0
- :func:`validate_edges`     -> (src, dst) int64, every id in ``[0, N)``
- :func:`validate_labels`    -> int8 [N] of 1 (anomaly), 0 (normal) or -1 (unknown: partly labelled graphs)
- :func:`validate_label_mask` -> bool [N], True where the label is known
- :func:`validate_graph_id`  -> int64 [N]
- :func:`validate_masks`     -> dict name -> bool [S, N]
- :func:`validate_arrays`    -> all of the above at once (what the loaders call)

Option helpers for the command-line tools: :func:`check_ratio`, :func:`check_positive`,
:func:`check_int_range`. No Python loop runs over nodes or edges.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from partitioning.errors import GraphInputError

__all__ = [
    "check_int_range",
    "check_positive",
    "check_ratio",
    "validate_arrays",
    "validate_edges",
    "validate_features",
    "validate_graph_id",
    "validate_label_mask",
    "validate_labels",
    "validate_masks",
    "LABEL_MASK_NAMES",
    "UNKNOWN_LABEL",
]

UNKNOWN_LABEL = -1  # the label of a node whose class is not known (partly labelled graphs)
# Names under which a per-node "label is known" mask is accepted (.npz key, .pt attribute, folder file stem).
# They end in _mask/_masks like split masks but are never a split called "label".
LABEL_MASK_NAMES = ("label_mask", "labeled_mask", "labelled_mask", "label_masks", "labeled_masks", "labelled_masks")


def _shape(a: np.ndarray) -> str:
    return "(" + ", ".join(str(s) for s in a.shape) + ")"


def _values_list(values: np.ndarray, limit: int = 5) -> str:
    shown = ", ".join(repr(v.item()) for v in values[:limit])
    return shown + (f", ... ({values.size} distinct)" if values.size > limit else "")


def validate_features(source: str, x: Any, name: str = "features") -> np.ndarray:
    """Features as float32 [N, F] C-contiguous; rejects non-numeric, wrong rank, empty, NaN/inf."""
    x = np.asarray(x)
    if x.dtype.kind not in "biuf":
        raise GraphInputError(source, f"{name} have dtype {x.dtype}, expected numbers")
    if x.ndim != 2:
        raise GraphInputError(source, f"{name} must be 2-D [nodes, features], got shape {_shape(x)}")
    if x.shape[0] == 0:
        raise GraphInputError(source, f"empty graph: {name} have 0 rows (nodes)")
    if x.shape[1] == 0:
        raise GraphInputError(source, f"{name} have 0 columns")
    orig = x
    with np.errstate(over="ignore", invalid="ignore"):
        x = np.ascontiguousarray(x, dtype=np.float32)
    finite = np.isfinite(x)
    if not finite.all():
        bad_rows = ~finite.all(axis=1)
        bad = int(bad_rows.sum())
        if orig.dtype.kind == "f" and orig.dtype.itemsize > 4 and np.isfinite(orig[bad_rows]).all():
            raise GraphInputError(source, f"{name} hold values too large for float32 in {bad} of {x.shape[0]} rows")
        raise GraphInputError(source, f"{name} contain NaN or inf in {bad} of {x.shape[0]} rows")
    return x


def validate_edges(
    source: str, edge_index: Any, num_nodes: int, name: str = "edge_index"
) -> tuple[np.ndarray, np.ndarray]:
    """Edge list [2, E] of integer node ids in ``[0, num_nodes)`` -> (src, dst) int64."""
    e = np.asarray(edge_index)
    if e.ndim != 2 or e.shape[0] != 2:
        hint = " (transpose it)" if e.ndim == 2 and e.shape[1] == 2 else ""
        raise GraphInputError(source, f"{name} must have shape [2, E], got {_shape(e)}{hint}")
    if e.dtype.kind == "f":
        if e.size and not (np.isfinite(e).all() and (e == np.round(e)).all()):
            raise GraphInputError(source, f"{name} has dtype {e.dtype} with non-integer values")
    elif e.dtype.kind not in "iu":
        raise GraphInputError(source, f"{name} has dtype {e.dtype}, expected integer node ids")
    if e.shape[1]:
        lo, hi = e.min(), e.max()
        if lo < 0:
            raise GraphInputError(source, f"{name} holds node id {lo.item()} < 0 (graph has {num_nodes} nodes)")
        if hi >= num_nodes:
            raise GraphInputError(
                source,
                f"{name} holds node id {hi.item()} >= number of nodes {num_nodes} (ids must be 0..{num_nodes - 1})",
            )
    e = e.astype(np.int64, copy=False)
    return e[0], e[1]


def validate_label_mask(source: str, mask: Any, num_nodes: int, name: str = "label_mask") -> np.ndarray:
    """Which labels are known: bool [N] (0/1 integers accepted; [N, 1] / [1, N] squeezed)."""
    m = np.asarray(mask)
    if m.ndim == 2 and 1 in m.shape:
        m = m.reshape(-1)
    if m.ndim != 1 or m.shape[0] != num_nodes:
        raise GraphInputError(source, f"{name} has shape {_shape(np.asarray(mask))}, expected [{num_nodes}] (one flag per node)")
    if m.dtype.kind != "b":
        if m.dtype.kind not in "iuf" or ((m != 0) & (m != 1)).any():
            raise GraphInputError(source, f"{name} must be boolean (or 0/1), got dtype {m.dtype}")
    return np.ascontiguousarray(m, dtype=bool)


def validate_labels(
    source: str, y: Any, num_nodes: int, name: str = "labels", label_mask: np.ndarray | None = None
) -> np.ndarray:
    """Labels as int8 [N]: 1 = anomaly, 0 = normal, -1 = unknown. ``[N, 1]`` is accepted and squeezed.

    A label is unknown where ``y == -1``, where a float ``y`` is NaN, or, when ``label_mask`` (bool [N],
    already validated) is given, where the mask is False (``y`` there is ignored). Known labels must be 0/1.
    A fully labelled ``y`` comes back as ``y.astype(int8)``, unchanged.
    """
    y = np.asarray(y)
    if y.ndim == 2 and y.shape[1] == 1:
        y = y[:, 0]
    if y.ndim != 1:
        raise GraphInputError(source, f"{name} must be 1-D [nodes], got shape {_shape(y)}")
    if y.shape[0] != num_nodes:
        raise GraphInputError(source, f"{name} have length {y.shape[0]} but the graph has {num_nodes} nodes")
    if y.dtype.kind not in "biuf":
        raise GraphInputError(source, f"{name} have dtype {y.dtype}, expected 0/1 (or -1 = unknown)")
    if y.dtype.kind == "b":
        known = np.ones(num_nodes, dtype=bool) if label_mask is None else label_mask
        bad = np.zeros(num_nodes, dtype=bool)
    else:
        if label_mask is None:
            known = y != UNKNOWN_LABEL
            if y.dtype.kind == "f":
                known &= ~np.isnan(y)
        else:
            known = label_mask
        bad = known & (y != 0) & (y != 1)  # NaN at a node marked labelled is caught here too
    if bad.any():
        vals = np.unique(y[bad])
        if label_mask is None:
            problem = f"{name} must be 0/1 (1 = anomaly) or -1 (unknown), found other values: {_values_list(vals)}"
        else:
            problem = (f"{name} of the {int(label_mask.sum())} nodes marked labelled by the label mask must be 0/1 "
                       f"(1 = anomaly), found: {_values_list(vals)}")
        raise GraphInputError(source, problem)
    if known.all():
        return y.astype(np.int8)
    out = np.full(num_nodes, UNKNOWN_LABEL, dtype=np.int8)
    out[known] = y[known].astype(np.int8)
    return out


def validate_graph_id(source: str, graph_id: Any, num_nodes: int, name: str = "graph_id") -> np.ndarray:
    """Per-node graph membership as int64 [N] (multi-graph setting)."""
    g = np.asarray(graph_id)
    if g.ndim != 1:
        raise GraphInputError(source, f"{name} must be 1-D [nodes], got shape {_shape(g)}")
    if g.shape[0] != num_nodes:
        raise GraphInputError(source, f"{name} has length {g.shape[0]} but the graph has {num_nodes} nodes")
    if g.dtype.kind not in "iu":
        raise GraphInputError(source, f"{name} has dtype {g.dtype}, expected integers")
    if g.size and g.min() < 0:
        raise GraphInputError(source, f"{name} holds negative id {g.min().item()}")
    return g.astype(np.int64, copy=False)


def validate_masks(source: str, masks: Mapping[str, Any], num_nodes: int) -> dict[str, np.ndarray]:
    """Split masks name -> bool [S, N]; a 1-D [N] mask becomes [1, N]; 0/1 integers become bool."""
    out: dict[str, np.ndarray] = {}
    for key, m in masks.items():
        m = np.asarray(m)
        if m.ndim == 1:
            m = m[None, :]
        if m.ndim != 2 or m.shape[1] != num_nodes:
            raise GraphInputError(
                source, f"mask {key!r} has shape {_shape(np.asarray(masks[key]))}, expected [splits, {num_nodes}]"
            )
        if m.dtype.kind != "b":
            if m.dtype.kind not in "iuf" or ((m != 0) & (m != 1)).any():
                raise GraphInputError(source, f"mask {key!r} must be boolean (or 0/1), got dtype {m.dtype}")
        out[key] = np.ascontiguousarray(m, dtype=bool)
    return out


def validate_arrays(
    source: str,
    x: Any,
    edge_index: Any,
    y: Any | None = None,
    graph_id: Any | None = None,
    masks: Mapping[str, Any] | None = None,
    label_mask: Any | None = None,
    label_mask_name: str = "label_mask",
) -> dict[str, Any]:
    """Validate everything a graph file holds; returns dict x, src, dst, y, graph_id, masks (canonical dtypes).

    Order of checks: features (which define N), then edges, label mask, labels, graph ids and masks.
    ``label_mask`` (True = label known) needs ``y``; ``label_mask_name`` is how messages call it.
    """
    xv = validate_features(source, x)
    n = xv.shape[0]
    src, dst = validate_edges(source, edge_index, n)
    lm = None
    if label_mask is not None:
        if y is None:
            raise GraphInputError(source, f"{label_mask_name} given but no labels (y)")
        lm = validate_label_mask(source, label_mask, n, name=label_mask_name)
    return {
        "x": xv,
        "src": src,
        "dst": dst,
        "y": None if y is None else validate_labels(source, y, n, label_mask=lm),
        "graph_id": None if graph_id is None else validate_graph_id(source, graph_id, n),
        "masks": validate_masks(source, masks or {}, n),
    }


# ----------------------------------------------------------------------------------------------------
# Option checks (command-line tools). ``name`` is the option as the user typed it, e.g. "--corrupt-ratio".


def check_ratio(name: str, value: float, low_inclusive: bool = False, high_inclusive: bool = False) -> float:
    """``value`` must be a finite number in (0, 1) (ends included on request); returns it as float."""
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise GraphInputError(name, f"must be a number, got {value!r}") from None
    lo_ok = v >= 0.0 if low_inclusive else v > 0.0
    hi_ok = v <= 1.0 if high_inclusive else v < 1.0
    if not (np.isfinite(v) and lo_ok and hi_ok):
        interval = ("[" if low_inclusive else "(") + "0, 1" + ("]" if high_inclusive else ")")
        raise GraphInputError(name, f"must lie in {interval}, got {value}")
    return v


def check_positive(name: str, value: float, allow_zero: bool = False) -> float:
    """``value`` must be a finite number > 0 (or >= 0 with ``allow_zero``)."""
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise GraphInputError(name, f"must be a number, got {value!r}") from None
    if not np.isfinite(v) or v < 0 or (v == 0 and not allow_zero):
        raise GraphInputError(name, f"must be {'>= 0' if allow_zero else '> 0'}, got {value}")
    return v


def check_int_range(name: str, value: int, low: int | None = None, high: int | None = None) -> int:
    """``value`` must be an integer in ``[low, high]`` (either end optional)."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise GraphInputError(name, f"must be an integer, got {value!r}")
    v = int(value)
    if (low is not None and v < low) or (high is not None and v > high):
        if low is not None and high is not None:
            rng = f"between {low} and {high}"
        elif low is not None:
            rng = f">= {low}"
        else:
            rng = f"<= {high}"
        raise GraphInputError(name, f"must be {rng}, got {v}")
    return v
