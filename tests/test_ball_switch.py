"""The ball switch (gcad_dist.model.ball.ball_reveals_group; GCCADConfig.ball_switch; pretrain --ball-switch;
score --context-hops auto): the two-hop ball as context where it makes a group stand out that the neighbours hide."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from gcad_dist.model import GCCAD, GCCADConfig
from gcad_dist.model import ball as ball_module
from gcad_dist.model.ball import ball_reveals_group

#: the label-free recipe's model, small
LOCAL = dict(in_dim=5, contrast="local", loss="logistic", ensemble=2, degree_detrend=True)


def _with_outliers(n: int, share: float, seed: int) -> torch.Tensor:
    """Gaussian scores with ``share`` of the nodes pushed far out (robust z well above 3)."""
    g = torch.Generator().manual_seed(seed)
    s = torch.randn(n, generator=g)
    s[: int(share * n)] += 20.0
    return s


def _graph_and_three_models(n: int, edges: int) -> tuple:
    """(x, edge_index, and one local model scoring with the neighbours, the ball and the switch, same weights) on a
    random graph."""
    torch.manual_seed(0)
    src, dst = torch.randint(0, n, (edges,)), torch.randint(0, n, (edges,))
    ei = torch.stack([torch.cat([src, dst]), torch.cat([dst, src])])
    x = torch.randn(n, 5)
    plain = GCCAD(GCCADConfig(**LOCAL)).eval()
    hops2 = GCCAD(GCCADConfig(**LOCAL, context_hops=2)).eval()
    switch = GCCAD(GCCADConfig(**LOCAL, ball_switch=True)).eval()
    hops2.load_state_dict(plain.state_dict())
    switch.load_state_dict(plain.state_dict())
    return x, ei, plain, hops2, switch


def test_the_switch_needs_a_group_the_neighbours_hide() -> None:
    n = 2000
    has = torch.ones(n, dtype=torch.bool)
    use, t1, t2 = ball_reveals_group(_with_outliers(n, 0.0, 0), _with_outliers(n, 0.06, 1), has)
    assert use and t1 < 0.01 and t2 >= 0.06
    # the ball sees no more than the neighbours: no switch
    assert not ball_reveals_group(_with_outliers(n, 0.06, 0), _with_outliers(n, 0.07, 1), has)[0]
    # a few more nodes stand out with the ball, under 1% of them: no switch
    assert not ball_reveals_group(_with_outliers(n, 0.0, 0), _with_outliers(n, 0.005, 1), has)[0]
    # 1% more but not 1.15 times as many (a graph where many nodes stand out either way): no switch
    assert not ball_reveals_group(_with_outliers(n, 0.10, 0), _with_outliers(n, 0.112, 1), has)[0]
    # 1.3 times as many and 2% more (a weibo-like graph's shares, session 49): the ball
    assert ball_reveals_group(_with_outliers(n, 0.07, 0), _with_outliers(n, 0.092, 1), has)[0]
    # nodes without neighbours are not counted
    alone = torch.zeros(n, dtype=torch.bool)
    assert ball_reveals_group(_with_outliers(n, 0.0, 0), _with_outliers(n, 0.5, 1), alone) == (False, 0.0, 0.0)


@pytest.mark.parametrize("use", [True, False])
def test_the_model_scores_with_the_ball_or_the_neighbours_as_the_switch_says(use: bool, monkeypatch) -> None:
    x, ei, plain, hops2, switch = _graph_and_three_models(80, 300)
    monkeypatch.setattr("gcad_dist.model.gccad.ball_reveals_group", lambda a, b, h: (use, 0.01, 0.05))
    with torch.no_grad():
        want = (hops2 if use else plain).score((hops2 if use else plain)(x, ei))
        got = switch.score(switch(x, ei))
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    assert switch.last_context["context"] == ("ball" if use else "neighbours")
    with torch.no_grad():
        switch.score(switch(x, ei))  # a second graph or part: the choices are counted over calls
    assert switch.context_choices == {"ball": 2 * use, "neighbours": 2 * (not use)}
    with pytest.raises(ValueError, match="ball_switch needs"):
        GCCADConfig(**LOCAL, context_hops=2, ball_switch=True)
    with pytest.raises(ValueError, match="ball_switch needs"):
        GCCADConfig(**LOCAL, loose_context=True, ball_switch=True)


def test_pretrain_option_and_recipe() -> None:
    from gcad_dist.distributed.train_loop import model_config
    from gcad_dist.pretrain import PretrainConfig, RECIPES, apply_recipe, parse_config

    local = apply_recipe(PretrainConfig(store="s"), store_corrupted=False)
    assert local.ball_switch is RECIPES["local"]["ball_switch"] is True  # the default since session 49
    assert apply_recipe(PretrainConfig(store="s"), store_corrupted=True).ball_switch is False
    # the recipe's switch gives way to another context asked for
    assert apply_recipe(PretrainConfig(store="s", context_hops=2), store_corrupted=False).ball_switch is False
    assert apply_recipe(PretrainConfig(store="s", loose_context=True), store_corrupted=False).ball_switch is False
    on = apply_recipe(PretrainConfig(store="s", ball_switch=True), store_corrupted=False)
    assert model_config(on, in_dim=4).ball_switch is True
    assert parse_config(["--store", "s", "--no-ball-switch"]).ball_switch is False
    assert parse_config(["--store", "s"]).ball_switch is None
    assert (ball_module.SWITCH_Z, ball_module.SWITCH_SHARE, ball_module.SWITCH_RATIO) == (3.0, 0.01, 1.15)  # documented


def test_harness_option_keeps_earlier_run_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    from gcad_dist.detectors import gccad_pre, settings_of

    old = settings_of("gccad-pre", {"pre_ball_switch": False})
    assert "pre_ball_switch" not in old
    assert settings_of("gccad-pre", {"pre_ball_switch": True}) == {**old, "pre_ball_switch": True}
    seen: list[dict] = []
    monkeypatch.setattr(gccad_pre, "_pipeline", lambda *a: seen.append(a[6]) or np.zeros(1))
    gccad_pre.fit_score(None, None, 0, pre_ball_switch=True)
    gccad_pre.fit_score(None, None, 0, pre_ball_switch=True, pre_context_hops=2)
    assert seen[0]["ball_switch"] is True and seen[1]["ball_switch"] is False
    gccad_pre.fit_score(None, None, 0)  # the recipe's default since session 49: on, in the run key
    assert seen[2]["ball_switch"] is gccad_pre.LOCAL_BALL_SWITCH is True
    assert settings_of("gccad-pre", {})["pre_ball_switch"] is True


def test_score_context_hops_auto_records_its_choice(rings_graph, tmp_path, make_checkpoint, run_score) -> None:
    pytest.importorskip("pyarrow")
    ck = make_checkpoint("local", contrast="local", loss="logistic", tau=0.2, degree_detrend=True)
    argv = ["--checkpoint", str(ck), "--graph", str(rings_graph), "--out", str(tmp_path / "s.parquet"),
            "--context-hops", "auto"]
    code, err = run_score(argv)
    assert code == 0, err
    m = json.loads((tmp_path / "s.parquet.metrics.json").read_text())
    assert m["context"]["context"] in ("ball", "neighbours") and 0 <= m["context"]["stand_out_ball"] <= 1
    code, err = run_score(argv + ["--loose-context"])
    assert code == 2 and "pass one of them" in err


def test_the_score_command_reports_the_choices_once(caplog) -> None:
    """``gcad_dist.score`` logs the switch once: the shares for one graph, the counts for a scoring part by part."""
    import logging
    from types import SimpleNamespace

    from gcad_dist.score import _report_ball_switch

    caplog.set_level(logging.INFO, logger="gcad_dist.score")
    assert _report_ball_switch(SimpleNamespace()) is None  # a model without the switch
    one = {"context": "ball", "stand_out_neighbours": 0.01, "stand_out_ball": 0.08}
    assert _report_ball_switch(SimpleNamespace(last_context=one, context_choices={"ball": 1, "neighbours": 0})) == one
    assert "1.0% of the nodes stand out" in caplog.text and "scored with the ball" in caplog.text
    parts = _report_ball_switch(SimpleNamespace(last_context=one, context_choices={"ball": 2, "neighbours": 5}))
    assert parts == {"context": "per part", "ball": 2, "neighbours": 5}
    assert "2 of 7 graphs or parts scored with the two-hop ball" in caplog.text


def test_ball_mean_of_some_targets_gives_their_rows_of_the_whole_ball() -> None:
    from gcad_dist.model.ball import ball_mean

    torch.manual_seed(3)
    n = 200
    src, dst = torch.randint(0, n, (900,)), torch.randint(0, n, (900,))
    ei = torch.stack([torch.cat([src, dst]), torch.cat([dst, src])])
    h = torch.randn(n, 6)
    targets = torch.tensor([0, 5, 17, 60, 199])
    whole, size = ball_mean(h, ei, n, 4, torch.Generator().manual_seed(0))
    some, some_size = ball_mean(h, ei, n, 4, torch.Generator().manual_seed(0), targets=targets)
    torch.testing.assert_close(some[targets], whole[targets])
    assert torch.equal(some_size[targets], size[targets])
    rest = torch.ones(n, dtype=torch.bool)
    rest[targets] = False
    assert not some[rest].any() and not some_size[rest].any()


@pytest.mark.parametrize("use", [True, False])
def test_a_large_graph_is_decided_on_a_sample(use: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """Above SWITCH_SAMPLE nodes the shares come from a fixed sample of the nodes; the ball, when chosen, is every
    node's, as --context-hops 2 scores it."""
    n = 300
    x, ei, plain, hops2, switch = _graph_and_three_models(n, 1500)
    assert ball_module.switch_sample(n) is None  # the default sample is far larger than this graph
    monkeypatch.setattr(ball_module, "SWITCH_SAMPLE", 120)
    sample = ball_module.switch_sample(n)
    assert sample.numel() == 120 and torch.equal(sample, torch.sort(sample).values)
    assert torch.equal(sample, ball_module.switch_sample(n))  # fixed
    seen = []
    monkeypatch.setattr("gcad_dist.model.gccad.ball_reveals_group",
                        lambda a, b, h: seen.append((a.numel(), b.numel(), h.numel())) or (use, 0.01, 0.05))
    with torch.no_grad():
        out = switch(x, ei)
        assert torch.equal(out.ball_nodes, sample)
        got = switch.score(out)
        want = (hops2 if use else plain).score((hops2 if use else plain)(x, ei))
    assert seen == [(120, 120, 120)]
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
