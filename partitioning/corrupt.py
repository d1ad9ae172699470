"""Corrupt subgraphs (METHOD.md section 4, "Corrupt Graph").

For each part V_i of a partition of the nodes, draw ``round(ratio * |V_i|)`` nodes uniformly without
replacement from the *other* parts, take the subgraph of the input graph induced on the union (every
original link among the kept nodes survives, including injected-own and injected-injected links) and
label own nodes 0, injected nodes 1.

Node order inside a subgraph is deterministic: own nodes in ascending global id, then injected nodes in
ascending global id, so ``y = [0] * num_own + [1] * num_injected``.

Cost: nodes are grouped by part once (one stable argsort, O(N log N)). Per part, the injected nodes are
``Generator.choice(N - |V_i|, m, replace=False)`` positions in the list of other-part nodes, mapped to
node ids with O(m) index arithmetic; NumPy does this with Floyd's algorithm (O(m)) when m is small
against the population and a partial shuffle of an O(N) range otherwise, which can only happen for a
few large parts, so the total stays O(N * min(K, ~8) + sum m). The induced subgraph of each part costs
O(edges touched) with an O(1) membership/relabel lookup in one reusable node-to-local-id array
(no N x N structure; one loop over parts, none over nodes or edges).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from partitioning.graph import gather_rows

log = logging.getLogger(__name__)


def num_injected(part_size: int | np.ndarray, ratio: float) -> np.ndarray:
    """``round(ratio * |part|)`` with halves rounded up (so 0.5 -> 1, unlike Python's banker's round)."""
    return np.floor(np.asarray(part_size, dtype=np.float64) * ratio + 0.5).astype(np.int64)


@dataclass
class CorruptSubgraph:
    """One corrupt subgraph: own nodes first, then injected nodes; a local undirected CSR."""

    subgraph_id: int
    part: int
    replica: int
    nodes: np.ndarray  # int64 [n] global ids: own (sorted) then injected (sorted)
    num_own: int
    indptr: np.ndarray  # int64 [n+1] local CSR
    indices: np.ndarray  # int32 (or int64 if n >= 2**31) [nnz] local ids, sorted within rows

    @property
    def num_nodes(self) -> int:
        return int(self.nodes.size)

    @property
    def num_injected(self) -> int:
        return int(self.nodes.size - self.num_own)

    @property
    def y(self) -> np.ndarray:
        """int8 [n]: 0 for own nodes, 1 for injected nodes."""
        y = np.zeros(self.nodes.size, dtype=np.int8)
        y[self.num_own :] = 1
        return y


class PartIndex:
    """Nodes grouped by part: ``members(p)`` is part p's sorted node ids, in O(1) (a view)."""

    def __init__(self, parts: np.ndarray, num_parts: int | None = None) -> None:
        parts = np.asarray(parts, dtype=np.int64)
        if parts.ndim != 1:
            raise ValueError("parts must be one part id per node")
        if parts.size and parts.min() < 0:
            raise ValueError("part ids must be >= 0")
        self.num_nodes = int(parts.size)
        self.num_parts = int(num_parts if num_parts is not None else (parts.max() + 1 if parts.size else 0))
        self.perm = np.argsort(parts, kind="stable")  # grouped by part, ascending node id inside a part
        self.sizes = np.bincount(parts, minlength=self.num_parts).astype(np.int64)
        self.starts = np.zeros(self.num_parts + 1, dtype=np.int64)
        np.cumsum(self.sizes, out=self.starts[1:])

    def members(self, p: int) -> np.ndarray:
        return self.perm[self.starts[p] : self.starts[p + 1]]

    def sample_others(self, p: int, m: int, rng: np.random.Generator) -> np.ndarray:
        """``m`` distinct nodes drawn uniformly from all parts but ``p`` (sorted)."""
        s, e = int(self.starts[p]), int(self.starts[p + 1])
        pop = self.num_nodes - (e - s)
        if m > pop:
            raise ValueError(f"cannot draw {m} nodes from the {pop} nodes of the other parts")
        if m == 0:
            return np.zeros(0, dtype=np.int64)
        pos = rng.choice(pop, size=m, replace=False).astype(np.int64)
        # positions index the concatenation perm[:s] ++ perm[e:]: skip part p's block
        pos[pos >= s] += e - s
        return np.sort(self.perm[pos])


