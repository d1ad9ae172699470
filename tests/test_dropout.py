"""gcad_dist.model.dropout: the CPU dropout of the node updates."""

from __future__ import annotations

import pytest
import torch


def test_fast_dropout_rate_scale_gradient_and_eval():
    import gcad_dist.model.dropout as dmod

    torch.manual_seed(0)
    x = torch.ones(4000, 64, requires_grad=True)
    d = dmod.Dropout(0.1)
    y = d(x)
    kept = (y != 0).float().mean().item()
    assert abs(kept - 0.9) < 0.005
    assert torch.allclose(y[y != 0], torch.full_like(y[y != 0], 1 / 0.9), atol=1e-4)  # inverted dropout
    y.sum().backward()
    assert torch.equal(x.grad, y.detach())  # d(x * mask)/dx = mask, and x = 1
    d.eval()
    assert d(x) is x
    torch.manual_seed(3)
    a = dmod.fast_dropout(torch.ones(10, 8), 0.5)
    torch.manual_seed(3)
    assert torch.equal(a, dmod.fast_dropout(torch.ones(10, 8), 0.5))  # follows torch.manual_seed
    with pytest.raises(ValueError):
        dmod.Dropout(1.0)
