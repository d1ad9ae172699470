"""A whole graph split by target nodes among workers (gcad_dist.data.target_shard): the shares partition the nodes and
their in-links, and the workers' weighted gradients average to the one whole-graph step's gradient."""

from __future__ import annotations

import pytest
import torch

from gcad_dist.data.degree_cap import cap_dense_step
from gcad_dist.data.online_corruption import draw_member_swaps
from gcad_dist.data.target_shard import TargetShard, shard_for
from gcad_dist.model import GCCAD, GCCADConfig


def _graph(n: int = 203, e: int = 2500, f: int = 12, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    ei = torch.randint(0, n, (2, e), generator=g)
    return torch.randn(n, f, generator=g), ei


@pytest.mark.parametrize("world", [2, 3])
def test_shares_partition_the_targets_and_their_in_links(world: int) -> None:
    x, ei = _graph()
    n = x.size(0)
    shards = [TargetShard(ei, n, r, world, seed=4) for r in range(world)]
    mine = torch.stack([s.mine for s in shards])
    assert (mine.sum(0) == 1).all()  # every node in exactly one share
    sizes = mine.sum(1)
    assert int(sizes.max() - sizes.min()) <= 1
    assert sum(int(s.edge_index.size(1)) for s in shards) == ei.size(1)
    deg = torch.bincount(ei[1], minlength=n)
    for s in shards:
        assert s.mine[s.edge_index[1]].all()  # only the share's targets' in-links
        assert torch.equal(torch.bincount(s.edge_index[1], minlength=n)[s.mine], deg[s.mine])  # all of them
    joined = torch.cat([s.edge_index for s in shards], 1)
    key = lambda t: (t[0] * n + t[1]).sort().values  # noqa: E731
    assert torch.equal(key(joined), key(ei))
    # a fixed share: the same nodes on every call, other seeds another split
    assert torch.equal(TargetShard(ei, n, 0, world, seed=4).mine, shards[0].mine)
    assert not torch.equal(TargetShard(ei, n, 0, world, seed=5).mine, shards[0].mine)
    with pytest.raises(ValueError):
        TargetShard(ei, n, world, world)


def _grads(model: GCCAD, x: torch.Tensor, ei: torch.Tensor, y: torch.Tensor, swaps: tuple, mask, weight: float = 1.0):
    model.zero_grad(set_to_none=True)
    out = model(x, ei, member_swaps=swaps)
    (model.loss(out, y, mask=mask)["total"] * weight).backward()
    return [p.grad.clone() for p in model.parameters() if p.grad is not None]


@pytest.mark.parametrize("world", [2, 3])
def test_weighted_share_gradients_average_to_the_whole_step(world: int) -> None:
    """DDP's mean of the workers' gradients (each loss weighted by W * n_rank / n) is the whole-graph step's gradient;
    without the weights, unequal shares (203 nodes over 2 or 3 workers) move it."""
    torch.manual_seed(0)
    x, ei = _graph()
    n = x.size(0)
    model = GCCAD(GCCADConfig(in_dim=x.size(1), hidden=16, contrast="local", loss="logistic", tau=0.2, ensemble=3,
                              dropout=0.0)).train()
    y0 = torch.zeros(n, dtype=torch.long)
    y, pick, donor = draw_member_swaps(y0, None, 0.15, 3, torch.Generator().manual_seed(1))
    whole = _grads(model, x, ei, y, (pick, donor), None)
    parts, plain = [], []
    for r in range(world):
        s = TargetShard(ei, n, r, world)
        mask = s.loss_mask(None)
        parts.append(_grads(model, x, s.edge_index, y, (pick, donor), mask, s.weight(None, mask)))
        plain.append(_grads(model, x, s.edge_index, y, (pick, donor), mask))
    mean = [torch.stack(g).mean(0) for g in zip(*parts)]
    assert len(mean) == len(whole) and len(whole) >= 2
    for a, b in zip(mean, whole):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
    unweighted = [torch.stack(g).mean(0) for g in zip(*plain)]
    assert max(float((a - b).abs().max()) for a, b in zip(unweighted, whole)) > 1e-5


def test_weight_counts_the_masked_nodes() -> None:
    x, ei = _graph(n=10, e=40)
    s = TargetShard(ei, 10, 0, 2)
    assert s.weight(None, s.loss_mask(None)) == pytest.approx(1.0)
    mask = torch.zeros(10, dtype=torch.bool)
    mask[:4] = True
    own = s.loss_mask(mask)
    assert s.weight(mask, own) == pytest.approx(2 * int(own.sum()) / 4)


def test_the_cache_keeps_one_share_and_a_capped_draw_keeps_the_targets() -> None:
    x, ei = _graph(n=300, e=30_000)
    cache: dict = {}
    a = shard_for(cache, ei, 300, 1, 2, key=None)
    assert shard_for(cache, ei, 300, 1, 2, key=None) is a
    b = shard_for(cache, ei[:, :-1], 300, 1, 2, key=None)
    assert b is not a and len(cache) == 1
    capped = cap_dense_step(a.edge_index, 300, 16, 0)
    assert a.mine[capped[1]].all()  # a cap drawn on the share keeps to its targets
    assert int(capped.size(1)) < int(a.edge_index.size(1))
