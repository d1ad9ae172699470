"""The two-hop ball as the local contrast's context (``GCCADConfig.context_hops = 2``, ``pretrain --context-hops 2``)."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp
import torch
import torch.nn.functional as F
from torch_geometric.data import Data

from gcad_dist.model import GCCAD, GCCADConfig
from gcad_dist.model.ball import DEFAULT_FANOUT, sample_in_edges, two_hop_ball


def _graph(n: int = 150, e: int = 500, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    ei = torch.randint(0, n, (2, e), generator=g)
    return torch.cat([ei, ei.flip(0)], 1)


def context_ball(edge_index: torch.Tensor, num_nodes: int, fanout: int = DEFAULT_FANOUT,
                 generator: torch.Generator | None = None) -> torch.Tensor:
    """Every node's whole ball as edges (the reference that the model's chunked means are checked against)."""
    return two_hop_ball(edge_index, sample_in_edges(edge_index, num_nodes, fanout, generator), num_nodes)


def _pairs(ei: torch.Tensor) -> set[tuple[int, int]]:
    return set(zip(ei[0].tolist(), ei[1].tolist()))


def test_context_ball_is_every_node_within_two_hops_but_itself() -> None:
    n = 150
    ei = _graph(n)
    ball = context_ball(ei, n, fanout=-1)
    a = sp.csr_matrix((np.ones(ei.size(1)), (ei[1].numpy(), ei[0].numpy())), shape=(n, n))
    a.data[:] = 1.0
    b = (a + a @ a).tocsr()
    b.setdiag(0)
    b.eliminate_zeros()
    b = b.tocoo()
    assert _pairs(ball) == set(zip(b.col.tolist(), b.row.tolist()))
    assert ball.size(1) == len(_pairs(ball))  # each node once
    assert not (ball[0] == ball[1]).any()
    # a path 0 - 1 - 2 and an isolated node 3, by hand
    path = torch.tensor([[0, 1, 1, 2], [1, 0, 2, 1]])
    assert _pairs(context_ball(path, 4, fanout=-1)) == {(1, 0), (2, 0), (0, 1), (2, 1), (1, 2), (0, 2)}


def test_sample_in_edges_keeps_at_most_fanout_per_node() -> None:
    n = 150
    ei = _graph(n, e=900)
    s = sample_in_edges(ei, n, 3, torch.Generator().manual_seed(1))
    deg = torch.bincount(ei[1], minlength=n)
    assert torch.equal(torch.bincount(s[1], minlength=n), deg.clamp(max=3))
    assert _pairs(s) <= _pairs(ei)
    again = sample_in_edges(ei, n, 3, torch.Generator().manual_seed(1))
    assert torch.equal(s, again)
    other = sample_in_edges(ei, n, 3, torch.Generator().manual_seed(2))
    assert not torch.equal(s, other)
    assert sample_in_edges(ei, n, -1) is ei
    # the ball through a capped second hop: a subset of the exact ball that still holds every neighbour
    capped = context_ball(ei, n, fanout=2, generator=torch.Generator().manual_seed(0))
    assert _pairs(ei) - {(i, i) for i in range(n)} <= _pairs(capped) <= _pairs(context_ball(ei, n, fanout=-1))


@pytest.mark.parametrize("f", [5, 12])
def test_whole_graph_score_uses_the_ball(f: int) -> None:
    """``context_hops`` 2: the score is 1 - cos(g(h0_i), g(mean of h0 over i's ball)), the ball's second hop drawn
    with the scoring seed, so the same at every call in evaluation (narrow inputs are averaged before the projection,
    wide ones after: the same context); in training the second hop is drawn afresh."""
    from gcad_dist.model.ball import SCORE_SEED
    from gcad_dist.model.readout import neighbour_context

    n = 150
    ei = _graph(n)
    x = torch.randn(n, f, dtype=torch.float64)
    torch.manual_seed(0)
    model = GCCAD(GCCADConfig(in_dim=f, hidden=8, contrast="local", loss="logistic", tau=0.2, context_hops=2,
                              context_fanout=3)).to(torch.float64).eval()
    out = model(x, ei)
    assert torch.equal(model.score(out), model.score(model(x, ei)))
    h0 = model.encoder.input_proj(x)
    ball = context_ball(ei, n, 3, torch.Generator().manual_seed(SCORE_SEED))
    want = 1 - F.cosine_similarity(model.head(h0), model.head(neighbour_context(h0, ball, n)), dim=-1)
    has = torch.bincount(ei[1], minlength=n) > 0  # a node without neighbours is scored at the median
    assert not has.all()
    torch.testing.assert_close(model.score(out)[has], want.float()[has])
    one_hop = GCCAD(GCCADConfig(in_dim=f, hidden=8, contrast="local", loss="logistic", tau=0.2)).to(torch.float64)
    one_hop.load_state_dict(model.state_dict())
    assert not torch.allclose(one_hop.eval().score(one_hop(x, ei)), model.score(out))
    model.train()
    assert not torch.equal(model(x, ei).local_context, model(x, ei).local_context)


@pytest.mark.parametrize("dense", [False, True, None])
def test_ball_mean_in_chunks_equals_the_whole_ball(dense: bool | None, monkeypatch: pytest.MonkeyPatch) -> None:
    """Scoring a large graph takes the balls in chunks of targets, or by a membership matrix a block of targets at a
    time (a dense graph's path): the same means as the whole ball's, however small the chunks or blocks."""
    import gcad_dist.model.ball as ball
    from gcad_dist.model.ball import ball_mean
    from gcad_dist.model.readout import neighbour_context

    n = 150
    ei = _graph(n)
    h = torch.randn(n, 4, dtype=torch.float64)
    want = neighbour_context(h, context_ball(ei, n, 3, torch.Generator().manual_seed(5)), n)
    for max_pairs, cells in ((1, 1), (50, 700), (1 << 23, 1 << 25)):
        monkeypatch.setattr(ball, "DENSE_BALL_CELLS", cells)  # blocks of 1, 4 and every target
        mean, size = ball_mean(h, ei, n, 3, torch.Generator().manual_seed(5), max_pairs=max_pairs, dense=dense)
        torch.testing.assert_close(mean, want)
        assert torch.equal(size, torch.bincount(context_ball(ei, n, 3, torch.Generator().manual_seed(5))[1],
                                                minlength=n))


def test_ball_mean_takes_the_membership_path_where_balls_cover_the_graph(monkeypatch: pytest.MonkeyPatch) -> None:
    """The automatic choice: the membership matrix where the composed edges average DENSE_BALL_SHARE of the nodes a
    target (a dense graph), the sorted-unique chunks elsewhere; with targets, their rows only, the same either way."""
    import gcad_dist.model.ball as ball

    calls: list[int] = []
    real = ball._dense_ball_sums

    def spy(h, inner, outer, n):
        calls.append(n)
        return real(h, inner, outer, n)

    monkeypatch.setattr(ball, "_dense_ball_sums", spy)
    g = torch.Generator().manual_seed(0)
    sparse_n, dense_n = 2000, 100
    sparse = torch.randint(0, sparse_n, (2, 4 * sparse_n), generator=g)  # mean degree 4: balls of ~20 of 2,000 nodes
    dense = torch.randint(0, dense_n, (2, 30 * dense_n), generator=g)  # mean degree 30: balls of most of 100 nodes
    ball.ball_mean(torch.randn(sparse_n, 3), sparse, sparse_n, 3, torch.Generator().manual_seed(1))
    assert calls == []
    h = torch.randn(dense_n, 3, dtype=torch.float64)
    targets = torch.tensor([1, 5, 50])
    mean, size = ball.ball_mean(h, dense, dense_n, 3, torch.Generator().manual_seed(1), targets=targets)
    assert calls == [dense_n]
    want, want_size = ball.ball_mean(h, dense, dense_n, 3, torch.Generator().manual_seed(1), dense=False)
    torch.testing.assert_close(mean[targets], want[targets])
    assert torch.equal(size[targets], want_size[targets]) and int(size.sum()) == int(size[targets].sum())


@pytest.mark.parametrize("members", [1, 3])
def test_minibatch_ball_matches_the_whole_graph(members: int) -> None:
    """On a minibatch sampled two hops deep with every neighbour, the seeds' balls are their whole-graph balls: the
    seeds' scores equal the whole graph's, and with an ensemble's swaps of seeds the outputs, loss and gradients
    equal those of the members' own [N, K, F] inputs."""
    from gcad_dist.data.neighbor_loader import SubgraphNeighborLoader
    from gcad_dist.data.online_corruption import draw_member_swaps

    n, f = 150, 5
    ei = _graph(n, e=300)
    data = Data(x=torch.randn(n, f, dtype=torch.float64), edge_index=ei, y=torch.zeros(n, dtype=torch.long))
    b = next(iter(SubgraphNeighborLoader(data, [-1, -1], batch_size=40, shuffle=True, seed=1, prefetch=0,
                                         backend="builtin")))
    s = b.batch_size
    seeds = torch.zeros(b.num_nodes, dtype=torch.bool)
    seeds[:s] = True
    torch.manual_seed(0)
    model = GCCAD(GCCADConfig(in_dim=f, hidden=8, contrast="local", loss="logistic", tau=0.2, ensemble=members,
                              context_hops=2, context_fanout=-1)).to(torch.float64).eval()
    kw = {"context_mask": seeds, "num_sampled_nodes": b.num_sampled_nodes, "num_sampled_edges": b.num_sampled_edges}
    trim = model(b.x, b.edge_index, **kw)
    assert trim.h.size(0) == s
    torch.testing.assert_close(model.score(trim), model.score(model(data.x, ei))[b.n_id[:s]])
    with pytest.raises(ValueError, match="two hops"):
        model(b.x, b.edge_index, context_mask=seeds, num_sampled_nodes=b.num_sampled_nodes[:2],
              num_sampled_edges=b.num_sampled_edges[:1])
    if members == 1:
        return
    y3, pick, donor = draw_member_swaps(b.y, seeds, 0.3, members, generator=torch.Generator().manual_seed(2))
    own = b.x.unsqueeze(1).repeat(1, members, 1)
    for k in range(members):
        own[pick[k], k] = b.x[donor[k]]
    results = []
    model.train()
    for inputs, extra in ((own, {}), (b.x, {"member_swaps": (pick, donor)})):
        model.zero_grad()
        out = model(inputs, b.edge_index, **kw, **extra)
        loss = model.loss(out, y3, mask=seeds)["total"]
        loss.backward()
        results.append((model.score(out).detach(), loss.detach(),
                        [p.grad.clone() for p in model.parameters() if p.grad is not None]))
    (s0, l0, g0), (s1, l1, g1) = results
    torch.testing.assert_close(s1, s0)
    torch.testing.assert_close(l1, l0)
    for a, c in zip(g0, g1):
        torch.testing.assert_close(c, a, rtol=1e-9, atol=1e-12)


def test_two_hop_ball_of_a_minibatch_keeps_edges_into_the_seeds() -> None:
    inner = torch.tensor([[2, 3], [0, 1]])  # 0 <- 2, 1 <- 3 (seeds 0, 1)
    outer = torch.tensor([[2, 3, 4, 0, 1, 5], [0, 1, 2, 2, 3, 3]])  # 2 <- 4, 0; 3 <- 1, 5
    ball = two_hop_ball(inner, outer, 6)
    assert _pairs(ball) == {(2, 0), (4, 0), (3, 1), (5, 1)}


def test_context_hops_is_validated() -> None:
    with pytest.raises(ValueError, match="context_hops"):
        GCCADConfig(in_dim=4, context_hops=2)  # the graph contrast
    with pytest.raises(ValueError, match="context_hops"):
        GCCADConfig(in_dim=4, contrast="local", loss="logistic", context_hops=3)
    with pytest.raises(ValueError, match="context_fanout"):
        GCCADConfig(in_dim=4, contrast="local", loss="logistic", context_hops=2, context_fanout=0)
    from gcad_dist.pretrain import parse_config

    assert parse_config(["--store", "s.zarr", "--context-hops", "2"]).context_hops == 2
    assert parse_config(["--store", "s.zarr"]).context_hops == 1
    with pytest.raises(SystemExit):
        parse_config(["--store", "s.zarr", "--context-hops", "3"])


@pytest.mark.parametrize("sampled", [False, True])
def test_pretraining_with_the_ball(tmp_path: Path, sampled: bool) -> None:
    """``pretrain --context-hops 2`` reaches the model (and its checkpoint); minibatches are sampled two hops deep
    (the second at the ball's fanout), whole subgraphs use the whole ball; the loss stays finite."""
    from test_pretrain_loop import LocalReporter, _two_subgraph_store

    from gcad_dist.data.store_dataset import StoreDataset
    from gcad_dist.distributed.train_loop import run_worker
    from gcad_dist.pretrain import PretrainConfig

    store = _two_subgraph_store(tmp_path / "two.zarr")
    seen: list[list[int]] = []
    real = StoreDataset.__init__

    def spy(self, *a, **kw):
        real(self, *a, **kw)
        seen.append(list(self.fanouts))

    StoreDataset.__init__ = spy
    try:
        cfg = PretrainConfig(store=str(store), epochs=1, min_steps_per_epoch=4, contrast="local", loss="logistic",
                             tau=0.2, swap_features=0.15, ensemble=2, context_hops=2, hidden=16, fanouts="5,3",
                             prefetch=0, batch_size=20, sample_threshold=10 if sampled else 100_000)
        rep = LocalReporter(tmp_path / "rep")
        torch.set_num_threads(1)
        run_worker({"pretrain": asdict(cfg)}, rep)
    finally:
        StoreDataset.__init__ = real
    assert seen == [[5, DEFAULT_FANOUT]]
    from gcad_dist.checkpoint import load_model_file

    assert load_model_file(rep.checkpoints[-1])["config"]["context_hops"] == 2
    assert np.isfinite(rep.state()["history"][0]["loss"])


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_dense_ball_on_the_gpu_equals_the_unique_path() -> None:
    """The membership-matrix path on a GPU: the same balls as the sorted-unique path, on the device."""
    from gcad_dist.model.ball import ball_mean

    g = torch.Generator().manual_seed(0)
    n = 300
    ei = torch.randint(0, n, (2, 30 * n), generator=g).cuda()
    h = torch.randn(n, 4, generator=g).cuda()
    a, sa = ball_mean(h, ei, n, 5, torch.Generator().manual_seed(1), dense=False)
    b, sb = ball_mean(h, ei, n, 5, torch.Generator().manual_seed(1), dense=True)
    assert b.is_cuda and torch.equal(sa, sb)
    torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)
