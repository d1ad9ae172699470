"""Worker shares: balanced by cost, disjoint, deterministic; every worker does the same steps."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch_geometric.data import Data

from gcad_dist.data.sharding import (
    ShardConfig,
    capped_whole,
    epoch_plan,
    large_steps,
    lpt_assign,
    seed_share,
    subgraph_cost,
    trained_links,
    worker_shares,
)
from gcad_dist.data.store_dataset import StoreDataset


def _counts(seed: int = 0, s: int = 40) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    nodes = rng.lognormal(5, 1.2, s).astype(np.int64) + 5  # heavy-tailed sizes
    edges = nodes * rng.integers(2, 30, s)
    return nodes, edges


def test_lpt_balances_by_cost_not_count() -> None:
    nodes, edges = _counts()
    costs = subgraph_cost(nodes, edges)
    ids = np.arange(nodes.size)
    bins = lpt_assign(costs, ids, 3)
    assert sorted(np.concatenate(bins).tolist()) == ids.tolist()  # a partition
    loads = np.array([costs[b].sum() for b in bins])
    # LPT guarantee: makespan <= 4/3 OPT; OPT >= max(mean load, largest item).
    assert loads.max() <= 4 / 3 * max(loads.mean(), costs.max()) + 1e-6
    # A count-based round-robin split is worse on this heavy-tailed input.
    rr = np.array([costs[ids[r::3]].sum() for r in range(3)])
    assert loads.max() <= rr.max()
    assert all((np.diff(b) > 0).all() for b in bins)  # sorted ids: contiguous reads
    assert [b.tolist() for b in lpt_assign(costs, ids, 3)] == [b.tolist() for b in bins]  # deterministic


def test_large_subgraphs_split_seeds_disjointly() -> None:
    n, world = 1001, 3
    shares = [seed_share(n, 5, r, world, seed=1) for r in range(world)]
    allv = np.concatenate(shares)
    assert np.array_equal(np.sort(allv), np.arange(n))
    assert max(s.size for s in shares) - min(s.size for s in shares) <= 1
    assert large_steps(n, world, 100) == 4  # ceil(334 / 100)


def test_epoch_plans_line_up_across_workers() -> None:
    nodes, edges = _counts(1)
    nodes[[3, 17]] = [5000, 7000]  # two large subgraphs
    cfg = ShardConfig(sample_threshold=4000, batch_cost=3000, batch_size=500, seed=2)
    world = 3
    shares, large = worker_shares(nodes, edges, world, cfg)
    assert large.tolist() == [3, 17]
    for epoch in range(2):
        plans = [epoch_plan(nodes, edges, r, world, epoch, cfg) for r in range(world)]
        assert len({len(p) for p in plans}) == 1
        for pos in range(len(plans[0])):
            kinds = {p.steps[pos].kind for p in plans}
            assert len(kinds) == 1
            if plans[0].steps[pos].kind == "seeds":
                assert len({int(p.steps[pos].subgraphs[0]) for p in plans}) == 1
        for r, p in enumerate(plans):
            used = np.unique(np.concatenate([s.subgraphs for s in p.steps if s.kind == "graphs"]))
            assert set(used.tolist()) == set(shares[r].tolist())  # each worker reads only its share
        seeds_steps = sum(s.kind == "seeds" for s in plans[0].steps)
        assert seeds_steps == large_steps(5000, world, 500) + large_steps(7000, world, 500)
    p0 = epoch_plan(nodes, edges, 0, world, 0, cfg)
    p1 = epoch_plan(nodes, edges, 0, world, 1, cfg)
    assert [s.kind for s in p0.steps] != [s.kind for s in p1.steps] or any(
        not np.array_equal(a.subgraphs, b.subgraphs) for a, b in zip(p0.steps, p1.steps)
    )  # epochs differ in order or composition


class _FakeReader:
    """Stands in for StoreReader: random subgraphs with the counts it reports."""

    def __init__(self, nodes: list[int]) -> None:
        self.datas = []
        g = torch.Generator().manual_seed(0)
        for n in nodes:
            src = torch.randint(0, n, (3 * n,), generator=g)
            dst = torch.randint(0, n, (3 * n,), generator=g)
            ei = torch.stack([torch.cat([src, dst]), torch.cat([dst, src])])
            self.datas.append(Data(x=torch.randn(n, 4, generator=g), edge_index=ei,
                                   y=(torch.rand(n, generator=g) < 0.15).long(), num_nodes=n))
        self.node_counts = np.array(nodes, dtype=np.int64)
        self.edge_counts = np.array([d.edge_index.size(1) for d in self.datas], dtype=np.int64)
        self.reads = 0

    def get(self, i: int) -> Data:
        self.reads += 1
        return self.datas[i].clone()


def test_store_dataset_steps_and_cache() -> None:
    reader = _FakeReader([30, 40, 50, 20, 400, 35])
    cfg = ShardConfig(sample_threshold=100, batch_cost=150, batch_size=64, seed=0)
    ds = [StoreDataset(reader, r, 2, cfg, fanouts=[3, 2], backend="builtin", prefetch=1) for r in range(2)]
    n_steps = ds[0].steps_per_epoch()
    assert n_steps == ds[1].steps_per_epoch()
    batches = list(ds[0].iter_epoch(0))
    assert len(batches) == n_steps
    seeds = [b for b in batches if b.step.kind == "seeds"]
    assert len(seeds) == large_steps(400, 2, 64)
    for b in seeds:
        assert b.shared and b.key == 4
        assert int(b.context_mask.sum()) == b.num_seeds <= 64
        assert b.context_mask[: b.num_seeds].all()
    for b in batches:
        if b.step.kind == "graphs":
            assert not b.shared and b.context_mask is None
            assert b.num_graphs == len(b.step.subgraphs)
            assert b.x.size(0) == sum(reader.node_counts[i] for i in b.step.subgraphs)
    reads = reader.reads
    again = list(ds[0].iter_epoch(1))
    assert len(again) == n_steps and reader.reads == reads  # second epoch: all from the cache
    tail = list(ds[0].iter_epoch(1, start=n_steps - 2))  # resume mid-epoch
    assert [b.step.kind for b in tail] == [b.step.kind for b in again[-2:]]


def test_store_dataset_samples_on_the_gpu_with_the_builtin_sampler_only() -> None:
    reader = _FakeReader([400])
    cfg = ShardConfig(sample_threshold=100, batch_cost=150, batch_size=64, seed=0)
    with pytest.raises(ValueError, match="samples on the CPU only"):
        StoreDataset(reader, 0, 1, cfg, fanouts=[3, 2], backend="torch-sparse", device="cuda")
    assert StoreDataset(reader, 0, 1, cfg, backend="auto", device="cuda").backend == "builtin"


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_store_dataset_minibatches_sampled_on_the_gpu() -> None:
    """device=cuda: the seeds steps come out on the GPU, with the same shapes of plan as on the CPU."""
    reader = _FakeReader([30, 400, 20])
    cfg = ShardConfig(sample_threshold=100, batch_cost=150, batch_size=64, seed=0)
    cpu = list(StoreDataset(reader, 0, 1, cfg, fanouts=[3, 2], backend="builtin").iter_epoch(0))
    gpu = list(StoreDataset(reader, 0, 1, cfg, fanouts=[3, 2], backend="builtin", device="cuda").iter_epoch(0))
    assert [b.step.kind for b in gpu] == [b.step.kind for b in cpu]
    for b, c in zip(gpu, cpu):
        if b.step.kind != "seeds":
            continue
        assert b.x.is_cuda and b.edge_index.is_cuda and b.context_mask.is_cuda
        assert b.num_seeds == c.num_seeds and int(b.context_mask.sum()) == b.num_seeds
        assert int(b.edge_index.max()) < b.x.size(0) and b.x.size(1) == 4


def test_side_stream_is_a_no_op_on_the_cpu() -> None:
    from gcad_dist.data.cuda_handoff import SideStream

    side = SideStream("cpu")
    item = {"x": torch.ones(3)}
    assert not side.enabled
    with side.context():
        assert side.receive(side.send(item)) is item


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_side_stream_batches_equal_the_default_streams(monkeypatch: pytest.MonkeyPatch) -> None:
    """GPU sampling in the prefetch thread on its own CUDA stream gives the same batches as on the default stream,
    and the consumer may free and reuse them at once (record_stream)."""
    reader = _FakeReader([30, 400, 20])
    cfg = ShardConfig(sample_threshold=100, batch_cost=150, batch_size=64, seed=0)

    def epoch(side: str) -> list:
        monkeypatch.setenv("GCAD_SIDE_STREAM", side)
        ds = StoreDataset(reader, 0, 1, cfg, fanouts=[3, 2], backend="builtin", device="cuda", prefetch=2)
        out = []
        for b in ds.iter_epoch(0):
            out.append([t.cpu() for t in b.tensors()])
            torch.cuda.synchronize()
        return out

    on, off = epoch("1"), epoch("0")
    assert len(on) == len(off)
    for a, b in zip(on, off):
        assert len(a) == len(b) and all(torch.equal(s, t) for s, t in zip(a, b))


def test_trained_links_counts_a_capped_dense_subgraph_at_most_nodes_times_cap() -> None:
    """Only a subgraph trained whole (at most sample_threshold nodes) with more than dense_links links is capped, and
    it costs at most nodes x max_degree of its links; without a cap every link counts."""
    nodes = np.array([1000, 1000, 1000, 5000])
    links = np.array([900_000, 40_000, 10_000, 900_000])  # dense, dense but under the cap's bound, sparse, sampled
    cfg = ShardConfig(sample_threshold=2000, max_degree=64, dense_links=20_000)
    assert trained_links(nodes, links, cfg).tolist() == [64_000, 40_000, 10_000, 900_000]
    assert trained_links(nodes, links, ShardConfig(sample_threshold=2000, dense_links=20_000)).tolist() == links.tolist()
    loose = ShardConfig(sample_threshold=2000, max_degree=64, dense_links=10**9)
    assert trained_links(nodes, links, loose).tolist() == links.tolist()
    # the same predicate says which subgraphs are capped (pretrain's log counts them)
    assert capped_whole(nodes, links, cfg).tolist() == [True, True, False, False]
    assert not capped_whole(nodes, links, ShardConfig(sample_threshold=2000, dense_links=20_000)).any()


def test_a_capped_dense_store_gets_the_epoch_of_any_whole_graph_store() -> None:
    """One dense subgraph: uncapped, a pass is as many whole-graph steps as its links fill batches; capped, the pass
    costs the capped links, and the epoch falls back to --min-steps-per-epoch's passes."""
    nodes, links = np.array([12_000]), np.array([8_356_276])
    plain = ShardConfig(min_steps=100)
    capped = ShardConfig(min_steps=100, max_degree=64, dense_links=2_000_000)
    p0, p1 = epoch_plan(nodes, links, 0, 1, 0, plain), epoch_plan(nodes, links, 0, 1, 0, capped)
    assert (len(p0), p0.passes) == (168, 2)  # ceil((12k + 4.18M) / 50k) = 84 steps a pass
    assert (len(p1), p1.passes) == (104, 13)  # ceil((12k + 384k) / 50k) = 8 steps a pass
    assert all(s.kind == "graphs" and s.subgraphs.tolist() == [0] for s in p1.steps)
