"""Tests of the GCCAD model (gcad_dist/model): encoder pieces, batching, ContextSync seam, training."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch_geometric.data import Batch, Data

from gcad_dist.model import GCCAD, GCCADConfig, GCCADOutput
from gcad_dist.model.context import ContextSync
from gcad_dist.model.edge_update import EdgeUpdate, LinkPredictor, straight_through_sample
from gcad_dist.model.node_update import CONVS, make_conv
from gcad_dist.model.readout import READOUTS, mean_context, memory_context

IDENT = ContextSync()


def _random_graph(n: int, m: int, f: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, f, generator=g)
    src = torch.randint(0, n, (m,), generator=g)
    dst = torch.randint(0, n, (m,), generator=g)
    keep = src != dst
    ei = torch.stack([src[keep], dst[keep]])
    return x, torch.cat([ei, ei.flip(0)], 1)


def test_config_rejects_unknown_names():
    for bad in ({"conv": "cheb"}, {"readout": "median"}, {"loss": "mse"}, {"tau": 0.0}, {"num_layers": 0}):
        with pytest.raises(ValueError):
            GCCADConfig(in_dim=4, **bad)


def test_link_predictor_equals_explicit_concatenated_mlp():
    torch.manual_seed(0)
    h = torch.randn(7, 5)
    q = torch.randn(2, 5)
    batch = torch.tensor([0, 0, 0, 1, 1, 1, 1])
    ei = torch.tensor([[0, 1, 2, 3, 6, 5], [1, 2, 0, 4, 3, 6]])
    for link_global in (True, False):
        lp = LinkPredictor(5, link_global=link_global).eval()
        hi, hj = h[ei[1]], h[ei[0]]
        feats = [(hi - hj).abs()]
        if link_global:
            feats += [hi - q[batch[ei[1]]], hj - q[batch[ei[0]]]]
        expected = lp.lin2(F.relu(lp.lin1(torch.cat(feats, -1)))).squeeze(-1)
        torch.testing.assert_close(lp(h, q, ei, batch), expected)


@pytest.mark.parametrize("link_global", [True, False])
def test_fused_link_mlp_matches_plain_autograd(monkeypatch, link_global):
    """The blocked, recomputing link MLP gives the plain version's logits and gradients (eval mode),
    with a block size that does not divide the edge count."""
    import gcad_dist.model.edge_update as eu

    monkeypatch.setattr(eu, "EDGE_CHUNK", 97)
    torch.manual_seed(0)
    n, k = 60, 8
    h = torch.randn(n, k, dtype=torch.float64, requires_grad=True)
    q = torch.randn(2, k, dtype=torch.float64)
    batch = (torch.arange(n) >= 30).long()
    ei = torch.randint(0, n, (2, 1000))
    fused = LinkPredictor(k, link_global).double().eval()
    plain = LinkPredictor(k, link_global, fused=False).double().eval()
    plain.load_state_dict(fused.state_dict())
    a, b = fused(h, q, ei, batch), plain(h, q, ei, batch)
    torch.testing.assert_close(a, b)
    ga = torch.autograd.grad(a.sin().sum(), [h, *fused.parameters()])
    gb = torch.autograd.grad(b.sin().sum(), [h, *plain.parameters()])
    for x, y in zip(ga, gb):
        torch.testing.assert_close(x, y)


def test_fused_link_mlp_dropout_is_reproducible_and_differentiable(monkeypatch):
    """Training mode: the dropout mask is regenerated exactly in the backward pass (gradcheck), it
    follows torch.manual_seed, and it drops about the configured fraction."""
    import gcad_dist.model.edge_update as eu

    monkeypatch.setattr(eu, "EDGE_CHUNK", 50)
    torch.manual_seed(0)
    h = torch.randn(20, 6, dtype=torch.float64, requires_grad=True)
    q = torch.randn(1, 6, dtype=torch.float64)
    batch = torch.zeros(20, dtype=torch.long)
    ei = torch.randint(0, 20, (2, 120))
    lp = LinkPredictor(6, dropout=0.3).double().train()

    def f(x):
        torch.manual_seed(7)
        return lp(x, q, ei, batch)

    torch.testing.assert_close(f(h), f(h))
    assert not torch.allclose(f(h), lp.eval()(h, q, ei, batch))
    lp.train()
    assert torch.autograd.gradcheck(f, (h,), eps=1e-6, atol=1e-6)
    keep = eu._chunk_keep_mask(500, 64, 0.3, seed=1, chunk=0, like=torch.zeros(()))
    assert set(keep.unique().tolist()) == {0.0, 1.0}
    assert abs(1 - keep.mean().item() - 0.3) < 0.01


def test_straight_through_sample_is_hard_forward_and_differentiable():
    torch.manual_seed(1)
    logits = torch.randn(500, requires_grad=True)
    keep = straight_through_sample(logits, 0.6)
    assert set(keep.detach().unique().tolist()) <= {0.0, 1.0}
    frac = keep.mean().item()
    assert abs(frac - torch.sigmoid(logits).mean().item()) < 0.1  # samples follow p
    (keep * torch.arange(500.0)).sum().backward()
    assert logits.grad.abs().sum() > 0


def test_edge_residual_formula_in_eval_mode():
    torch.manual_seed(2)
    eu = EdgeUpdate(6).eval()
    with torch.no_grad():
        eu.alpha_logit.fill_(0.7)
    h, q = torch.randn(5, 6), torch.randn(1, 6)
    ei = torch.tensor([[0, 1, 2, 3, 4], [1, 2, 3, 4, 0]])
    batch = torch.zeros(5, dtype=torch.long)
    w_prev = torch.tensor([1.0, 0.5, 0.2, 1.0, 0.0])
    w, p, logits = eu(h, q, ei, batch, w_prev)
    alpha = torch.sigmoid(torch.tensor(0.7))
    expected = (alpha * w_prev + (1 - alpha) * p) * (p > 0.5).float()
    torch.testing.assert_close(w, expected)
    torch.testing.assert_close(p, torch.sigmoid(logits))


def test_expected_eval_rule_uses_the_mean_of_the_training_indicator():
    """eval_rule="expected": I = p, the mean of the training-time hard sample (which keeps an edge
    with probability exactly p); "threshold" stays METHOD.md's [p > 0.5]."""
    torch.manual_seed(2)
    h, q = torch.randn(6, 8), torch.randn(1, 8)
    ei = torch.tensor([[0, 1, 2, 3, 4, 5], [1, 2, 3, 4, 5, 0]])
    batch = torch.zeros(6, dtype=torch.long)
    w_prev = torch.rand(6)
    thr = EdgeUpdate(8).eval()
    exp = EdgeUpdate(8, eval_rule="expected").eval()
    exp.load_state_dict(thr.state_dict())
    w_t, p, _ = thr(h, q, ei, batch, w_prev)
    w_e, p_e, logits = exp(h, q, ei, batch, w_prev)
    torch.testing.assert_close(p, p_e)
    alpha = torch.sigmoid(exp.alpha_logit)
    torch.testing.assert_close(w_e, (alpha * w_prev + (1 - alpha) * p) * p)
    assert not torch.allclose(w_e, w_t)
    # the training sample's mean over many draws is p: "expected" is what training sees on average
    many = torch.stack([straight_through_sample(logits.detach(), 0.6) for _ in range(4000)]).mean(0)
    torch.testing.assert_close(many, p.detach(), atol=0.03, rtol=0)
    with pytest.raises(ValueError, match="eval_rule"):
        EdgeUpdate(8, eval_rule="mean")
    with pytest.raises(ValueError, match="link_eval"):
        GCCADConfig(in_dim=3, link_eval="soft")


