"""Partitioning: load a graph, cluster it, build corrupt subgraphs, write them to a Zarr store."""

from partitioning.errors import GraphInputError
from partitioning.graph import Graph

__all__ = ["Graph", "GraphInputError"]
