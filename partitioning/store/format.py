"""The corrupt-subgraph Zarr store: names, version, chunking and codecs (see ``STORE_FORMAT.md``)."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable
from pathlib import Path

import numpy as np

from partitioning.errors import GraphInputError

FORMAT_NAME = "gcad-corrupt-subgraphs"
FORMAT_VERSION = 1
MANIFEST_KEY = "gcad_store"  # the manifest lives in the root group's attributes under this key

# name -> (dtype, what indexes its first axis)
NODE_ARRAYS = {"x": "float32", "y": "int8", "global_id": "int64"}  # [T, ...] T = total subgraph nodes
ROWPTR_ARRAYS = {"indptr": "int64"}  # [T + 1] positions into ``indices``
EDGE_ARRAYS = {"indices": "int32"}  # [E] local neighbour ids (int64 when a subgraph has >= 2**31 nodes)
SUBGRAPH_ARRAYS = {"part": "int64", "replica": "int32", "num_own": "int64"}  # [S]
OFFSET_ARRAYS = {"node_offsets": "int64", "edge_offsets": "int64"}  # [S + 1]
OPTIONAL_ARRAYS = {"node_part": "int32", "centroids": "float32"}  # [N] part of every source node; [K, F]

REQUIRED_ARRAYS = (
    tuple(NODE_ARRAYS) + tuple(ROWPTR_ARRAYS) + tuple(EDGE_ARRAYS) + tuple(SUBGRAPH_ARRAYS) + tuple(OFFSET_ARRAYS)
)

DEFAULT_CHUNK_MIB = 8.0
# zstd level 1: on float features level 3 wrote half as fast for ~2% smaller chunks (measured on the
# 2-core build machine); decompression speed barely depends on the level.
ZSTD_LEVEL = 1
MIN_CHUNK_ROWS = 1024


# Checksums of every array's files (its zarr.json and its chunk files), recorded in the manifest at build
# time and checked by the reader (see STORE_FORMAT.md, "Checksums"). SHA-256 runs at ~1.8 GB/s with the
# SHA extensions of current x86 CPUs; the files are the compressed chunks, so a full check reads and
# hashes the store once (about 0.1 s for a 200k-node store of 60 MB).
CHECKSUM_ALGORITHM = "sha256"
# A local store whose checksummed files total at most this many bytes is verified in full when opened
# (StoreReader(verify=None)); a larger or remote one is verified chunk by chunk as it is read.
FULL_VERIFY_MAX_BYTES = 1 << 30


class StoreError(GraphInputError):
    """The store is missing, incomplete (a build died), of another format version, or damaged."""


def array_files(root: str | os.PathLike[str], name: str) -> Iterable[tuple[str, Path]]:
    """(key relative to the array, file) for every file of array ``name`` in a local store, sorted."""
    base = Path(root) / name
    for dirpath, _dirs, files in sorted(os.walk(base)):
        for f in sorted(files):
            p = Path(dirpath) / f
            yield p.relative_to(base).as_posix(), p


def file_checksum(path: Path) -> str:
    with open(path, "rb") as fh:
        return hashlib.file_digest(fh, CHECKSUM_ALGORITHM).hexdigest()


def bytes_checksum(data) -> str:
    return hashlib.new(CHECKSUM_ALGORITHM, data).hexdigest()


def store_checksums(root: str | os.PathLike[str], names: Iterable[str]) -> dict:
    """The manifest's ``checksums`` entry: the SHA-256 of every file of the named arrays of a local store.

    ``{"algorithm": "sha256", "files": n, "bytes": total, "arrays": {name: {key: hexdigest}}}`` where key is
    the file's path inside the array folder (``zarr.json``, ``c/0/0``, ...).
    """
    arrays: dict[str, dict[str, str]] = {}
    files = total = 0
    for name in names:
        table = arrays[name] = {}
        for key, p in array_files(root, name):
            table[key] = file_checksum(p)
            files += 1
            total += p.stat().st_size
    return {"algorithm": CHECKSUM_ALGORITHM, "files": files, "bytes": total, "arrays": arrays}


def chunk_rows(row_bytes: int, target_mib: float = DEFAULT_CHUNK_MIB) -> int:
    """Rows per chunk: the power of two closest (from below) to ``target_mib`` MiB of uncompressed rows.

    Node arrays (x, y, global_id, indptr) share this row count so one subgraph is one aligned row range.
    """
    rows = max(int(target_mib * 2**20) // max(int(row_bytes), 1), 1)
    return max(MIN_CHUNK_ROWS, 1 << (rows.bit_length() - 1))


def compressors(dtype: np.dtype | str) -> list:
    """Blosc/zstd (byte shuffle for floats, bit shuffle for integers) followed by a CRC32C per chunk.

    The checksum makes a truncated or altered chunk fail loudly on read instead of decoding garbage.
    """
    from zarr.codecs import BloscCodec, Crc32cCodec

    dt = np.dtype(dtype)
    shuffle = "shuffle" if dt.kind == "f" else "bitshuffle"
    return [BloscCodec(cname="zstd", clevel=ZSTD_LEVEL, shuffle=shuffle, typesize=dt.itemsize), Crc32cCodec()]


def array_digest(a: np.ndarray) -> str:
    """SHA-256 of an array's dtype, shape and bytes (used for the small index arrays in the manifest)."""
    a = np.ascontiguousarray(a)
    h = hashlib.sha256(f"{a.dtype.str}{a.shape}".encode())
    h.update(memoryview(a).cast("B"))
    return h.hexdigest()


def is_url(path: str) -> bool:
    """True for fsspec-style URLs (``s3://``, ``gs://``, ``file://``, ``memory://`` ...)."""
    return "://" in str(path)
