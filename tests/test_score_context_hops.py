"""gcad_dist.score --context-hops: a label-free local checkpoint scored with its neighbours or its two-hop ball."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pytest
import torch

from gcad_dist.checkpoint import save_model
from gcad_dist.cli import run_cli
from gcad_dist.model import GCCAD, GCCADConfig
from gcad_dist.score import load_checkpoint_model, prepare_data, score_data
from gcad_dist.score import main as score_main

pd = pytest.importorskip("pandas")
pytest.importorskip("pyarrow")


@pytest.fixture(scope="module")
def graph(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 400-node generated graph of fraud rings (--clique-features shared), saved as .npz."""
    from partitioning.io import save_npz
    from partitioning.synthetic import SyntheticConfig, generate

    g = generate(SyntheticConfig(nodes=400, avg_degree=6, features=8, anomaly_fraction=0.1, anomaly_mix=(0, 0, 1),
                                 clique_size=8, clique_features="shared", seed=2))
    path = tmp_path_factory.mktemp("graph") / "rings.npz"
    save_npz(g, path)
    return path


def _checkpoint(root: Path, name: str, **kw) -> Path:
    torch.manual_seed(0)
    cfg = GCCADConfig(in_dim=8, hidden=16, **kw)
    d = root / name / "final"
    save_model(d, GCCAD(cfg), cfg, extra={"stage": "pretrain"})
    return d


def _score(argv: list[str], capsys) -> tuple[int, str]:
    with pytest.raises(SystemExit) as e:
        run_cli(score_main, argv)
    return int(e.value.code or 0), capsys.readouterr().err


def test_context_hops_2_scores_a_one_hop_checkpoint_with_the_ball(graph, tmp_path, capsys, caplog) -> None:
    caplog.set_level(logging.INFO, logger="gcad_dist.score")
    ck = _checkpoint(tmp_path, "local", contrast="local", loss="logistic", tau=0.2, degree_detrend=True)
    outs = {}
    for hops in (None, 1, 2):
        out = tmp_path / f"s{hops}.parquet"
        code, err = _score(["--checkpoint", str(ck), "--graph", str(graph), "--out", str(out)]
                           + ([] if hops is None else ["--context-hops", str(hops)]), capsys)
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


def test_context_hops_on_another_model_is_a_usage_error(graph, tmp_path, capsys) -> None:
    ck = _checkpoint(tmp_path, "paper")  # the paper's graph contrast: its context is its layers'
    code, err = _score(["--checkpoint", str(ck), "--graph", str(graph), "--out", str(tmp_path / "s.parquet"),
                        "--context-hops", "2"], capsys)
    assert code == 2 and "--context-hops: applies to label-free local checkpoints" in err
    assert not (tmp_path / "s.parquet").exists()
    code, err = _score(["--checkpoint", str(ck), "--graph", str(graph), "--out", str(tmp_path / "s.parquet"),
                        "--context-hops", "3"], capsys)
    assert code == 2 and "invalid choice" in err
