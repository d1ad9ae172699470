"""Read corrupt subgraphs back from a Zarr store (local path or fsspec URL).

``StoreReader(path)`` refuses anything but a complete store of this format version: missing or
unfinished manifest, other version, missing array, wrong shape, a chunk file missing, offsets that do
not match their digest. A damaged chunk (truncated, altered) fails its CRC32C when read, and
``get``/``get_csr`` report that as :class:`StoreError` too.

Subgraph i is one contiguous row range of every node array (and one contiguous range of ``indices``),
so reading it is a handful of contiguous slice reads. When a subgraph is smaller than a chunk, the
reader keeps the last decoded chunk-aligned span per array, so iterating over many small subgraphs
decodes each chunk once.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

from partitioning.store.format import (
    FORMAT_NAME,
    FORMAT_VERSION,
    MANIFEST_KEY,
    NODE_ARRAYS,
    OFFSET_ARRAYS,
    REQUIRED_ARRAYS,
    SUBGRAPH_ARRAYS,
    StoreError,
    array_digest,
)

__all__ = ["StoreReader", "StoreError"]


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

    def __init__(self, path: str, *, storage_options: dict[str, Any] | None = None, check_chunks: bool = True) -> None:
        import zarr

        self.path = str(path)
        try:
            kwargs = {"storage_options": storage_options} if storage_options else {}
            self.group = zarr.open_group(self.path, mode="r", **kwargs)
        except FileNotFoundError as e:
            raise StoreError(self.path, "no such store") from e
        except Exception as e:  # not a zarr group, unreadable metadata, bad URL ...
            raise StoreError(self.path, f"not a readable Zarr store ({type(e).__name__}: {e})") from e
        manifest = self.group.attrs.get(MANIFEST_KEY)
        if not isinstance(manifest, dict) or manifest.get("format") != FORMAT_NAME:
            raise StoreError(self.path, f"not a {FORMAT_NAME} store (no manifest)")
        if manifest.get("format_version") != FORMAT_VERSION:
            raise StoreError(
                self.path,
                f"store format version {manifest.get('format_version')} but this code reads version {FORMAT_VERSION}",
            )
        if manifest.get("complete") is not True:
            raise StoreError(self.path, "incomplete store (the build did not finish); rebuild it")
        self.manifest: dict[str, Any] = manifest
        self._arrays = self._open_arrays(check_chunks)
        counts = manifest["counts"]
        self.node_offsets = np.asarray(self._arrays["node_offsets"][:])
        self.edge_offsets = np.asarray(self._arrays["edge_offsets"][:])
        self._num_own = np.asarray(self._arrays["num_own"][:])
        self._part = np.asarray(self._arrays["part"][:])
        self._replica = np.asarray(self._arrays["replica"][:])
        digests = manifest.get("digests", {})
        for name, arr in (("node_offsets", self.node_offsets), ("edge_offsets", self.edge_offsets), ("num_own", self._num_own)):
            if digests.get(name) != array_digest(arr):
                raise StoreError(self.path, f"array {name} does not match the manifest digest (damaged store)")
        if int(self.node_offsets[-1]) != counts["nodes"] or int(self.edge_offsets[-1]) != counts["edge_entries"]:
            raise StoreError(self.path, "offsets do not match the manifest counts (damaged store)")
        self.num_subgraphs: int = int(counts["subgraphs"])
        self.num_features: int = int(counts["num_features"])
        self.node_counts: np.ndarray = np.diff(self.node_offsets)
        self.edge_counts: np.ndarray = np.diff(self.edge_offsets)
        self._cache = {name: _SpanCache(self._arrays[name]) for name in ("x", "y", "global_id", "indptr", "indices")}

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
            return np.asarray(self.group["node_part"][:])
        except KeyError:
            return None

    def feature_normalization(self) -> str:
        """How the stored ``x`` was normalised at build time: ``standard`` (z-scored per feature over all
        source nodes, ``manifest["features"]``) or ``none`` (raw; also stores written before the key existed)."""
        from partitioning.features import manifest_normalization

        return manifest_normalization(self.manifest)

    def __repr__(self) -> str:
        c = self.manifest["counts"]
        return f"StoreReader({self.path!r}, subgraphs={c['subgraphs']}, nodes={c['nodes']}, features={c['num_features']})"
