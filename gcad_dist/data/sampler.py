"""Uniform multi-hop neighbour sampling (without replacement) over a CSR graph.

Three interchangeable backends, same inputs and outputs:

* ``"pyg-lib"``: ``pyg_lib.sampler.neighbor_sample`` (C++; CPU), used when ``pyg_lib`` imports.
* ``"torch-sparse"``: ``torch.ops.torch_sparse.neighbor_sample`` (C++; CPU), used when ``torch_sparse`` imports.
  NOTE: torch-sparse <= 0.6.18 draws Floyd's index from ``[0, j)`` instead of ``[0, j]``, so for
  ``deg > fanout`` its sample is slightly biased (the last neighbour of a row is under-sampled; with
  fanout 1 it is never drawn). Upstream: rusty1s/pytorch_sparse#385 (fix proposed in #386, not merged).
* ``"builtin"``: plain vectorised torch (no Python loop over nodes or edges; one loop over hops and one
  over the fan-out slots), so it also runs on CUDA tensors. Exact uniform k-subsets via a vectorised
  Robert Floyd algorithm; relabelling through an N-sized scratch map instead of a hash table.

Conventions (PyG ``NeighborLoader``): ``n_id`` holds the global ids of all sampled nodes, the seeds first,
then the nodes first reached at hop 1, hop 2, ... (each node once). ``edge_index`` is in local ids with
row 0 = sampled neighbour (source) and row 1 = the node it was sampled for (target), i.e. PyG's
``source_to_target`` flow: messages go from the neighbours to the seeds. Row ``i`` of the CSR
(``col[rowptr[i]:rowptr[i+1]]``) lists the neighbours of node ``i`` (for our symmetric graphs the direction
does not matter).
"""

from __future__ import annotations

import contextlib
import importlib.util
import logging
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

import torch
from torch import Tensor

log = logging.getLogger(__name__)

BACKENDS = ("pyg-lib", "torch-sparse", "builtin")


@dataclass
class SampledSubgraph:
    """One sampled computation graph.

    Attributes:
        n_id: int64 [n] global ids of the sampled nodes, seeds first, unique.
        edge_index: int64 [2, E] local ids; row 0 = neighbour (source), row 1 = target.
        batch_size: number of seeds (``n_id[:batch_size]`` are the seeds).
        e_id: int64 [E] position in ``col`` of each sampled edge (to fetch edge features), or None.
        num_sampled_nodes: nodes added per hop, starting with the seeds (length ``hops + 1``).
        num_sampled_edges: edges sampled per hop (length ``hops``).
    """

    n_id: Tensor
    edge_index: Tensor
    batch_size: int
    e_id: Tensor | None = None
    num_sampled_nodes: list[int] = field(default_factory=list)
    num_sampled_edges: list[int] = field(default_factory=list)

    @property
    def num_nodes(self) -> int:
        return int(self.n_id.numel())