def test_gradient_reaches_link_predictor_through_the_sample():
    torch.manual_seed(3)
    x, ei = _random_graph(40, 120, 6, seed=3)
    y = torch.zeros(40, dtype=torch.long)
    y[:5] = 1
    model = GCCAD(GCCADConfig(in_dim=6, hidden=8, link_loss_weight=0.0, dropout=0.0)).train()
    out = model(x, ei)
    losses = model.loss(out, y)
    assert losses["link"].item() == 0.0
    losses["total"].backward()
    for eu in model.encoder.edge_updates:
        assert eu.predictor.lin1.weight.grad is not None
        assert eu.predictor.lin1.weight.grad.abs().sum() > 0


def test_eval_mode_is_deterministic_and_train_mode_samples():
    x, ei = _random_graph(30, 90, 5, seed=4)
    torch.manual_seed(4)
    model = GCCAD(GCCADConfig(in_dim=5, hidden=8)).eval()
    a, b = model(x, ei), model(x, ei)
    torch.testing.assert_close(a.h, b.h, rtol=0, atol=0)
    torch.testing.assert_close(model.score(a), model.score(b), rtol=0, atol=0)
    model.train()
    w1 = model(x, ei).edge_weight
    w2 = model(x, ei).edge_weight
    assert not torch.equal(w1, w2)


