"""The Zarr store of corrupt subgraphs (layout in ``partitioning/STORE_FORMAT.md``)."""

from partitioning.store.format import FORMAT_VERSION, StoreError
from partitioning.store.reader import StoreReader
from partitioning.store.writer import write_store

__all__ = ["FORMAT_VERSION", "StoreError", "StoreReader", "write_store"]
