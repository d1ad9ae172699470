"""The loose context (gcad_dist.model.loose_context; GCCADConfig.loose_context; pretrain / score --loose-context)."""

from __future__ import annotations

import itertools
import logging

import numpy as np
import pytest
import torch

from gcad_dist.model import GCCAD, GCCADConfig
from gcad_dist.model.loose_context import common_neighbours, embedded_link_weights, larger_z, robust_z
from gcad_dist.model.readout import neighbour_context


def _reference(edge_index: torch.Tensor, n: int) -> np.ndarray:
    """Common neighbours by a dense adjacency (undirected, no self-loops, no repeats)."""
    a = np.zeros((n, n), dtype=np.int64)
    src, dst = edge_index.numpy()
    a[src, dst] = a[dst, src] = 1
    np.fill_diagonal(a, 0)
    c = a @ a
    out = c[src, dst]
    out[src == dst] = 0
    return out


@pytest.mark.parametrize("chunk", [1, 7, 1 << 24])
def test_common_neighbours_match_a_dense_count(chunk: int) -> None:
    g = torch.Generator().manual_seed(3)
    for n, e in ((6, 12), (40, 300)):
        ei = torch.randint(0, n, (2, e), generator=g)  # repeats and self-loops included
        np.testing.assert_array_equal(common_neighbours(ei, n, max_lookups=chunk).numpy(), _reference(ei, n))
    assert common_neighbours(torch.zeros(2, 0, dtype=torch.long), 5).numel() == 0


def _ring_graph() -> tuple[torch.Tensor, int, list[int]]:
    """A 5-clique (nodes 0-4) each of whose members also links to two outside nodes of a 20-node path."""
    ring = list(range(5))
    edges = list(itertools.combinations(ring, 2)) + [(i, i + 1) for i in range(5, 24)]
    edges += [(m, 5 + 4 * m) for m in ring] + [(m, 7 + 4 * m) for m in ring]
    ei = torch.tensor(edges).t()
    return torch.cat([ei, ei.flip(0)], dim=1), 25, ring


def test_links_inside_a_dense_group_weigh_little() -> None:
    ei, n, ring = _ring_graph()
    w = embedded_link_weights(ei, n)
    inside = torch.isin(ei[0], torch.tensor(ring)) & torch.isin(ei[1], torch.tensor(ring))
    assert torch.allclose(w[inside], torch.tensor(1 / 16))  # 3 common neighbours inside a 5-clique: (1 + 3)^-2
    assert torch.allclose(w[~inside], torch.tensor(1.0))  # the path and the ring's outside links share none
    # a ring member's loose context is mostly its outside neighbours: with alike members and unlike outsiders it
    # disagrees with the loose context and agrees with the plain mean
    x = torch.zeros(n, 2)
    x[:, 0] = 1.0
    x[ring] = torch.tensor([0.0, 1.0])
    plain, loose = neighbour_context(x, ei, n), neighbour_context(x, ei, n, w)
    assert float(plain[0, 1]) == pytest.approx(4 / 6)
    assert float(loose[0, 1]) == pytest.approx((4 / 16) / (4 / 16 + 2))


def test_larger_z_is_the_larger_robust_z_and_lone_nodes_sit_at_zero() -> None:
    a = torch.tensor([1.0, 2.0, 3.0, 4.0, 100.0, 7.0])
    b = torch.tensor([4.0, 3.0, 2.0, 1.0, 0.0, -5.0])
    has = torch.tensor([True, True, True, True, True, False])
    za, zb = robust_z(a, has), robust_z(b, has)
    assert float(za[5]) == 0.0 and float(zb[5]) == 0.0
    assert float(za[2]) == 0.0  # the median of the nodes with neighbours
    assert float(za[3]) == pytest.approx(1 / 1.4826)  # MAD 1
    torch.testing.assert_close(larger_z(a, b, has), torch.maximum(za, zb).float())


