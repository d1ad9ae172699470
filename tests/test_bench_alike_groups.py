"""bench.alike_groups: the table from saved scores (no pre-training), and the scorer's three scores of a local model."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch

from bench.alike_groups import AlikeGroupsConfig, main, run, score_three, table
from gcad_dist.cli import UsageError


def _saved(tmp_path, n: int = 300) -> None:
    """A random labelled graph, and saved scores for seeds 0 and 1 in the bench's layout: anomalies (a tenth) stand
    out in the loose score, a third of them in the plain score too."""
    rng = np.random.default_rng(0)
    y = np.zeros(n, dtype=np.int64)
    y[rng.choice(n, n // 10, replace=False)] = 1
    src = np.repeat(np.arange(n), rng.integers(1, 6, n))
    dst = rng.integers(0, n, src.size)
    ei = np.stack([np.concatenate([src, dst]), np.concatenate([dst, src])])
    np.savez(tmp_path / "toy.npz", x=rng.normal(size=(n, 4)).astype(np.float32), edge_index=ei, y=y)
    (tmp_path / "lc").mkdir()
    for s in (0, 1):
        some = rng.normal(size=n) < -0.4
        np.savez(tmp_path / "lc" / f"toy-{s}.npz", plain=rng.normal(size=n) + 3.0 * y * some,
                 loose=rng.normal(size=n) + 3.0 * y, ball=rng.normal(size=n))


def test_run_tabulates_saved_scores(tmp_path, capsys) -> None:
    _saved(tmp_path)
    cfg = AlikeGroupsConfig(out=str(tmp_path / "lc"), datasets=["toy"], seeds=[0, 1], data_dir=str(tmp_path),
                             no_train=True)
    recs = run(cfg)
    assert [r["seed"] for r in recs] == [0, 1]
    assert all(r["loose"][0] > r["plain"][0] + 0.05 for r in recs)
    test = run(AlikeGroupsConfig(**{**cfg.__dict__, "on_test": True}))
    assert [r["plain"] for r in test] != [r["plain"] for r in recs]  # other nodes
    t = table(recs).splitlines()
    assert t[0].startswith("| graph (training + validation) |") and t[2].startswith("| toy | 2 |")
    assert all(not r["ball_chosen"] and r["switch"] == r["plain"] for r in recs)  # the ball shows no hidden group
    assert t[2].endswith("(0/2) |")
    assert main(["--out", str(tmp_path / "lc"), "--datasets", "toy", "--seeds", "0", "--data-dir", str(tmp_path),
                 "--no-train", "--on-test"]) == 0
    assert "| graph (test) |" in capsys.readouterr().out
    with pytest.raises(UsageError, match="no toy-2.npz"):
        run(AlikeGroupsConfig(**{**cfg.__dict__, "seeds": [2]}))
    with pytest.raises(UsageError, match="no other.npz"):
        run(AlikeGroupsConfig(**{**cfg.__dict__, "datasets": ["other"]}))


def test_the_scorer_gives_the_default_the_loose_and_the_ball_scores() -> None:
    from torch_geometric.data import Data

    from gcad_dist.model.gccad import GCCAD, GCCADConfig
    from gcad_dist.score import score_data

    torch.manual_seed(0)
    n = 60
    src, dst = torch.randint(0, n, (240,)), torch.randint(0, n, (240,))
    data = Data(x=torch.randn(n, 5), edge_index=torch.stack([torch.cat([src, dst]), torch.cat([dst, src])]))
    model = GCCAD(GCCADConfig(in_dim=5, contrast="local", loss="logistic", ensemble=2, degree_detrend=True,
                              ball_switch=True))  # as the local recipe's checkpoints since session 49
    got = score_three(SimpleNamespace(model=model), data, None, "cpu")
    assert got.shape == (3, n)
    assert model.config.ball_switch is False  # each column is one context, never the switch's choice
    model.config.loose_context, model.config.context_hops = False, 1
    np.testing.assert_array_equal(got[0], score_data(model, data, device="cpu"))
    model.config.loose_context = True
    np.testing.assert_array_equal(got[1], score_data(model, data, device="cpu"))
    assert not np.allclose(got[0], got[1]) and not np.allclose(got[0], got[2])


def test_the_switch_column_takes_the_ball_where_it_reveals_a_group(tmp_path) -> None:
    _saved(tmp_path)
    y = np.load(tmp_path / "toy.npz")["y"]
    rng = np.random.default_rng(5)
    np.savez(tmp_path / "lc" / "toy-0.npz", plain=rng.normal(size=y.size), loose=rng.normal(size=y.size),
             ball=rng.normal(size=y.size) + 20.0 * y)  # a tenth of the nodes stand out with the ball only
    rec = run(AlikeGroupsConfig(out=str(tmp_path / "lc"), datasets=["toy"], seeds=[0], data_dir=str(tmp_path),
                                  no_train=True))[0]
    assert rec["ball_chosen"] and rec["switch"] == rec["ball"] and rec["switch"][0] > 0.95