class _Relabel:
    """A reusable node -> local id map (-1 = not in the current subgraph); O(n) set-up and reset."""

    def __init__(self, num_nodes: int) -> None:
        self.local = np.full(num_nodes, -1, dtype=np.int64)

    def induced(self, indptr: np.ndarray, indices: np.ndarray, nodes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Local CSR of the subgraph induced on ``nodes`` (local id k = nodes[k]), rows sorted."""
        n = nodes.size
        self.local[nodes] = np.arange(n, dtype=np.int64)
        try:
            owner, nbr = gather_rows(indptr, indices, nodes)
            loc = self.local[nbr]
        finally:
            self.local[nodes] = -1
        keep = loc >= 0
        owner, loc = owner[keep], loc[keep]
        del keep, nbr
        key = owner * max(n, 1) + loc  # owner is already ascending: sort fixes order within rows
        key.sort()
        sub_indptr = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(np.bincount(owner, minlength=n), out=sub_indptr[1:])
        local_dtype = np.int32 if n < 2**31 else np.int64
        return sub_indptr, (key % max(n, 1)).astype(local_dtype)


def corrupt_subgraphs(
    indptr: np.ndarray,
    indices: np.ndarray,
    parts: np.ndarray,
    *,
    ratio: float = 0.15,
    corruptions: int = 1,
    seed: int = 0,
    num_parts: int | None = None,
) -> Iterator[CorruptSubgraph]:
    """Yield the corrupt subgraphs, part-major: subgraph ``p * corruptions + r`` is replica r of part p.

    ``parts`` gives the part of every node (int, 0..K-1). Empty parts yield nothing (ids stay
    ``p * corruptions + r``, so ids can have gaps only when a part is empty). Replica r of part p uses
    the random stream ``default_rng([seed, p, r])``: a subgraph does not depend on the others.
    """
    if not 0.0 < ratio < 1.0:
        raise ValueError(f"ratio must lie in (0, 1), got {ratio}")
    if corruptions < 1:
        raise ValueError(f"corruptions must be >= 1, got {corruptions}")
    index = PartIndex(parts, num_parts)
    relabel = _Relabel(index.num_nodes)
    for p in range(index.num_parts):
        own = index.members(p)
        if own.size == 0:
            continue
        m = int(num_injected(own.size, ratio))
        pop = index.num_nodes - own.size
        if m > pop:
            log.warning("part %d: %d nodes to inject but only %d in other parts; injecting %d", p, m, pop, pop)
            m = pop
        for r in range(corruptions):
            rng = np.random.default_rng([seed, p, r])
            injected = index.sample_others(p, m, rng)
            nodes = np.concatenate([own, injected])
            sub_indptr, sub_indices = relabel.induced(indptr, indices, nodes)
            yield CorruptSubgraph(
                subgraph_id=p * corruptions + r,
                part=p,
                replica=r,
                nodes=nodes,
                num_own=int(own.size),
                indptr=sub_indptr,
                indices=sub_indices,
            )


def uncut_edge_share(indptr: np.ndarray, indices: np.ndarray, parts: np.ndarray, block: int = 1 << 24) -> float | None:
    """Share of the graph's undirected edges whose two ends lie in the same part (not cut by the
    partition), i.e. that some corrupt subgraph holds among its own nodes. None for a graph without
    edges. Each undirected edge is two CSR entries, so the share over entries is the same; the entries
    are walked in blocks of about ``block`` (row-aligned) to bound memory."""
    nnz = int(indices.size)
    if nnz == 0:
        return None
    parts = np.asarray(parts)
    n = parts.size
    # row boundaries of blocks of ~`block` entries (a loop over blocks, not nodes)
    bounds = np.unique(np.r_[0, np.searchsorted(indptr, np.arange(block, nnz, block), side="right") - 1, n])
    same = 0
    for a, b in zip(bounds[:-1].tolist(), bounds[1:].tolist()):
        s, e = int(indptr[a]), int(indptr[b])
        if e == s:
            continue
        rows_part = np.repeat(parts[a:b], np.diff(indptr[a : b + 1]))
        same += int(np.count_nonzero(rows_part == parts[indices[s:e]]))
    return same / nnz


def subgraph_edge_share(subgraphs: list[CorruptSubgraph], num_nodes: int, num_edges: int) -> float | None:
    """Share of the graph's ``num_edges`` undirected edges that lie inside at least one corrupt subgraph
    (own-own, own-injected or injected-injected), averaged over the replicas (with ``--corruptions``
    R > 1, the share for each replica r = subgraphs of replica r, then the mean). None without edges.

    One loop over the subgraphs to collect each one's edges as global keys ``u * N + v`` (u < v);
    the union is one ``np.unique`` per replica.
    """
    if num_edges == 0 or not subgraphs:
        return None
    by_rep: dict[int, list[np.ndarray]] = {}
    for s in subgraphs:
        rows = np.repeat(np.arange(s.num_nodes, dtype=np.int64), np.diff(s.indptr))
        cols = s.indices.astype(np.int64)
        upper = rows < cols
        u, v = s.nodes[rows[upper]], s.nodes[cols[upper]]
        lo, hi = np.minimum(u, v), np.maximum(u, v)
        by_rep.setdefault(s.replica, []).append(lo * np.int64(num_nodes) + hi)
    shares = [np.unique(np.concatenate(keys)).size / num_edges for keys in by_rep.values()]
    return float(np.mean(shares))