def test_the_model_keeps_the_larger_z_of_its_two_contexts() -> None:
    """``loose_context``: the local score is larger_z of the plain score and the loose-context score, each made
    neutral to degree as the plain one is; the training path and the plain score are unchanged."""
    torch.manual_seed(0)
    ei, n, ring = _ring_graph()
    x = torch.randn(n, 6)
    off = GCCAD(GCCADConfig(in_dim=6, contrast="local", loss="logistic", ensemble=3, degree_detrend=True)).eval()
    on = GCCAD(GCCADConfig(in_dim=6, contrast="local", loss="logistic", ensemble=3, degree_detrend=True,
                           loose_context=True)).eval()
    on.load_state_dict(off.state_dict())
    with torch.no_grad():
        out = off(x, ei)
        plain = off.score(out)
        loose_ctx = neighbour_context(off._rows(out), ei, n, embedded_link_weights(ei, n))  # h0 or [x, 1] rows
        loose = off._neutral_to_degree(off._local_score(out, loose_ctx), out, True)
        got = on.score(on(x, ei))
    has = torch.ones(n, dtype=torch.bool)
    torch.testing.assert_close(got, larger_z(plain, loose, has))
    assert not torch.allclose(plain, loose)
    with pytest.raises(ValueError, match="loose_context needs"):
        GCCADConfig(in_dim=6, contrast="local", loss="logistic", context_hops=2, loose_context=True)
    with pytest.raises(ValueError, match="loose_context needs"):
        GCCADConfig(in_dim=6, loose_context=True)  # the paper's graph contrast


def test_pretrain_option_and_recipe_default() -> None:
    from gcad_dist.distributed.train_loop import model_config
    from gcad_dist.pretrain import PretrainConfig, apply_recipe, parse_config

    local = apply_recipe(PretrainConfig(store="s"), store_corrupted=False)
    paper = apply_recipe(PretrainConfig(store="s"), store_corrupted=True)
    assert paper.loose_context is False
    assert model_config(local, in_dim=4).loose_context is local.loose_context
    on = apply_recipe(PretrainConfig(store="s", loose_context=True), store_corrupted=False)
    assert model_config(on, in_dim=4).loose_context is True
    assert parse_config(["--store", "s", "--loose-context"]).loose_context is True
    assert parse_config(["--store", "s"]).loose_context is None  # the recipe's


def test_harness_option_keeps_earlier_run_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    from gcad_dist.detectors import gccad_pre, settings_of

    old = settings_of("gccad-pre", {"pre_loose_context": False})
    assert "pre_loose_context" not in old
    assert settings_of("gccad-pre", {"pre_loose_context": True}) == {**old, "pre_loose_context": True}
    seen: list[dict] = []
    monkeypatch.setattr(gccad_pre, "_pipeline", lambda *a: seen.append(a[6]) or np.zeros(1))
    for value in (False, True):
        gccad_pre.fit_score(None, None, 0, pre_loose_context=value)
    assert "loose_context" not in seen[0] and seen[1]["loose_context"] is True


def test_score_option_scores_a_checkpoint_with_the_loose_context(rings_graph, tmp_path, make_checkpoint, run_score,
                                                                 caplog) -> None:
    pytest.importorskip("pyarrow")
    pd = pytest.importorskip("pandas")
    from gcad_dist.score import load_checkpoint_model, prepare_data, score_data

    graph = rings_graph
    caplog.set_level(logging.INFO, logger="gcad_dist.score")
    ck = make_checkpoint("local", contrast="local", loss="logistic", tau=0.2, degree_detrend=True)
    outs = {}
    for flag in (None, "--no-loose-context", "--loose-context"):
        out = tmp_path / f"s{flag}.parquet"
        code, err = run_score(["--checkpoint", str(ck), "--graph", str(graph), "--out", str(out)]
                              + ([] if flag is None else [flag]))
        assert code == 0, err
        outs[flag] = pd.read_parquet(out)["score"].to_numpy()
    assert "--loose-context: scoring with the loose context" in caplog.text
    np.testing.assert_array_equal(outs[None], outs["--no-loose-context"])  # as trained: off
    loaded = load_checkpoint_model(ck)
    loaded.model.config.loose_context = True
    np.testing.assert_allclose(outs["--loose-context"],
                               score_data(loaded.model, prepare_data(str(graph), loaded), device="cpu"),
                               rtol=1e-5, atol=1e-5)
    paper = make_checkpoint("paper")
    code, err = run_score(["--checkpoint", str(paper), "--graph", str(graph), "--out", str(tmp_path / "p.parquet"),
                           "--loose-context"])
    assert code == 2 and "--loose-context: applies to label-free local checkpoints" in err
    code, err = run_score(["--checkpoint", str(ck), "--graph", str(graph), "--out", str(tmp_path / "b.parquet"),
                           "--context-hops", "2", "--loose-context"])
    assert code == 2 and "pass --context-hops 1 too" in err
