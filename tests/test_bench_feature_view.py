"""bench.feature_view: the table from saved scores (no pre-training), the view joining where the forest corroborates
the contrast or where the links say nothing about the features."""

from __future__ import annotations

import numpy as np
import pytest

from bench.feature_view import FeatureViewConfig, main, run, table
from gcad_dist.cli import UsageError


def _saved(tmp_path, forest_agrees: bool, n: int = 2000, linked: bool = True) -> FeatureViewConfig:
    """A labelled graph and saved scores for seeds 0 and 1: the contrast finds half of the anomalies (a twentieth of
    the nodes); the forest finds all of them (``forest_agrees``) or ranks them low. ``linked``: the links join nodes of
    the same group of 50, whose features share the group's centre; else the links are random."""
    rng = np.random.default_rng(0)
    y = np.zeros(n, dtype=np.int64)
    y[rng.choice(n, n // 20, replace=False)] = 1
    src = np.repeat(np.arange(n), rng.integers(1, 6, n))
    dst = (src // 50 * 50 + rng.integers(0, 50, src.size)) % n if linked else rng.integers(0, n, src.size)
    ei = np.stack([np.concatenate([src, dst]), np.concatenate([dst, src])])
    x = rng.normal(size=(n // 50 + 1, 4))[np.arange(n) // 50] + rng.normal(size=(n, 4))
    np.savez(tmp_path / "toy.npz", x=x.astype(np.float32), edge_index=ei, y=y)
    (tmp_path / "fv").mkdir(exist_ok=True)
    half = y * (rng.random(n) < 0.5)
    for s in (0, 1):
        forest = rng.normal(size=n) + (4.0 if forest_agrees else -4.0) * y
        np.savez(tmp_path / "fv" / f"toy-{s}.npz", contrast=rng.normal(size=n) + 6.0 * half, forest=forest)
    return FeatureViewConfig(out=str(tmp_path / "fv"), datasets=["toy"], seeds=[0, 1], data_dir=str(tmp_path),
                             no_train=True)


def test_the_view_joins_where_the_forest_corroborates(tmp_path, capsys) -> None:
    recs = run(_saved(tmp_path, forest_agrees=True))
    assert [r["seed"] for r in recs] == [0, 1]
    assert all(r["used"] and r["corroboration"] > 0.9 and r["view"] == r["fused"] for r in recs)
    assert all(r["view"][0] > r["contrast"][0] + 0.1 for r in recs)  # the half the contrast missed
    t = table(recs).splitlines()
    assert t[0].startswith("| graph (training + validation) |") and t[2].startswith("| toy | 2 |")
    assert t[2].endswith("(2/2) |")
    assert main(["--out", str(tmp_path / "fv"), "--datasets", "toy", "--seeds", "0", "--data-dir", str(tmp_path),
                 "--no-train", "--on-test"]) == 0
    assert "| graph (test) |" in capsys.readouterr().out
    with pytest.raises(UsageError, match="no toy-2.npz"):
        run(FeatureViewConfig(**{**_saved(tmp_path, True).__dict__, "seeds": [2]}))


def test_the_view_stays_off_where_the_forest_disagrees(tmp_path) -> None:
    recs = run(_saved(tmp_path, forest_agrees=False))
    assert all(not r["used"] and r["corroboration"] < 0.5 and r["view"] == r["contrast"] for r in recs)
    assert all(r["assortativity"] > 0.3 for r in recs)  # the links follow the features
    assert all(r["fused"][0] < r["contrast"][0] for r in recs)  # fusing here would have cost
    assert table(recs).splitlines()[2].endswith("+0.0000 (0/2) |")


def test_the_view_joins_where_the_links_say_nothing_about_the_features(tmp_path) -> None:
    recs = run(_saved(tmp_path, forest_agrees=False, linked=False))
    assert all(r["used"] and r["corroboration"] < 0.5 and r["view"] == r["fused"] for r in recs)
    assert all(abs(r["assortativity"]) < 0.05 for r in recs)
    assert table(recs).splitlines()[2].endswith("(2/2) |")


def test_the_statistics_table_reads_the_two_scores_shapes(tmp_path) -> None:
    agree, disagree = run(_saved(tmp_path, forest_agrees=True)), run(_saved(tmp_path, forest_agrees=False))
    for r in agree + disagree:
        st = r["statistics"]
        assert 0.0 <= st["tail_contrast"] <= 1.0 and 0.0 <= st["tail_forest"] <= 1.0
        assert st["tail_contrast"] > 0.01  # the contrast's half of the anomalies (a fortieth of the nodes) stands out
    # where the forest ranks the anomalies high, its top nodes are the contrast's high ones too, and the reverse
    assert all(r["statistics"]["contrast_on_forest_top"] > 1.0 for r in agree)
    assert all(r["statistics"]["forest_on_contrast_top"] > 1.0 for r in agree)
    assert all(r["statistics"]["forest_on_contrast_top"] < -1.0 for r in disagree)
    assert all(r["statistics"]["spearman"] > 0 for r in agree)
    assert all(r["statistics"]["spearman"] < 0 for r in disagree)
    t = table(agree).splitlines()
    i = t.index("") + 1
    assert t[i].startswith("| graph, seed | contrast | forest | fused | Spearman(contrast, forest) |")
    assert t[i + 2].startswith("| toy, 0 |") and t[i + 3].startswith("| toy, 1 |")
    assert len(t[i + 2].split("|")) == len(t[i].split("|"))
