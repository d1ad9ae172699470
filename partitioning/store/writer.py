"""Write corrupt subgraphs to a Zarr store, atomically.

A build writes everything into ``<out>.tmp-<pid>``; the manifest with ``complete: true``, the counts,
the digests of the offset arrays and the SHA-256 of every array file (``checksums``) is written last,
and only then is the folder renamed to ``<out>``
(one ``rename`` on the same file system). A build that dies leaves at most a ``.tmp-<pid>`` folder
whose manifest says ``complete: false``, which :class:`~partitioning.store.reader.StoreReader`
refuses; the next build removes such folders when their process is gone.
"""

from __future__ import annotations

import logging
import os
import shutil
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from partitioning.errors import GraphInputError
from partitioning.store.format import (
    DEFAULT_CHUNK_MIB,
    FORMAT_NAME,
    FORMAT_VERSION,
    MANIFEST_KEY,
    OPTIONAL_ARRAYS,
    REQUIRED_ARRAYS,
    array_digest,
    chunk_rows,
    compressors,
    is_url,
    store_checksums,
)

log = logging.getLogger(__name__)

# Rows of x gathered and handed to zarr per write call: several chunks at once so zarr compresses
# them concurrently, while the gather buffer stays bounded (WRITE_CHUNKS x chunk size).
WRITE_CHUNKS = 8


class SubgraphLike(Protocol):
    nodes: np.ndarray  # int64 global ids, own first then injected
    num_own: int
    indptr: np.ndarray  # local CSR
    indices: np.ndarray
    part: int
    replica: int


def check_destination(out: str | os.PathLike[str], overwrite: bool) -> Path:
    """Validate the output path before any work: local, parent exists, not there unless ``overwrite``."""
    if is_url(str(out)):
        raise GraphInputError(str(out), "the store is written to a local path (readers accept URLs)")
    path = Path(out)
    if not path.parent.exists():
        raise GraphInputError(str(out), f"parent folder {path.parent} does not exist")
    if path.exists() and not overwrite:
        raise GraphInputError(str(out), "already exists; pass --overwrite to replace it")
    if path.exists() and not path.is_dir():
        raise GraphInputError(str(out), "exists and is not a folder")
    return path


def _remove_stale_tmp(path: Path) -> None:
    """Remove ``<out>.tmp-<pid>`` folders left by builds whose process no longer exists."""
    for tmp in path.parent.glob(path.name + ".tmp-*"):
        try:
            pid = int(tmp.name.rsplit("-", 1)[1])
            os.kill(pid, 0)
        except ValueError:
            continue
        except ProcessLookupError:
            log.info("removing %s left by a build that died", tmp)
            shutil.rmtree(tmp, ignore_errors=True)
        except PermissionError:  # alive, someone else's
            continue


def _concat(subgraphs: Sequence[SubgraphLike]) -> dict[str, np.ndarray]:
    """The per-subgraph pieces concatenated: offsets, ids, labels, one global row pointer, local indices."""
    s = len(subgraphs)
    sizes = np.fromiter((g.nodes.size for g in subgraphs), dtype=np.int64, count=s)
    nnz = np.fromiter((g.indices.size for g in subgraphs), dtype=np.int64, count=s)
    node_offsets = np.zeros(s + 1, dtype=np.int64)
    np.cumsum(sizes, out=node_offsets[1:])
    edge_offsets = np.zeros(s + 1, dtype=np.int64)
    np.cumsum(nnz, out=edge_offsets[1:])
    total = int(node_offsets[-1])
    num_own = np.fromiter((g.num_own for g in subgraphs), dtype=np.int64, count=s)
    big = any(g.nodes.size >= 2**31 for g in subgraphs)
    idx_dtype = np.int64 if big else np.int32
    if s:
        global_id = np.concatenate([g.nodes for g in subgraphs]).astype(np.int64, copy=False)
        indices = np.concatenate([g.indices.astype(idx_dtype, copy=False) for g in subgraphs])
        # global row pointer: each local indptr (without its leading 0) shifted by its edge offset
        indptr = np.zeros(total + 1, dtype=np.int64)
        indptr[1:] = np.concatenate([g.indptr[1:] + edge_offsets[i] for i, g in enumerate(subgraphs)])
    else:
        global_id = np.zeros(0, np.int64)
        indices = np.zeros(0, idx_dtype)
        indptr = np.zeros(1, np.int64)
    # y: 1 from each subgraph's first injected row to its end (vectorised via a +1/-1 difference array)
    diff = np.zeros(total + 1, dtype=np.int8)
    np.add.at(diff, node_offsets[:-1] + num_own, 1)
    np.add.at(diff, node_offsets[1:], -1)
    y = np.cumsum(diff[:-1], dtype=np.int8) if total else np.zeros(0, np.int8)
    return {
        "node_offsets": node_offsets,
        "edge_offsets": edge_offsets,
        "global_id": global_id,
        "y": y,
        "indptr": indptr,
        "indices": indices,
        "part": np.fromiter((g.part for g in subgraphs), dtype=np.int64, count=s),
        "replica": np.fromiter((g.replica for g in subgraphs), dtype=np.int32, count=s),
        "num_own": num_own,
    }


