"""Whole-graph scoring of the local contrast in input space (gcad_dist.model.gccad.INPUT_SPACE_SCORING): the features
with a column of ones stand in for h^(0), every context is averaged over them and projected a block at a time. The
scores must be those of the h^(0) path, for every context the local recipe can score with."""

from __future__ import annotations

import pytest
import torch

from gcad_dist.model import GCCAD, GCCADConfig
from gcad_dist.model import ball as ball_module
from gcad_dist.model import gccad as gccad_module

LOCAL = dict(in_dim=5, contrast="local", loss="logistic", hidden=8, ensemble=3)


def _graph(n: int = 120, edges: int = 300, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """A random graph with isolated nodes (the last 5) and a node whose only link is a self-loop (node n - 6)."""
    g = torch.Generator().manual_seed(seed)
    src, dst = torch.randint(0, n - 6, (edges,), generator=g), torch.randint(0, n - 6, (edges,), generator=g)
    ei = torch.cat([torch.stack([torch.cat([src, dst]), torch.cat([dst, src])]), torch.tensor([[n - 6], [n - 6]])], 1)
    return torch.randn(n, 5, generator=g), ei


def _both(model: GCCAD, x: torch.Tensor, ei: torch.Tensor, monkeypatch) -> tuple[torch.Tensor, torch.Tensor]:
    """(scores with h^(0) materialised, scores in input space), same model."""
    with torch.no_grad():
        monkeypatch.setattr(gccad_module, "INPUT_SPACE_SCORING", False)
        ref = model.score(model(x, ei))
        monkeypatch.setattr(gccad_module, "INPUT_SPACE_SCORING", True)
        got = model.score(model(x, ei))
    return ref, got


@pytest.mark.parametrize("options", [
    {}, {"degree_detrend": True}, {"context_hops": 2}, {"loose_context": True, "degree_detrend": True},
    {"ball_switch": True, "degree_detrend": True},
], ids=["plain", "detrend", "ball", "loose", "switch"])
def test_input_space_scores_are_the_h0_scores(options, monkeypatch):
    torch.manual_seed(0)
    x, ei = _graph()
    model = GCCAD(GCCADConfig(**LOCAL, **options)).eval()
    ref, got = _both(model, x, ei, monkeypatch)
    torch.testing.assert_close(got, ref, atol=1e-5, rtol=1e-5)
    with torch.no_grad():
        out = model(x, ei)
    assert out.h0 is None and out.x_in.shape == (x.size(0), 6)  # 6 + 1 columns < 3 x 8: input space
    torch.testing.assert_close(model.lift(out.x_in, out), model.input_projection(x), atol=1e-6, rtol=1e-6)


@pytest.mark.parametrize("ball", [False, True], ids=["neighbours-chosen", "ball-chosen"])
def test_input_space_ball_switch_on_a_sample(ball, monkeypatch):
    """A graph larger than the switch's sample: the switch decides on a sample, and computes every node's ball in
    input space when it chooses the ball."""
    monkeypatch.setattr(ball_module, "SWITCH_SAMPLE", 50)
    monkeypatch.setattr(gccad_module, "ball_reveals_group", lambda plain, b, has: (ball, 0.0, 0.0))
    torch.manual_seed(1)
    x, ei = _graph(n=200, edges=600, seed=1)
    model = GCCAD(GCCADConfig(**LOCAL, ball_switch=True, degree_detrend=True)).eval()
    ref, got = _both(model, x, ei, monkeypatch)
    torch.testing.assert_close(got, ref, atol=1e-5, rtol=1e-5)
    assert model.last_context["context"] == ("ball" if ball else "neighbours")


def test_wide_features_and_training_keep_h0(monkeypatch):
    """Features at least as wide as h^(0) are projected first, as before; training never uses input space."""
    torch.manual_seed(0)
    wide = GCCAD(GCCADConfig(in_dim=30, contrast="local", loss="logistic", hidden=8, ensemble=3)).eval()
    with torch.no_grad():
        out = wide(torch.randn(40, 30), _graph(n=40, edges=80)[1])
    assert out.h0 is not None and out.x_in is None
    model = GCCAD(GCCADConfig(**LOCAL)).train()
    x, ei = _graph()
    out = model(x, ei)
    assert out.h0 is not None and out.x_in is None


def test_input_space_local_pair_and_loss_match(monkeypatch):
    """local_pair (and so the loss, at eval) reads the same rows in input space."""
    torch.manual_seed(0)
    x, ei = _graph()
    model = GCCAD(GCCADConfig(**LOCAL)).eval()
    y = (torch.arange(x.size(0)) % 7 == 0).long()
    with torch.no_grad():
        monkeypatch.setattr(gccad_module, "INPUT_SPACE_SCORING", False)
        ref_out = model(x, ei)
        ref_pair, ref_loss = model.local_pair(ref_out, torch.arange(10)), model.loss(ref_out, y)["total"]
        monkeypatch.setattr(gccad_module, "INPUT_SPACE_SCORING", True)
        out = model(x, ei)
        pair, loss = model.local_pair(out, torch.arange(10)), model.loss(out, y)["total"]
    for a, b in zip(pair, ref_pair):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(loss, ref_loss, atol=1e-5, rtol=1e-5)