def test_memory_readout_equals_softmax_weighted_mean():
    torch.manual_seed(5)
    h = torch.randn(9, 4)
    mem = torch.randn(3, 4)
    batch = torch.tensor([0, 0, 0, 1, 1, 2, 2, 2, 2])
    mask = torch.tensor([True, True, False, True, True, True, True, True, False])
    q = memory_context(h, mem, batch, 3, mask, IDENT)
    for g in range(3):
        sel = (batch == g) & mask
        a = torch.softmax(F.cosine_similarity(h[sel], mem[g].expand_as(h[sel]), dim=-1), dim=0)
        torch.testing.assert_close(q[g], (a.unsqueeze(-1) * h[sel]).sum(0))
    q0 = mean_context(h, batch, 3, mask, IDENT)
    for g in range(3):
        torch.testing.assert_close(q0[g], h[(batch == g) & mask].mean(0))


@pytest.mark.parametrize("conv", sorted(CONVS))
def test_zero_edge_weight_is_exact_removal(conv):
    torch.manual_seed(6)
    x, ei = _random_graph(12, 30, 8, seed=6)
    layer = make_conv(conv, 8).eval()
    w = (torch.rand(ei.size(1)) < 0.6).float() * torch.rand(ei.size(1))
    kept = w > 0
    torch.testing.assert_close(layer(x, ei, w), layer(x, ei[:, kept], w[kept]), rtol=1e-5, atol=1e-6)
    ones = torch.ones(ei.size(1))
    torch.testing.assert_close(layer(x, ei, ones), layer(x, ei, None), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("conv", ["gin", "gcn"])
def test_batch_of_graphs_equals_each_graph_alone(conv):
    torch.manual_seed(7)
    graphs = []
    for i, n in enumerate((7, 11, 5)):
        x, ei = _random_graph(n, 2 * n, 6, seed=10 + i)
        graphs.append(Data(x=x, edge_index=ei, y=(torch.arange(n) % 4 == 0).long()))
    model = GCCAD(GCCADConfig(in_dim=6, hidden=8, conv=conv)).eval()
    b = Batch.from_data_list(graphs)
    out = model(b.x, b.edge_index, batch=b.batch, num_graphs=b.num_graphs)
    assert isinstance(out, GCCADOutput) and out.q.shape == (3, 8)
    scores = model.score(out)
    for g, data in enumerate(graphs):
        alone = model(data.x, data.edge_index)
        sel = b.batch == g
        torch.testing.assert_close(out.h[sel], alone.h, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(out.q[g : g + 1], alone.q, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(scores[sel], model.score(alone), rtol=1e-5, atol=1e-5)
        for p_b, p_a in zip(out.edge_probs, alone.edge_probs):
            esel = sel[b.edge_index[0]]
            torch.testing.assert_close(p_b[esel], p_a, rtol=1e-5, atol=1e-5)


class RecordingSync(ContextSync):
    def __init__(self) -> None:
        self.calls: list[tuple] = []

    def sum(self, t):
        self.calls.append(("sum", tuple(t.shape)))
        return t

    def memory(self, layer, q):
        self.calls.append(("memory", layer, tuple(q.shape)))
        return q


@pytest.mark.parametrize("readout", READOUTS)
def test_context_sync_call_order(readout):
    x, ei = _random_graph(20, 50, 4, seed=8)
    batch = (torch.arange(20) >= 12).long()
    y = (torch.arange(20) % 5 == 0).long()
    model = GCCAD(GCCADConfig(in_dim=4, hidden=6, num_layers=3, readout=readout)).eval()
    rec = RecordingSync()
    out = model(x, ei, batch=batch, num_graphs=2, sync=rec)
    model.loss(out, y, sync=rec)
    layer_sum = {"memory": [("sum", (2, 7))], "mean": [("sum", (2, 7))], "sum": [("sum", (2, 6))], "max": []}
    expected = [("sum", (2, 7))]
    for layer in range(3):
        expected += layer_sum[readout] + [("memory", layer, (2, 6))]
    expected += [("sum", (2, 2))]
    assert rec.calls == expected
    # the identity sync reproduces the default exactly
    ref = model(x, ei, batch=batch, num_graphs=2)
    torch.testing.assert_close(out.q, ref.q, rtol=0, atol=0)


def test_context_sync_sum_and_memory_are_used():
    """A sync that doubles the worker count (two identical workers) must leave means unchanged;
    a memory override must change the next layer."""

    class TwoWorkers(ContextSync):
        def sum(self, t):
            return 2 * t

    x, ei = _random_graph(15, 40, 4, seed=9)
    y = (torch.arange(15) % 4 == 0).long()
    model = GCCAD(GCCADConfig(in_dim=4, hidden=6)).eval()
    ref = model(x, ei)
    two = model(x, ei, sync=TwoWorkers())
    torch.testing.assert_close(two.q, ref.q)
    torch.testing.assert_close(model.loss(two, y, sync=TwoWorkers())["con"].shape, torch.Size([]))
    assert model.loss(two, y, sync=TwoWorkers())["con"].item() > model.loss(ref, y)["con"].item()

    class ZeroMemory(ContextSync):
        def memory(self, layer, q):
            return torch.zeros_like(q)

    assert not torch.allclose(model(x, ei, sync=ZeroMemory()).h, ref.h)


def test_context_mask_limits_context_to_masked_nodes():
    x, ei = _random_graph(16, 40, 4, seed=10)
    mask = torch.arange(16) < 10
    model = GCCAD(GCCADConfig(in_dim=4, hidden=6, readout="mean", edge_update=False, num_layers=1)).eval()
    out = model(x, ei, context_mask=mask)
    torch.testing.assert_close(out.q[0], out.h[mask].mean(0))


CONFIGS = [dict(conv=c, readout=r) for c in sorted(CONVS) for r in READOUTS] + [
    dict(loss="ce"),
    dict(edge_update=False),
    dict(link_global=False),
    dict(link_loss_weight=0.0),
    dict(score_space="projection"),
    dict(num_layers=1),
    dict(norm="graph"),
    dict(norm="graph", jump="cat", score_space="projection"),
]


@pytest.mark.parametrize("kwargs", CONFIGS, ids=lambda k: ",".join(f"{a}={b}" for a, b in k.items()))
def test_variants_run_forward_and_backward(kwargs):
    torch.manual_seed(11)
    x, ei = _random_graph(25, 60, 5, seed=11)
    batch = (torch.arange(25) >= 15).long()
    y = (torch.arange(25) % 6 == 0).long()
    model = GCCAD(GCCADConfig(in_dim=5, hidden=8, **kwargs)).train()
    out = model(x, ei, batch=batch, num_graphs=2, edge_weight=torch.rand(ei.size(1)))
    losses = model.loss(out, y)
    assert set(losses) >= {"total", "con", "link"}
    assert torch.isfinite(losses["total"])
    losses["total"].backward()
    grads = [p.grad for p in model.encoder.parameters() if p.grad is not None]
    assert grads and all(torch.isfinite(g).all() for g in grads)
    assert model.encoder.input_proj.weight.grad.abs().sum() > 0
    s = model.score(out)
    assert s.shape == (25,) and torch.isfinite(s).all()
    assert len(out.edge_probs) == (0 if kwargs.get("edge_update") is False else model.config.num_layers)


def _two_community_graph(seed: int = 0, n: int = 300, f: int = 16, n_anom: int = 15, deg: int = 8):
    """Two communities; anomalies carry the *other* community's features (contextual anomalies)."""
    rng = np.random.default_rng(seed)
    comm = rng.integers(0, 2, n)
    centers = rng.normal(0, 1, (2, f)) * 1.5
    y = np.zeros(n, dtype=np.int64)
    anom = rng.choice(n, n_anom, replace=False)
    y[anom] = 1
    feat_comm = comm.copy()
    feat_comm[anom] = 1 - comm[anom]
    x = centers[feat_comm] + rng.normal(0, 1, (n, f))
    src = np.repeat(np.arange(n), deg // 2)
    members = [np.flatnonzero(comm == c) for c in (0, 1)]
    dst = np.concatenate([rng.choice(members[comm[s]], 1) for s in src])
    keep = src != dst
    ei = np.concatenate([np.stack([src[keep], dst[keep]]), np.stack([dst[keep], src[keep]])], 1)
    return torch.tensor(x, dtype=torch.float32), torch.tensor(ei), torch.tensor(y)


def test_training_separates_contextual_anomalies():
    from sklearn.metrics import roc_auc_score

    x, ei, y = _two_community_graph(n=200, n_anom=10)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        torch.manual_seed(0)
        model = GCCAD(GCCADConfig(in_dim=16, hidden=16))
        opt = torch.optim.Adam(model.parameters(), lr=3e-3)
        model.eval()
        with torch.no_grad():
            auc_before = roc_auc_score(y.numpy(), model.score(model(x, ei)).numpy())
        for _ in range(150):
            model.train()
            loss = model.loss(model(x, ei), y)["total"]
            opt.zero_grad()
            loss.backward()
            opt.step()
        model.eval()
        with torch.no_grad():
            auc = roc_auc_score(y.numpy(), model.score(model(x, ei)).numpy())
    finally:
        torch.set_num_threads(threads)
    assert auc > 0.9, (auc_before, auc)
    assert auc > auc_before + 0.2


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("conv", ["gin", "gcn", "sage", "gat"])
def test_hop_trimming_leaves_seed_outputs_and_loss_unchanged(conv, dtype):
    """On a neighbour-sampled minibatch whose context and loss masks are the seeds, running layer l on
    the hops that can still reach the seeds only (PyG's trim_to_layer) gives the same seed
    embeddings, context, scores and loss (eval mode: deterministic edge decisions). The trimmed link
    predictor folds the shared context into the target side, a sum in another order: in float64 the
    gradients agree to 1e-9, in float32 to its rounding."""
    from torch_geometric.data import Data

    from gcad_dist.data.neighbor_loader import SubgraphNeighborLoader

    torch.manual_seed(0)
    n = 400
    ei = torch.randint(0, n, (2, 3000))
    data = Data(x=torch.randn(n, 6, dtype=dtype), edge_index=torch.cat([ei, ei.flip(0)], 1),
                y=(torch.rand(n) < 0.2).long())
    b = next(iter(SubgraphNeighborLoader(data, [5, 3], batch_size=32, seed=1, prefetch=0, backend="builtin")))
    assert b.num_nodes > 2 * b.batch_size  # the later hops are really there
    seeds = torch.zeros(b.num_nodes, dtype=torch.bool)
    seeds[: b.batch_size] = True
    model = GCCAD(GCCADConfig(in_dim=6, hidden=8, conv=conv)).to(dtype).eval()
    full = model(b.x, b.edge_index, context_mask=seeds)
    trim = model(b.x, b.edge_index, context_mask=seeds, num_sampled_nodes=b.num_sampled_nodes,
                 num_sampled_edges=b.num_sampled_edges)
    s = b.batch_size
    if conv == "gcn":  # not trimmed: its normalisation needs the source nodes' full degrees
        assert trim.h.size(0) == full.h.size(0)
    else:  # each layer computes the outputs the next one reads only: the seeds after the last layer
        assert trim.h.size(0) == s and trim.edge_logits[1].numel() < full.edge_logits[1].numel()
    torch.testing.assert_close(trim.h[:s], full.h[:s])
    torch.testing.assert_close(trim.q, full.q)
    torch.testing.assert_close(model.score(trim)[:s], model.score(full)[:s])
    lf, lt = model.loss(full, b.y, mask=seeds), model.loss(trim, b.y, mask=seeds)
    for k in ("total", "con", "link"):
        torch.testing.assert_close(lt[k], lf[k])
    # and the same gradients for every parameter
    grads = []
    for loss in (lf["total"], lt["total"]):
        model.zero_grad()
        loss.backward()
        grads.append([p.grad.clone() if p.grad is not None else None for p in model.parameters()])
    for gf, gt in zip(*grads):
        assert (gf is None) == (gt is None)
        if gf is not None:
            tol = {"rtol": 1e-9, "atol": 1e-12} if dtype == torch.float64 else {"rtol": 1e-4, "atol": 2e-5}
            torch.testing.assert_close(gt, gf, **tol)
    if conv != "gcn":  # a context over non-seed nodes cannot be trimmed: a clear error
        wider = seeds.clone()
        wider[s] = True
        with pytest.raises(ValueError, match="seeds only"):
            model(b.x, b.edge_index, context_mask=wider, num_sampled_nodes=b.num_sampled_nodes,
                  num_sampled_edges=b.num_sampled_edges)


def _full_and_trimmed(model: GCCAD, data: Data) -> tuple[Data, torch.Tensor, GCCADOutput, GCCADOutput]:
    """One neighbour-sampled minibatch of ``data`` (16 seeds, fan-outs 5, 3): (batch, seed mask, the model's output
    on it untrimmed, hop-trimmed)."""
    from gcad_dist.data.neighbor_loader import SubgraphNeighborLoader

    b = next(iter(SubgraphNeighborLoader(data, [5, 3], batch_size=16, seed=1, prefetch=0, backend="builtin")))
    seeds = torch.zeros(b.num_nodes, dtype=torch.bool)
    seeds[: b.batch_size] = True
    full = model(b.x, b.edge_index, context_mask=seeds)
    trim = model(b.x, b.edge_index, context_mask=seeds, num_sampled_nodes=b.num_sampled_nodes,
                 num_sampled_edges=b.num_sampled_edges)
    return b, seeds, full, trim


def test_jump_cat_concatenates_every_layer_and_trims_exactly():
    """jump="cat": the embedding is [h^(0), ..., h^(L)] (h^(0) = the input projection, the node's own features)
    and the context [q^(0), ..., q^(L)]; loss and score use them; a hop-trimmed minibatch gives the seeds the
    same outputs and loss as the untrimmed one. Only the graph contrast takes it."""
    from torch_geometric.data import Data


    torch.manual_seed(0)
    n, hid = 300, 8
    ei = torch.randint(0, n, (2, 2000))
    data = Data(x=torch.randn(n, 5), edge_index=torch.cat([ei, ei.flip(0)], 1), y=(torch.rand(n) < 0.2).long())
    model = GCCAD(GCCADConfig(in_dim=5, hidden=hid, jump="cat")).eval()
    out = model(data.x, data.edge_index)
    assert out.h.shape == (n, 3 * hid) and out.q.shape == (1, 3 * hid)
    torch.testing.assert_close(out.h[:, :hid], model.encoder.input_proj(data.x))
    last = GCCAD(GCCADConfig(in_dim=5, hidden=hid)).eval()
    last.load_state_dict({k: v for k, v in model.state_dict().items() if not k.startswith("head.")}, strict=False)
    torch.testing.assert_close(out.h[:, 2 * hid:], last(data.x, data.edge_index).h)  # the last block is h^(L)
    loss = model.loss(out, data.y)["total"]
    loss.backward()
    assert torch.isfinite(loss) and model.head.net[0].weight.grad.shape == (hid, 3 * hid)
    assert torch.isfinite(model.score(out)).all()

    b, seeds, full, trim = _full_and_trimmed(model, data)
    s = b.batch_size
    assert trim.h.shape == (s, 3 * hid)
    torch.testing.assert_close(trim.h, full.h[:s])
    torch.testing.assert_close(trim.q, full.q)
    torch.testing.assert_close(model.loss(trim, b.y, mask=seeds)["total"], model.loss(full, b.y, mask=seeds)["total"])
    for contrast in ("neighbors", "ego"):
        with pytest.raises(ValueError, match="jump"):
            GCCADConfig(in_dim=5, jump="cat", contrast=contrast)
    with pytest.raises(ValueError, match="jump"):
        GCCADConfig(in_dim=5, jump="all")


def test_jump_cat_local_puts_the_neighbours_mean_of_h0_in_the_first_context_block():
    """jump="cat-local": the embedding is jump cat's; each node's context is [mean of its neighbours' h^(0), q^(1),
    ..., q^(L)], so the input projection is contrasted locally and the later layers with the graph's context. Loss
    and score use it; a hop-trimmed minibatch gives the seeds the same score inputs and loss."""
    from gcad_dist.model.readout import neighbour_context

    torch.manual_seed(0)
    n, hid = 300, 8
    ei = torch.randint(0, n, (2, 2000))
    data = Data(x=torch.randn(n, 5), edge_index=torch.cat([ei, ei.flip(0)], 1), y=(torch.rand(n) < 0.2).long())
    model = GCCAD(GCCADConfig(in_dim=5, hidden=hid, jump="cat-local", score_space="projection")).eval()
    cat = GCCAD(GCCADConfig(in_dim=5, hidden=hid, jump="cat", score_space="projection")).eval()
    cat.load_state_dict(model.state_dict())
    out, ref = model(data.x, data.edge_index), cat(data.x, data.edge_index)
    torch.testing.assert_close(out.h, ref.h)  # same embedding as jump cat
    c = model.graph_context(out)
    h0 = model.encoder.input_proj(data.x)
    torch.testing.assert_close(c[:, :hid], neighbour_context(h0, data.edge_index, n))
    torch.testing.assert_close(c[:, hid:], ref.q[:, hid:].expand(n, -1))
    want = 1 - F.cosine_similarity(model.head(out.h), model.head(c), dim=-1)
    torch.testing.assert_close(model.score(out), want)
    assert not torch.allclose(model.score(out), cat.score(ref))
    loss = model.loss(out, data.y)["total"]
    loss.backward()
    assert torch.isfinite(loss)

    b, seeds, full, trim = _full_and_trimmed(model, data)
    s = b.batch_size
    torch.testing.assert_close(model.graph_context(trim), model.graph_context(full)[:s])
    torch.testing.assert_close(model.loss(trim, b.y, mask=seeds)["total"], model.loss(full, b.y, mask=seeds)["total"])


def test_graph_scale_norm_keeps_relative_node_sizes_where_layernorm_erases_them():
    from gcad_dist.model.node_update import GraphScaleNorm, make_norm

    base = torch.rand(4, 8) + 0.1
    x = torch.cat([base, 3 * base])  # nodes 4..7: the same directions at three times the size
    norm = GraphScaleNorm(8).train()
    out = norm(x).detach()
    np.testing.assert_allclose(out[4:].numpy(), 3 * out[:4].numpy(), rtol=1e-5)  # weight 1, bias 0
    assert torch.allclose(out.pow(2).mean(), torch.tensor(1.0), atol=1e-5)  # one RMS for all nodes
    ln = make_norm("layer", 8)
    np.testing.assert_allclose(ln(x)[4:].detach().numpy(), ln(x)[:4].detach().numpy(), atol=1e-3)


def test_graph_scale_norm_uses_batch_rms_in_training_and_running_rms_in_eval():
    from gcad_dist.model.node_update import GraphScaleNorm

    norm = GraphScaleNorm(3, momentum=0.5)
    a, b = torch.full((5, 3), 2.0), torch.full((2, 3), 4.0)
    norm.train()
    assert torch.allclose(norm(a), torch.ones(5, 3))  # batch statistic
    assert norm.running_rms.item() == pytest.approx(2.0)  # the first batch sets the running average
    norm(b)
    assert norm.running_rms.item() == pytest.approx(3.0)  # then momentum 0.5: 2 + 0.5 * (4 - 2)
    norm.eval()
    with torch.no_grad():
        alone, together = norm(b[:1]), norm(torch.cat([b[:1], 100 * a]))[:1]
    assert torch.allclose(alone, together) and torch.allclose(alone, torch.full((1, 3), 4.0 / 3.0))
    with pytest.raises(ValueError, match="norm"):
        GCCADConfig(in_dim=3, norm="batch")


def test_baselines_take_the_norm_too():
    from gcad_dist.model.node_update import GraphScaleNorm
    from gcad_dist.train import build_model

    model, cfg = build_model("gin", 5, hidden=8, norm="graph")
    assert cfg.norm == "graph" and all(isinstance(n, GraphScaleNorm) for n in model.norms)
    model, cfg = build_model("gccad", 5, hidden=8, norm="graph")
    assert cfg.norm == "graph" and all(isinstance(u.norm, GraphScaleNorm) for u in model.encoder.node_updates)


@pytest.mark.parametrize("kind", ["gccad", "gin", "mlp"])
def test_input_dropout_acts_in_training_only(kind):
    """Input dropout changes a training forward pass (the same seed, the same weights, another output) and leaves
    evaluation exactly as without it; 0 draws nothing, so a run at 0 is the run before the option existed."""
    from gcad_dist.train import build_model

    torch.manual_seed(0)
    x, ei = torch.randn(30, 6), torch.randint(0, 30, (2, 90))
    outs = {}
    for p in (0.0, 0.5):
        torch.manual_seed(1)
        model, cfg = build_model(kind, 6, hidden=8, contrast="graph", input_dropout=p)
        assert cfg.input_dropout == p
        if p:
            model.load_state_dict(outs[0.0][0])
        model.eval()
        with torch.no_grad():
            ev = model.score(model(x, ei))
        model.train()
        torch.manual_seed(2)
        rng = torch.get_rng_state()
        tr = model.score(model(x, ei)).detach()
        outs[p] = (model.state_dict(), ev, tr, torch.equal(rng, torch.get_rng_state()))
    assert torch.equal(outs[0.0][1], outs[0.5][1])  # evaluation: no dropout
    assert not torch.allclose(outs[0.0][2], outs[0.5][2])  # training: the inputs were dropped
    with pytest.raises(ValueError, match="input_dropout"):
        GCCADConfig(in_dim=3, input_dropout=1.0)


def test_pyg_generated_sources_are_removed_at_exit(tmp_path):
    """PyG writes each MessagePassing class's generated propagate into the temporary folder and never deletes it;
    a process that built GCCAD models and baselines leaves none of those files behind, even one killed without its
    exit hooks (os._exit), and the generated source stays readable (inspect, tracebacks)."""
    import subprocess
    import sys

    code = (
        "import glob, inspect, os, sys, tempfile\n"
        "from gcad_dist.model import GCCAD, GCCADConfig\n"
        "from gcad_dist.model.baselines import BaselineClassifier, BaselineConfig\n"
        "for conv in ('gin', 'sage', 'gat', 'gcn'):\n"
        "    m = GCCAD(GCCADConfig(in_dim=4, hidden=8, conv=conv))\n"
        "for kind in ('gcn', 'gin', 'sage', 'gat'):\n"
        "    BaselineClassifier(BaselineConfig(in_dim=4, kind=kind, hidden=8, heads=2))\n"
        "gen = [n for n in sys.modules if n.endswith('_propagate')]\n"
        "src = inspect.getsource(sys.modules[gen[0]])\n"
        "print(len(gen), 'def propagate' in src, len(glob.glob(os.path.join(tempfile.gettempdir(), '*_propagate_*.py'))))\n"
        "sys.stdout.flush()\n"
        "os._exit(0)\n"
    )
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300,
                       cwd=Path(__file__).resolve().parents[1])
    assert r.returncode == 0, r.stderr
    modules, has_source, files_left = r.stdout.split()[-3:]
    assert int(modules) >= 3 and has_source == "True"  # the generated modules were built, and their source is kept
    assert files_left == "0"  # deleted as soon as the convs were built
    assert not list(tmp_path.glob("*_propagate_*.py"))


@pytest.mark.parametrize("kwargs", [dict(contrast="local", ensemble=3, ball_switch=True),
                                    dict(contrast="local", ensemble=1, degree_detrend=False),
                                    dict(contrast="neighbors", score_space="encoder"),
                                    dict(contrast="neighbors", score_space="projection"),
                                    dict(contrast="ego")],
                         ids=lambda k: ",".join(f"{a}={b}" for a, b in k.items()))
def test_local_scores_do_not_depend_on_the_scoring_block(monkeypatch, kwargs):
    """The local contrasts' scores are computed over blocks of nodes (less memory on large graphs): any block size
    gives every node the same score, for all nodes and for a subset (the ball switch's sample)."""
    import gcad_dist.model.gccad as gccad

    torch.manual_seed(3)
    x, ei = _random_graph(40, 120, 6, seed=3)
    model = GCCAD(GCCADConfig(in_dim=6, hidden=8, **kwargs)).eval()
    idx = torch.tensor([5, 0, 39, 17, 17])
    with torch.no_grad():
        out = model(x, ei)
        whole, some = model.score(out), model._local_score(out, idx=idx)
        for rows in (1, 7, 40):
            monkeypatch.setattr(gccad, "SCORE_ROWS", rows)
            assert torch.allclose(model.score(out), whole, atol=1e-6, rtol=0)
            assert torch.allclose(model._local_score(out, idx=idx), some, atol=1e-6, rtol=0)
        assert model._local_score(out, idx=idx[:0]).shape == (0,)
    assert whole.shape == (40,) and torch.isfinite(whole).all()
