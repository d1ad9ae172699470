"""gcad_dist.score --context-hops: a label-free local checkpoint scored with its neighbours or its two-hop ball."""

from __future__ import annotations

import logging

import numpy as np
import pytest

from gcad_dist.score import load_checkpoint_model, prepare_data, score_data

pd = pytest.importorskip("pandas")
pytest.importorskip("pyarrow")


def test_context_hops_2_scores_a_one_hop_checkpoint_with_the_ball(rings_graph, tmp_path, make_checkpoint, run_score,
                                                                  caplog) -> None:
    graph = rings_graph
    caplog.set_level(logging.INFO, logger="gcad_dist.score")
    ck = make_checkpoint("local", contrast="local", loss="logistic", tau=0.2, degree_detrend=True)
    outs = {}
    for hops in (None, 1, 2):
        out = tmp_path / f"s{hops}.parquet"
        code, err = run_score(["--checkpoint", str(ck), "--graph", str(graph), "--out", str(out)]
                              + ([] if hops is None else ["--context-hops", str(hops)]))
        assert code == 0, err
        outs[hops] = pd.read_parquet(out)["score"].to_numpy()
        if hops == 2:
            assert "--context-hops 2: scoring with the two-hop ball" in caplog.text
    np.testing.assert_array_equal(outs[None], outs[1])  # 1 = as trained
    assert not np.allclose(outs[1], outs[2])
    loaded = load_checkpoint_model(ck)
    loaded.model.config.context_hops = 2
    np.testing.assert_allclose(outs[2], score_data(loaded.model, prepare_data(str(graph), loaded), device="cpu"),
                               rtol=1e-5, atol=1e-6)


def test_context_hops_on_another_model_is_a_usage_error(rings_graph, tmp_path, make_checkpoint, run_score) -> None:
    graph = rings_graph
    ck = make_checkpoint("paper")  # the paper's graph contrast: its context is its layers'
    code, err = run_score(["--checkpoint", str(ck), "--graph", str(graph), "--out", str(tmp_path / "s.parquet"),
                        "--context-hops", "2"])
    assert code == 2 and "--context-hops: applies to label-free local checkpoints" in err
    assert not (tmp_path / "s.parquet").exists()
    code, err = run_score(["--checkpoint", str(ck), "--graph", str(graph), "--out", str(tmp_path / "s.parquet"),
                        "--context-hops", "3"])
    assert code == 2 and "invalid choice" in err
