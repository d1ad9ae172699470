"""bench.fresh_graphs: the recipe family is made as asked, and the table reads fine-tuning, scratch and the one-liners
on each run's own test nodes."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from bench.fresh_graphs import ARMS, RECIPES, collect, main, make, table
from gcad_dist.cli import UsageError


@pytest.fixture(scope="module")
def graphs(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("fresh")
    make(out, prefix="g", seed=11, nodes=400, anomaly_fraction=0.05)
    return out


def test_one_graph_per_recipe_each_as_its_options_ask(graphs) -> None:
    files = sorted(graphs.glob("g*.npz"), key=lambda p: int(p.stem[1:]))
    assert [p.name for p in files] == [f"g{i}.npz" for i in range(1, len(RECIPES) + 1)]
    z = {p.stem: np.load(p) for p in files}
    types = {k: set(np.unique(v["anomaly_type"][v["y"] == 1]).tolist()) for k, v in z.items()}
    assert types["g2"] == {2, 4}  # contextual and camouflage
    assert types["g4"] == {4}  # camouflage alone
    assert types["g6"] == {2}  # contextual alone
    assert 5 in types["g8"] and 3 not in types["g8"]  # rings, not unlike cliques
    assert z["g3"]["x"].shape[1] == 300 and set(np.unique(z["g3"]["x"])) <= {0.0, 1.0}  # bag of words
    assert z["g6"]["edge_index"].shape[1] < z["g1"]["edge_index"].shape[1] / 2  # mean degree 6 against 20
    assert all(int(v["y"].sum()) == 20 for v in z.values())
    assert not np.array_equal(z["g1"]["x"][:, :5], z["g7"]["x"][:, :5])  # a seed of its own each
    again = make(graphs / "again", prefix="g", seed=11, nodes=400, anomaly_fraction=0.05)
    assert np.array_equal(np.load(again[0])["x"], z["g1"]["x"])  # same seed, same graph


def _arm(folder: Path, auroc: float, auprc: float, labels: dict | None = None, split: dict | None = None) -> None:
    folder.mkdir(parents=True)
    m = {"test": {"auroc": auroc, "auprc": auprc}, "labels": labels or {}, "split": split or {}}
    (folder / "metrics.json").write_text(json.dumps(m))


def test_table_reads_each_arm_and_scores_the_one_liners_on_the_same_test_nodes(graphs, tmp_path, capsys) -> None:
    from gcad_dist.data.splits import make_split
    from gcad_dist.detectors import fit_score
    from gcad_dist.metrics import auroc
    from partitioning.io import load_graph

    data = load_graph(graphs / "g2.npz").to_data()
    root = tmp_path / "pt" / "g2"
    for seed, (ft, sc) in enumerate([(0.9, 0.7), (0.6, 0.8)]):
        test = make_split(data, seed=seed).test.numpy()
        _arm(root / f"zs-s{seed}", 0.8, 0.3)
        _arm(root / f"ft0.1-s{seed}", ft, 0.5, {"train_labelled_anomalies": 1}, {"test": int(test.sum())})
        _arm(root / f"sc0.1-s{seed}", sc, 0.2)
    _arm(root / "ft0.1-s2", 0.9, 0.5, {"train_labelled_anomalies": 1}, {"test": 0})  # no scratch arm: left out
    r = collect([tmp_path / "pt"], graphs, 0.1)
    (row,) = r["rows"]
    assert row["seeds"] == [0, 1] and r["missing"] == ["g2/ft0.1-s2"]
    assert row["fine-tuned"][0] == pytest.approx(0.75) and row["scratch"][0] == pytest.approx(0.75)
    assert row["ahead"] == 1 and row["zero-shot"] == pytest.approx([0.8, 0.3])
    y = data.y.numpy()
    want = np.mean([auroc(y[t], fit_score("iforest", data, None, 0)[t])
                    for t in (make_split(data, seed=s).test.numpy() for s in (0, 1))])
    assert row["iforest"][0] == pytest.approx(want)
    assert row["anomalies"][0] == (1, int(y[make_split(data, seed=0).val.numpy()].sum()))
    text = table(r)
    assert "| g2 | 2 |" in text and "+0.000 / +0.300 (1/2)" in text and all(a in text for a in ARMS)
    assert main(["table", str(tmp_path / "pt"), "--data-dir", str(graphs), "--json", str(tmp_path / "r.json")]) == 0
    assert json.loads((tmp_path / "r.json").read_text())["rows"][0]["seeds"] == [0, 1]


def test_a_run_on_another_split_or_graph_is_refused(graphs, tmp_path) -> None:
    root = tmp_path / "pt" / "g1"
    _arm(root / "zs-s0", 0.8, 0.3)
    _arm(root / "ft0.1-s0", 0.9, 0.5, {"train_labelled_anomalies": 1}, {"test": 7})  # not this graph's split
    _arm(root / "sc0.1-s0", 0.7, 0.2)
    with pytest.raises(UsageError, match="not make_split"):
        collect([tmp_path / "pt"], graphs, 0.1)
    with pytest.raises(UsageError, match="does not exist"):
        collect([tmp_path / "pt"], tmp_path, 0.1)
    with pytest.raises(UsageError, match="no complete fine-tuning run at fraction 0.5"):
        collect([tmp_path / "pt"], graphs, 0.5)
    with pytest.raises(UsageError, match="--nodes"):
        main(["make", "--out", str(tmp_path / "x"), "--nodes", "10"])
