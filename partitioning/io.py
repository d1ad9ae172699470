"""Load a graph from disk into a validated :class:`~partitioning.graph.Graph`, and save one as ``.npz``.

Accepted inputs (``load_graph(path)`` picks by what ``path`` is):

1. **``.npz``** (the format of ``../shared/data``; read with ``allow_pickle=False``):
   ``x`` float [N, F]; ``edge_index`` int [2, E]; optional ``y`` [N] 0/1 (1 = anomaly; -1 or NaN =
   unknown); optional ``label_mask`` bool [N] (True = label known; also spelt ``labeled_mask`` /
   ``labelled_mask``); optional ``train_masks`` / ``val_masks`` / ``test_masks`` bool [S, N] (any
   ``<name>_masks`` key except the label-mask names); optional ``graph_id`` int [N] (many small graphs:
   node -> graph). Other keys (e.g. the synthetic generator's ``anomaly_type`` and ``community``) are ignored.
2. **``.pt`` / ``.pth``**: a PyG ``Data`` (or a plain dict of tensors/arrays) saved with ``torch.save``,
   loaded with ``torch.load(weights_only=True)`` and only PyG's ``Data`` classes allow-listed (no
   arbitrary unpickling). Attributes ``x``, ``edge_index``, optional ``y`` (-1 = unknown), ``label_mask``,
   ``graph_id`` (or ``batch``), and split masks ``<name>_mask`` / ``<name>_masks`` shaped [N], [S, N] or
   PyG's [N, S].
3. **A folder** holding
   - ``edges.parquet`` or ``edges.csv``: columns ``src`` and ``dst`` (0-based node ids; the CSV needs a
     header line; other columns are ignored), read with pyarrow;
   - ``features.npy``: [N, F] numbers;
   - optional ``labels.npy``: [N] 0/1 (1 = anomaly; -1 or NaN = unknown);
   - optional ``label_mask.npy``: bool [N], True where the label is known (needs ``labels.npy``);
   - optional ``graph_id.npy``: [N] integers (many small graphs);
   - optional ``train_masks.npy`` / ``val_masks.npy`` / ``test_masks.npy``: bool [S, N] or [N].

In every case the edges are made undirected, self-loops and duplicates are dropped
(:func:`~partitioning.graph.csr_from_edges`), features are cast to C-contiguous float32 and labels to
int8 (-1 where unknown: a partly labelled graph; the label-mask names never become split masks). Any
problem with the input raises :class:`~partitioning.errors.GraphInputError` whose message is one line
``<file>: <problem>`` (see :mod:`partitioning.validate`).

``save_npz(graph, path)`` writes format 1 (each undirected edge once, ``src < dst``), uncompressed by
default; ``load_graph(save_npz(g))`` reproduces ``g`` exactly (same fingerprint).
"""

from __future__ import annotations

import logging
import os
import pickle
import time
import zipfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from partitioning.errors import GraphInputError
from partitioning.graph import Graph, csr_from_edges, describe_labels, sorted_unique
from partitioning.validate import (
    LABEL_MASK_NAMES,
    validate_arrays,
    validate_edges,
    validate_features,
    validate_graph_id,
    validate_label_mask,
    validate_labels,
    validate_masks,
)

log = logging.getLogger(__name__)

__all__ = ["load_graph", "save_npz", "graph_from_arrays", "NPZ_KEYS", "TORCH_SUFFIXES"]

NPZ_KEYS = ("x", "edge_index", "y", "graph_id")
TORCH_SUFFIXES = (".pt", ".pth")
_FORMATS_HELP = ".npz, .pt/.pth (PyG Data), or a folder with edges.csv|edges.parquet and features.npy"


# ----------------------------------------------------------------------------------------------------
# Public API


