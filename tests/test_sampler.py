"""Neighbour sampling: every backend must produce valid, fan-out-respecting, uniform samples."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch_geometric.data import Data

from gcad_dist.data.neighbor_loader import SubgraphNeighborLoader, csr_by_target
from gcad_dist.data.sampler import SampledSubgraph, _hop_counts, available_backends, sample_neighbors
from partitioning.graph import csr_from_edges

BACKENDS = available_backends()
KNOWN_BIASED = {"torch-sparse"}  # Floyd draws from [0, j) instead of [0, j]: rusty1s/pytorch_sparse#385


def _graph(n: int = 300, m: int = 1200, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Random undirected graph with a hub (node 0, ~120 neighbours) and isolated nodes (the last 10)."""
    rng = np.random.default_rng(seed)
    src = rng.integers(0, n - 10, m)
    dst = rng.integers(0, n - 10, m)
    hub = rng.choice(np.arange(1, n - 10), 120, replace=False)
    src = np.concatenate([src, np.zeros(120, np.int64)])
    dst = np.concatenate([dst, hub])
    indptr, indices = csr_from_edges(src, dst, n)
    return torch.from_numpy(indptr), torch.from_numpy(indices)


def _hop_ranges(sub: SampledSubgraph, hops: int) -> list[tuple[int, int, int, int]]:
    """(first target, end target, first edge, end edge) per hop, from the per-hop counts or edge order."""
    out = []
    row, col = sub.edge_index
    start, end, e0 = 0, sub.batch_size, 0
    for h in range(hops):
        if sub.num_sampled_nodes and sub.num_sampled_edges:
            e1 = e0 + sub.num_sampled_edges[h]
            new_end = end + sub.num_sampled_nodes[h + 1]
        else:  # edges come grouped by hop, targets non-decreasing
            e1 = int(torch.searchsorted(col, torch.tensor(end)))
            new_end = max(end, int(row[e0:e1].max()) + 1) if e1 > e0 else end
        out.append((start, end, e0, e1))
        start, end, e0 = end, new_end, e1
    assert e0 == col.numel()
    assert end == sub.n_id.numel()
    return out


def _check_valid(rowptr, col, seeds, fanouts, sub: SampledSubgraph) -> None:
    n = rowptr.numel() - 1
    n_id, (src, dst) = sub.n_id.cpu(), sub.edge_index.cpu()
    rowptr, col = rowptr.cpu(), col.cpu()
    # n_id unique, seeds first
    assert sub.batch_size == seeds.numel()
    assert torch.equal(n_id[: seeds.numel()], seeds.cpu())
    assert torch.unique(n_id).numel() == n_id.numel()
    # every sampled edge exists: (target, neighbour) is an entry of the CSR
    deg = rowptr[1:] - rowptr[:-1]
    csr_keys = torch.repeat_interleave(torch.arange(n), deg) * n + col
    keys = n_id[dst] * n + n_id[src]
    assert bool(torch.isin(keys, csr_keys).all())
    # no duplicate edges
    assert torch.unique(keys).numel() == keys.numel()
    # fan-out: each frontier node has min(deg, k) in-edges at its hop, and only at its hop
    for (t0, t1, e0, e1), k in zip(_hop_ranges(sub, len(fanouts)), fanouts):
        hop_dst = dst[e0:e1]
        assert bool(((hop_dst >= t0) & (hop_dst < t1)).all())
        got = torch.bincount(hop_dst - t0, minlength=t1 - t0)
        d = deg[n_id[t0:t1]]
        want = d if k < 0 else torch.clamp(d, max=k)
        assert torch.equal(got, want)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("fanouts", [[5, 3], [2], [-1, 4], [10, 5, 2], [0, 3]])
def test_sample_is_valid(backend: str, fanouts: list[int]) -> None:
    rowptr, col = _graph()
    seeds = torch.tensor([0, 7, 299, 42, 3, 295, 150])  # hub, ordinary nodes, isolated (>= 290)
    g = torch.Generator().manual_seed(1)
    sub = sample_neighbors(rowptr, col, seeds, fanouts, backend=backend, generator=g)
    _check_valid(rowptr, col, seeds, fanouts, sub)
    # per-hop counts are reported, and agree with the hop structure of the edge list
    assert len(sub.num_sampled_nodes) == len(fanouts) + 1 and sum(sub.num_sampled_nodes) == sub.num_nodes
    assert sum(sub.num_sampled_edges) == sub.edge_index.shape[1]
    counts = _hop_counts(sub.edge_index[0], sub.edge_index[1], seeds.numel(), len(fanouts))
    assert counts == (sub.num_sampled_nodes, sub.num_sampled_edges)
    if sub.e_id is not None:  # e_id points at the sampled neighbour inside the target's row
        src, dst = sub.edge_index
        assert torch.equal(col[sub.e_id], sub.n_id[src])
        tgt = sub.n_id[dst]
        assert bool(((sub.e_id >= rowptr[tgt]) & (sub.e_id < rowptr[tgt + 1])).all())


