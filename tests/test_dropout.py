"""gcad_dist.model.dropout: the CPU dropout of the node updates."""

from __future__ import annotations

import pytest
import torch


@pytest.mark.parametrize("kernels", ["native", "pytorch"])
def test_fast_dropout_rate_scale_gradient_and_eval(monkeypatch, kernels):
    """Both CPU masks (the native hash, recomputed in the backward; the PyTorch one, kept): the rate, the inverted
    scale, the gradient (the same mask), eval mode, and the seed from torch's generator."""
    import gcad_dist.model.dropout as dmod
    from gcad_dist.model import native

    monkeypatch.setenv(native.ENV, "1" if kernels == "native" else "0")
    if kernels == "native" and not native.available():
        pytest.skip(native.status())
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


def test_native_dropout_mask_is_the_same_on_any_number_of_threads():
    """The hash mask depends on (seed, row, unit) only: 1 and 2 threads give the same output, rows differ."""
    from gcad_dist.model import native

    if not native.available():
        pytest.skip(native.status())
    x = torch.randn(20_000, 64)
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        a = native.dropout(x, 0.3, seed=7)
        torch.set_num_threads(2)
        b = native.dropout(x, 0.3, seed=7)
    finally:
        torch.set_num_threads(before)
    assert torch.equal(a, b)
    assert not torch.equal(a[0] == 0, a[1] == 0)  # another row, another mask
    assert not torch.equal(a, native.dropout(x, 0.3, seed=8))


def test_native_dropout_mask_is_the_same_in_bf16():
    """Under bf16 autocast the node updates' dropout draws the fp32 mask: the same entries are dropped."""
    import gcad_dist.model.dropout as dmod
    from gcad_dist.model import native

    if not native.available():
        pytest.skip(native.status())
    x = torch.rand(500, 64) + 0.5  # no zeros of its own
    torch.manual_seed(5)
    a = dmod.fast_dropout(x, 0.2)
    torch.manual_seed(5)
    b = dmod.fast_dropout(x.bfloat16(), 0.2)
    assert b.dtype == torch.bfloat16
    assert torch.equal(a == 0, b == 0)
    torch.testing.assert_close(b.float(), a, rtol=1e-2, atol=1e-2)