def _importable(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def _load_pyg_lib():
    """``pyg_lib.sampler.neighbor_sample`` or None (missing or broken install)."""
    if not _importable("pyg_lib"):
        return None
    try:
        from pyg_lib.sampler import neighbor_sample  # type: ignore[import-not-found]
    except Exception as exc:  # noqa: BLE001 - a broken binary must not break the import of this module
        log.debug("pyg-lib present but unusable: %s", exc)
        return None
    return neighbor_sample


def _load_torch_sparse():
    """``torch.ops.torch_sparse.neighbor_sample`` or None."""
    if not _importable("torch_sparse"):
        return None
    try:
        import torch_sparse  # type: ignore[import-not-found]  # noqa: F401 - registers the ops

        return torch.ops.torch_sparse.neighbor_sample
    except Exception as exc:  # noqa: BLE001
        log.debug("torch-sparse present but unusable: %s", exc)
        return None


_AVAILABLE: list[str] | None = None


def available_backends() -> list[str]:
    """Backends usable in this environment, in preference order (``"builtin"`` always last)."""
    global _AVAILABLE
    if _AVAILABLE is None:
        found = []
        if _load_pyg_lib() is not None:
            found.append("pyg-lib")
        if _load_torch_sparse() is not None:
            found.append("torch-sparse")
        found.append("builtin")
        _AVAILABLE = found
    return list(_AVAILABLE)


def resolve_backend(backend: str = "auto") -> str:
    """Map ``"auto"`` to the preferred available backend; validate an explicit choice."""
    avail = available_backends()
    if backend == "auto":
        return avail[0]
    if backend not in BACKENDS:
        raise ValueError(f"unknown sampling backend {backend!r}; choose from {', '.join(('auto',) + BACKENDS)}")
    if backend not in avail:
        raise ValueError(f"sampling backend {backend!r} is not installed (available: {', '.join(avail)})")
    return backend


def _check_fanouts(fanouts: Sequence[int]) -> list[int]:
    out = [int(k) for k in fanouts]
    if any(k < -1 for k in out):
        raise ValueError(f"fanouts must be >= 0 or -1 (all neighbours), got {out}")
    return out


@contextlib.contextmanager
def _seeded_global_rng(generator: torch.Generator | None) -> Iterator[None]:
    """Seed torch's default CPU RNG from ``generator`` for C++ samplers that draw from it; restore after."""
    if generator is None:
        yield
        return
    seed = int(torch.randint(0, 2**62, (1,), generator=generator, device=generator.device).item())
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        yield


# --------------------------------------------------------------------------------------------------- builtin

_TLS = threading.local()


def _scratch_map(num_nodes: int, device: torch.device) -> Tensor:
    """A per-thread, per-device int64 map of length >= num_nodes, all -1 (callers restore that)."""
    cache: dict = getattr(_TLS, "maps", None) or {}
    _TLS.maps = cache
    buf = cache.get(device)
    if buf is None or buf.numel() < num_nodes:
        buf = torch.full((max(num_nodes, 1),), -1, dtype=torch.long, device=device)
        cache[device] = buf
    return buf[:num_nodes]


def _floyd_positions(deg: Tensor, k: int, generator: torch.Generator | None) -> Tensor:
    """Uniform random k-subsets of ``range(d)`` for every row (all ``d > k``): int64 [M, k] positions.

    Robert Floyd's algorithm, vectorised over rows: for slot s, j = d - k + s, draw t in [0, j]; if t was
    already taken, take j instead. Exact (every k-subset equally likely); loops over the k slots only.
    """
    m = deg.numel()
    out = torch.empty((m, k), dtype=torch.long, device=deg.device)
    u = torch.rand((k, m), generator=generator, dtype=torch.float64, device=deg.device)
    j = deg - k  # >= 1; becomes d - k + s in slot s
    for s in range(k):
        t = (u[s] * (j + 1)).long()
        torch.minimum(t, j, out=t)  # guard the (measure-zero) rounding up to j + 1
        if s:
            taken = (out[:, :s] == t.unsqueeze(1)).any(dim=1)
            t = torch.where(taken, j, t)
        out[:, s] = t
        j = j + 1
    return out


def _nonzero(mask: Tensor) -> Tensor:
    return mask.reshape(-1).nonzero().view(-1)


def _sample_hop(
    rowptr: Tensor, frontier: Tensor, k: int, generator: torch.Generator | None
) -> tuple[Tensor, Tensor]:
    """Sample in-edges of ``frontier`` nodes: (index into frontier of each edge's target, edge id in col)."""
    device = rowptr.device
    start = rowptr.index_select(0, frontier)
    deg = rowptr.index_select(0, frontier + 1) - start
    m = frontier.numel()
    if k < 0:  # all neighbours: expand every row (gather_rows)
        owner = torch.repeat_interleave(torch.arange(m, device=device), deg)
        shift = start - (torch.cumsum(deg, 0) - deg)  # row start minus its output offset
        eid = torch.arange(owner.numel(), device=device) + shift.index_select(0, owner)
        return owner, eid
    if k == 0 or m == 0:
        empty = torch.empty(0, dtype=torch.long, device=device)
        return empty, empty
    slots = torch.arange(k, device=device)
    pos = slots.expand(m, k).clone()  # rows with deg <= k take positions 0..deg-1
    big = _nonzero(deg > k)
    if big.numel():
        pos.index_copy_(0, big, _floyd_positions(deg.index_select(0, big), k, generator))
    pos += start.unsqueeze(1)  # edge ids
    flat = _nonzero(slots.unsqueeze(0) < deg.unsqueeze(1))  # valid (row, slot) pairs, row-major
    eid = pos.view(-1).index_select(0, flat)
    owner = torch.repeat_interleave(torch.arange(m, device=device), deg.clamp(max=k), output_size=eid.numel())
    return owner, eid


def _sample_builtin(
    rowptr: Tensor, col: Tensor, seeds: Tensor, fanouts: list[int], generator: torch.Generator | None
) -> SampledSubgraph:
    device = rowptr.device
    num_nodes = rowptr.numel() - 1
    loc = _scratch_map(num_nodes, device)  # global id -> local id, -1 = not sampled yet
    b = seeds.numel()
    parts, rows, cols, eids = [seeds], [], [], []
    n_nodes, n_edges = [b], []
    try:
        ar = torch.arange(b, device=device)
        loc.index_copy_(0, seeds, ar)
        if b and not bool((loc.index_select(0, seeds) == ar).all()):
            raise ValueError("seeds must be unique")
        frontier, frontier_start, total = seeds, 0, b
        for k in fanouts:
            owner, eid = _sample_hop(rowptr, frontier, k, generator)
            nbr = col.index_select(0, eid)
            local = loc.index_select(0, nbr)
            new = nbr.index_select(0, _nonzero(local < 0))
            if new.numel():
                # Deduplicate, keeping first appearances in edge order (deterministic, also on GPU).
                pos = torch.arange(new.numel(), device=device)
                loc.index_fill_(0, new, new.numel())
                loc.scatter_reduce_(0, new, pos, reduce="amin")
                uniq = new.index_select(0, _nonzero(loc.index_select(0, new) == pos))
                loc.index_copy_(0, uniq, torch.arange(total, total + uniq.numel(), device=device))
                local = loc.index_select(0, nbr)
            else:
                uniq = new
            rows.append(local)
            cols.append(owner + frontier_start)
            eids.append(eid)
            parts.append(uniq)
            n_nodes.append(int(uniq.numel()))
            n_edges.append(int(eid.numel()))
            frontier, frontier_start, total = uniq, total, total + uniq.numel()
    finally:
        for p in parts:  # restore the scratch map for the next call (loop over hops)
            loc.index_fill_(0, p, -1)
    n_id = torch.cat(parts)
    empty = torch.empty(0, dtype=torch.long, device=device)
    edge_index = torch.stack([torch.cat(rows) if rows else empty, torch.cat(cols) if cols else empty])
    e_id = torch.cat(eids) if eids else empty
    return SampledSubgraph(n_id, edge_index, b, e_id, n_nodes, n_edges)


# ------------------------------------------------------------------------------------------ C++ backends


def _sample_torch_sparse(
    rowptr: Tensor, col: Tensor, seeds: Tensor, fanouts: list[int], generator: torch.Generator | None
) -> SampledSubgraph:
    op = _load_torch_sparse()
    if op is None:
        raise ValueError("sampling backend 'torch-sparse' is not installed")
    device = rowptr.device
    rp, c, s = rowptr.cpu(), col.cpu(), seeds.cpu()
    with _seeded_global_rng(generator):
        # (colptr, row, input_node, num_neighbors, replace, directed) -> (node, row, col, edge);
        # row = sampled neighbour (local), col = node it was sampled for (local).
        node, row, colo, edge = op(rp, c, s, fanouts, False, True)
    nn, ne = _hop_counts(row, colo, s.numel(), len(fanouts))
    return _from_cpp(node, row, colo, edge, s.numel(), device, nn, ne)


def _hop_counts(row: Tensor, col: Tensor, b: int, hops: int) -> tuple[list[int], list[int]]:
    """Per-hop node and edge counts of a sample whose edges come grouped by hop with targets non-decreasing."""
    n_nodes, n_edges = [b], []
    end, e0 = b, 0
    for _ in range(hops):
        e1 = int(torch.searchsorted(col, torch.tensor(end, dtype=col.dtype)))
        new_end = max(end, int(row[e0:e1].max()) + 1) if e1 > e0 else end
        n_nodes.append(new_end - end)
        n_edges.append(e1 - e0)
        end, e0 = new_end, e1
    return n_nodes, n_edges


def _sample_pyg_lib(
    rowptr: Tensor, col: Tensor, seeds: Tensor, fanouts: list[int], generator: torch.Generator | None
) -> SampledSubgraph:
    fn = _load_pyg_lib()
    if fn is None:
        raise ValueError("sampling backend 'pyg-lib' is not installed")
    device = rowptr.device
    rp, c, s = rowptr.cpu(), col.cpu(), seeds.cpu().to(rowptr.dtype)
    with _seeded_global_rng(generator):
        # csc=True: (rowptr, col) read as (colptr, row), exactly as PyG's NeighborSampler passes it,
        # so row = sampled neighbour (source) and col = target, both local.
        out = fn(rp, c, s, fanouts, csc=True, replace=False, directed=True, disjoint=False, return_edge_id=True)
    row, colo, node, edge = out[:4]
    nn = [int(v) for v in out[4]] if len(out) >= 6 else None
    ne = [int(v) for v in out[5]] if len(out) >= 6 else None
    return _from_cpp(node, row, colo, edge, s.numel(), device, nn, ne)


def _from_cpp(
    node: Tensor,
    row: Tensor,
    col: Tensor,
    edge: Tensor | None,
    b: int,
    device: torch.device,
    n_nodes: list[int] | None,
    n_edges: list[int] | None,
) -> SampledSubgraph:
    edge_index = torch.stack([row.long(), col.long()]).to(device)
    e_id = edge.long().to(device) if edge is not None else None
    return SampledSubgraph(node.long().to(device), edge_index, b, e_id, n_nodes or [], n_edges or [])


_IMPL = {"builtin": _sample_builtin, "torch-sparse": _sample_torch_sparse, "pyg-lib": _sample_pyg_lib}


def sample_neighbors(
    rowptr: Tensor,
    col: Tensor,
    seeds: Tensor,
    fanouts: Sequence[int],
    backend: str = "auto",
    generator: torch.Generator | None = None,
) -> SampledSubgraph:
    """Sample a ``len(fanouts)``-hop computation graph around ``seeds``.

    Args:
        rowptr, col: int64 CSR (CPU or CUDA); row i lists the neighbours of node i.
        seeds: int64 [B] unique global seed ids (same device).
        fanouts: neighbours to draw per node at each hop, uniformly without replacement
            (all of them when ``deg <= k``); ``-1`` takes every neighbour.
        backend: ``"auto"`` (first of :func:`available_backends`), ``"pyg-lib"``, ``"torch-sparse"``
            or ``"builtin"``. The C++ backends run on CPU (CUDA inputs are copied there and back).
        generator: makes the draw reproducible. The builtin backend draws from it directly (it must live
            on the tensors' device); the C++ backends draw from torch's default CPU RNG, which is seeded
            from ``generator`` for the call and then restored.

    Returns:
        :class:`SampledSubgraph` with ``n_id`` (seeds first), local ``edge_index`` (row 0 = neighbour,
        row 1 = target) and ``batch_size``.
    """
    name = resolve_backend(backend)
    ks = _check_fanouts(fanouts)
    if rowptr.dim() != 1 or col.dim() != 1:
        raise ValueError("rowptr and col must be 1-D")
    seeds = seeds.reshape(-1).to(device=rowptr.device, dtype=torch.long)
    if name != "builtin" and torch.unique(seeds).numel() != seeds.numel():  # builtin checks on its own
        raise ValueError("seeds must be unique")
    return _IMPL[name](rowptr.long(), col.long(), seeds, ks, generator)