@pytest.mark.parametrize("backend", BACKENDS)
def test_isolated_and_empty_seeds(backend: str) -> None:
    rowptr, col = _graph()
    iso = torch.tensor([291, 295, 299])
    sub = sample_neighbors(rowptr, col, iso, [5, 5], backend=backend)
    assert torch.equal(sub.n_id, iso) and sub.edge_index.shape == (2, 0)
    sub = sample_neighbors(rowptr, col, torch.empty(0, dtype=torch.long), [5], backend=backend)
    assert sub.n_id.numel() == 0 and sub.edge_index.shape == (2, 0)


@pytest.mark.parametrize("backend", BACKENDS)
def test_deterministic_given_generator(backend: str) -> None:
    rowptr, col = _graph()
    seeds = torch.arange(0, 60, 3)
    a = sample_neighbors(rowptr, col, seeds, [4, 3], backend, torch.Generator().manual_seed(5))
    b = sample_neighbors(rowptr, col, seeds, [4, 3], backend, torch.Generator().manual_seed(5))
    c = sample_neighbors(rowptr, col, seeds, [4, 3], backend, torch.Generator().manual_seed(6))
    assert torch.equal(a.n_id, b.n_id) and torch.equal(a.edge_index, b.edge_index)
    assert not (a.n_id.numel() == c.n_id.numel() and torch.equal(a.n_id, c.n_id))


