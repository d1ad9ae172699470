"""gcad_dist.data.degree_cap: the per-epoch in-degree cap of supervised GCCAD on dense graphs."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch_geometric.data import Data

from gcad_dist.data.degree_cap import DegreeCap


def _star_and_path() -> tuple[torch.Tensor, int]:
    """Node 0 has 400 in-edges (from 1..400); nodes 401..405 form a path (in-degree 1 or 2)."""
    hub = torch.stack([torch.arange(1, 401), torch.zeros(400, dtype=torch.long)])
    path = torch.tensor([[401, 402, 403, 404, 402, 403, 404, 405], [402, 403, 404, 405, 401, 402, 403, 404]])
    return torch.cat([hub, path], dim=1), 406


def test_nodes_under_the_cap_keep_every_edge_and_busy_nodes_about_cap():
    ei, n = _star_and_path()
    cap = DegreeCap(ei, n, 20)
    assert cap.active
    g = torch.Generator().manual_seed(0)
    kept_hub = []
    for _ in range(50):
        ids, sub, scale = cap.sample_edges(ei, g)
        assert torch.equal(sub, ei[:, ids])
        path_ids = ids[ids >= 400]
        assert torch.equal(path_ids, torch.arange(400, 408))  # the path's nodes are under the cap: all kept
        assert torch.all(scale[ids >= 400] == 1.0)
        k = int((sub[1] == 0).sum())
        kept_hub.append(k)
        assert torch.allclose(scale[sub[1] == 0], torch.full((k,), 400 / k))  # the hub's sum rescaled to 400
    assert abs(np.mean(kept_hub) - 20) < 2.0  # about cap in-edges a busy node, drawn afresh each epoch
    assert len(set(kept_hub)) > 1
    assert 0.05 < cap.expected_share < 0.07  # (20 + 8) of 408 edges


def test_rescaled_sum_is_the_full_sum_in_expectation():
    """sum over the sampled in-edges of scale * x_j estimates the full sum (the mean of the sample times the degree)."""
    ei, n = _star_and_path()
    x = torch.randn(n, 3)
    full = torch.zeros(n, 3).index_add_(0, ei[1], x[ei[0]])
    cap = DegreeCap(ei, n, 20)
    g = torch.Generator().manual_seed(1)
    reps = 400
    ests = []
    for _ in range(reps):
        _, sub, scale = cap.sample_edges(ei, g)
        ests.append(torch.zeros(n, 3).index_add_(0, sub[1], x[sub[0]] * scale[:, None]))
    est = torch.stack(ests)
    assert torch.allclose(est[:, 401:], full[401:].expand(reps, -1, -1))  # exact where nothing is sampled
    se = est[:, 0].std(0) / reps**0.5
    assert torch.all((est[:, 0].mean(0) - full[0]).abs() < 4 * se)  # unbiased for the hub, within 4 s.e.
    assert torch.all(est[:, 0].std(0) > 0)  # and it is a sample


def test_inactive_when_no_node_exceeds_the_cap_and_data_unchanged():
    ei, n = _star_and_path()
    cap = DegreeCap(ei, n, 400)
    assert not cap.active
    data = Data(x=torch.randn(n, 2), edge_index=ei)
    assert cap.sample(data, torch.Generator().manual_seed(0)) is data


def test_sample_copies_data_with_scale_and_edge_weight():
    ei, n = _star_and_path()
    data = Data(x=torch.randn(n, 2), edge_index=ei, edge_weight=torch.arange(ei.size(1), dtype=torch.float32))
    out = DegreeCap(ei, n, 10).sample(data, torch.Generator().manual_seed(2))
    assert out is not data and data.edge_index is ei  # the caller's graph is left whole
    assert out.edge_index.size(1) == out.edge_scale.numel() == out.edge_weight.numel() < ei.size(1)
    assert torch.equal(ei[:, out.edge_weight.long()], out.edge_index)  # the weights follow their edges


def test_edge_scale_multiplies_the_sum_aggregation_only():
    """GCCAD with gin: an edge scale of 2 on every edge equals doubling the messages; a sage conv ignores it."""
    from gcad_dist.model import GCCAD, GCCADConfig

    torch.manual_seed(0)
    ei, n = _star_and_path()
    x = torch.randn(n, 6)
    for conv, same in (("gin", False), ("sage", True)):
        m = GCCAD(GCCADConfig(in_dim=6, hidden=8, num_layers=2, conv=conv, edge_update=False, contrast="graph"))
        m.eval()
        a = m(x, ei).h
        b = m(x, ei, edge_scale=torch.full((ei.size(1),), 2.0)).h
        c = m(x, ei, edge_weight=torch.full((ei.size(1),), 2.0)).h
        assert torch.equal(a, b) == same
        if conv == "gin":
            assert torch.allclose(b, c, atol=1e-6)  # without the link remover, a scale is a weight


def test_fit_supervised_with_a_cap_trains_on_samples_and_scores_on_every_edge(monkeypatch):
    """The training forwards see sampled edges with their scale, the evaluations every edge; on a graph under the
    cap the run is exactly the uncapped one."""
    from gcad_dist.model import GCCAD, GCCADConfig
    from gcad_dist.supervised import SupervisedConfig, fit_supervised

    torch.manual_seed(0)
    ei, n = _star_and_path()
    y = torch.zeros(n, dtype=torch.long)
    y[torch.arange(3, n, 17)] = 1
    data = Data(x=torch.randn(n, 4), edge_index=ei, y=y)
    perm = torch.randperm(n)
    masks = [torch.zeros(n, dtype=torch.bool) for _ in range(3)]
    for m, idx in zip(masks, (perm[:200], perm[200:300], perm[300:])):
        m[idx] = True

    seen: list[tuple[bool, int, bool]] = []
    orig = GCCAD.forward

    def spy(self, x, edge_index, *a, **k):
        seen.append((self.training, edge_index.size(1), k.get("edge_scale") is not None))
        return orig(self, x, edge_index, *a, **k)

    monkeypatch.setattr(GCCAD, "forward", spy)

    def fit(max_degree: int):
        torch.manual_seed(1)
        model = GCCAD(GCCADConfig(in_dim=4, hidden=8, num_layers=2, contrast="graph"))
        cfg = SupervisedConfig(epochs=6, eval_every=3, patience=0, snapshots=1, progress=False, max_degree=max_degree)
        return fit_supervised(model, data, masks, cfg)

    fit(16)
    train_calls = [s for s in seen if s[0]]
    eval_calls = [s for s in seen if not s[0]]
    assert len(train_calls) == 6 and all(e < ei.size(1) and scaled for _, e, scaled in train_calls)
    assert len({e for _, e, _ in train_calls}) > 1  # a fresh sample every epoch
    assert eval_calls and all(e == ei.size(1) and not scaled for _, e, scaled in eval_calls)
    seen.clear()
    a, b = fit(0), fit(400)  # no node above 400 in-edges: the cap changes nothing
    assert all(e == ei.size(1) and not scaled for _, e, scaled in seen)
    assert np.array_equal(a.scores, b.scores)


def test_draw_links_without_a_busy_node_keeps_every_link():
    ei = torch.tensor([[1, 2, 3, 0], [0, 0, 1, 2]])
    dc = DegreeCap(ei, 4, 4)
    d = dc.draw_links(ei)
    assert sorted(map(tuple, d.t().tolist())) == sorted(map(tuple, ei.t().tolist()))


def test_cap_dense_step_caps_only_steps_above_the_link_threshold():
    """Pre-training's dense whole-graph steps: at most ``dense_links`` links pass unchanged; above, each node keeps
    every in-edge under the cap and about ``cap`` of a busier node's, a fresh draw each step, and the cap's layout is
    kept in the cache between steps of the same subgraph."""
    from gcad_dist.data.degree_cap import cap_dense_step

    torch.manual_seed(0)
    n = 300
    dst = torch.cat([torch.zeros(2000, dtype=torch.long), torch.randint(1, n, (600,))])  # node 0: 2000 in-edges
    src = torch.randint(0, n, dst.shape)
    order = torch.argsort(dst, stable=True)
    ei = torch.stack([src[order], dst[order]])
    assert cap_dense_step(ei, n, 16, ei.size(1)) is ei  # at the threshold: unchanged
    assert cap_dense_step(ei, n, 0, 0) is ei  # cap 0: every link
    cache: dict = {}
    a = cap_dense_step(ei, n, 16, 100, cache, key=7)
    assert len(cache) == 1
    b = cap_dense_step(ei, n, 16, 100, cache, key=7)
    assert len(cache) == 1 and not torch.equal(a, b)  # cached cap, fresh draw
    deg_a = torch.bincount(a[1], minlength=n)
    full = torch.bincount(ei[1], minlength=n)
    busy = full > 16
    assert torch.equal(deg_a[~busy], full[~busy])  # under the cap: every in-edge
    assert 4 <= int(deg_a[0]) <= 40  # about 16 of 2000
    pos = {(int(s), int(d)) for s, d in ei.t()}
    assert all((int(s), int(d)) in pos for s, d in a.t())


def test_draw_links_is_the_bernoulli_draw_of_sample_edges():
    """DegreeCap.draw_links (the geometric gaps between kept in-edges) keeps each in-edge of a busy node with
    probability cap / degree, each at most once, and every in-edge of a node under the cap: over 400 draws the kept
    counts match the Bernoulli draw of sample_edges within sampling noise, and the links kept are spread evenly."""
    n, cap, draws = 3000, 16, 400
    # node 0: 2000 in-edges from distinct sources; node 1: cap + 1; node 2: cap (under); nodes 3.. : 1 each
    src = torch.cat([torch.arange(1, 2001), torch.arange(100, 117), torch.arange(200, 216), torch.arange(3, 1000)])
    dst = torch.cat([torch.zeros(2000, dtype=torch.long), torch.ones(17, dtype=torch.long),
                     torch.full((16,), 2, dtype=torch.long), torch.arange(3, 1000)])
    ei = torch.stack([src, dst])[:, torch.randperm(src.numel(), generator=torch.Generator().manual_seed(1))]
    dc = DegreeCap(ei, n, cap)
    g = torch.Generator().manual_seed(0)
    kept0 = torch.zeros(2001)
    counts = torch.zeros(draws, n)
    for i in range(draws):
        d = dc.draw_links(ei, g)
        counts[i] = torch.bincount(d[1], minlength=n).float()
        s0 = d[0][d[1] == 0]
        assert s0.unique().numel() == s0.numel()  # no in-edge twice
        kept0[s0] += 1
        assert {(int(a), int(b)) for a, b in d.t()} <= {(int(a), int(b)) for a, b in ei.t()}
    full = torch.bincount(ei[1], minlength=n).float()
    assert torch.equal(counts[:, 2:], full[2:].expand(draws, -1))  # under the cap: every in-edge, every draw
    for node, deg in ((0, 2000), (1, 17)):
        p = cap / deg  # Bernoulli(p) per in-edge: the mean of `draws` kept counts is cap, its sd sqrt(deg p (1-p) / draws)
        sd = (deg * p * (1 - p) / draws) ** 0.5
        assert abs(float(counts[:, node].mean()) - cap) < 5 * sd, (node, float(counts[:, node].mean()))
        assert abs(float(counts[:, node].var()) - deg * p * (1 - p)) < 0.35 * deg * p * (1 - p)
    # every in-edge of node 0 equally likely: the first and second halves of its sources kept alike
    a, b = float(kept0[1:1001].sum()), float(kept0[1001:].sum())
    assert abs(a - b) < 5 * (a + b) ** 0.5


def test_pretraining_caps_dense_whole_graph_steps(tmp_path, monkeypatch):
    """The loop Ray Train runs, local contrast on a whole-graph store: with ``--dense-links`` below the store's links
    every step's contexts use capped links (at most about ``--max-degree`` in-edges a node); with the default, the
    same store trains on every link."""
    from dataclasses import asdict, replace

    import gcad_dist.distributed.train_loop as loop
    from gcad_dist.pretrain import PretrainConfig, apply_recipe
    from tests.test_online_corruption import _whole_graph_store
    from tests.test_pretrain_loop import LocalReporter

    store = _whole_graph_store(tmp_path)
    seen: list[tuple[int, int]] = []
    real = loop.cap_dense_step

    def spy(edge_index, num_nodes, cap, dense_links, cache=None, key=None):
        out = real(edge_index, num_nodes, cap, dense_links, cache, key)
        seen.append((int(edge_index.size(1)), int(out.size(1))))
        return out

    monkeypatch.setattr(loop, "cap_dense_step", spy)
    shards: list = []
    real_shard = loop.shard_config

    def shard_spy(cfg):
        shards.append(real_shard(cfg))
        return shards[-1]

    monkeypatch.setattr(loop, "shard_config", shard_spy)
    torch.set_num_threads(1)
    for dense_links, capped in ((0, True), (PretrainConfig.dense_links, False)):
        seen.clear()
        cfg = PretrainConfig(store=str(store), out=str(tmp_path / f"o{dense_links}"), epochs=1, min_steps_per_epoch=3,
                             hidden=16, prefetch=0, ensemble=2, max_degree=2, dense_links=dense_links)
        apply_recipe(cfg, store_corrupted=False)
        rep = LocalReporter(tmp_path / f"ck{dense_links}")
        loop.run_worker({"pretrain": asdict(cfg)}, rep)
        assert len(seen) >= 3
        # the epoch plan costs a step's links as the cap leaves them (sharding.trained_links)
        assert (shards[-1].max_degree, shards[-1].dense_links) == (2, dense_links)
        assert shard_spy(replace(cfg, contrast="graph")).max_degree == 0  # the cap is the local contrast's
        if capped:
            assert all(kept < links for links, kept in seen)
        else:
            assert all(kept == links for links, kept in seen)
        assert np.isfinite(rep.state()["history"][0]["loss"])


def test_harness_defaults_are_pretrainings():
    """The quality harness leaves a run's key unchanged at pre-training's defaults, so its constants must be them."""
    from gcad_dist.detectors import gccad_pre
    from gcad_dist.pretrain import PretrainConfig

    assert gccad_pre.DENSE_LINKS == PretrainConfig.dense_links
    assert gccad_pre.MAX_DEGREE == PretrainConfig.max_degree
    assert gccad_pre.SAMPLE_THRESHOLD == PretrainConfig.sample_threshold


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_draw_links_on_the_gpu_keeps_links_of_the_graph() -> None:
    """A dense step on a GPU: the draw runs on the device, every kept link is a link, nodes under the cap keep all."""
    g = torch.Generator().manual_seed(0)
    n, cap = 500, 16
    ei = torch.randint(0, n, (2, 40 * n), generator=g).cuda()
    dc = DegreeCap(ei, n, cap)
    d = dc.draw_links(ei)
    assert d.is_cuda
    key = lambda e: set((e[0] * n + e[1]).tolist())  # noqa: E731
    assert key(d) <= key(ei)
    full, kept = torch.bincount(ei[1], minlength=n), torch.bincount(d[1], minlength=n)
    assert torch.equal(kept[full <= cap], full[full <= cap])
    assert abs(float(kept[full > cap].float().mean()) - cap) < 2