def load_graph(path: str | os.PathLike[str]) -> Graph:
    """Load and validate a graph from ``path`` (``.npz``, ``.pt``/``.pth`` or a folder; see module doc)."""
    p = Path(path)
    t0 = time.perf_counter()
    if not p.exists():
        raise GraphInputError(str(p), "no such file or folder")
    if p.is_dir():
        graph = _load_folder(p)
    elif p.suffix.lower() == ".npz":
        graph = _load_npz(p)
    elif p.suffix.lower() in TORCH_SUFFIXES:
        graph = _load_torch(p)
    else:
        raise GraphInputError(str(p), f"unknown format {p.suffix or '(no extension)'!r}; expected {_FORMATS_HELP}")
    log.info(
        "loaded %s: %d nodes, %d undirected edges, %d features%s%s in %.1fs",
        p,
        graph.num_nodes,
        graph.num_edges,
        graph.num_features,
        "" if graph.y is None else f", {describe_labels(graph.y)}",
        "" if graph.graph_id is None else f", {sorted_unique(graph.graph_id.copy()).size} graphs",
        time.perf_counter() - t0,
    )
    return graph


def save_npz(
    graph: Graph,
    path: str | os.PathLike[str],
    extra: Mapping[str, np.ndarray] | None = None,
    compress: bool = False,
) -> None:
    """Write ``graph`` as ``.npz`` (keys x, edge_index [2, E] with each undirected edge once, y (-1 =
    unknown), graph_id, ``<name>_masks``) plus any ``extra`` arrays. Written to a temporary file then renamed."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    rows = np.repeat(np.arange(graph.num_nodes, dtype=np.int64), np.diff(graph.indptr))
    upper = rows < graph.indices
    arrays: dict[str, np.ndarray] = {
        "x": np.ascontiguousarray(graph.x, dtype=np.float32),
        "edge_index": np.stack([rows[upper], graph.indices[upper]]),
    }
    del rows, upper
    if graph.y is not None:
        arrays["y"] = graph.y.astype(np.int8, copy=False)
    if graph.graph_id is not None:
        arrays["graph_id"] = graph.graph_id.astype(np.int64, copy=False)
    for name, m in graph.masks.items():
        arrays[f"{name}_masks"] = np.asarray(m, dtype=bool)
    for key, value in (extra or {}).items():
        if key in arrays:
            raise ValueError(f"extra key {key!r} clashes with a graph key")
        arrays[key] = np.asarray(value)
    tmp = p.with_name(p.name + ".tmp")
    with open(tmp, "wb") as f:
        (np.savez_compressed if compress else np.savez)(f, **arrays)
    os.replace(tmp, p)


def graph_from_arrays(
    source: str,
    x: Any,
    edge_index: Any,
    y: Any | None = None,
    graph_id: Any | None = None,
    masks: Mapping[str, Any] | None = None,
    label_mask: Any | None = None,
    label_mask_name: str = "label_mask",
) -> Graph:
    """Validate raw arrays (as :func:`partitioning.validate.validate_arrays`) and build the CSR graph.

    ``label_mask`` (bool [N], True = label known) marks a partly labelled graph; unknown labels become -1.
    """
    v = validate_arrays(source, x, edge_index, y=y, graph_id=graph_id, masks=masks, label_mask=label_mask,
                        label_mask_name=label_mask_name)
    n = v["x"].shape[0]
    indptr, indices = csr_from_edges(v["src"], v["dst"], n)
    return Graph(
        x=v["x"], indptr=indptr, indices=indices, y=v["y"], graph_id=v["graph_id"], masks=v["masks"], source=source
    )


# ----------------------------------------------------------------------------------------------------
# .npz


def _load_npz(p: Path) -> Graph:
    src = str(p)
    try:
        with open(p, "rb") as f:
            magic = f.read(6)
    except OSError as e:
        raise GraphInputError(src, f"cannot read ({_short(e)})") from None
    if not (magic.startswith(b"PK") or magic == b"\x93NUMPY"):
        raise GraphInputError(src, "not a valid .npz file (neither a zip archive nor a NumPy array)")
    try:
        npz = np.load(p, allow_pickle=False)
    except (zipfile.BadZipFile, OSError, EOFError) as e:
        raise GraphInputError(src, f"not a readable .npz file ({_short(e)})") from None
    except ValueError as e:  # the pickle fallback of np.load on bytes that are neither zip nor .npy
        raise GraphInputError(src, f"not a valid .npz file ({_short(e)})") from None
    except Exception as e:
        raise GraphInputError(src, f"not a readable .npz file ({type(e).__name__}: {_short(e)})") from None
    if not isinstance(npz, np.lib.npyio.NpzFile):
        raise GraphInputError(src, "holds a single .npy array, not an .npz archive with keys x and edge_index")
    with npz:
        keys = list(npz.files)
        for key in ("x", "edge_index"):
            if key not in keys:
                raise GraphInputError(src, f"missing key {key!r} (keys found: {', '.join(keys) or 'none'})")

        def read(key: str) -> np.ndarray:
            try:
                return npz[key]
            except ValueError as e:
                if "pickle" in str(e):
                    raise GraphInputError(src, f"key {key!r} holds Python objects, expected a numeric array") from None
                raise GraphInputError(src, f"key {key!r} is corrupted ({_short(e)})") from None
            except Exception as e:  # BadZipFile, OSError, EOFError, zlib.error, ...
                raise GraphInputError(src, f"key {key!r} is corrupted ({type(e).__name__}: {_short(e)})") from None

        x = read("x")
        edge_index = read("edge_index")
        y = read("y") if "y" in keys else None
        graph_id = read("graph_id") if "graph_id" in keys else None
        masks = {k[: -len("_masks")]: read(k) for k in keys
                 if k.endswith("_masks") and len(k) > len("_masks") and k not in LABEL_MASK_NAMES}
        lm_name = _one_label_mask(src, [k for k in keys if k in LABEL_MASK_NAMES], "key")
        label_mask = None if lm_name is None else read(lm_name)
    return graph_from_arrays(src, x, edge_index, y=y, graph_id=graph_id, masks=masks, label_mask=label_mask,
                             label_mask_name=f"key {lm_name!r}" if lm_name else "label_mask")


# ----------------------------------------------------------------------------------------------------
# torch.save'd PyG Data


def _pyg_safe_globals() -> list[Any]:
    """PyG classes a pickled ``Data`` refers to; allow-listed for ``torch.load(weights_only=True)``."""
    out: list[Any] = []
    try:
        import torch_geometric.data.data as pyg_data
        import torch_geometric.data.storage as pyg_storage
    except ImportError:  # torch without PyG: plain dicts of tensors still load
        return out
    for mod, names in (
        (pyg_data, ("Data", "DataEdgeAttr", "DataTensorAttr")),
        (pyg_storage, ("BaseStorage", "GlobalStorage", "NodeStorage", "EdgeStorage")),
    ):
        out.extend(getattr(mod, n) for n in names if hasattr(mod, n))
    try:
        from torch_geometric.data.feature_store import TensorAttr
        from torch_geometric.data.graph_store import EdgeAttr, EdgeLayout

        out.extend([TensorAttr, EdgeAttr, EdgeLayout])
    except ImportError:
        pass
    return out


def _to_numpy(value: Any) -> Any:
    if value is None:
        return None
    if hasattr(value, "detach") and hasattr(value, "cpu"):  # torch.Tensor
        return value.detach().cpu().numpy()
    return np.asarray(value)


def _load_torch(p: Path) -> Graph:
    import torch

    src = str(p)
    try:
        with torch.serialization.safe_globals(_pyg_safe_globals()):
            obj = torch.load(p, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as e:
        msg = str(e)
        if "Unsupported global" in msg:
            what = msg.split("Unsupported global:", 1)[1].split(" was not", 1)[0].strip()
            raise GraphInputError(
                src, f"refusing to unpickle {what}: expected a PyG Data or a dict of tensors (torch.load weights_only)"
            ) from None
        raise GraphInputError(src, f"not a readable torch file ({_short(e)})") from None
    except Exception as e:  # a damaged pickle can fail in the unpickler with any error type
        raise GraphInputError(src, f"not a readable torch file ({type(e).__name__}: {_short(e)})") from None

    if isinstance(obj, Mapping):
        attrs = dict(obj)
    else:
        try:
            from torch_geometric.data import Data
        except ImportError:  # pragma: no cover - PyG is a dependency
            Data = ()  # type: ignore[assignment]
        if not isinstance(obj, Data):
            raise GraphInputError(src, f"holds a {type(obj).__name__}, expected a PyG Data or a dict of tensors")
        attrs = {k: obj[k] for k in obj.keys()}
    keys = sorted(str(k) for k in attrs)
    for key in ("x", "edge_index"):
        if attrs.get(key) is None:
            raise GraphInputError(src, f"missing attribute {key!r} (attributes found: {', '.join(keys) or 'none'})")
    x = _to_numpy(attrs["x"])
    n = int(np.shape(x)[0]) if np.ndim(x) >= 1 else 0
    graph_id = attrs.get("graph_id", attrs.get("batch"))
    masks: dict[str, Any] = {}
    lm_name = _one_label_mask(src, [k for k in keys if k in LABEL_MASK_NAMES and attrs[k] is not None], "attribute")
    for key, value in attrs.items():
        if key in LABEL_MASK_NAMES:
            continue
        for suffix in ("_masks", "_mask"):
            if isinstance(key, str) and key.endswith(suffix) and len(key) > len(suffix) and value is not None:
                m = _to_numpy(value)
                # PyG stores several splits as [N, S]; Graph wants [S, N].
                if m.ndim == 2 and m.shape[0] == n and m.shape[1] != n:
                    m = m.T
                masks[key[: -len(suffix)]] = m
                break
    return graph_from_arrays(
        src,
        x,
        _to_numpy(attrs["edge_index"]),
        y=_to_numpy(attrs.get("y")),
        graph_id=_to_numpy(graph_id),
        masks=masks,
        label_mask=None if lm_name is None else _to_numpy(attrs[lm_name]),
        label_mask_name=f"attribute {lm_name!r}" if lm_name else "label_mask",
    )


# ----------------------------------------------------------------------------------------------------
# Folder: edges.csv | edges.parquet + features.npy (+ labels.npy, graph_id.npy, <split>_masks.npy)


def _load_npy(path: Path, required: bool, folder: Path) -> np.ndarray | None:
    if not path.exists():
        if required:
            found = ", ".join(sorted(q.name for q in folder.iterdir())) or "nothing"
            raise GraphInputError(str(path), f"missing file (the folder holds: {found})")
        return None
    try:
        arr = np.load(path, allow_pickle=False)
    except ValueError as e:
        problem = "holds Python objects, expected a numeric array" if "pickle" in str(e) else f"corrupted ({_short(e)})"
        raise GraphInputError(str(path), problem) from None
    except Exception as e:  # OSError, EOFError, ...
        raise GraphInputError(str(path), f"not a readable .npy file ({type(e).__name__}: {_short(e)})") from None
    if not isinstance(arr, np.ndarray):
        raise GraphInputError(str(path), "holds an .npz archive, expected a single .npy array")
    return arr


def _read_edge_table(folder: Path) -> tuple[str, np.ndarray]:
    import pyarrow as pa

    parquet, csv = folder / "edges.parquet", folder / "edges.csv"
    if parquet.exists():
        path = parquet
        import pyarrow.parquet as pq

        try:
            names = pq.read_schema(path).names
        except (pa.ArrowException, OSError) as e:
            raise GraphInputError(str(path), f"not a readable parquet file ({_short(e)})") from None
        _check_columns(path, names)
        try:
            table = pq.read_table(path, columns=["src", "dst"])
        except (pa.ArrowException, OSError) as e:
            raise GraphInputError(str(path), f"not a readable parquet file ({_short(e)})") from None
    elif csv.exists():
        path = csv
        import pyarrow.csv as pcsv

        with open(path, "rb") as f:
            header = f.readline().decode("utf-8", errors="replace").strip()
        names = [h.strip().strip('"') for h in header.split(",")] if header else []
        _check_columns(path, names)
        try:
            table = pcsv.read_csv(
                path,
                convert_options=pcsv.ConvertOptions(
                    include_columns=["src", "dst"], column_types={"src": pa.int64(), "dst": pa.int64()}
                ),
            )
        except (pa.ArrowException, OSError) as e:
            raise GraphInputError(str(path), f"cannot parse edges ({_short(e)})") from None
    else:
        found = ", ".join(sorted(q.name for q in folder.iterdir())) or "nothing"
        raise GraphInputError(str(folder), f"no edges.csv or edges.parquet (the folder holds: {found})")

    cols = []
    for name in ("src", "dst"):
        col = table.column(name)
        if not (pa.types.is_integer(col.type)):
            raise GraphInputError(str(path), f"column {name!r} has type {col.type}, expected integer node ids")
        if col.null_count:
            raise GraphInputError(str(path), f"column {name!r} has {col.null_count} empty values")
        cols.append(col.to_numpy())
    return str(path), np.stack(cols) if cols[0].size else np.zeros((2, 0), dtype=np.int64)


def _check_columns(path: Path, names: list[str]) -> None:
    for col in ("src", "dst"):
        if col not in names:
            raise GraphInputError(str(path), f"missing column {col!r} (columns found: {', '.join(names) or 'none'})")


def _load_folder(folder: Path) -> Graph:
    edge_src, edge_index = _read_edge_table(folder)
    feat_path = folder / "features.npy"
    x = _load_npy(feat_path, required=True, folder=folder)
    # Validate each array against the file it came from, so the message names the right file.
    xv = validate_features(str(feat_path), x)
    n = xv.shape[0]
    src, dst = validate_edges(edge_src, edge_index, n, name="edge list")
    y = _load_npy(folder / "labels.npy", required=False, folder=folder)
    lm_name = _one_label_mask(str(folder), [k for k in LABEL_MASK_NAMES if (folder / f"{k}.npy").exists()], "file")
    lm = None
    if lm_name is not None:
        lm_path = folder / f"{lm_name}.npy"
        if y is None:
            raise GraphInputError(str(lm_path), "label mask given but the folder has no labels.npy")
        lm = validate_label_mask(str(lm_path), _load_npy(lm_path, True, folder), n, name="label mask")
    yv = None if y is None else validate_labels(str(folder / "labels.npy"), y, n, label_mask=lm)
    g = _load_npy(folder / "graph_id.npy", required=False, folder=folder)
    gv = None if g is None else validate_graph_id(str(folder / "graph_id.npy"), g, n)
    masks = {}
    for mpath in sorted(folder.glob("*_masks.npy")):
        name = mpath.name[: -len("_masks.npy")]
        if name and mpath.stem not in LABEL_MASK_NAMES:
            masks.update(validate_masks(str(mpath), {name: _load_npy(mpath, False, folder)}, n))
    indptr, indices = csr_from_edges(src, dst, n)
    return Graph(x=xv, indptr=indptr, indices=indices, y=yv, graph_id=gv, masks=masks, source=str(folder))


def _one_label_mask(source: str, found: list[str], what: str) -> str | None:
    """The one label-mask name present (None if none); two spellings at once is an error."""
    if len(found) > 1:
        raise GraphInputError(source, f"several label masks given ({what}s {', '.join(found)}); keep one")
    return found[0] if found else None


def _short(e: BaseException) -> str:
    """First line of an exception message, trimmed (keeps our messages to one line)."""
    text = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    return text if len(text) <= 160 else text[:157] + "..."