def _stars(num_stars: int, leaves: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``num_stars`` disjoint stars; centre r has leaves ``num_stars + r * leaves + j`` (j = row position)."""
    centres = np.repeat(np.arange(num_stars), leaves)
    leaf = num_stars + np.arange(num_stars * leaves)
    indptr, indices = csr_from_edges(centres, leaf, num_stars * (leaves + 1))
    return torch.from_numpy(indptr), torch.from_numpy(indices), torch.arange(num_stars)


def _leaf_positions(sub: SampledSubgraph, num_stars: int, leaves: int) -> tuple[torch.Tensor, torch.Tensor]:
    src, dst = sub.edge_index
    star = sub.n_id[dst]
    pos = sub.n_id[src] - num_stars - star * leaves
    return star, pos


def _uniform_test(backend: str) -> tuple[float, float]:
    """Chi-square statistics of (leaf marginals, 2-subset frequencies) on many stars, fixed seed."""
    num_stars, leaves, k = 10_000, 10, 3
    rowptr, col, seeds = _stars(num_stars, leaves)
    sub = sample_neighbors(rowptr, col, seeds, [k], backend, torch.Generator().manual_seed(0))
    star, pos = _leaf_positions(sub, num_stars, leaves)
    assert torch.equal(torch.bincount(star, minlength=num_stars), torch.full((num_stars,), k))
    obs = torch.bincount(pos, minlength=leaves).double()
    exp = num_stars * k / leaves
    chi_marg = float(((obs - exp) ** 2 / exp).sum())
    # Joint: k = 2 of 4 leaves -> 6 equally likely subsets.
    num_stars2, leaves2 = 12_000, 4
    rowptr, col, seeds = _stars(num_stars2, leaves2)
    sub = sample_neighbors(rowptr, col, seeds, [2], backend, torch.Generator().manual_seed(1))
    star, pos = _leaf_positions(sub, num_stars2, leaves2)
    code = torch.zeros(num_stars2, dtype=torch.long).index_add_(0, star, 1 << pos)  # bitmask of the pair
    obs2 = torch.bincount(code, minlength=16)[torch.tensor([3, 5, 6, 9, 10, 12])].double()
    assert int(obs2.sum()) == num_stars2
    exp2 = num_stars2 / 6
    chi_joint = float(((obs2 - exp2) ** 2 / exp2).sum())
    return chi_marg, chi_joint


@pytest.mark.parametrize("backend", BACKENDS)
def test_uniform_without_replacement(backend: str) -> None:
    chi_marg, chi_joint = _uniform_test(backend)
    # 99.99% quantiles: chi2(9) ~ 33.7, chi2(5) ~ 25.7. Fixed seeds, so the outcome is deterministic.
    if backend in KNOWN_BIASED:
        pytest.xfail(f"{backend} is biased upstream (chi2 marginal {chi_marg:.0f}, joint {chi_joint:.0f})")
    assert chi_marg < 33.7, chi_marg
    assert chi_joint < 25.7, chi_joint


def _global_edges(sub: SampledSubgraph) -> set[tuple[int, int]]:
    src, dst = sub.n_id[sub.edge_index]
    return set(zip(src.tolist(), dst.tolist()))


@pytest.mark.skipif(len(BACKENDS) < 2, reason="only one sampling backend installed")
def test_backends_agree() -> None:
    rowptr, col = _graph()
    seeds = torch.tensor([5, 0, 17, 290, 80])
    full = [sample_neighbors(rowptr, col, seeds, [-1, -1], b) for b in BACKENDS]
    for other in full[1:]:  # fanout -1: the same edge sets and node sets
        assert _global_edges(other) == _global_edges(full[0])
        assert set(other.n_id.tolist()) == set(full[0].n_id.tolist())
    # first-hop edge counts are determined by the degrees alone
    counts = []
    for b in BACKENDS:
        sub = sample_neighbors(rowptr, col, seeds, [3, 2], b, torch.Generator().manual_seed(0))
        counts.append(int((sub.edge_index[1] < seeds.numel()).sum()))
    assert len(set(counts)) == 1


def test_take_all_matches_bfs() -> None:
    rowptr, col = _graph()
    seeds = torch.tensor([3, 9])
    sub = sample_neighbors(rowptr, col, seeds, [-1], "builtin")
    want = {(int(v), int(s)) for s in seeds for v in col[rowptr[s] : rowptr[s + 1]]}
    assert _global_edges(sub) == want


@pytest.mark.parametrize("backend", BACKENDS)
def test_rejects_duplicate_seeds(backend: str) -> None:
    rowptr, col = _graph()
    with pytest.raises(ValueError, match="unique"):
        sample_neighbors(rowptr, col, torch.tensor([1, 2, 1]), [2], backend)


def test_builtin_rejects_bad_input_and_recovers() -> None:
    rowptr, col = _graph()
    with pytest.raises(ValueError, match="unique"):
        sample_neighbors(rowptr, col, torch.tensor([1, 2, 1]), [2], "builtin")
    with pytest.raises(ValueError, match="fanouts"):
        sample_neighbors(rowptr, col, torch.tensor([1]), [-2], "builtin")
    with pytest.raises(ValueError, match="unknown sampling backend"):
        sample_neighbors(rowptr, col, torch.tensor([1]), [2], "nope")
    # the scratch map was restored: a following call still works and is valid
    sub = sample_neighbors(rowptr, col, torch.tensor([1, 2]), [3, 3], "builtin")
    _check_valid(rowptr, col, torch.tensor([1, 2]), [3, 3], sub)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_builtin_on_cuda() -> None:
    rowptr, col = _graph()
    dev = torch.device("cuda")
    seeds = torch.tensor([0, 7, 299, 42])
    g = torch.Generator(device=dev).manual_seed(0)
    sub = sample_neighbors(rowptr.to(dev), col.to(dev), seeds.to(dev), [5, 3], "builtin", g)
    assert sub.n_id.device.type == "cuda" and sub.edge_index.device.type == "cuda"
    _check_valid(rowptr, col, seeds, [5, 3], sub)
    rp, c, s = _stars(2000, 10)
    sub = sample_neighbors(rp.to(dev), c.to(dev), s.to(dev), [3], "builtin", g)
    star, pos = _leaf_positions(sub, 2000, 10)
    obs = torch.bincount(pos.cpu(), minlength=10).double()
    assert float(((obs - 600) ** 2 / 600).sum()) < 33.7


# ---------------------------------------------------------------------------------------------- loader


def _data(n: int = 300) -> Data:
    rowptr, col = _graph(n)
    deg = rowptr[1:] - rowptr[:-1]
    edge_index = torch.stack([col, torch.repeat_interleave(torch.arange(n), deg)])
    x = torch.randn(n, 8, generator=torch.Generator().manual_seed(0))
    y = (torch.arange(n) % 7 == 0).long()
    return Data(x=x, edge_index=edge_index, y=y, global_id=torch.arange(n) * 10 + 3, part=4)


def test_csr_by_target_roundtrip() -> None:
    data = _data()
    rowptr, col, perm = csr_by_target(data.edge_index, data.num_nodes)
    tgt = torch.repeat_interleave(torch.arange(data.num_nodes), rowptr[1:] - rowptr[:-1])
    assert torch.equal(data.edge_index[:, perm], torch.stack([col, tgt]))


@pytest.mark.parametrize("prefetch", [0, 2])
@pytest.mark.parametrize("backend", BACKENDS)
def test_loader_covers_seeds_once(backend: str, prefetch: int) -> None:
    data = _data()
    loader = SubgraphNeighborLoader(data, [4, 2], batch_size=64, backend=backend, prefetch=prefetch, seed=3)
    assert len(loader) == 5  # ceil(300 / 64)
    seen, sizes = [], []
    for batch in loader:
        b = batch.batch_size
        sizes.append(b)
        seen.append(batch.n_id[:b])
        assert torch.equal(batch.x, data.x[batch.n_id])
        assert torch.equal(batch.y, data.y[batch.n_id])
        assert torch.equal(batch.global_id, data.global_id[batch.n_id])
        assert batch.part == 4 and batch.num_nodes == batch.n_id.numel()
        src, dst = batch.edge_index
        assert bool((dst < batch.num_nodes).all()) and bool((src < batch.num_nodes).all())
        _check_valid(loader.rowptr, loader.col, batch.n_id[:b], [4, 2], _as_sub(batch))
    assert sizes == [64, 64, 64, 64, 44]
    assert torch.equal(torch.sort(torch.cat(seen)).values, torch.arange(300))


def _as_sub(batch: Data) -> SampledSubgraph:
    return SampledSubgraph(
        batch.n_id, batch.edge_index, batch.batch_size, batch.e_id, batch.num_sampled_nodes, batch.num_sampled_edges
    )


def test_loader_seed_subset_shuffle_and_reproducibility() -> None:
    data = _data()
    mask = torch.arange(300) % 3 == 0
    loader = SubgraphNeighborLoader(data, [3], batch_size=16, seeds=mask, seed=7, backend="builtin", prefetch=2)
    assert len(loader) == 7  # ceil(100 / 16)
    epoch0 = [b.n_id[: b.batch_size] for b in loader]
    epoch1 = [b.n_id[: b.batch_size] for b in loader]
    assert torch.equal(torch.sort(torch.cat(epoch0)).values, mask.nonzero().view(-1))
    assert not torch.equal(torch.cat(epoch0), torch.cat(epoch1))  # reshuffled each epoch
    again = SubgraphNeighborLoader(data, [3], batch_size=16, seeds=mask, seed=7, backend="builtin", prefetch=0)
    for a, b in zip(epoch0, (b.n_id[: b.batch_size] for b in again)):
        assert torch.equal(a, b)
    ordered = SubgraphNeighborLoader(data, [3], batch_size=16, seeds=torch.tensor([9, 3, 6]), shuffle=False)
    assert next(iter(ordered)).n_id[:3].tolist() == [3, 6, 9]


def test_loader_edge_attributes_follow_sampled_edges() -> None:
    data = _data()
    data.edge_attr = data.edge_index[0].float() * 1000 + data.edge_index[1].float()
    loader = SubgraphNeighborLoader(data, [5, 5], batch_size=50, backend="builtin", drop_last=True)
    assert len(loader) == 6
    for batch in loader:
        src, dst = batch.n_id[batch.edge_index]
        assert torch.equal(batch.edge_attr, src.float() * 1000 + dst.float())


def test_loader_early_stop_and_errors() -> None:
    data = _data()
    loader = SubgraphNeighborLoader(data, [3, 3], batch_size=8, prefetch=1)
    it = iter(loader)
    next(it)
    it.close()  # must not hang; a fresh epoch works
    assert sum(1 for _ in loader) == len(loader)
    with pytest.raises(ValueError):
        SubgraphNeighborLoader(data, [3], batch_size=0)
    with pytest.raises(ValueError):
        SubgraphNeighborLoader(data, [3], batch_size=4, seeds=torch.tensor([0, 300]))
