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

Corruption kinds (``mix``; the paper's setting is ``inject`` alone, the default here). Per subgraph,
``round(ratio * |V_i|)`` nodes are corrupted in all, split between the kinds of the mix in proportion
to their weights (the remainder of the split goes to kinds drawn at random), and every corrupted node
is labelled 1:

* ``inject`` (METHOD.md section 4, the paper's): nodes of other parts, with their links to the kept nodes;
* ``features`` (contextual anomaly): an own node of the part keeps all its links but carries the
  feature vector of a node drawn uniformly from the other parts (the donor; donors and injected nodes
  are distinct): its features then disagree with its neighbours'. The store holds such a row under the
  donor's id (``nodes`` = whose features, ``link_nodes`` = whose links: the own node's);
* ``edges`` (structural anomaly): an own node keeps its features and gains ``max(EDGE_MIN, degree)``
  edges (its degree in the subgraph at least doubles) to nodes drawn uniformly from the rest of the
  subgraph, i.e. nodes it is not tied to, as a planted clique ties its random members; draws that hit
  an existing edge, a duplicate or itself are dropped (a node left without any new edge, possible only
  in tiny dense subgraphs, is not corrupted and stays 0).

``none`` stores the parts uncorrupted (every row ``y = 0``): pre-training then draws its corruptions afresh at
every step (``gcad_dist.pretrain --swap-features``), which a small store's few fixed corruptions cannot
replace (they are learnt by heart). With ``--k 1`` the one part is the whole graph, every edge kept: the
label-free default of GCCAD-pre, whose local contrast needs each node's whole neighbourhood.

Row order with a mix: unchanged own nodes (ascending id), injected nodes (ascending id), feature-swapped
rows (ascending own id), edge-corrupted nodes (ascending id); so ``y`` is still ``num_own`` zeros
(``num_own`` = uncorrupted own nodes) then ones, as the store format expects.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

import numpy as np

from partitioning.graph import gather_rows, sorted_unique

log = logging.getLogger(__name__)

#: Corruption kinds, in row order within a subgraph. ``inject`` alone is the paper's corrupt graph.
KINDS: tuple[str, ...] = ("inject", "features", "edges")
PAPER_MIX: dict[str, float] = {"inject": 1.0}
#: ``--corruption-mix none``: no stored corruption (parse_mix gives an empty mix).
NO_CORRUPTION = "none"
#: An edge-corrupted node gains max(EDGE_MIN, its degree in the subgraph) new edges (before dropping
#: collisions): at least as many as a member of a small planted clique, and at least doubling its degree.
EDGE_MIN = 5


def parse_mix(text: str | Mapping[str, float]) -> dict[str, float]:
    """``"inject"``, ``"inject,features,edges"`` or with weights ``"inject:2,features:1"`` -> {kind: weight},
    in :data:`KINDS` order; ``"none"`` -> {} (no stored corruption). Raises ValueError naming the problem."""
    if (isinstance(text, str) and text.strip() == NO_CORRUPTION) or (isinstance(text, Mapping) and not text):
        return {}
    if isinstance(text, Mapping):
        items = [(str(k), float(v)) for k, v in text.items()]
    else:
        items = []
        for tok in str(text).split(","):
            tok = tok.strip()
            if not tok:
                continue
            name, _, w = tok.partition(":")
            try:
                items.append((name.strip(), float(w) if w else 1.0))
            except ValueError:
                raise ValueError(f"bad weight in {tok!r} (expected KIND or KIND:WEIGHT)") from None
    if not items:
        raise ValueError("no corruption kind given")
    names = [k for k, _ in items]
    for k, w in items:
        if k == NO_CORRUPTION:
            raise ValueError(f"{NO_CORRUPTION!r} cannot be combined with corruption kinds")
        if k not in KINDS:
            raise ValueError(f"unknown corruption kind {k!r} (choose from {', '.join(KINDS)}, or {NO_CORRUPTION})")
        if not (w > 0 and np.isfinite(w)):
            raise ValueError(f"weight of {k!r} must be a positive number, got {w}")
    if len(set(names)) != len(names):
        raise ValueError(f"corruption kind repeated in {','.join(names)}")
    d = dict(items)
    return {k: d[k] for k in KINDS if k in d}


def format_mix(mix: Mapping[str, float]) -> str:
    """Inverse of :func:`parse_mix` (weights shown only when they differ)."""
    if not mix:
        return NO_CORRUPTION
    ws = set(mix.values())
    if len(ws) == 1:
        return ",".join(mix)
    return ",".join(f"{k}:{w:g}" for k, w in mix.items())


def split_counts(m: int, mix: Mapping[str, float], rng: np.random.Generator | None) -> dict[str, int]:
    """Split ``m`` corrupted nodes between the kinds of ``mix`` in proportion to the weights: each kind
    gets the floor of its share, the remainder goes one each to kinds drawn without replacement
    (weighted by the fractional parts). A single kind takes all ``m`` (``rng`` unused)."""
    kinds = list(mix)
    if len(kinds) == 1:
        return {kinds[0]: int(m)}
    w = np.array([mix[k] for k in kinds], dtype=np.float64)
    exact = m * w / w.sum()
    base = np.floor(exact).astype(np.int64)
    rest = int(m - base.sum())
    if rest:
        frac = exact - base
        pr = frac / frac.sum() if frac.sum() > 0 else None
        base[rng.choice(len(kinds), size=rest, replace=False, p=pr)] += 1
    return {k: int(c) for k, c in zip(kinds, base)}


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
    # With a mix of corruption kinds (None/empty for the paper's injection alone):
    link_nodes: np.ndarray | None = None  # int64 [n] whose source links each row holds (None = nodes)
    planted: np.ndarray | None = None  # bool [nnz] True for edges planted by the ``edges`` kind
    counts: dict[str, int] = field(default_factory=dict)  # corrupted nodes per kind (+ planted_edges)

    @property
    def num_nodes(self) -> int:
        return int(self.nodes.size)

    @property
    def num_injected(self) -> int:
        """Corrupted (label 1) rows: the injected nodes, plus the feature/edge-corrupted own nodes of a mix."""
        return int(self.nodes.size - self.num_own)

    @property
    def y(self) -> np.ndarray:
        """int8 [n]: 0 for own (unchanged) nodes, 1 for corrupted (injected, ...) nodes."""
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

    def pairs(self, indptr: np.ndarray, indices: np.ndarray, nodes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Entries (owner, neighbour) of the subgraph induced on ``nodes`` in local ids (k = nodes[k]);
        owner ascending, neighbours in source order."""
        n = nodes.size
        self.local[nodes] = np.arange(n, dtype=np.int64)
        try:
            owner, nbr = gather_rows(indptr, indices, nodes)
            loc = self.local[nbr]
        finally:
            self.local[nodes] = -1
        keep = loc >= 0
        return owner[keep], loc[keep]

    def induced(self, indptr: np.ndarray, indices: np.ndarray, nodes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Local CSR of the subgraph induced on ``nodes`` (local id k = nodes[k]), rows sorted."""
        owner, loc = self.pairs(indptr, indices, nodes)
        return _csr(owner, loc, nodes.size)[:2]


def _csr(owner: np.ndarray, loc: np.ndarray, n: int, flag: np.ndarray | None = None
         ) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """Local CSR (rows sorted) of the entries (owner, loc); ``flag`` (per entry) is permuted alongside."""
    key = owner * max(n, 1) + loc
    if flag is None:
        key.sort()
    else:
        order = np.argsort(key, kind="stable")
        key, flag = key[order], flag[order]
    sub_indptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(owner, minlength=n), out=sub_indptr[1:])
    local_dtype = np.int32 if n < 2**31 else np.int64
    return sub_indptr, (key % max(n, 1)).astype(local_dtype), flag


def _plant_edges(owner: np.ndarray, loc: np.ndarray, n: int, first: int, rng: np.random.Generator
                 ) -> tuple[np.ndarray, np.ndarray]:
    """New undirected edges (u, v), u < v, for rows ``first..n-1``: each draws max(EDGE_MIN, degree)
    partners uniformly among the other n - 1 rows (at most its non-neighbours); self loops are
    impossible, existing edges and duplicates are dropped."""
    rows = np.arange(first, n, dtype=np.int64)
    deg = np.bincount(owner, minlength=n)[first:]
    want = np.minimum(np.maximum(EDGE_MIN, deg), n - 1 - deg)
    src = np.repeat(rows, np.maximum(want, 0))
    dst = rng.integers(0, max(n - 1, 1), size=src.size, dtype=np.int64)
    dst += dst >= src  # uniform over the rows other than src
    key = sorted_unique(np.minimum(src, dst) * n + np.maximum(src, dst))
    upper = owner < loc
    old = np.sort(owner[upper] * n + loc[upper])
    if old.size and key.size:
        pos = np.minimum(np.searchsorted(old, key), old.size - 1)
        key = key[old[pos] != key]
    return key // n, key % n


def corrupt_subgraphs(
    indptr: np.ndarray,
    indices: np.ndarray,
    parts: np.ndarray,
    *,
    ratio: float = 0.15,
    corruptions: int = 1,
    seed: int = 0,
    num_parts: int | None = None,
    mix: str | Mapping[str, float] | None = None,
) -> Iterator[CorruptSubgraph]:
    """Yield the corrupt subgraphs, part-major: subgraph ``p * corruptions + r`` is replica r of part p.

    ``parts`` gives the part of every node (int, 0..K-1). Empty parts yield nothing (ids stay
    ``p * corruptions + r``, so ids can have gaps only when a part is empty). Replica r of part p uses
    the random stream ``default_rng([seed, p, r])``: a subgraph does not depend on the others.
    ``mix``: corruption kinds and weights (:func:`parse_mix`); None or ``"inject"`` = the paper's
    injection alone (the same subgraphs, bit for bit, as before kinds existed); ``"none"`` (or ``{}``) = each
    part's induced subgraph, uncorrupted (all ``y = 0``; ``ratio`` unused).
    """
    if not 0.0 < ratio < 1.0:
        raise ValueError(f"ratio must lie in (0, 1), got {ratio}")
    if corruptions < 1:
        raise ValueError(f"corruptions must be >= 1, got {corruptions}")
    weights = PAPER_MIX if mix is None else parse_mix(mix)
    paper = list(weights) == ["inject"]
    index = PartIndex(parts, num_parts)
    relabel = _Relabel(index.num_nodes)
    for p in range(index.num_parts):
        own = index.members(p)
        if own.size == 0:
            continue
        if not weights:  # "none": the part as it is
            sub_indptr, sub_indices = relabel.induced(indptr, indices, own)
            for r in range(corruptions):
                yield CorruptSubgraph(subgraph_id=p * corruptions + r, part=p, replica=r, nodes=own,
                                      num_own=int(own.size), indptr=sub_indptr, indices=sub_indices, counts={})
            continue
        m = int(num_injected(own.size, ratio))
        pop = index.num_nodes - own.size
        if paper:
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
                    counts={"inject": int(m)},
                )
            continue
        for r in range(corruptions):
            rng = np.random.default_rng([seed, p, r])
            yield _mixed_subgraph(indptr, indices, index, relabel, p, r, corruptions, own, m, weights, rng)


