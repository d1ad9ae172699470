"""Read corrupt subgraphs back from a Zarr store (local path or fsspec URL).

``StoreReader(path)`` refuses anything but a complete store of this format version: no such path (with
a hint when an unfinished build's ``<path>.tmp-<pid>`` is left), missing or unfinished manifest, an
older or newer version, missing array, wrong shape, a chunk file missing, offsets that do not match
their digest. A damaged chunk (truncated, altered) fails its CRC32C when read, and ``get``/``get_csr``
report that as :class:`StoreError` too.

Checksums (manifest ``checksums``, STORE_FORMAT.md): every file of every array has its SHA-256 in the
manifest. Each file is checked whenever it is read (so no byte that fails its checksum is ever decoded),
and ``verify`` decides whether every file is also checked when the store is opened: ``None`` (default)
does so for a local store of at most ``FULL_VERIFY_MAX_BYTES``, ``True`` always, ``False`` never. A file
that does not match is refused with a :class:`StoreError` naming the array and the file. Stores built
before checksums existed open with one log line saying they cannot be verified.

Subgraph i is one contiguous row range of every node array (and one contiguous range of ``indices``),
so reading it is a handful of contiguous slice reads. When a subgraph is smaller than a chunk, the
reader keeps the last decoded chunk-aligned span per array, so iterating over many small subgraphs
decodes each chunk once.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import AsyncGenerator, Iterable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from partitioning.store.format import (
    CHECKSUM_ALGORITHM,
    FORMAT_NAME,
    FORMAT_VERSION,
    FULL_VERIFY_MAX_BYTES,
    MANIFEST_KEY,
    NODE_ARRAYS,
    OFFSET_ARRAYS,
    REQUIRED_ARRAYS,
    SUBGRAPH_ARRAYS,
    StoreError,
    array_digest,
    bytes_checksum,
    file_checksum,
    is_url,
)

__all__ = ["StoreReader", "StoreError"]

log = logging.getLogger(__name__)


def _mismatch(source: str, name: str, key: str) -> StoreError:
    return StoreError(
        source, f"array {name}: file {name}/{key} does not match its checksum in the manifest "
        "(edited or damaged after the build); rebuild the store"
    )


def _missing(source: str, name: str, key: str) -> StoreError:
    return StoreError(source, f"array {name}: file {name}/{key} is missing (damaged store)")


_VERIFYING_STORE: type | None = None


def _verifying_store(base: Any, source: str) -> Any:
    """``base`` wrapped in :class:`_VerifyingStore` (defined on first use: zarr is imported lazily)."""
    global _VERIFYING_STORE
    if _VERIFYING_STORE is None:
        from zarr.storage import WrapperStore

        class _VerifyingStore(WrapperStore):
            """A read-only zarr store that checks every file listed in the manifest's checksums as it is read.

            ``table`` maps a store key (``x/c/0/0``) to (array name, expected hex digest); keys not in it (the
            root ``zarr.json`` holding the manifest, probes for other metadata names) pass through unchecked.
            """

            def __init__(self, store: Any, source: str = "", table: dict[str, tuple[str, str]] | None = None) -> None:
                super().__init__(store)
                self.source = source
                self.table = table or {}

            def _with_store(self, store: Any) -> Any:
                return type(self)(store, self.source, self.table)

            async def get(self, key: str, prototype: Any, byte_range: Any = None) -> Any:
                entry = self.table.get(key)
                if entry is None:
                    return await self._store.get(key, prototype, byte_range)
                buf = await self._store.get(key, prototype, None)  # whole file: the checksum covers all of it
                name, expected = entry
                sub = key[len(name) + 1 :]
                if buf is None:  # zarr would silently read a missing chunk as fill values
                    raise _missing(self.source, name, sub)
                if bytes_checksum(buf.as_numpy_array()) != expected:
                    raise _mismatch(self.source, name, sub)
                if byte_range is None:
                    return buf
                from zarr.abc.store import OffsetByteRequest, RangeByteRequest, SuffixByteRequest

                data = buf.to_bytes()
                if isinstance(byte_range, RangeByteRequest):
                    data = data[byte_range.start : byte_range.end]
                elif isinstance(byte_range, OffsetByteRequest):
                    data = data[byte_range.offset :]
                elif isinstance(byte_range, SuffixByteRequest):
                    data = data[len(data) - byte_range.suffix :]
                else:
                    raise TypeError(f"unknown byte range {byte_range!r}")
                return prototype.buffer.from_bytes(data)

            async def get_partial_values(self, prototype: Any, key_ranges: Iterable[tuple[str, Any]]) -> list[Any]:
                return [await self.get(key, prototype, byte_range) for key, byte_range in key_ranges]

            async def _get_many(
                self, requests: Iterable[tuple[str, Any, Any]]
            ) -> AsyncGenerator[tuple[str, Any], None]:
                for key, prototype, byte_range in requests:
                    yield key, await self.get(key, prototype, byte_range)

        _VERIFYING_STORE = _VerifyingStore
    return _VERIFYING_STORE(base, source)


def _unfinished_hint(path: str) -> str:
    """' (an unfinished build left <path>.tmp-<pid>; ...)' when such a folder is beside a missing store."""
    p = Path(path)
    try:
        left = sorted(q.name for q in p.parent.glob(p.name + ".tmp-*"))
    except OSError:
        return ""
    if not left:
        return ""
    return f" (a build to it did not finish: {left[0]} is left; rebuild with python -m partitioning.build)"


class _SpanCache:
    """Reads ``arr[a:b]`` along axis 0; small reads go through one cached chunk-aligned span."""

    def __init__(self, arr: Any) -> None:
        self.arr = arr
        self.chunk = int(arr.chunks[0])
        self.span: tuple[int, int, np.ndarray] | None = None

    def read(self, a: int, b: int) -> np.ndarray:
        if b - a >= self.chunk:  # large: read exactly (zarr decodes only the chunks it touches)
            return np.asarray(self.arr[a:b])
        if self.span is not None and self.span[0] <= a and b <= self.span[1]:
            s0, _, data = self.span
            return data[a - s0 : b - s0]
        s0 = (a // self.chunk) * self.chunk
        s1 = min(-(-b // self.chunk) * self.chunk, int(self.arr.shape[0]))
        data = np.asarray(self.arr[s0:s1])
        self.span = (s0, s1, data)
        return data[a - s0 : b - s0]


class StoreReader:
    """A complete corrupt-subgraph store. ``get(i)`` returns subgraph i as a PyG ``Data``."""

    def __init__(
        self,
        path: str,
        *,
        storage_options: dict[str, Any] | None = None,
        check_chunks: bool = True,
        verify: bool | None = None,
    ) -> None:
        import zarr
        from zarr.storage import FsspecStore, LocalStore

        self.path = str(path)
        url = is_url(self.path)
        if not url and not Path(self.path).exists():
            raise StoreError(self.path, "no such store" + _unfinished_hint(self.path))
        if not url and not Path(self.path).is_dir():
            raise StoreError(self.path, "not a store (a store is a folder written by python -m partitioning.build)")
        try:
            if url:
                base = FsspecStore.from_url(self.path, storage_options=storage_options or None, read_only=True)
            else:
                base = LocalStore(self.path, read_only=True)
            self._store = _verifying_store(base, self.path)
            self.group = zarr.open_group(store=self._store, mode="r")
        except FileNotFoundError as e:
            raise StoreError(self.path, "no such store" + ("" if url else _unfinished_hint(self.path))) from e
        except Exception as e:  # not a zarr group, unreadable metadata, bad URL ...
            raise StoreError(self.path, f"not a readable Zarr store ({type(e).__name__}: {e})") from e
        manifest = self.group.attrs.get(MANIFEST_KEY)
        if not isinstance(manifest, dict) or manifest.get("format") != FORMAT_NAME:
            raise StoreError(self.path, f"not a {FORMAT_NAME} store (no manifest)")
        version = manifest.get("format_version")
        if version != FORMAT_VERSION:
            if isinstance(version, int) and not isinstance(version, bool) and version < FORMAT_VERSION:
                problem = (f"store format version {version} is older than this code reads (version {FORMAT_VERSION}); "
                           "rebuild it with python -m partitioning.build")
            elif isinstance(version, int) and not isinstance(version, bool):
                problem = (f"store format version {version} is newer than this code reads (version {FORMAT_VERSION}); "
                           "update gcad-dist, or rebuild the store with this version")
            else:
                problem = f"store format version {version!r} is not one this code reads (version {FORMAT_VERSION})"
            raise StoreError(self.path, problem)
        if manifest.get("complete") is not True:
            tmp = re.search(r"\.tmp-\d+$", self.path.rstrip("/"))
            raise StoreError(self.path, "incomplete store (the build did not finish" +
                             (", or is still running: this is its temporary folder" if tmp else "") + "); rebuild it")
        self.manifest: dict[str, Any] = manifest
        self.checksums: dict[str, Any] | None = self._checksum_table()
        self._arrays = self._open_arrays(check_chunks)
        if self.checksums is not None:
            full = verify if verify is not None else (not url and self.checksums["bytes"] <= FULL_VERIFY_MAX_BYTES)
            if full:
                self.verify()
        counts = manifest["counts"]
        try:
            self.node_offsets = np.asarray(self._arrays["node_offsets"][:])
            self.edge_offsets = np.asarray(self._arrays["edge_offsets"][:])
            self._num_own = np.asarray(self._arrays["num_own"][:])
            self._part = np.asarray(self._arrays["part"][:])
            self._replica = np.asarray(self._arrays["replica"][:])
        except StoreError:
            raise
        except Exception as e:  # checksum (CRC32C) mismatch, truncated chunk
            raise StoreError(self.path, f"cannot read the offset arrays ({type(e).__name__}: {e})") from e
        digests = manifest.get("digests", {})
        for name, arr in (("node_offsets", self.node_offsets), ("edge_offsets", self.edge_offsets), ("num_own", self._num_own)):
            if digests.get(name) != array_digest(arr):
                raise StoreError(self.path, f"array {name} does not match the manifest digest (damaged store)")
        if int(self.node_offsets[-1]) != counts["nodes"] or int(self.edge_offsets[-1]) != counts["edge_entries"]:
            raise StoreError(self.path, "offsets do not match the manifest counts (damaged store)")
        self.num_subgraphs: int = int(counts["subgraphs"])
        self.num_features: int = int(counts["num_features"])
        self.node_counts: np.ndarray = np.diff(self.node_offsets)
        self.own_counts: np.ndarray = self._num_own  # label-0 rows per subgraph (the rest are corrupted, y = 1)
        #: corrupted (label-1) rows over all subgraphs; 0 for a store built with --corruption-mix none
        self.num_corrupted: int = int(self.node_counts.sum() - self.own_counts.sum())
        self.edge_counts: np.ndarray = np.diff(self.edge_offsets)
        self._cache = {name: _SpanCache(self._arrays[name]) for name in ("x", "y", "global_id", "indptr", "indices")}

    def _checksum_table(self) -> dict[str, Any] | None:
        """Install the manifest's checksums in the verifying store (files are checked from now on)."""
        sums = self.manifest.get("checksums")
        if sums is None:
            log.info("%s: store built without checksums (before they were added); its files cannot be verified "
                     "(each chunk still carries its CRC32C); rebuild it to add them", self.path)
            return None
        try:
            if sums["algorithm"] != CHECKSUM_ALGORITHM:
                raise StoreError(self.path, f"checksum algorithm {sums['algorithm']!r} is not one this code reads "
                                 f"({CHECKSUM_ALGORITHM})")
            arrays = sums["arrays"]
            table = {f"{name}/{key}": (name, str(h)) for name, files in arrays.items() for key, h in files.items()}
            int(sums["bytes"])
        except StoreError:
            raise
        except (KeyError, TypeError, AttributeError, ValueError) as e:
            raise StoreError(self.path, f"malformed checksums in the manifest ({type(e).__name__}: {e})") from e
        missing = [name for name in REQUIRED_ARRAYS if name not in arrays]
        if missing:
            raise StoreError(self.path, f"the manifest's checksums lack array {missing[0]} (damaged manifest)")
        self._store.table = table
        return sums

    def verify(self) -> dict[str, Any]:
        """Check every file of every array against its checksum now; returns ``{files, bytes, seconds}``.

        Raises :class:`StoreError` naming the array and file of the first mismatch or missing file, and
        when the store has no checksums (built before they existed).
        """
        if self.checksums is None:
            raise StoreError(self.path, "store built without checksums (before they were added): it cannot be "
                             "verified; rebuild it to add them")
        t0 = time.perf_counter()
        files = total = 0
        local = not is_url(self.path)
        if not local:
            from zarr.core.buffer import default_buffer_prototype
            from zarr.core.sync import sync

            proto = default_buffer_prototype()
        for name, table in self.checksums["arrays"].items():
            for key, expected in table.items():
                if local:
                    p = Path(self.path) / name / key
                    if not p.is_file():
                        raise _missing(self.path, name, key)
                    got = file_checksum(p)
                    total += p.stat().st_size
                else:
                    buf = sync(self._store._store.get(f"{name}/{key}", proto))
                    if buf is None:
                        raise _missing(self.path, name, key)
                    got = bytes_checksum(buf.as_numpy_array())
                    total += len(buf)
                if got != expected:
                    raise _mismatch(self.path, name, key)
                files += 1
        seconds = time.perf_counter() - t0
        log.debug("%s: verified %d files (%.1f MB) in %.2f s", self.path, files, total / 1e6, seconds)
        return {"files": files, "bytes": total, "seconds": seconds}

    def _open_arrays(self, check_chunks: bool) -> dict[str, Any]:
        counts = self.manifest["counts"]
        t, e, s = counts["nodes"], counts["edge_entries"], counts["subgraphs"]
        expected = {name: (t,) for name in NODE_ARRAYS}
        expected["x"] = (t, counts["num_features"])
        expected.update({"indptr": (t + 1,), "indices": (e,)})
        expected.update({name: (s,) for name in SUBGRAPH_ARRAYS})
        expected.update({name: (s + 1,) for name in OFFSET_ARRAYS})
        arrays = {}
        for name in REQUIRED_ARRAYS:
            try:
                arr = self.group[name]
            except KeyError as err:
                raise StoreError(self.path, f"array {name} is missing (damaged store)") from err
            if tuple(arr.shape) != expected[name]:
                raise StoreError(self.path, f"array {name} has shape {tuple(arr.shape)}, expected {expected[name]}")
            if check_chunks and arr.nchunks_initialized != arr.nchunks:
                raise StoreError(
                    self.path, f"array {name}: {arr.nchunks - arr.nchunks_initialized} of {arr.nchunks} chunks missing"
                )
            arrays[name] = arr
        return arrays

    def __len__(self) -> int:
        return self.num_subgraphs

    def _check_index(self, i: int) -> int:
        i = int(i)
        if i < 0:
            i += self.num_subgraphs
        if not 0 <= i < self.num_subgraphs:
            raise IndexError(f"subgraph {i} out of range (store has {self.num_subgraphs})")
        return i

    def get_csr(self, i: int) -> dict[str, Any]:
        """Subgraph i as NumPy: indptr [n+1], indices [nnz] (local), x [n,F], y int8 [n], global_id [n]."""
        i = self._check_index(i)
        a, b = int(self.node_offsets[i]), int(self.node_offsets[i + 1])
        ea, eb = int(self.edge_offsets[i]), int(self.edge_offsets[i + 1])
        try:
            indptr = self._cache["indptr"].read(a, b + 1) - ea
            out = {
                "indptr": indptr,
                "indices": self._cache["indices"].read(ea, eb).astype(np.int64),
                "x": self._cache["x"].read(a, b),
                "y": self._cache["y"].read(a, b),
                "global_id": self._cache["global_id"].read(a, b),
            }
        except StoreError:
            raise
        except Exception as e:  # checksum mismatch, truncated chunk, vanished file
            raise StoreError(self.path, f"subgraph {i}: cannot read ({type(e).__name__}: {e})") from e
        if indptr[0] != 0 or indptr[-1] != eb - ea:
            raise StoreError(self.path, f"subgraph {i}: row pointer does not match its edge range (damaged store)")
        out.update(
            num_own=int(self._num_own[i]), part=int(self._part[i]), replica=int(self._replica[i]), subgraph_id=i
        )
        return out

    def get(self, i: int):  # -> torch_geometric.data.Data
        """Subgraph i as ``Data(x, edge_index, y, global_id, part, subgraph_id, num_nodes)``."""
        import torch
        from torch_geometric.data import Data

        c = self.get_csr(i)
        n = c["x"].shape[0]
        rows = np.repeat(np.arange(n, dtype=np.int64), np.diff(c["indptr"]))
        return Data(
            x=torch.from_numpy(np.ascontiguousarray(c["x"])),
            edge_index=torch.from_numpy(np.stack([rows, c["indices"]])),
            y=torch.from_numpy(c["y"].astype(np.int64)),
            global_id=torch.from_numpy(np.ascontiguousarray(c["global_id"])),
            part=c["part"],
            replica=c["replica"],
            subgraph_id=c["subgraph_id"],
            num_nodes=n,
        )

    def __getitem__(self, i: int):
        return self.get(i)

    def __iter__(self) -> Iterator:
        for i in range(self.num_subgraphs):
            yield self.get(i)

    def node_part(self) -> np.ndarray | None:
        """Part of every source-graph node (int32 [N]) when the build stored it."""
        try:
            arr = self.group["node_part"]
        except KeyError:
            return None
        try:
            return np.asarray(arr[:])
        except StoreError:
            raise
        except Exception as e:  # CRC32C mismatch, truncated chunk
            raise StoreError(self.path, f"array node_part: cannot read ({type(e).__name__}: {e})") from e

    def feature_normalization(self) -> str:
        """How the stored ``x`` was normalised at build time (``manifest["features"]``): ``power`` (the default),
        ``power-all-rows`` (a ``power`` store written before session 40), ``standard`` (z-scored per feature over
        all source nodes) or ``none`` (raw; also stores written before the key existed)."""
        from partitioning.features import manifest_normalization

        return manifest_normalization(self.manifest)

    def __repr__(self) -> str:
        c = self.manifest["counts"]
        return f"StoreReader({self.path!r}, subgraphs={c['subgraphs']}, nodes={c['nodes']}, features={c['num_features']})"
