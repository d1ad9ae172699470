"""Tests of the GCCAD objective (gcad_dist/model/loss.py, GCCAD.loss)."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from gcad_dist.model import GCCAD, GCCADConfig
from gcad_dist.model.context import ContextSync
from gcad_dist.model.loss import ce_loss, contrastive_loss, link_loss, link_targets

IDENT = ContextSync()


def _hand_contrastive(z, c, y, batch, mask, tau):
    """Eq. loss written out with loops: mean over normal masked nodes of graphs having an abnormal node."""
    terms = []
    for i in range(len(y)):
        if not mask[i] or y[i] != 0:
            continue
        g = int(batch[i])
        abn = [j for j in range(len(y)) if int(batch[j]) == g and mask[j] and y[j] == 1]
        if not abn:
            continue
        pos = math.exp(sum(a * b for a, b in zip(c[g], z[i])) / tau)
        neg = sum(math.exp(sum(a * b for a, b in zip(c[g], z[j])) / tau) for j in abn)
        terms.append(-math.log(pos / (pos + neg)))
    return sum(terms) / len(terms) if terms else 0.0


def _unit(v):
    n = math.sqrt(sum(a * a for a in v))
    return [a / n for a in v]


def _tiny_case():
    # graph 0: nodes 0..4 (nodes 1 and 3 abnormal, node 4 outside the mask);
    # graph 1: nodes 5..7, no abnormal node -> contributes no term.
    z = [_unit(v) for v in ([1, 0], [0.2, 1], [0.9, 0.3], [-1, 0.1], [0.5, 0.5], [1, 1], [0, 1], [1, -1])]
    c = [_unit([1, 0.2]), _unit([0.3, 1])]
    y = [0, 1, 0, 1, 1, 0, 0, 0]
    batch = [0, 0, 0, 0, 0, 1, 1, 1]
    mask = [True, True, True, True, False, True, True, True]
    return z, c, y, batch, mask


def test_contrastive_loss_matches_hand_computation():
    z, c, y, batch, mask = _tiny_case()
    tau = 0.1
    expected = _hand_contrastive(z, c, y, batch, mask, tau)
    got = contrastive_loss(
        torch.tensor(z), torch.tensor(c), torch.tensor(y), torch.tensor(batch), 2,
        torch.tensor(mask), tau, IDENT,
    )
    assert expected > 0
    assert got.item() == pytest.approx(expected, rel=1e-5)


def test_contrastive_loss_is_stable_for_small_tau():
    z, c, y, batch, mask = _tiny_case()
    for tau in (0.01, 0.003):
        got = contrastive_loss(
            torch.tensor(z), torch.tensor(c), torch.tensor(y), torch.tensor(batch), 2,
            torch.tensor(mask), tau, IDENT,
        )
        assert torch.isfinite(got)
    # tau = 0.01 is still representable by the hand computation (exp(100) fits a double)
    expected = _hand_contrastive(z, c, y, batch, mask, 0.01)
    got = contrastive_loss(
        torch.tensor(z), torch.tensor(c), torch.tensor(y), torch.tensor(batch), 2,
        torch.tensor(mask), 0.01, IDENT,
    )
    assert got.item() == pytest.approx(expected, rel=1e-4)


def test_graph_without_anomaly_gives_finite_zero_loss_and_gradient():
    z = F.normalize(torch.randn(6, 4), dim=-1).requires_grad_()
    c = F.normalize(torch.randn(1, 4), dim=-1)
    y = torch.zeros(6, dtype=torch.long)
    loss = contrastive_loss(z, c, y, torch.zeros(6, dtype=torch.long), 1, torch.ones(6, dtype=torch.bool), 0.1, IDENT)
    assert torch.isfinite(loss) and loss.item() == 0.0
    loss.backward()
    assert torch.isfinite(z.grad).all()


def test_model_loss_without_anomaly_is_finite():
    torch.manual_seed(0)
    model = GCCAD(GCCADConfig(in_dim=5, hidden=8))
    x = torch.randn(10, 5)
    ei = torch.tensor([[0, 1, 2, 3, 4, 5, 6, 7, 8], [1, 2, 3, 4, 5, 6, 7, 8, 9]])
    ei = torch.cat([ei, ei.flip(0)], 1)
    out = model(x, ei)
    losses = model.loss(out, torch.zeros(10, dtype=torch.long))
    assert all(torch.isfinite(v) for v in losses.values())
    losses["total"].backward()
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)


def test_model_loss_equals_hand_computation_on_its_own_embeddings():
    torch.manual_seed(1)
    model = GCCAD(GCCADConfig(in_dim=3, hidden=4, link_loss_weight=0.0)).eval()
    x = torch.randn(6, 3)
    ei = torch.tensor([[0, 1, 1, 2, 3, 4, 4, 5], [1, 0, 2, 1, 4, 3, 5, 4]])
    batch = torch.tensor([0, 0, 0, 1, 1, 1])
    y = torch.tensor([0, 1, 0, 0, 1, 1])
    out = model(x, ei, batch=batch, num_graphs=2)
    losses = model.loss(out, y)
    z = F.normalize(model.head(out.h), dim=-1).tolist()
    c = F.normalize(model.head(out.q), dim=-1).tolist()
    expected = _hand_contrastive(z, c, y.tolist(), batch.tolist(), [True] * 6, 0.1)
    assert losses["con"].item() == pytest.approx(expected, rel=1e-5)
    assert losses["total"].item() == pytest.approx(expected, rel=1e-5)


def test_loss_and_scores_do_not_depend_on_node_order():
    torch.manual_seed(2)
    n = 30
    x = torch.randn(n, 6)
    src = torch.randint(0, n, (80,))
    dst = torch.randint(0, n, (80,))
    keep = src != dst
    ei = torch.stack([src[keep], dst[keep]])
    ei = torch.cat([ei, ei.flip(0)], 1)
    y = (torch.rand(n) < 0.2).long()
    y[0] = 1
    mask = torch.rand(n) < 0.8
    model = GCCAD(GCCADConfig(in_dim=6, hidden=8)).eval()
    out = model(x, ei)
    loss = model.loss(out, y, mask)
    perm = torch.randperm(n)
    inv = torch.empty_like(perm)
    inv[perm] = torch.arange(n)  # new id of old node k is inv[k]
    out_p = model(x[perm], inv[ei])
    loss_p = model.loss(out_p, y[perm], mask[perm])
    for key in ("total", "con", "link"):
        assert loss_p[key].item() == pytest.approx(loss[key].item(), rel=1e-5, abs=1e-7)
    torch.testing.assert_close(model.score(out_p), model.score(out)[perm], rtol=1e-5, atol=1e-6)


def test_labels_outside_mask_are_ignored():
    torch.manual_seed(3)
    model = GCCAD(GCCADConfig(in_dim=4, hidden=8)).eval()
    x = torch.randn(12, 4)
    ei = torch.tensor([[i for i in range(11)], [i + 1 for i in range(11)]])
    ei = torch.cat([ei, ei.flip(0)], 1)
    y = torch.tensor([0, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0])
    mask = torch.ones(12, dtype=torch.bool)
    mask[8:] = False
    out = model(x, ei)
    base = model.loss(out, y, mask)
    y2 = y.clone()
    y2[8:] = torch.tensor([1, 0, 1, 1])
    other = model.loss(out, y2, mask)
    full = model.loss(out, y2)
    assert other["total"].item() == pytest.approx(base["total"].item(), rel=1e-6)
    assert full["total"].item() != pytest.approx(base["total"].item(), rel=1e-3)


def test_link_loss_matches_hand_computation():
    ei = torch.tensor([[0, 1, 0, 2, 2, 3, 1, 4], [1, 0, 2, 0, 3, 2, 3, 0]])
    y = torch.tensor([0, 0, 1, 1, 0])
    mask = torch.tensor([True, True, True, True, False])
    logits = [torch.tensor([0.5, -0.2, 1.0, 0.3, -1.5, 2.0, 0.7, 0.1]), torch.tensor([1.0, 1.0, -1.0, 0.0, 0.4, -0.3, 0.2, 3.0])]
    total, count = 0.0, 0
    for lg in logits:
        for e in range(ei.size(1)):
            a, b = int(ei[0, e]), int(ei[1, e])
            if not (mask[a] and mask[b]) or (y[a] == 1 and y[b] == 1):
                continue
            p = 1 / (1 + math.exp(-float(lg[e])))
            t = 1.0 if (y[a] == 0 and y[b] == 0) else 0.0
            total += -(t * math.log(p) + (1 - t) * math.log(1 - p))
            count += 1
    assert count == 2 * 5  # per layer: 0-1 both ways (positive), 0-2 both ways and 1-3 (negative)
    assert link_loss(logits, ei, y, mask).item() == pytest.approx(total / count, rel=1e-5)
    target, used = link_targets(ei, y, mask)
    assert used.tolist() == [True, True, True, True, False, False, True, False]
    assert target[used].tolist() == [1.0, 1.0, 0.0, 0.0, 0.0]


def test_ce_loss_matches_torch_cross_entropy_on_masked_nodes():
    logits = torch.randn(7, 2)
    y = torch.tensor([0, 1, 0, 0, 1, 0, 1])
    mask = torch.tensor([True, True, False, True, True, False, True])
    expected = F.cross_entropy(logits[mask], y[mask])
    assert ce_loss(logits, y, mask).item() == pytest.approx(expected.item(), rel=1e-6)


def test_ce_ablation_trains_classifier_and_scores_probabilities():
    torch.manual_seed(4)
    model = GCCAD(GCCADConfig(in_dim=4, hidden=8, loss="ce"))
    x = torch.randn(10, 4)
    ei = torch.tensor([[0, 1, 2, 3, 4], [1, 2, 3, 4, 5]])
    y = torch.tensor([0, 1, 0, 0, 1, 0, 0, 0, 0, 0])
    out = model(x, ei)
    losses = model.loss(out, y)
    expected = F.cross_entropy(out.logits, y)
    assert losses["con"].item() == pytest.approx(expected.item(), rel=1e-6)
    losses["total"].backward()
    assert model.classifier.net[0].weight.grad.abs().sum() > 0
    s = model.score(out)
    assert ((s >= 0) & (s <= 1)).all()
