"""The fused weighted aggregation equals PyG's propagate (values and gradients)."""

import pytest
import torch
from torch_geometric.utils import scatter

import gcad_dist.model.aggregate as agg


@pytest.mark.parametrize("with_weight", [True, False])
def test_weighted_sum_matches_scatter(monkeypatch, with_weight):
    monkeypatch.setattr(agg, "EDGE_CHUNK", 37)  # several blocks, the last one partial
    torch.manual_seed(0)
    x = torch.randn(25, 4, dtype=torch.float64, requires_grad=True)
    ei = torch.randint(0, 25, (2, 300))
    w = torch.rand(300, dtype=torch.float64, requires_grad=True) if with_weight else None
    out = agg.weighted_sum(x, ei, w, num_nodes=30)
    msg = x[ei[0]] * (w[:, None] if with_weight else 1.0)
    ref = scatter(msg, ei[1], dim=0, dim_size=30, reduce="sum")
    torch.testing.assert_close(out, ref)
    inputs = (x, w) if with_weight else (x,)
    assert torch.autograd.gradcheck(lambda *a: agg.weighted_sum(a[0], ei, a[1] if with_weight else None, 30),
                                    inputs, eps=1e-6, atol=1e-6)


def test_weighted_sum_no_edges():
    x = torch.randn(3, 2, requires_grad=True)
    out = agg.weighted_sum(x, torch.empty(2, 0, dtype=torch.long), torch.empty(0))
    assert out.shape == (3, 2) and out.abs().sum() == 0
    out.sum().backward()
    assert x.grad.abs().sum() == 0