def _create(group: Any, name: str, data_shape: tuple[int, ...], dtype: Any, chunks: tuple[int, ...]) -> Any:
    chunks = tuple(max(1, min(c, s)) if s else 1 for c, s in zip(chunks, data_shape))
    return group.create_array(
        name,
        shape=data_shape,
        dtype=dtype,
        chunks=chunks,
        compressors=compressors(dtype),
        fill_value=0,
        config={"write_empty_chunks": True},  # every chunk is a file: a missing one is detectable
    )


def _write_whole(group: Any, name: str, a: np.ndarray, chunks: tuple[int, ...]) -> None:
    arr = _create(group, name, a.shape, a.dtype, chunks)
    if a.size:
        arr[...] = a


def _write_x(group: Any, x: np.ndarray, global_id: np.ndarray, rows: int, progress: bool) -> None:
    """x[global_id] written in blocks of WRITE_CHUNKS aligned chunks (gathered block by block)."""
    from tqdm.auto import tqdm

    from partitioning.cli import bar_disable

    total, f = int(global_id.size), int(x.shape[1])
    arr = _create(group, "x", (total, f), np.float32, (rows, f))
    step = rows * WRITE_CHUNKS
    for start in tqdm(range(0, total, step), desc="write x", unit="block", disable=bar_disable(progress)):
        stop = min(start + step, total)
        _write_block(arr, start, stop, np.ascontiguousarray(x[global_id[start:stop]], dtype=np.float32))


def _write_block(arr: Any, start: int, stop: int, block: np.ndarray) -> None:
    arr[start:stop] = block


def _commit(group: Any, manifest: dict[str, Any]) -> None:
    """The completion marker: the full manifest with ``complete: true``, written last."""
    group.attrs.update({MANIFEST_KEY: manifest})


def _publish(tmp: Path, out: Path) -> None:
    """Rename the finished folder into place (replacing an old store only after the new one is whole)."""
    old = None
    if out.exists():
        old = out.with_name(f"{out.name}.old-{os.getpid()}")
        os.rename(out, old)
    os.rename(tmp, out)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def write_store(
    out: str | os.PathLike[str],
    x: np.ndarray,
    subgraphs: Sequence[SubgraphLike],
    manifest: dict[str, Any],
    *,
    node_part: np.ndarray | None = None,
    centroids: np.ndarray | None = None,
    overwrite: bool = False,
    chunk_mib: float = DEFAULT_CHUNK_MIB,
    progress: bool = False,
) -> dict[str, Any]:
    """Write ``subgraphs`` (features gathered from ``x``) as a store at ``out``; returns the manifest.

    ``manifest`` holds the caller's fields (source, parameters, clustering); the format name and
    version, the counts, the array layout, digests and ``complete: true`` are added here.
    """
    import zarr

    path = check_destination(out, overwrite)
    _remove_stale_tmp(path)
    tmp = path.with_name(f"{path.name}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    t0 = time.perf_counter()
    try:
        head = {"format": FORMAT_NAME, "format_version": FORMAT_VERSION, "complete": False}
        group = zarr.open_group(str(tmp), mode="w", zarr_format=3, attributes={MANIFEST_KEY: head})
        cat = _concat(subgraphs)
        f = int(x.shape[1])
        rows = chunk_rows(f * 4, chunk_mib)
        ent = chunk_rows(cat["indices"].dtype.itemsize, chunk_mib)
        _write_x(group, x, cat["global_id"], rows, progress)
        for name in ("y", "global_id", "indptr"):
            _write_whole(group, name, cat[name], (rows,))
        _write_whole(group, "indices", cat["indices"], (ent,))
        small = ("node_offsets", "edge_offsets", "part", "replica", "num_own")
        for name in small:
            _write_whole(group, name, cat[name], (max(cat[name].size, 1),))
        if node_part is not None:
            _write_whole(group, "node_part", np.asarray(node_part, dtype=np.int32), (chunk_rows(4, chunk_mib),))
        if centroids is not None:
            c = np.asarray(centroids, dtype=np.float32)
            _write_whole(group, "centroids", c, c.shape)
        num_own = cat["num_own"]
        sizes = np.diff(cat["node_offsets"])
        full = {
            **manifest,
            **head,
            "complete": True,
            "counts": {
                "subgraphs": int(sizes.size),
                "parts": int(np.unique_values(cat["part"]).size) if sizes.size else 0,
                "nodes": int(cat["global_id"].size),
                "own_nodes": int(num_own.sum()),
                "injected_nodes": int((sizes - num_own).sum()),
                "edge_entries": int(cat["indices"].size),
                "num_features": f,
            },
            "chunks": {"node_rows": rows, "edge_entries": ent, "chunk_mib": chunk_mib},
            "index_dtype": str(cat["indices"].dtype),
            "digests": {name: array_digest(cat[name]) for name in ("node_offsets", "edge_offsets", "num_own")},
        }
        t_sum = time.perf_counter()
        names = [n for n in (*REQUIRED_ARRAYS, *OPTIONAL_ARRAYS) if (tmp / n).is_dir()]
        full["checksums"] = store_checksums(tmp, names)
        log.debug("checksums of %d files (%.1f MB) in %.2f s", full["checksums"]["files"],
                  full["checksums"]["bytes"] / 1e6, time.perf_counter() - t_sum)
        _commit(group, full)
        del group
        _publish(tmp, path)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    log.info("wrote %s in %.1f s", path, time.perf_counter() - t0)
    return full


def store_size_bytes(path: str | os.PathLike[str]) -> int:
    """Bytes on disk of a local store folder."""
    return sum(p.stat().st_size for p in Path(path).rglob("*") if p.is_file())
