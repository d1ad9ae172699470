"""Partly labelled graphs (y = -1 / label_mask): loading in every format, splits, train, finetune and
score on the labelled nodes only; and the score summary saying what its figures cover."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import numpy as np
import pytest
import torch

from gcad_dist.cli import run_cli
from partitioning.errors import GraphInputError
from partitioning.io import load_graph, save_npz

N = 6
EDGES = np.array([[0, 1, 2, 3], [1, 2, 3, 4]])
Y = np.array([0, 1, 0, 0, 1, 0], dtype=np.int64)
KNOWN = np.array([True, True, False, True, False, True])
Y_PARTIAL = np.where(KNOWN, Y, -1).astype(np.int8)


def _x() -> np.ndarray:
    return np.random.default_rng(0).standard_normal((N, 3)).astype(np.float32)


def _run(module, argv: list[str], capsys) -> tuple[int, str, str]:
    capsys.readouterr()
    with pytest.raises(SystemExit) as e:
        run_cli(module.main, argv)
    out, err = capsys.readouterr()
    return int(e.value.code or 0), out, err


# --------------------------------------------------------------------------------------------------
# Loading: every format, both ways of saying "unknown"


@pytest.mark.parametrize("key", ["label_mask", "labeled_mask", "labelled_mask", "label_masks"])
def test_npz_label_mask_marks_unknown_labels_and_is_not_a_split(tmp_path: Path, key: str) -> None:
    split = np.array([[1, 1, 0, 0, 1, 0]], dtype=bool)
    np.savez(tmp_path / "g.npz", x=_x(), edge_index=EDGES, y=Y, train_masks=split, **{key: KNOWN.astype(np.uint8)})
    g = load_graph(tmp_path / "g.npz")
    assert g.y.dtype == np.int8
    np.testing.assert_array_equal(g.y, Y_PARTIAL)
    np.testing.assert_array_equal(g.labelled, KNOWN)
    assert g.num_labelled == 4
    assert set(g.masks) == {"train"}  # the label mask is not a split called "label"
    # save_npz round trip: y keeps its -1s, same fingerprint
    save_npz(g, tmp_path / "again.npz")
    g2 = load_graph(tmp_path / "again.npz")
    np.testing.assert_array_equal(g2.y, Y_PARTIAL)
    assert g2.fingerprint() == g.fingerprint()


def test_npz_y_minus_one_and_nan_are_unknown(tmp_path: Path) -> None:
    np.savez(tmp_path / "a.npz", x=_x(), edge_index=EDGES, y=np.where(KNOWN, Y, -1))
    np.savez(tmp_path / "b.npz", x=_x(), edge_index=EDGES, y=np.where(KNOWN, Y.astype(float), np.nan))
    a, b = load_graph(tmp_path / "a.npz"), load_graph(tmp_path / "b.npz")
    np.testing.assert_array_equal(a.y, Y_PARTIAL)
    np.testing.assert_array_equal(b.y, Y_PARTIAL)
    assert a.fingerprint() == b.fingerprint()
    # with a label mask, y at unlabelled nodes is ignored whatever it holds
    np.savez(tmp_path / "c.npz", x=_x(), edge_index=EDGES, y=np.where(KNOWN, Y, 7), label_mask=KNOWN)
    assert load_graph(tmp_path / "c.npz").fingerprint() == a.fingerprint()


def test_fully_labelled_fingerprint_unchanged(tmp_path: Path) -> None:
    """Adding an all-True label mask, or nothing, leaves a fully labelled graph as it was."""
    np.savez(tmp_path / "a.npz", x=_x(), edge_index=EDGES, y=Y)
    np.savez(tmp_path / "b.npz", x=_x(), edge_index=EDGES, y=Y, label_mask=np.ones(N, bool))
    a, b = load_graph(tmp_path / "a.npz"), load_graph(tmp_path / "b.npz")
    assert a.fingerprint() == b.fingerprint()
    np.testing.assert_array_equal(a.y, Y.astype(np.int8))
    assert a.labelled.all() and b.masks == {}
    # the fingerprint formula itself: sha256 over x, indptr, indices, y, graph_id as before
    import hashlib

    h = hashlib.sha256()
    for arr in (a.x, a.indptr, a.indices, Y.astype(np.int8), None):
        if arr is None:
            h.update(b"none")
            continue
        h.update(f"{arr.dtype.str}{arr.shape}".encode())
        h.update(memoryview(np.ascontiguousarray(arr)).cast("B"))
    assert a.fingerprint() == h.hexdigest()


def test_pt_label_mask_or_minus_one_and_to_data_round_trip(tmp_path: Path) -> None:
    from torch_geometric.data import Data

    base = dict(x=torch.from_numpy(_x()), edge_index=torch.from_numpy(EDGES))
    torch.save(Data(**base, y=torch.from_numpy(Y), label_mask=torch.from_numpy(KNOWN)), tmp_path / "a.pt")
    torch.save(Data(**base, y=torch.from_numpy(Y_PARTIAL.astype(np.int64))), tmp_path / "b.pt")
    a, b = load_graph(tmp_path / "a.pt"), load_graph(tmp_path / "b.pt")
    np.testing.assert_array_equal(a.y, Y_PARTIAL)
    assert a.masks == {} and a.fingerprint() == b.fingerprint()
    data = a.to_data()
    assert data.y.dtype == torch.int64 and data.y.tolist() == Y_PARTIAL.tolist()
    assert data.label_mask.tolist() == KNOWN.tolist()
    torch.save(data, tmp_path / "c.pt")
    c = load_graph(tmp_path / "c.pt")
    assert c.fingerprint() == a.fingerprint() and c.masks == {}


@pytest.mark.parametrize("how", ["label_mask.npy", "labels -1"])
def test_folder_label_mask_or_minus_one(tmp_path: Path, how: str) -> None:
    (tmp_path / "edges.csv").write_text("src,dst\n" + "".join(f"{s},{d}\n" for s, d in EDGES.T))
    np.save(tmp_path / "features.npy", _x())
    if how == "label_mask.npy":
        np.save(tmp_path / "labels.npy", Y)
        np.save(tmp_path / "label_mask.npy", KNOWN)
    else:
        np.save(tmp_path / "labels.npy", Y_PARTIAL)
    g = load_graph(tmp_path)
    np.testing.assert_array_equal(g.y, Y_PARTIAL)
    assert g.masks == {}


def test_bad_label_values_still_one_line(tmp_path: Path) -> None:
    np.savez(tmp_path / "g.npz", x=_x(), edge_index=EDGES, y=np.array([0, 1, -1, 3, 0, 0]))
    with pytest.raises(GraphInputError) as e:
        load_graph(tmp_path / "g.npz")
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith(str(tmp_path / "g.npz") + ": ") and "3" in msg and "-1 (unknown)" in msg


def test_label_counts_and_description() -> None:
    from partitioning.graph import describe_labels, label_counts

    y = np.full(11758, -1, np.int8)
    y[:812] = 0
    y[:96] = 1
    assert label_counts(torch.from_numpy(y.astype(np.int64))) == {"nodes": 11758, "labelled": 812, "anomalies": 96,
                                                                  "normal": 716}
    assert describe_labels(y) == "labels: 812 of 11,758 nodes (6.9%), 96 anomalies"
    assert describe_labels(np.array([0, 1, 0])) == "labels: all 3 nodes, 1 anomalies"


# --------------------------------------------------------------------------------------------------
# Splits


def _partial_labels(n: int = 2000, rate: float = 0.1, labelled: float = 0.3, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    y = (rng.random(n) < rate).astype(np.int64)
    y[rng.random(n) >= labelled] = -1
    return y


def test_random_split_uses_labelled_nodes_only() -> None:
    from gcad_dist.data.splits import stratified_split

    y = _partial_labels()
    lab = y >= 0
    tr, va, te = (m.numpy() for m in stratified_split(y, seed=2))
    assert not ((tr | va | te) & ~lab).any(), "an unlabelled node is in a split"
    assert ((tr | va | te) == lab).all()
    assert not (tr & va).any() and not (tr & te).any() and not (va & te).any()
    n_lab, n_pos = int(lab.sum()), int((y == 1).sum())
    for m, frac in ((tr, 0.4), (va, 0.2), (te, 0.4)):
        assert abs(m.sum() - frac * n_lab) <= 2
        assert abs((y[m] == 1).sum() - frac * n_pos) <= 1


def test_given_masks_are_intersected_with_labelled_nodes(caplog) -> None:
    from torch_geometric.data import Data

    from gcad_dist.data.splits import make_split

    y = _partial_labels(300)
    part = np.random.default_rng(1).integers(0, 3, (2, 300))
    data = Data(x=torch.zeros(300, 2), y=torch.from_numpy(y), train_mask=torch.from_numpy(part == 0),
                val_mask=torch.from_numpy(part == 1), test_mask=torch.from_numpy(part == 2))
    with caplog.at_level(logging.WARNING, logger="gcad_dist.data.splits"):
        sp = make_split(data, seed=1)
    lab = y >= 0
    for m, k in ((sp.train, 0), (sp.val, 1), (sp.test, 2)):
        np.testing.assert_array_equal(m.numpy(), (part[1] == k) & lab)
    assert "unlabelled nodes" in caplog.text and str(int((~lab).sum())) in caplog.text


def test_multi_graph_split_keeps_unlabelled_out() -> None:
    from gcad_dist.data.splits import stratified_split

    rng = np.random.default_rng(0)
    gid = np.repeat(np.arange(60), rng.integers(3, 10, 60))
    y = (rng.random(gid.size) < 0.1).astype(np.int64)
    y[rng.random(gid.size) < 0.5] = -1
    y[np.isin(gid, [0, 1, 2])] = -1  # three graphs without any label
    sp = stratified_split(y, seed=0, graph_id=gid)
    tr, va, te = (m.numpy() for m in sp)
    anyp = tr | va | te
    assert (anyp == (y >= 0)).all()
    assert not anyp[np.isin(gid, [0, 1, 2])].any()
    part = np.select([tr, va, te], [0, 1, 2], -1)
    for g in np.unique(gid[anyp]):  # a graph's labelled nodes all go to one part
        assert np.unique(part[(gid == g) & anyp]).size == 1
    has_anom = {g for g in np.unique(gid) if (y[gid == g] == 1).any()}
    for m in (tr, te):  # graphs stratified by holding a labelled anomaly
        assert any(g in has_anom for g in np.unique(gid[m]))


# --------------------------------------------------------------------------------------------------
# train / finetune / score on a graph with < 10 % of its nodes labelled


@pytest.fixture(scope="module")
def partial_graph(tmp_path_factory: pytest.TempPathFactory):
    """800-node synthetic graph (8 features), 9 % of its nodes labelled, given as y + label_mask."""
    from partitioning.synthetic import SyntheticConfig, generate

    g = generate(SyntheticConfig(nodes=800, avg_degree=6, features=8, anomaly_fraction=0.15, clique_size=5,
                                 contextual_candidates=10, seed=4))
    rng = np.random.default_rng(0)
    known = np.zeros(g.num_nodes, dtype=bool)
    anomalies, normal = np.flatnonzero(g.y == 1), np.flatnonzero(g.y == 0)
    known[rng.choice(anomalies, 12, replace=False)] = True
    known[rng.choice(normal, 60, replace=False)] = True
    path = tmp_path_factory.mktemp("partial") / "g.npz"
    rows = np.repeat(np.arange(g.num_nodes), np.diff(g.indptr))
    np.savez(path, x=g.x, edge_index=np.stack([rows, g.indices]), y=g.y, label_mask=known)
    return g, known, path


@pytest.fixture(scope="module")
def pre_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from gcad_dist.checkpoint import save_model
    from gcad_dist.model import GCCAD, GCCADConfig

    torch.manual_seed(0)
    cfg = GCCADConfig(in_dim=8, hidden=16)
    d = tmp_path_factory.mktemp("pre") / "final"
    save_model(d, GCCAD(cfg), cfg, extra={"stage": "pretrain"})
    return d


@pytest.mark.parametrize("model", ["gccad", "mlp"])
def test_train_uses_labelled_nodes_only(partial_graph, tmp_path, capsys, model) -> None:
    import gcad_dist.train as train

    g, known, path = partial_graph
    out = tmp_path / "run"
    code, stdout, err = _run(train, ["--graph", str(path), "--out", str(out), "--model", model, "--epochs", "4",
                                     "--eval-every", "2", "--hidden", "16", "--threads", "1", "--no-progress"], capsys)
    assert code == 0, err
    assert "labels: 72 of 800 nodes (9.0%), 12 anomalies" in stdout
    m = json.loads((out / "metrics.json").read_text())
    assert m["labels"] == {"nodes": 800, "labelled": 72, "anomalies": 12, "normal": 60}
    assert m["split"]["train"] + m["split"]["val"] + m["split"]["test"] == 72
    assert m["test"]["num_nodes"] == m["split"]["test"] and m["val"]["num_nodes"] == m["split"]["val"]
    assert m["test"]["num_pos"] == round(12 * 0.4) and m["test"]["num_unlabelled"] == 0
    assert f"test ({m['split']['test']} labelled nodes)" in stdout
    # the recorded test metrics are those of the saved model on the labelled test nodes
    from gcad_dist.data.splits import make_split
    from gcad_dist.metrics import auprc
    from gcad_dist.score import load_checkpoint_model
    from gcad_dist.supervised import predict

    data = train.load_labelled(str(path))
    assert data.label_mask.tolist() == known.tolist()
    split = make_split(data, seed=0)
    assert not (split.test.numpy() & ~known).any()
    loaded = load_checkpoint_model(out)
    if loaded.label_inputs:  # GCCAD's default: scored with the training labels as inputs, as the run was
        from gcad_dist.data.label_inputs import with_label_inputs

        data = with_label_inputs(data, split.train)
    # GCCAD's rule: label inputs from 10 labelled training anomalies; this graph's training split holds about 5
    n_train_anomalies = int((data.y[split.train] == 1).sum())
    assert n_train_anomalies < 10 and loaded.label_inputs is False
    s = predict(loaded.model, data).numpy()
    test = split.test.numpy()
    assert auprc(g.y[test], s[test]) == pytest.approx(m["test"]["auprc"], abs=1e-6)


def test_train_needs_both_classes_among_labelled_nodes(partial_graph, tmp_path, capsys) -> None:
    import gcad_dist.train as train

    g, known, _ = partial_graph
    rows = np.repeat(np.arange(g.num_nodes), np.diff(g.indptr))
    ei = np.stack([rows, g.indices])
    cases = {"normal.npz": (known & (g.y == 0), "are normal (0)"), "none.npz": (np.zeros(g.num_nodes, bool), "all -1")}
    for name, (mask, needle) in cases.items():
        np.savez(tmp_path / name, x=g.x, edge_index=ei, y=g.y, label_mask=mask)
        code, _, err = _run(train, ["--graph", str(tmp_path / name), "--out", str(tmp_path / "o")], capsys)
        lines = [ln for ln in err.strip().splitlines() if ln.startswith("error:")]
        assert code == 2 and len(lines) == 1 and needle in lines[0] and "Traceback" not in err


def test_finetune_label_fraction_applies_to_labelled_training_nodes(partial_graph, pre_checkpoint, tmp_path,
                                                                    capsys) -> None:
    import gcad_dist.finetune as finetune
    from gcad_dist.data.splits import make_split
    from gcad_dist.finetune import subsample_labels

    g, known, path = partial_graph
    out = tmp_path / "ft"
    code, stdout, err = _run(finetune, ["--checkpoint", str(pre_checkpoint), "--graph", str(path), "--out", str(out),
                                        "--label-fraction", "0.5", "--epochs", "2", "--eval-every", "1",
                                        "--no-plots", "--no-progress", "--threads", "1"], capsys)
    assert code == 0, err
    m = json.loads((out / "metrics.json").read_text())
    split = make_split(load_graph(path).to_data(), seed=0)
    assert m["labels"]["labelled"] == 72 and m["labels"]["nodes"] == 800
    assert m["labels"]["train_total"] == int(split.train.sum()) == int((split.train.numpy() & known).sum())
    keep = subsample_labels(split.train, load_graph(path).y, 0.5)
    assert m["labels"]["train_labelled"] == int(keep.sum()) < m["labels"]["train_total"]
    assert m["test"]["num_nodes"] == m["zero_shot"]["test"]["num_nodes"] == int(split.test.sum())
    assert "72 of 800 nodes labelled" in stdout
    # subsample_labels never picks an unlabelled node, even from a mask that contains some
    y = np.where(known, g.y, -1)
    assert not (subsample_labels(np.ones(800, bool), y, 0.5).numpy() & ~known).any()


def test_score_metrics_are_over_labelled_nodes(partial_graph, pre_checkpoint, tmp_path, capsys) -> None:
    import pyarrow.parquet as pq

    import gcad_dist.score as score
    from gcad_dist.metrics import auprc, auroc, recall_at_k

    g, known, path = partial_graph
    out = tmp_path / "s.parquet"
    code, stdout, err = _run(score, ["--checkpoint", str(pre_checkpoint), "--graph", str(path), "--out", str(out),
                                     "--threads", "1"], capsys)
    assert code == 0, err
    t = pq.read_table(out)
    assert t.num_rows == 800  # every node is scored
    label = t.column("label")
    assert label.null_count == 800 - 72
    np.testing.assert_array_equal(label.to_numpy(zero_copy_only=False)[known], g.y[known])
    s = t.column("score").to_numpy()
    m = json.loads(out.with_name(out.name + ".metrics.json").read_text())
    assert m["num_nodes"] == m["labelled"] == 72 and m["nodes_scored"] == 800 and m["num_pos"] == 12
    assert m["auroc"] == pytest.approx(auroc(g.y[known], s[known]), abs=1e-9)
    assert m["auprc"] == pytest.approx(auprc(g.y[known], s[known]), abs=1e-9)
    assert m["recall_at_k"] == pytest.approx(recall_at_k(g.y[known], s[known]), abs=1e-9)
    assert "metrics on the 72 labelled nodes of 800 (9.0%; 12 anomalies): AUROC" in stdout


def test_score_summary_wording_for_graphs_and_parts() -> None:
    from gcad_dist.score import score_metrics, summary_text

    rng = np.random.default_rng(0)
    gid = np.repeat(np.arange(5), 40)
    y = np.zeros(200, np.int64)
    y[[3, 45, 90, 91]] = 1  # graphs 0, 1, 2 hold an anomaly; 3 and 4 do not
    s = rng.random(200) + y
    m = score_metrics(y, s, gid, grouping="graphs")
    assert (m["graphs_used"], m["graphs_total"]) == (3, 5)
    text = summary_text(m)
    assert text.startswith("metrics on all 200 nodes (4 anomalies): AUROC")
    assert "per graph, mean over the 3 of 5 graphs that contain both classes: AUROC" in text
    # K-means parts: the per-part mean is kept apart, out of the summary line
    p = score_metrics(y, s, gid, grouping="parts")
    assert p["parts"]["total"] == 5 and p["parts"]["with_both_classes"] == 3
    assert "auroc_graph_mean" not in p and "mean" not in summary_text(p)
    assert score_metrics(np.zeros(200, np.int64), s) is None


def test_score_parts_summary_does_not_print_a_per_part_mean(tmp_path, pre_checkpoint, capsys, caplog) -> None:
    import gcad_dist.score as score
    from partitioning.build import main as build_main
    from partitioning.synthetic import SyntheticConfig, generate

    g = generate(SyntheticConfig(nodes=300, avg_degree=6, features=8, anomaly_fraction=0.05, clique_size=5,
                                 contextual_candidates=5, seed=3))
    path = tmp_path / "g.npz"
    save_npz(g, path)
    store = tmp_path / "s.zarr"
    assert build_main(["--graph", str(path), "--out", str(store), "--k", "4", "--no-plot", "--no-progress",
                       "--threads", "1"]) == 0
    out = tmp_path / "p.parquet"
    caplog.set_level(logging.INFO, logger="gcad_dist.score")
    code, stdout, err = _run(score, ["--checkpoint", str(pre_checkpoint), "--graph", str(path), "--out", str(out),
                                     "--parts", str(store), "--threads", "1"], capsys)
    assert code == 0, err
    assert "per-graph" not in stdout and "mean" not in stdout
    assert f"metrics on all 300 nodes ({int(g.y.sum())} anomalies): AUROC" in stdout
    m = json.loads(out.with_name(out.name + ".metrics.json").read_text())
    from partitioning.store.reader import StoreReader

    part = StoreReader(str(store)).node_part()
    k = int(np.unique(part).size)
    both = sum(int(0 < g.y[part == p].sum() < (part == p).sum()) for p in np.unique(part))
    assert m["parts"]["total"] == k and m["parts"]["with_both_classes"] == both
    assert m["parts"]["context"] == "halo" and "auroc_graph_mean" not in m and "graphs_used" not in m
    assert f"mean over the {both} of {k} parts that contain both classes" in caplog.text


def test_score_out_of_memory_is_one_line_that_says_what_to_do(partial_graph, pre_checkpoint, tmp_path, capsys,
                                                               monkeypatch) -> None:
    import gcad_dist.score as score

    _, _, path = partial_graph
    argv = ["--checkpoint", str(pre_checkpoint), "--graph", str(path), "--out", str(tmp_path / "s.parquet")]

    def full(*_, **__):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 20.00 GiB\nmore lines")

    monkeypatch.setattr(score, "score_data", full)
    code, _, err = _run(score, argv, capsys)
    assert code == 2
    assert "out of memory scoring 800 nodes" in err and "Tried to allocate 20.00 GiB" in err
    assert "more lines" not in err and "Traceback" not in err
    assert "--device cpu" in err

    def broken(*_, **__):
        raise RuntimeError("a bug, not memory")

    monkeypatch.setattr(score, "score_data", broken)
    with pytest.raises(RuntimeError, match="a bug"):  # other errors are not dressed up as memory
        run_cli(score.main, argv)