def _mixed_subgraph(indptr: np.ndarray, indices: np.ndarray, index: PartIndex, relabel: _Relabel, p: int, r: int,
                    corruptions: int, own: np.ndarray, m: int, weights: Mapping[str, float],
                    rng: np.random.Generator) -> CorruptSubgraph:
    """One corrupt subgraph of part ``p`` with ``m`` nodes corrupted by the kinds of ``weights``."""
    c = {k: 0 for k in KINDS}
    c.update(split_counts(m, weights, rng))
    # keep at least one unchanged own node (the contrastive loss needs normal nodes) ...
    excess = c["features"] + c["edges"] - (own.size - 1)
    if excess > 0:
        cut = min(excess, c["edges"])
        c["edges"] -= cut
        c["features"] -= excess - cut
    # ... and draw no more nodes from the other parts than there are
    pop = index.num_nodes - own.size
    excess = c["inject"] + c["features"] - pop
    if excess > 0:
        cut = min(excess, c["inject"])
        c["inject"] -= cut
        c["features"] -= excess - cut
    if sum(c.values()) < m:
        log.warning("part %d: %d nodes to corrupt, only %d possible (%s)", p, m, sum(c.values()), c)
    ci, cf, ce = c["inject"], c["features"], c["edges"]
    others = index.sample_others(p, ci + cf, rng)  # injected nodes and donors: distinct, other parts
    perm = rng.permutation(others.size)
    donors = others[perm[:cf]]  # random order: donor j goes to host j
    injected = np.sort(others[perm[cf:]])
    pick = rng.choice(own.size, size=cf + ce, replace=False)
    hosts_pos, edgy_pos = np.sort(pick[:cf]), np.sort(pick[cf:])
    clean_mask = np.ones(own.size, dtype=bool)
    clean_mask[pick] = False
    clean, hosts, edgy = own[clean_mask], own[hosts_pos], own[edgy_pos]
    link_nodes = np.concatenate([clean, injected, hosts, edgy])
    feat_nodes = np.concatenate([clean, injected, donors, edgy])
    n = link_nodes.size
    owner, loc = relabel.pairs(indptr, indices, link_nodes)
    planted = np.zeros(owner.size, dtype=bool)
    num_own = int(clean.size)
    if ce:
        first = n - ce
        u, v = _plant_edges(owner, loc, n, first, rng)
        gained = np.bincount(np.concatenate([u, v]), minlength=n)[first:]
        owner = np.concatenate([owner, u, v])
        loc = np.concatenate([loc, v, u])
        planted = np.concatenate([planted, np.ones(2 * u.size, dtype=bool)])
        failed = gained == 0
        if failed.any():  # no new edge: not corrupted; moved among the unchanged own nodes
            normal = np.concatenate([np.arange(num_own), first + np.flatnonzero(failed)])
            normal = normal[np.argsort(link_nodes[normal], kind="stable")]
            order = np.concatenate([normal, np.arange(num_own, first), first + np.flatnonzero(~failed)])
            inv = np.empty(n, dtype=np.int64)
            inv[order] = np.arange(n)
            owner, loc = inv[owner], inv[loc]
            link_nodes, feat_nodes = link_nodes[order], feat_nodes[order]
            num_own += int(failed.sum())
            ce -= int(failed.sum())
        c["edges"] = ce
        c["planted_edges"] = int(u.size)
    sub_indptr, sub_indices, planted = _csr(owner, loc, n, planted)
    return CorruptSubgraph(
        subgraph_id=p * corruptions + r, part=p, replica=r, nodes=feat_nodes, num_own=num_own,
        indptr=sub_indptr, indices=sub_indices, link_nodes=link_nodes, planted=planted,
        counts={k: int(c[k]) for k in (*weights, *(("planted_edges",) if "edges" in weights else ()))},
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
    (own-own, own-injected or injected-injected; planted edges not counted), averaged over the replicas (with ``--corruptions``
    R > 1, the share for each replica r = subgraphs of replica r, then the mean). None without edges.

    One loop over the subgraphs to collect each one's edges as global keys ``u * N + v`` (u < v);
    the union is one sort per replica (:func:`partitioning.graph.sorted_unique`: NumPy 2.4's ``np.unique`` took
    10 s of an 18 s build of a 1M-node store here).
    """
    if num_edges == 0 or not subgraphs:
        return None
    by_rep: dict[int, list[np.ndarray]] = {}
    for s in subgraphs:
        rows = np.repeat(np.arange(s.num_nodes, dtype=np.int64), np.diff(s.indptr))
        cols = s.indices.astype(np.int64)
        upper = rows < cols
        if s.planted is not None:  # edges planted by the ``edges`` kind are not source edges
            upper &= ~s.planted
        ids = s.nodes if s.link_nodes is None else s.link_nodes  # a feature-swapped row holds its host's links
        u, v = ids[rows[upper]], ids[cols[upper]]
        lo, hi = np.minimum(u, v), np.maximum(u, v)
        by_rep.setdefault(s.replica, []).append(lo * np.int64(num_nodes) + hi)
    shares = [sorted_unique(np.concatenate(keys)).size / num_edges for keys in by_rep.values()]
    return float(np.mean(shares))
