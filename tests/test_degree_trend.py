"""The label-free local score made neutral to degree (gcad_dist.model.degree_trend; GCCADConfig.degree_detrend)."""

from __future__ import annotations

import pytest
import torch

from gcad_dist.metrics import auroc
from gcad_dist.model import GCCAD, GCCADConfig
from gcad_dist.model.degree_trend import degree_slope, remove_degree_trend


def test_the_trend_is_removed_and_the_level_kept() -> None:
    g = torch.Generator().manual_seed(0)
    deg = torch.randint(1, 200, (500,), generator=g)
    s = 0.5 - 0.05 * torch.log1p(deg.float()) + 0.01 * torch.randn(500, generator=g)
    assert degree_slope(s, deg) == pytest.approx(-0.05, abs=0.005)
    out = remove_degree_trend(s, deg)
    assert abs(degree_slope(out, deg)) < 1e-9
    assert float(out.mean()) == pytest.approx(float(s.mean()), abs=1e-6)  # the line's level stays
    assert out.dtype == s.dtype and out.shape == s.shape


def test_nodes_without_neighbours_are_left_as_they_are_and_do_not_fit_the_line() -> None:
    deg = torch.tensor([0, 1, 2, 4, 8, 16, 0])
    s = torch.tensor([9.0, 1.0, 0.9, 0.8, 0.7, 0.6, -3.0])
    out = remove_degree_trend(s, deg)
    assert out[0] == 9.0 and out[6] == -3.0
    assert degree_slope(s, deg) == pytest.approx(degree_slope(s[1:6], deg[1:6]))


@pytest.mark.parametrize("deg", [torch.tensor([3, 3, 3, 3]), torch.tensor([0, 0, 5, 2]), torch.zeros(4, dtype=torch.long)])
def test_no_line_to_fit_changes_nothing(deg) -> None:
    s = torch.tensor([0.1, 0.4, 0.2, 0.3])
    assert torch.equal(remove_degree_trend(s, deg), s)


def test_anomalies_hidden_by_the_degree_trend_come_first() -> None:
    """Normal scores fall with degree; anomalies sit a little above their own degree's normals. Raw, the low-degree
    normals outrank the high-degree anomalies; with the trend removed every anomaly outranks them."""
    g = torch.Generator().manual_seed(1)
    n = 2000
    deg = torch.randint(1, 300, (n,), generator=g)
    y = torch.zeros(n, dtype=torch.long)
    y[torch.randperm(n, generator=g)[:100]] = 1
    s = 1.0 - 0.15 * torch.log1p(deg.float()) + 0.02 * torch.randn(n, generator=g) + 0.2 * y
    before, after = auroc(y.numpy(), s.numpy()), auroc(y.numpy(), remove_degree_trend(s, deg).numpy())
    assert before < 0.9 and after > 0.99


def _star_and_ring(n: int = 40, f: int = 6, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Ring with chords plus a hub joined to a third of the nodes, and node n-1 left alone; random features."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, f, generator=g)
    i = torch.arange(n - 1)
    src = torch.cat([i, i, torch.zeros(12, dtype=torch.long)])
    dst = torch.cat([(i + 1) % (n - 1), (i + 5) % (n - 1), torch.arange(2, 38, 3)])
    ei = torch.stack([src, dst])
    return x, torch.cat([ei, ei.flip(0)], 1)


@pytest.mark.parametrize("members", [1, 3])
def test_local_model_scores_with_the_trend_removed_when_asked(members) -> None:
    """``degree_detrend``: the local score is the plain one with its degree trend removed, a node without neighbours
    still at the median of the others; off (the paper's and earlier checkpoints' setting) it is unchanged."""
    torch.manual_seed(0)
    x, ei = _star_and_ring()
    plain_model = GCCAD(GCCADConfig(in_dim=6, contrast="local", loss="logistic", ensemble=members)).eval()
    model = GCCAD(GCCADConfig(in_dim=6, contrast="local", loss="logistic", ensemble=members, degree_detrend=True)).eval()
    model.load_state_dict(plain_model.state_dict())
    with torch.no_grad():
        plain = plain_model.score(plain_model(x, ei))
        got = model.score(model(x, ei))
    deg = torch.bincount(ei[1], minlength=x.size(0))
    want = remove_degree_trend(plain, deg)
    rest = deg > 0
    assert torch.allclose(got[rest], want[rest], atol=1e-6)
    assert not torch.allclose(got[rest], plain[rest])
    assert got[-1] == pytest.approx(float(got[rest].median()))
    assert abs(degree_slope(got, deg)) < 1e-5


def test_the_local_recipe_detrends_and_the_papers_does_not() -> None:
    """``pretrain --degree-detrend``: the local recipe's default is on, the paper's off, an explicit value wins, and
    the pre-trained model's config carries it (so gcad_dist.score and gcad_dist.finetune score as pre-training did)."""
    from gcad_dist.distributed.train_loop import model_config
    from gcad_dist.pretrain import PretrainConfig, apply_recipe, parse_config

    local = apply_recipe(PretrainConfig(store="s"), store_corrupted=False)
    paper = apply_recipe(PretrainConfig(store="s"), store_corrupted=True)
    assert local.degree_detrend is True and paper.degree_detrend is False
    assert apply_recipe(PretrainConfig(store="s", degree_detrend=False), store_corrupted=False).degree_detrend is False
    assert model_config(local, in_dim=4).degree_detrend is True
    assert model_config(paper, in_dim=4).degree_detrend is False
    assert parse_config(["--store", "s", "--no-degree-detrend"]).degree_detrend is False
    assert parse_config(["--store", "s"]).degree_detrend is None  # the recipe's


def test_harness_option_for_the_detrend_keeps_earlier_run_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    """``gcad_dist.quality --pre-degree-detrend``: off is earlier sessions' gccad-pre (their run key), the default (on)
    is a new key; the harness passes the setting to pre-training."""
    import numpy as np

    from gcad_dist.detectors import gccad_pre, settings_of
    from gcad_dist.quality import build_parser

    old = settings_of("gccad-pre", {"pre_degree_detrend": False})
    assert "pre_degree_detrend" not in old
    assert settings_of("gccad-pre", {}) == {**old, "pre_degree_detrend": True}
    assert vars(build_parser().parse_args(["--no-pre-degree-detrend"]))["pre_degree_detrend"] is False
    seen: list[dict] = []
    monkeypatch.setattr(gccad_pre, "_pipeline", lambda *a: seen.append(a[6]) or np.zeros(1))
    for value in (None, False):
        gccad_pre.fit_score(None, None, 0, pre_degree_detrend=value)
    assert [s["degree_detrend"] for s in seen] == [True, False]
