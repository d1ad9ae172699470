"""Fine-tuning from a pre-training checkpoint and per-node scoring (gcad_dist.finetune, gcad_dist.score)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from gcad_dist.checkpoint import load_model_file, save_model
from gcad_dist.cli import UsageError, run_cli
from gcad_dist.finetune import main as finetune_main
from gcad_dist.finetune import subsample_labels
from gcad_dist.model import GCCAD, GCCADConfig
from gcad_dist.score import main as score_main
from gcad_dist.score import load_checkpoint_model, prepare_data, score_data, score_graph

pq = pytest.importorskip("pyarrow.parquet")


@pytest.fixture(scope="module")
def pre_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 'pre-training' checkpoint made directly (no Ray): random GCCAD weights, in_dim 8."""
    torch.manual_seed(0)
    cfg = GCCADConfig(in_dim=8, hidden=16)
    d = tmp_path_factory.mktemp("pre") / "final"
    save_model(d, GCCAD(cfg), cfg, extra={"stage": "pretrain"})
    return d


def _run(main, argv: list[str], capsys) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as e:
        run_cli(main, argv)
    out, err = capsys.readouterr()
    return int(e.value.code or 0), out, err


# ---------------------------------------------------------------------------------------------
# label subsampling


@settings(max_examples=40, deadline=None)
@given(n=st.integers(20, 400), pos=st.floats(0.02, 0.5), frac=st.floats(0.01, 1.0), seed=st.integers(0, 10))
def test_subsample_is_stratified_subset_with_each_class(n: int, pos: float, frac: float, seed: int) -> None:
    rng = np.random.default_rng(seed)
    y = (rng.random(n) < pos).astype(np.int64)
    y[:2] = [0, 1]
    train = rng.random(n) < 0.5
    train[:2] = True
    keep = subsample_labels(train, y, frac, seed=seed).numpy()
    assert not (keep & ~train).any(), "kept a node outside the training split"
    for c in (0, 1):
        n_c = int((train & (y == c)).sum())
        assert int((keep & (y == c)).sum()) == max(1, round(n_c * frac))
    again = subsample_labels(torch.from_numpy(train), torch.from_numpy(y), frac, seed=seed).numpy()
    np.testing.assert_array_equal(keep, again)


def test_subsample_depends_on_seed_and_full_fraction_is_identity() -> None:
    rng = np.random.default_rng(0)
    y = (rng.random(2000) < 0.1).astype(np.int64)
    train = rng.random(2000) < 0.6
    a = subsample_labels(train, y, 0.2, seed=0).numpy()
    b = subsample_labels(train, y, 0.2, seed=1).numpy()
    assert (a != b).any()
    np.testing.assert_array_equal(subsample_labels(train, y, 1.0).numpy(), train)
    with pytest.raises(ValueError):
        subsample_labels(train, y, 0.0)


# ---------------------------------------------------------------------------------------------
# finetune CLI


def test_finetune_honours_label_fraction_and_writes_checkpoint(small_graph, pre_checkpoint, tmp_path, capsys) -> None:
    g, path = small_graph
    out = tmp_path / "ft"
    code, stdout, err = _run(finetune_main, ["--checkpoint", str(pre_checkpoint), "--graph", str(path), "--out", str(out),
                                            "--label-fraction", "0.25", "--epochs", "6", "--eval-every", "2",
                                            "--model", "checkpoint", "--seed", "1", "--no-progress", "--no-plots",
                                            "--threads", "1"], capsys)
    assert code == 0, err
    assert "test AUROC" in stdout
    m = json.loads((out / "metrics.json").read_text())
    # The label budget the run reports is the stratified subsample of its own training split.
    from gcad_dist.data.splits import make_split

    data = g.to_data()
    split = make_split(data, seed=1)
    keep = subsample_labels(split.train, data.y, 0.25, seed=1)
    assert m["labels"]["train_labelled"] == int(keep.sum()) < m["labels"]["train_total"] == int(split.train.sum())
    assert m["labels"]["train_labelled_anomalies"] == int(data.y[keep].sum()) >= 1
    for part in ("val", "test"):
        assert 0.0 <= m[part]["auroc"] <= 1.0 and 0.0 <= m["zero_shot"][part]["auroc"] <= 1.0
    assert m["split"]["test"] == int(split.test.sum())
    # The written checkpoint loads, keeps the pre-training config (bar the evaluation settings, which are
    # gcad_dist.train's defaults) and says where it came from.
    ck = load_model_file(out / "final")
    assert ck["config"] == {**load_model_file(pre_checkpoint)["config"], "link_eval": "expected", "score_space": "projection"}
    assert ck["extra"]["finetuned_from"] == str(pre_checkpoint) and ck["extra"]["label_fraction"] == 0.25
    assert ck["extra"]["label_inputs"] is False
    loaded = load_checkpoint_model(out / "final")
    from gcad_dist.model.snapshots import SnapshotEnsemble, base_model

    # fine-tuning scores with the snapshot ensemble of its best evaluations (3 here: epochs 2, 4, 6), kept whole
    assert isinstance(loaded.model, SnapshotEnsemble) and len(loaded.model.members) == len(m["snapshot_epochs"]) == 3
    assert isinstance(base_model(loaded.model), GCCAD)


def test_snapshot_checkpoint_scores_with_the_mean_and_fine_tunes(small_graph, pre_checkpoint, tmp_path, capsys) -> None:
    """A checkpoint with snapshot states loads as a SnapshotEnsemble whose scores (whole graph, per part and per
    part with its halo) are the mean of its members'; fine-tuning starts from the best member, and zero-shot
    keeps every member."""
    from gcad_dist.model.snapshots import SnapshotEnsemble, member_states
    from gcad_dist.score import score_parts_halo

    g, path = small_graph
    base = load_checkpoint_model(pre_checkpoint)
    states = [base.model.state_dict()]
    for k in (1, 2):
        torch.manual_seed(k)
        states.append({n: v + 0.05 * torch.randn_like(v) if v.is_floating_point() else v for n, v in states[0].items()})
    d = tmp_path / "ens"
    save_model(d, base.model, base.config, extra={"stage": "test"}, snapshots=states)
    loaded = load_checkpoint_model(d)
    ens = loaded.model
    assert isinstance(ens, SnapshotEnsemble) and len(ens.members) == 3
    assert all(torch.equal(a[n], b[n]) for a, b in zip(member_states(ens), states) for n in a)
    data = prepare_data(str(path), loaded)
    members = [m.eval() for m in ens.members]
    np.testing.assert_allclose(score_data(ens, data, device="cpu"),
                               np.mean([score_data(m, data, device="cpu") for m in members], 0), atol=1e-5)
    part = np.arange(data.num_nodes) % 3
    np.testing.assert_allclose(score_parts_halo(ens, data, part, device="cpu"),
                               np.mean([score_parts_halo(m, data, part, device="cpu") for m in members], 0), atol=1e-5)
    assert np.abs(score_data(members[0], data, device="cpu") - score_data(members[1], data, device="cpu")).max() > 1e-4

    zs = tmp_path / "zs"
    code, _, err = _run(finetune_main, ["--checkpoint", str(d), "--graph", str(path), "--out", str(zs), "--epochs", "0",
                                        "--no-progress", "--no-plots", "--threads", "1"], capsys)
    assert code == 0, err
    again = load_checkpoint_model(zs / "final").model
    assert isinstance(again, SnapshotEnsemble)
    assert all(torch.equal(a[n], b[n]) for a, b in zip(member_states(again), states) for n in a)
    ft = tmp_path / "ft"
    code, _, err = _run(finetune_main, ["--checkpoint", str(d), "--graph", str(path), "--out", str(ft), "--epochs", "2",
                                        "--eval-every", "1", "--snapshots", "1", "--model", "checkpoint",
                                        "--no-progress", "--no-plots", "--threads", "1"], capsys)
    assert code == 0, err
    assert isinstance(load_checkpoint_model(ft / "final").model, GCCAD)  # one snapshot: a plain model


def test_zero_shot_evaluates_pretrained_weights_unchanged(small_graph, pre_checkpoint, tmp_path, capsys) -> None:
    _, path = small_graph
    out = tmp_path / "zs"
    code, _, err = _run(finetune_main, ["--checkpoint", str(pre_checkpoint), "--graph", str(path), "--out", str(out),
                                       "--epochs", "0", "--no-progress", "--threads", "1"], capsys)
    assert code == 0, err
    m = json.loads((out / "metrics.json").read_text())
    assert m["test"] == m["zero_shot"]["test"] and m["epochs_run"] == 0
    a, b = load_model_file(out / "final")["state_dict"], load_model_file(pre_checkpoint)["state_dict"]
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert (out / "roc_pr_test.png").exists()
    # zero-shot test metrics match scoring the pre-trained model directly
    from gcad_dist.data.splits import make_split
    from gcad_dist.metrics import evaluate
    from partitioning.io import load_graph

    g = load_graph(path)
    s = score_graph(pre_checkpoint, g)
    test = make_split(g.to_data(), seed=0).test.numpy()
    assert evaluate(g.y, s, mask=test)["auprc"] == pytest.approx(m["test"]["auprc"], abs=1e-6)


@pytest.mark.parametrize("main_fn", [finetune_main, score_main])
def test_in_dim_mismatch_is_a_one_line_error(main_fn, pre_checkpoint, tmp_path, capsys) -> None:
    from partitioning.io import save_npz
    from partitioning.synthetic import SyntheticConfig, generate

    other = tmp_path / "wide.npz"
    save_npz(generate(SyntheticConfig(nodes=60, avg_degree=4, features=5, clique_size=4, contextual_candidates=5)), other)
    args = ["--checkpoint", str(pre_checkpoint), "--graph", str(other), "--out", str(tmp_path / "o.parquet")]
    code, _, err = _run(main_fn, args, capsys)
    assert code == 2
    lines = [ln for ln in err.splitlines() if ln.startswith("error:")]
    assert len(lines) == 1 and "Traceback" not in err
    assert str(other) in lines[0] and "5" in lines[0] and "8" in lines[0]


def test_missing_checkpoint_is_a_one_line_error(small_graph, tmp_path, capsys) -> None:
    _, path = small_graph
    code, _, err = _run(score_main, ["--checkpoint", str(tmp_path / "nope"), "--graph", str(path),
                                     "--out", str(tmp_path / "s.parquet")], capsys)
    assert code == 2 and err.strip().startswith("error:") and "Traceback" not in err


# ---------------------------------------------------------------------------------------------
# score CLI / API


def test_score_writes_one_row_per_node_with_correct_ids(small_graph, pre_checkpoint, tmp_path, capsys, caplog) -> None:
    g, path = small_graph
    out = tmp_path / "scores.parquet"
    code, stdout, err = _run(score_main, ["--checkpoint", str(pre_checkpoint), "--graph", str(path), "--out", str(out),
                                          "--threads", "1"], capsys)
    assert code == 0, err
    assert "AUROC" in stdout
    t = pq.read_table(out).to_pandas()
    assert list(t.columns) == ["node_id", "score", "label"]
    assert len(t) == g.num_nodes
    np.testing.assert_array_equal(t["node_id"].to_numpy(), np.arange(g.num_nodes))
    np.testing.assert_array_equal(t["label"].to_numpy(), g.y)
    assert np.isfinite(t["score"].to_numpy()).all()
    np.testing.assert_allclose(t["score"].to_numpy(), score_graph(pre_checkpoint, path), rtol=0, atol=1e-6)
    m = json.loads(out.with_name(out.name + ".metrics.json").read_text())
    assert m["num_nodes"] == g.num_nodes and m["environment"]["packages"]["torch"] == torch.__version__

    # --out *.csv writes the same table as CSV; --context without --parts is said to be ignored
    csv = tmp_path / "scores.csv"
    with caplog.at_level("WARNING", logger="gcad_dist.score"):
        code, _, err = _run(score_main, ["--checkpoint", str(pre_checkpoint), "--graph", str(path), "--out", str(csv),
                                         "--threads", "1", "--context", "own"], capsys)
    assert code == 0, err
    assert "--context own: applies with --parts only" in caplog.text
    import pandas as pd

    c = pd.read_csv(csv)
    assert list(c.columns) == ["node_id", "score", "label"]
    np.testing.assert_array_equal(c["node_id"].to_numpy(), t["node_id"].to_numpy())
    np.testing.assert_allclose(c["score"].to_numpy(), t["score"].to_numpy(), rtol=1e-6)

    # Ids follow the nodes: scoring a relabelled copy of the graph gives the same score per node.
    from partitioning.graph import Graph, csr_from_edges

    perm = np.random.default_rng(0).permutation(g.num_nodes)  # new node k = old node perm[k]
    inv = np.argsort(perm)
    ei = g.edge_index()
    indptr, indices = csr_from_edges(inv[ei[0]], inv[ei[1]], g.num_nodes)
    h = Graph(x=g.x[perm], indptr=indptr, indices=indices, y=g.y[perm])
    s_perm = score_graph(pre_checkpoint, h)
    np.testing.assert_allclose(s_perm[inv], t["score"].to_numpy(), atol=1e-4)


def test_multi_graph_batches_are_exact(pre_checkpoint) -> None:
    from torch_geometric.data import Data

    from partitioning.synthetic import SyntheticConfig, generate

    parts = [generate(SyntheticConfig(nodes=n, avg_degree=4, features=8, clique_size=4, contextual_candidates=5, seed=n))
             for n in (40, 55, 70)]
    xs, eis, gids, off = [], [], [], 0
    for i, g in enumerate(parts):
        xs.append(torch.from_numpy(g.x))
        eis.append(torch.from_numpy(g.edge_index()) + off)
        gids.append(torch.full((g.num_nodes,), 10 * i + 7))  # arbitrary graph ids
        off += g.num_nodes
    data = Data(x=torch.cat(xs), edge_index=torch.cat(eis, 1), graph_id=torch.cat(gids))
    loaded = load_checkpoint_model(pre_checkpoint)
    d = prepare_data(data, loaded)
    full = score_data(loaded.model, d, device="cpu", batch_size=0)
    for bs in (1, 2):
        np.testing.assert_allclose(score_data(loaded.model, d, device="cpu", batch_size=bs), full, atol=1e-5)
    # each graph alone gives the same scores: contexts are per graph
    first = Data(x=xs[0], edge_index=eis[0])
    np.testing.assert_allclose(score_data(loaded.model, prepare_data(first, loaded), device="cpu"), full[:40], atol=1e-5)


@pytest.mark.parametrize("main_fn", [finetune_main, score_main])
def test_help_lists_options(main_fn, capsys) -> None:
    code, out, _ = _run(main_fn, ["--help"], capsys)
    assert code == 0 and "--checkpoint" in out and "--graph" in out and "default" in out


def test_finetune_uses_given_split_masks(small_graph, pre_checkpoint, tmp_path, capsys) -> None:
    """Graphs with their own splits (like tolokers' 10): --split-index picks one; labels come from its train part."""
    import dataclasses

    from partitioning.io import save_npz

    g, _ = small_graph
    rng = np.random.default_rng(5)
    part = rng.integers(0, 3, size=(3, g.num_nodes))  # 3 random splits: 0 train, 1 val, 2 test
    masks = {"train": part == 0, "val": part == 1, "test": part == 2}
    path = tmp_path / "masked.npz"
    save_npz(dataclasses.replace(g, masks=masks), path)
    out = tmp_path / "ft"
    code, _, err = _run(finetune_main, ["--checkpoint", str(pre_checkpoint), "--graph", str(path), "--out", str(out),
                                       "--split-index", "2", "--label-fraction", "0.5", "--epochs", "2",
                                       "--eval-every", "1", "--no-plots", "--no-progress", "--threads", "1"], capsys)
    assert code == 0, err
    m = json.loads((out / "metrics.json").read_text())
    assert m["split"]["source"] == "given[2]"
    assert (m["split"]["train"], m["split"]["test"]) == (int(masks["train"][2].sum()), int(masks["test"][2].sum()))
    keep = subsample_labels(masks["train"][2], g.y, 0.5, seed=0)
    assert m["labels"]["train_labelled"] == int(keep.sum())
    code, _, err = _run(finetune_main, ["--checkpoint", str(pre_checkpoint), "--graph", str(path), "--out", str(out),
                                       "--split-index", "3", "--epochs", "0"], capsys)
    assert code == 2 and err.startswith("error: --split-index")


def test_link_majority_parts_moves_a_node_to_the_part_of_its_links():
    import numpy as np
    import torch

    from gcad_dist.score import link_majority_parts

    # nodes 0-3 in part 0, node 4 in part 1 but linked only to 0, 1, 2; node 5 (part 2) isolated;
    # node 6 (part 1) has one neighbour in part 0 and one in part 1: tie -> lowest part id (0)
    und = [(0, 1), (1, 2), (2, 3), (4, 0), (4, 1), (4, 2), (6, 3), (6, 4)]
    src = [a for a, b in und] + [b for a, b in und]
    dst = [b for a, b in und] + [a for a, b in und]
    part = np.array([0, 0, 0, 0, 1, 2, 1])
    out = link_majority_parts(torch.tensor([src, dst]), part)
    assert out.tolist() == [0, 0, 0, 0, 0, 2, 0]
    assert out.dtype == np.int32


def test_score_per_part_of_a_store(small_graph, pre_checkpoint, tmp_path, capsys) -> None:
    """--parts: every node is scored in its part (own K-means part, or the part of its links), exactly
    as scoring that part's induced subgraph alone; a store of another graph is refused in one line."""
    from partitioning.build import main as build_main
    from partitioning.store.reader import StoreReader

    g, path = small_graph
    store = tmp_path / "s.zarr"
    assert build_main(["--graph", str(path), "--out", str(store), "--k", "3", "--no-plot", "--no-progress",
                       "--threads", "1"]) == 0
    part = StoreReader(str(store)).node_part()
    for context in ("own", "links"):
        out = tmp_path / f"{context}.parquet"
        code, _, err = _run(score_main, ["--checkpoint", str(pre_checkpoint), "--graph", str(path), "--out", str(out),
                                         "--parts", str(store), "--context", context, "--threads", "1"], capsys)
        assert code == 0, err
        t = pq.read_table(out).to_pandas()
        gid = t["graph_id"].to_numpy()
        if context == "own":
            np.testing.assert_array_equal(gid, part)
        # one part scored alone gives the same scores
        from torch_geometric.utils import subgraph

        from gcad_dist.score import load_checkpoint_model, prepare_data, score_data

        loaded = load_checkpoint_model(pre_checkpoint)
        data = prepare_data(str(path), loaded)
        nodes = torch.from_numpy(np.flatnonzero(gid == gid[0]))
        ei, _ = subgraph(nodes, data.edge_index, relabel_nodes=True, num_nodes=data.num_nodes)
        from torch_geometric.data import Data

        alone = score_data(loaded.model, Data(x=data.x[nodes], edge_index=ei), device="cpu")
        np.testing.assert_allclose(t["score"].to_numpy()[nodes.numpy()], alone, atol=1e-5)

    other = tmp_path / "other.npz"
    from partitioning.io import save_npz
    from partitioning.synthetic import SyntheticConfig, generate

    save_npz(generate(SyntheticConfig(nodes=200, avg_degree=6, features=8, seed=1)), other)
    code, _, err = _run(score_main, ["--checkpoint", str(pre_checkpoint), "--graph", str(other),
                                     "--out", str(tmp_path / "x.parquet"), "--parts", str(store)], capsys)
    assert code == 2 and "--parts" in err and "300 nodes" in err


def test_auto_normalize_follows_a_pretrain_checkpoint_of_a_normalised_store(small_graph, tmp_path, capsys) -> None:
    """A pre-training checkpoint of a default (z-scored) store says extra["normalize"] = "standard": with
    --normalize auto, score (also per part, --parts) and finetune z-score the target graph with its own
    statistics; older checkpoints without the key keep raw features."""
    from gcad_dist.train import normalize_features
    from partitioning.build import main as build_main
    from partitioning.store.reader import StoreReader

    g, path = small_graph
    torch.manual_seed(1)
    cfg = GCCADConfig(in_dim=8, hidden=16)
    ck = tmp_path / "pre"
    save_model(ck, GCCAD(cfg), cfg, extra={"normalize": "standard", "global_step": 3})
    loaded = load_checkpoint_model(ck)
    assert loaded.normalize == "standard"
    raw = torch.from_numpy(g.x)
    torch.testing.assert_close(prepare_data(str(path), loaded).x, normalize_features(raw, "standard"))
    torch.testing.assert_close(prepare_data(str(path), loaded, "none").x, raw)
    loaded.extra.pop("normalize")
    assert loaded.normalize == "none"
    torch.testing.assert_close(prepare_data(str(path), loaded).x, raw)

    store = tmp_path / "s.zarr"
    assert build_main(["--graph", str(path), "--out", str(store), "--k", "3", "--no-plot", "--no-progress",
                       "--threads", "1"]) == 0
    part = StoreReader(str(store)).node_part()
    out = tmp_path / "parts.parquet"
    code, _, err = _run(score_main, ["--checkpoint", str(ck), "--graph", str(path), "--out", str(out),
                                     "--parts", str(store), "--threads", "1"], capsys)
    assert code == 0, err
    loaded = load_checkpoint_model(ck)
    data = prepare_data(str(path), loaded, "standard")
    from gcad_dist.score import score_parts_halo

    expect = score_parts_halo(loaded.model, data, part, device="cpu")  # the default --context
    np.testing.assert_allclose(pq.read_table(out).to_pandas()["score"].to_numpy(), expect, atol=1e-5)

    ft = tmp_path / "ft"
    code, _, err = _run(finetune_main, ["--checkpoint", str(ck), "--graph", str(path), "--out", str(ft),
                                       "--epochs", "0", "--no-plots", "--no-progress", "--threads", "1"], capsys)
    assert code == 0, err
    assert json.loads((ft / "metrics.json").read_text())["normalize"] == "standard"
    assert load_model_file(ft / "final")["extra"]["normalize"] == "standard"


def test_halo_scores_each_part_with_its_one_hop_halo(small_graph, pre_checkpoint, tmp_path, capsys) -> None:
    """--context halo: a part's nodes are scored in the subgraph of the part plus the nodes of other parts
    they link to, with the context over the part's own nodes only (checked against a direct computation);
    with no link across parts it equals --context own; and the halo does change the scores otherwise."""
    from torch_geometric.data import Data
    from torch_geometric.utils import subgraph

    from gcad_dist.score import score_parts_halo

    g, path = small_graph
    loaded = load_checkpoint_model(pre_checkpoint)
    model = loaded.model.eval()
    data = prepare_data(str(path), loaded)
    n = data.num_nodes
    part = np.arange(n) % 3  # parts cut many links
    halo_scores = score_parts_halo(model, data, part, device="cpu")

    src, dst = data.edge_index.numpy()
    for k in range(3):
        own = np.flatnonzero(part == k)
        halo = np.setdiff1d(np.unique(dst[np.isin(src, own)]), own)
        assert halo.size > 0
        nodes = torch.from_numpy(np.concatenate([own, halo]))
        ei, _ = subgraph(nodes, data.edge_index, relabel_nodes=True, num_nodes=n)
        mask = torch.arange(nodes.numel()) < own.size
        with torch.no_grad():
            out = model(data.x[nodes], ei, context_mask=mask)
            ref = model.score(out)[: own.size].numpy()
        np.testing.assert_allclose(halo_scores[own], ref, atol=1e-5)

    data.graph_id = torch.from_numpy(part.astype(np.int64))
    own_scores = score_data(model, data, device="cpu", batch_size=1)
    assert np.abs(own_scores - halo_scores).max() > 1e-3

    # two parts with no link between them: the halo is empty and both contexts agree
    half = n // 2
    keep = (data.edge_index < half).all(0) | (data.edge_index >= half).all(0)
    cut = Data(x=data.x, edge_index=data.edge_index[:, keep])
    two = (np.arange(n) >= half).astype(np.int64)
    cut_halo = score_parts_halo(model, cut, two, device="cpu")
    cut.graph_id = torch.from_numpy(two)
    np.testing.assert_allclose(cut_halo, score_data(model, cut, device="cpu", batch_size=1), atol=1e-5)

    # the command line
    from partitioning.build import main as build_main

    store = tmp_path / "s.zarr"
    assert build_main(["--graph", str(path), "--out", str(store), "--k", "3", "--no-plot", "--no-progress",
                       "--threads", "1"]) == 0
    out = tmp_path / "halo.parquet"
    code, stdout, err = _run(score_main, ["--checkpoint", str(pre_checkpoint), "--graph", str(path), "--out", str(out),
                                          "--parts", str(store), "--context", "halo", "--threads", "1"], capsys)
    assert code == 0, err
    t = pq.read_table(out).to_pandas()
    from partitioning.store.reader import StoreReader

    np.testing.assert_array_equal(t["graph_id"].to_numpy(), StoreReader(str(store)).node_part())
    assert np.isfinite(t["score"].to_numpy()).all() and "AUROC" in stdout


# ---------------------------------------------------------------------------------------------
# fine-tuning against supervised training from scratch: shared defaults, shared label subsample


def test_finetune_defaults_are_train_defaults() -> None:
    """Optimiser, epoch, patience and evaluation-time GCCAD settings come from gcad_dist.train (one place)."""
    from gcad_dist.finetune import FinetuneConfig, build_parser
    from gcad_dist.train import TrainConfig
    from gcad_dist.train import build_parser as train_parser

    ft = FinetuneConfig(checkpoint="", graph="")
    tr = TrainConfig(graph="", out="")
    ft_args = vars(build_parser().parse_args(["--checkpoint", "c", "--graph", "g"]))
    tr_args = vars(train_parser().parse_args(["--graph", "g", "--out", "o"]))
    for name in ("epochs", "lr", "weight_decay", "eval_every", "patience", "link_eval", "score_space", "forest"):
        assert getattr(ft, name) == getattr(tr, name) == ft_args[name] == tr_args[name], name
    assert (ft.link_eval, ft.score_space) == ("expected", "projection")
    assert ft_args["label_fraction"] == tr_args["label_fraction"] == 1.0
    from gcad_dist.train import resolve_label_inputs

    # label inputs: the same rule on both sides (on from 10 kept training anomalies)
    assert ft.label_inputs is tr.label_inputs is ft_args["label_inputs"] is tr_args["label_inputs"] is None
    assert resolve_label_inputs("gccad", ft.label_inputs, 10) and not resolve_label_inputs("gccad", ft.label_inputs, 9)


def test_finetune_forest_view_joins_by_train_rule_and_its_checkpoint_scores_as_fine_tuning_did(
        pre_checkpoint, tmp_path, capsys) -> None:
    """Anomalies told by their own columns, linked at random (camouflage): the forest, fitted on the kept training
    labels, joins the fine-tuned score; the checkpoint scores as fine-tuning did; ``--forest off`` leaves it out."""
    from gcad_dist.data.splits import make_split
    from gcad_dist.metrics import evaluate
    from gcad_dist.model.rank_blend import RankBlend
    from gcad_dist.supervised import predict
    from partitioning.io import load_graph, save_npz
    from partitioning.synthetic import SyntheticConfig, generate

    g = tmp_path / "cam.npz"
    save_npz(generate(SyntheticConfig(nodes=500, avg_degree=6, features=8, anomaly_fraction=0.12,
                                      anomaly_mix=(0, 0, 0, 1), mixing=1.0, seed=4)), g)
    base = ["--checkpoint", str(pre_checkpoint), "--graph", str(g), "--epochs", "4", "--eval-every", "2",
            "--model", "checkpoint", "--no-label-inputs", "--no-progress", "--no-plots", "--threads", "1"]
    out = tmp_path / "ft"
    code, stdout, err = _run(finetune_main, [*base, "--out", str(out)], capsys)
    assert code == 0, err
    m = json.loads((out / "metrics.json").read_text())
    fv = m["forest_view"]
    assert fv["kept"] and fv["choice"] in ("blend", "forest") and "forest view joined" in stdout
    assert fv["train_nodes"] == m["labels"]["train_labelled"]  # the kept training labels, no other
    loaded = load_checkpoint_model(out / "final")
    assert isinstance(loaded.model, RankBlend) and loaded.model.weights.tolist() == fv["weights"]
    graph = load_graph(str(g))
    data = prepare_data(graph, loaded, m["normalize"], source=str(g))  # the run's own normalisation
    split = make_split(data, seed=0)
    s = predict(loaded.model, data).numpy()
    assert evaluate(data.y.numpy(), s, mask=split.val.numpy())["auprc"] == pytest.approx(m["val"]["auprc"], abs=1e-6)
    off = tmp_path / "ft_off"
    code, _, err = _run(finetune_main, [*base, "--out", str(off), "--forest", "off"], capsys)
    assert code == 0, err
    assert "forest_view" not in json.loads((off / "metrics.json").read_text())
    assert not isinstance(load_checkpoint_model(off / "final").model, RankBlend)


def test_finetune_overrides_checkpoint_eval_settings_unless_flags_given(small_graph, pre_checkpoint, tmp_path,
                                                                         capsys) -> None:
    g, path = small_graph
    pre_cfg = load_model_file(pre_checkpoint)["config"]
    assert (pre_cfg["link_eval"], pre_cfg["score_space"]) == ("threshold", "encoder")  # METHOD.md's, as pre-training saves
    base = ["--checkpoint", str(pre_checkpoint), "--graph", str(path), "--epochs", "4", "--eval-every", "2",
            "--label-fraction", "0.5", "--no-progress", "--no-plots", "--threads", "1"]
    from gcad_dist.data.splits import make_split
    from gcad_dist.metrics import evaluate

    test = make_split(g.to_data(), seed=0).test.numpy()
    for flags, want in (([], ("expected", "projection")),
                        (["--link-eval", "threshold", "--score-space", "encoder"], ("threshold", "encoder")),
                        (["--score-space", "encoder"], ("expected", "encoder"))):
        out = tmp_path / "-".join(want)
        code, _, err = _run(finetune_main, [*base, "--out", str(out), *flags], capsys)
        assert code == 0, err
        m = json.loads((out / "metrics.json").read_text())
        assert (m["link_eval"], m["score_space"]) == want
        assert (m["config"]["link_eval"], m["config"]["score_space"]) == want
        assert m["zero_shot_settings"] == {"link_eval": "threshold", "score_space": "encoder"}  # zero-shot: as saved
        ck = load_model_file(out / "final")["config"]
        assert (ck["link_eval"], ck["score_space"]) == want
        assert {k: v for k, v in ck.items() if k not in ("link_eval", "score_space")} == \
            {k: v for k, v in pre_cfg.items() if k not in ("link_eval", "score_space")}
        # The written model scores with the settings the reported test metrics used.
        s = score_graph(out / "final", path)
        assert evaluate(g.y, s, mask=test)["auprc"] == pytest.approx(m["test"]["auprc"], abs=1e-6)
    # --epochs 0 reports (and keeps) the checkpoint's own settings.
    out = tmp_path / "zs"
    code, _, err = _run(finetune_main, [*base[:4], "--out", str(out), "--epochs", "0", "--no-progress", "--no-plots"], capsys)
    assert code == 0, err
    m = json.loads((out / "metrics.json").read_text())
    assert (m["link_eval"], m["score_space"]) == ("threshold", "encoder")
    assert load_model_file(out / "final")["config"] == pre_cfg


@pytest.mark.parametrize("fraction,split_index", [(0.25, None), (0.05, None), (1.0, None), (0.3, 1)])
def test_train_label_fraction_trains_on_the_finetune_nodes(small_graph, pre_checkpoint, tmp_path, capsys, monkeypatch,
                                                           fraction, split_index) -> None:
    """gcad_dist.train --label-fraction f and gcad_dist.finetune --label-fraction f (same seed, same split) hand
    fit_supervised exactly the same training nodes, and the same validation / test nodes."""
    import dataclasses

    import gcad_dist.supervised as supervised
    import gcad_dist.train as train
    from partitioning.io import save_npz

    g, path = small_graph
    if split_index is not None:  # a graph with given split masks (like tolokers')
        rng = np.random.default_rng(5)
        part = rng.integers(0, 3, size=(2, g.num_nodes))
        g = dataclasses.replace(g, masks={"train": part == 0, "val": part == 1, "test": part == 2})
        path = tmp_path / "masks.npz"
        save_npz(g, path)
    seen: dict[str, tuple[torch.Tensor, ...]] = {}
    real_fit = supervised.fit_supervised

    def spy(tag):
        def fit(model, data, split, cfg, state_name=None):
            seen[tag] = tuple(torch.as_tensor(m).clone().cpu() for m in split)
            return real_fit(model, data, split, cfg, state_name)
        return fit

    monkeypatch.setattr(supervised, "fit_supervised", spy("ft"))  # finetune imports it at call time
    monkeypatch.setattr(train, "fit_supervised", spy("sc"))
    common = ["--graph", str(path), "--label-fraction", str(fraction), "--seed", "7", "--epochs", "2",
              "--eval-every", "1", "--no-progress", "--no-plots", "--threads", "1"]
    if split_index is not None:
        common += ["--split-index", str(split_index)]
    code, _, err = _run(finetune_main, ["--checkpoint", str(pre_checkpoint), "--out", str(tmp_path / "ft"), *common], capsys)
    assert code == 0, err
    code, _, err = _run(train.main, ["--model", "gccad", "--hidden", "16", "--out", str(tmp_path / "sc"), *common], capsys)
    assert code == 0, err
    for a, b in zip(seen["ft"], seen["sc"]):
        assert torch.equal(a, b)
    from gcad_dist.data.splits import make_split

    split = make_split(g.to_data(), seed=7, split_index=split_index)
    if split_index is not None:
        assert split.source == f"given[{split_index}]"
    keep = subsample_labels(split.train, torch.from_numpy(g.y), fraction, seed=7)
    assert torch.equal(seen["sc"][0], keep)
    if fraction < 1:
        assert int(keep.sum()) < int(split.train.sum())
    ft_m = json.loads((tmp_path / "ft" / "metrics.json").read_text())
    sc_m = json.loads((tmp_path / "sc" / "metrics.json").read_text())
    assert ft_m["label_budget"] == sc_m["label_budget"]
    assert sc_m["label_budget"]["train_labelled"] == int(keep.sum())
    assert sc_m["label_budget"]["label_fraction"] == fraction
    assert sc_m["split"] == ft_m["split"]  # the whole split is recorded, not the subsample


def test_train_label_fraction_rejects_bad_values(small_graph, tmp_path, capsys) -> None:
    import gcad_dist.train as train

    _, path = small_graph
    for bad in ("0", "1.5", "-0.1"):
        code, _, err = _run(train.main, ["--graph", str(path), "--out", str(tmp_path / "x"), "--label-fraction", bad], capsys)
        assert code == 2 and "--label-fraction" in err and "Traceback" not in err


def test_subsample_labels_is_shared_from_splits() -> None:
    import gcad_dist.data.splits as splits
    import gcad_dist.finetune as finetune

    assert finetune.subsample_labels is splits.subsample_labels


# ---------------------------------------------------------------------------------------------
# bench.pretrain_transfer: runs and tables (no heavy run)


def _fake_records() -> list[dict]:
    recs = []
    for seed in (0, 1, 2):
        recs.append({"dataset": "cora", "method": "zero-shot", "fraction": None, "seed": seed, "auroc": 0.5, "auprc": 0.05,
                     "recall_at_k": 0.04, "labels": 0, "label_anomalies": 0, "wall_seconds": 2.0})
        for f, n, a in ((0.1, 108, 6), (1.0, 1083, 60)):
            for method, base in (("fine-tune", 0.70 + 0.01 * seed), ("scratch", 0.65)):
                recs.append({"dataset": "cora", "method": method, "fraction": f, "seed": seed, "auroc": base,
                             "auprc": base / 2, "recall_at_k": 0.3, "labels": n, "label_anomalies": a, "wall_seconds": 4.0})
    return recs


def test_transfer_table_one_row_per_method_and_fraction() -> None:
    from bench.pretrain_transfer import table

    md = table(_fake_records()).splitlines()
    assert md[0].startswith("| dataset | method | label fraction | train labels (anomalies) | test AUROC")
    rows = [[c.strip() for c in ln.strip("|").split("|")] for ln in md[2:]]
    assert [(r[1], r[2]) for r in rows] == [("zero-shot", "-"), ("fine-tune", "0.1"), ("scratch", "0.1"),
                                            ("fine-tune", "1"), ("scratch", "1")]
    ft01 = rows[1]
    assert ft01[3] == "108 (6)" and ft01[4] == "0.7100 ± 0.0100" and ft01[7] == "0,1,2" and ft01[8] == "4"
    assert rows[2][4] == "0.6500 ± 0.0000" and rows[0][3] == "0 (0)"
    one = table([r for r in _fake_records() if r["seed"] == 0]).splitlines()[3]
    assert "| 0.7000 |" in one  # one seed: no ± std


def test_transfer_comparison_pairs_fine_tune_and_scratch_by_seed() -> None:
    from bench.pretrain_transfer import comparison

    recs = _fake_records()
    recs = [r for r in recs if not (r["method"] == "scratch" and r["fraction"] == 1.0 and r["seed"] == 2)]
    md = comparison(recs).splitlines()
    rows = [[c.strip() for c in ln.strip("|").split("|")] for ln in md[2:]]
    assert [(r[0], r[1], r[2]) for r in rows] == [("cora", "0.1", "0,1,2"), ("cora", "1", "0,1")]
    assert rows[0][3] == "+0.0600 ± 0.0100" and rows[0][5] == "+0.0000 ± 0.0000"
    assert rows[0][6] == "3/3, 3/3" and rows[0][7] == f"{0.355 / 0.325:.2f}"
    assert rows[1][3] == "+0.0550 ± 0.0071"


def test_transfer_runs_share_fraction_seed_and_settings() -> None:
    from bench.pretrain_transfer import TransferConfig, _method_runs, build_parser

    cfg = TransferConfig(**vars(build_parser().parse_args(["--datasets", "inj_cora"])))
    assert cfg.label_fractions == [0.01, 0.1, 1.0]
    runs = _method_runs(cfg, "ck", 3)
    assert [(m, f) for m, f, _, _ in runs] == [("zero-shot", None), ("fine-tune", 0.01), ("scratch", 0.01),
                                               ("fine-tune", 0.1), ("scratch", 0.1), ("fine-tune", 1.0), ("scratch", 1.0)]
    for _, f, tag, args in runs[1:]:
        assert args[args.index("--label-fraction") + 1] == str(f)
        assert "--lr" not in args and "--epochs" not in args  # both use gcad_dist.train's defaults
        assert "--no-label-inputs" not in args and "--label-inputs" not in args  # each CLI's own default
        assert args[args.index("--forest") + 1] == "off"  # a comparison of the two GNNs, without the forest view
    cfg = TransferConfig(**vars(build_parser().parse_args(["--datasets", "inj_cora", "--no-label-inputs"])))
    assert all("--no-label-inputs" in args for _, _, _, args in _method_runs(cfg, "ck", 0)[1:])
    cfg = TransferConfig(**vars(build_parser().parse_args(["--datasets", "inj_cora", "--forest", "auto"])))
    assert all(args[args.index("--forest") + 1] == "auto" for _, _, _, args in _method_runs(cfg, "ck", 0)[1:])
    assert len({tag for _, _, tag, _ in runs}) == len(runs)
    cfg = TransferConfig(**vars(build_parser().parse_args(["--datasets", "inj_cora", "--no-scratch"])))
    assert [m for m, _, _, _ in _method_runs(cfg, "ck", 0)] == ["zero-shot", "fine-tune", "fine-tune", "fine-tune"]
    # The old options still parse; the shared settings go to both kinds of run.
    cfg = TransferConfig(**vars(build_parser().parse_args(
        ["--datasets", "inj_cora", "--label-fractions", "0.1", "--ft-epochs", "50", "--sup-epochs", "60", "--patience", "20",
         "--lr", "5e-3", "--tune-lr", "2e-3", "--sup-score-space", "encoder", "--link-eval", "threshold"])))
    (_, _, _, ft), (_, _, _, sc) = _method_runs(cfg, "ck", 0)[1:]
    for args, epochs in ((ft, "50"), (sc, "60")):
        opts = dict(zip(args[::1], args[1::1]))
        assert (opts["--epochs"], opts["--lr"], opts["--patience"], opts["--score-space"], opts["--link-eval"]) == \
            (epochs, "0.002", "20", "encoder", "threshold")


def test_transfer_runs_continue_a_run_stopped_part_way(tmp_path) -> None:
    """Running the bench again after a crash or a kill: a run folder holding an unfinished run (a fit state saved, as
    gcad_dist.fit_state leaves it) gets --resume, which prepare_state_dir then accepts; a fresh folder gets nothing;
    --overwrite is passed on instead."""
    import torch

    from bench.pretrain_transfer import TransferConfig, _continue_flag, build_parser
    from gcad_dist.fit_state import has_unfinished_run, prepare_state_dir

    cfg = TransferConfig(**vars(build_parser().parse_args(["--datasets", "inj_cora"])))
    rdir = tmp_path / "ft0.1-s0"
    assert _continue_flag(cfg, rdir) == [] and not has_unfinished_run(rdir)
    folder = prepare_state_dir(rdir, {"seed": 0}, resume=False, overwrite=False)
    assert _continue_flag(cfg, rdir) == []  # started, but no fit saved yet: nothing to continue
    torch.save({"epoch": 3}, folder / "checkpoint.pt")
    assert _continue_flag(cfg, rdir) == ["--resume"]
    with pytest.raises(UsageError, match="--resume"):
        prepare_state_dir(rdir, {"seed": 0}, resume=False, overwrite=False)
    assert prepare_state_dir(rdir, {"seed": 0}, resume=True, overwrite=False) == folder
    cfg = TransferConfig(**vars(build_parser().parse_args(["--datasets", "inj_cora", "--overwrite"])))
    assert _continue_flag(cfg, rdir) == ["--overwrite"]


# ---------------------------------------------------------------------------------------------
# which model is fine-tuned (--model)


@pytest.fixture(scope="module")
def local_checkpoint(make_local_checkpoint) -> Path:
    """A checkpoint of the label-free recipe's model: the local contrast (no message passing), 3 members."""
    return make_local_checkpoint("standard")


def test_warm_start_copies_the_first_members_input_projection() -> None:
    from gcad_dist.finetune import warm_start_input_projection

    torch.manual_seed(0)
    src = GCCAD(GCCADConfig(in_dim=8, hidden=16, contrast="local", loss="logistic", ensemble=3))
    dst = GCCAD(GCCADConfig(in_dim=8, hidden=16, jump="cat"))
    before = {k: v.clone() for k, v in dst.state_dict().items()}
    warm_start_input_projection(dst, src)
    assert torch.equal(dst.encoder.input_proj.weight, src.encoder.input_proj.weight[:16])
    assert torch.equal(dst.encoder.input_proj.bias, src.encoder.input_proj.bias[:16])
    # nothing else moves
    for k, v in dst.state_dict().items():
        if not k.startswith("encoder.input_proj."):
            assert torch.equal(v, before[k]), k
    with pytest.raises(ValueError, match="differ in shape"):
        warm_start_input_projection(GCCAD(GCCADConfig(in_dim=5, hidden=16)), src)
    # a wider model (label inputs appended): the source fills the first columns, the others keep their start
    wide = GCCAD(GCCADConfig(in_dim=10, hidden=16, jump="cat"))
    own = wide.encoder.input_proj.weight[:, 8:].clone()
    warm_start_input_projection(wide, src)
    assert torch.equal(wide.encoder.input_proj.weight[:, :8], src.encoder.input_proj.weight[:16])
    assert torch.equal(wide.encoder.input_proj.weight[:, 8:], own)
    assert not src.config.passes_messages and dst.config.passes_messages
    assert GCCADConfig(in_dim=8, contrast="local", loss="ce").passes_messages


def test_widened_input_projection_computes_what_the_model_did() -> None:
    """Label inputs appended to a pre-trained model: two zero columns, so fine-tuning starts from its exact scores,
    whatever the new columns hold, and the new weights are trainable."""
    from gcad_dist.finetune import widen_input_projection
    from gcad_dist.supervised import predict
    from torch_geometric.data import Data

    torch.manual_seed(0)
    model = GCCAD(GCCADConfig(in_dim=8, hidden=16, contrast="local", loss="logistic", ensemble=3)).eval()
    x = torch.randn(30, 8)
    ei = torch.randint(0, 30, (2, 90))
    before = predict(model, Data(x=x, edge_index=ei, num_nodes=30))
    widen_input_projection(model, 2)
    assert model.encoder.input_proj.weight.shape == (48, 10)
    after = predict(model, Data(x=torch.cat([x, 5 * torch.randn(30, 2)], 1), edge_index=ei, num_nodes=30))
    assert torch.allclose(torch.as_tensor(before), torch.as_tensor(after), atol=1e-6)
    assert model.encoder.input_proj.weight.requires_grad and any(
        p is model.encoder.input_proj.weight for p in model.parameters())


def test_finetune_label_inputs_read_only_the_kept_training_labels(small_graph, pre_checkpoint, tmp_path, capsys,
                                                                    monkeypatch) -> None:
    """With ``--label-inputs`` every fit sees ``x`` plus the columns of the *kept* training anomalies (after
    --label-fraction), never a validation or test label; by default, with fewer than 10 kept training anomalies (3
    here), it fits on the features alone."""
    import gcad_dist.supervised as supervised
    from gcad_dist.data.label_inputs import with_label_inputs
    from gcad_dist.data.splits import make_split
    from gcad_dist.train import load_labelled

    g, path = small_graph
    seen: list[torch.Tensor] = []
    real_fit = supervised.fit_supervised

    def spy(model, data, split, cfg, state_name=None):
        seen.append(data.x.clone())
        return real_fit(model, data, split, cfg, state_name)

    monkeypatch.setattr(supervised, "fit_supervised", spy)
    common = ["--checkpoint", str(pre_checkpoint), "--graph", str(path), "--label-fraction", "0.3", "--seed", "4",
              "--epochs", "2", "--no-progress", "--no-plots", "--threads", "1"]
    code, _, err = _run(finetune_main, [*common, "--out", str(tmp_path / "li"), "--label-inputs"], capsys)
    assert code == 0, err
    data = load_labelled(str(path), "none")
    keep = subsample_labels(make_split(data, seed=4).train, data.y, 0.3, seed=4)
    assert int(keep.sum()) < int(make_split(data, seed=4).train.sum())
    want = with_label_inputs(data, keep).x
    assert len(seen) == 1 and torch.allclose(seen[0][:, -2:], want[:, -2:])
    assert load_model_file(tmp_path / "li" / "final")["config"]["in_dim"] == g.x.shape[1] + 2
    seen.clear()
    code, _, err = _run(finetune_main, [*common, "--out", str(tmp_path / "plain")], capsys)
    assert code == 0, err
    assert seen[0].shape[1] == g.x.shape[1]
    assert load_model_file(tmp_path / "plain" / "final")["config"]["in_dim"] == g.x.shape[1]


def test_auto_fine_tunes_a_local_checkpoint_three_ways_and_keeps_one_on_validation(
        small_graph, local_checkpoint, tmp_path, capsys, monkeypatch) -> None:
    """A model without message passing is fine-tuned as it is, and gcad_dist.train's GCCAD is trained from its input
    projection and from scratch; the choice reads validation labels only, and the written checkpoint is the kept
    model (several kept: their average, whose primary is the first kept)."""
    import gcad_dist.train as train_mod

    g, path = small_graph
    seen = {}
    real = train_mod.keep_candidates

    def spy(fits, y, val_mask, seed=0, names=None, cross_fitted=False, **kw):
        if names == ["checkpoint", "graph", "scratch", "zero-shot"]:
            seen["val_mask"] = torch.as_tensor(val_mask).clone()
            seen["names"] = names
            seen["cross_fitted"] = cross_fitted
        return real(fits, y, val_mask, seed=seed, names=names, cross_fitted=cross_fitted)

    monkeypatch.setattr(train_mod, "keep_candidates", spy)
    out = tmp_path / "ft"
    code, stdout, err = _run(finetune_main, ["--checkpoint", str(local_checkpoint), "--graph", str(path), "--out",
                                            str(out), "--epochs", "4", "--eval-every", "2", "--seed", "0",
                                            "--label-inputs", "--no-progress", "--no-plots", "--threads", "1"], capsys)
    assert code == 0, err
    m = json.loads((out / "metrics.json").read_text())
    assert seen["names"] == ["checkpoint", "graph", "scratch", "zero-shot"]
    assert seen["cross_fitted"] is True  # the default keep rule judges by cross-fitted scores (session 44)
    from gcad_dist.data.splits import make_split

    split = make_split(g.to_data(), seed=0)
    assert torch.equal(seen["val_mask"], split.val)  # the choice saw the validation nodes, not the test nodes
    sel = m["model_selection"]
    assert set(sel["val_auprc"]) == {"checkpoint", "graph", "scratch", "zero-shot"}
    assert sel["chosen"] == m["finetuned_model"]
    # each graph model's own choice, graph against ego, as gcad_dist.train makes it
    assert set(m["contrast_selection"]) == {"graph", "scratch"}
    ck = load_model_file(out / "final")
    assert ck["extra"]["finetuned_model"] == m["finetuned_model"]
    kept = m["finetuned_model"]
    assert kept == " + ".join(sel["kept"]) and f"{kept} model" in stdout
    primary = sel["kept"][0]
    assert (ck["config"]["contrast"] == "local" if primary in ("checkpoint", "zero-shot")
            else ck["config"]["contrast"] != "local")
    # the written checkpoint (one flat ensemble when several are kept) scores the validation nodes as the run did
    from gcad_dist.metrics import evaluate
    from gcad_dist.score import load_checkpoint_model
    from gcad_dist.supervised import predict
    from gcad_dist.train import load_labelled

    from gcad_dist.score import prepare_data

    # it reads label inputs (--label-inputs): scored with only the training labels known, it gives the run's columns
    data = load_labelled(str(path))
    loaded = load_checkpoint_model(out / "final")
    assert m["label_inputs"] and loaded.label_inputs and loaded.in_dim == g.x.shape[1] + 2
    only_train = data.clone()
    only_train.y = torch.where(split.train, data.y, torch.full_like(data.y, -1))
    s = predict(loaded.model, prepare_data(only_train, loaded, normalize="none"))
    assert evaluate(data.y, s, mask=split.val)["auprc"] == pytest.approx(m["val"]["auprc"], abs=1e-5)


def test_scratch_candidate_is_gcad_dist_train(small_graph, local_checkpoint, tmp_path, capsys) -> None:
    """``--model scratch`` fits exactly what gcad_dist.train fits on the same labels and inputs (the pre-trained weights
    unused; both sides decide the label inputs by the same rule), so the fine-tuning choice compares against the real
    baseline; ``graph`` differs from it in the start only."""
    from gcad_dist.train import main as train_main

    g, path = small_graph
    common = ["--graph", str(path), "--epochs", "4", "--eval-every", "2", "--seed", "0", "--label-fraction", "0.5",
              "--no-progress", "--no-plots", "--threads", "1"]
    runs = {}
    for choice in ("scratch", "graph"):
        code, _, err = _run(finetune_main, ["--checkpoint", str(local_checkpoint), "--out", str(tmp_path / choice),
                                           "--model", choice, *common], capsys)
        assert code == 0, err
        runs[choice] = json.loads((tmp_path / choice / "metrics.json").read_text())
    code, _, err = _run(train_main, ["--out", str(tmp_path / "train"), "--hidden", "16", *common], capsys)
    assert code == 0, err
    tr = json.loads((tmp_path / "train" / "metrics.json").read_text())
    assert runs["scratch"]["val"] == tr["val"] and runs["scratch"]["test"] == tr["test"]
    assert runs["graph"]["val"] != tr["val"]


@pytest.mark.parametrize("choice", ["checkpoint", "graph", "scratch"])
def test_model_flag_fits_only_the_model_asked_for(small_graph, local_checkpoint, tmp_path, capsys, choice) -> None:
    g, path = small_graph
    out = tmp_path / choice
    code, _, err = _run(finetune_main, ["--checkpoint", str(local_checkpoint), "--graph", str(path), "--out", str(out),
                                       "--model", choice, "--epochs", "2", "--seed", "0", "--no-progress",
                                       "--no-plots", "--threads", "1"], capsys)
    assert code == 0, err
    m = json.loads((out / "metrics.json").read_text())
    assert m["finetuned_model"] == choice and "model_selection" not in m
    ck = load_model_file(out / "final")
    if choice != "checkpoint":  # gcad_dist.train's model at the checkpoint's width
        assert ck["config"]["contrast"] in ("graph", "ego") and ck["config"]["hidden"] == 16
        assert ck["config"]["ensemble"] == 1
    else:
        assert ck["config"]["contrast"] == "local" and ck["config"]["ensemble"] == 3


def test_fine_tuning_a_ball_switch_checkpoint_fits_against_the_neighbours(small_graph, tmp_path, capsys) -> None:
    """The local recipe's checkpoints record the ball switch (session 49): the zero-shot score keeps it, the model
    fine-tuned from it is scored against its neighbours, as before."""
    g, path = small_graph
    torch.manual_seed(2)
    cfg = GCCADConfig(in_dim=8, hidden=16, contrast="local", loss="logistic", tau=0.2, ensemble=2, ball_switch=True)
    pre = tmp_path / "pre" / "final"
    save_model(pre, GCCAD(cfg), cfg, extra={"stage": "pretrain", "normalize": "standard"})
    out = tmp_path / "ft"
    code, _, err = _run(finetune_main, ["--checkpoint", str(pre), "--graph", str(path), "--out", str(out),
                                       "--model", "checkpoint", "--epochs", "2", "--seed", "0", "--no-progress",
                                       "--no-plots", "--threads", "1"], capsys)
    assert code == 0, err
    m = json.loads((out / "metrics.json").read_text())
    assert load_model_file(pre)["config"]["ball_switch"] is True and m["zero_shot"]["test"]
    assert m["model_config"]["ball_switch"] is False  # the written model's
    assert load_model_file(out / "final")["config"]["ball_switch"] is False


def test_auto_fine_tunes_a_message_passing_checkpoint_as_it_is(small_graph, pre_checkpoint, tmp_path, capsys) -> None:
    g, path = small_graph
    out = tmp_path / "ft"
    code, _, err = _run(finetune_main, ["--checkpoint", str(pre_checkpoint), "--graph", str(path), "--out", str(out),
                                       "--epochs", "2", "--no-progress", "--no-plots", "--threads", "1"], capsys)
    assert code == 0, err
    m = json.loads((out / "metrics.json").read_text())
    assert m["finetuned_model"] == "checkpoint" and "model_selection" not in m  # no zero-shot candidate (paper recipe)


def test_zero_shot_fit_reads_label_columns_without_changing_its_scores(local_checkpoint) -> None:
    """The zero-shot candidate is a copy of the checkpoint's model; widened for label inputs, it scores the widened
    inputs exactly as the checkpoint scores the plain ones, and the checkpoint's own model is left as it was."""
    from gcad_dist.finetune import zero_shot_fit
    from gcad_dist.score import load_checkpoint_model
    from gcad_dist.supervised import predict
    from torch_geometric.data import Data

    loaded = load_checkpoint_model(local_checkpoint)
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(40, loaded.in_dim, generator=gen)
    ei = torch.randint(0, 40, (2, 160), generator=gen)
    before = predict(loaded.model, Data(x=x, edge_index=ei))
    res, model, config = zero_shot_fit(loaded.model, loaded.config, before.numpy(), {"auprc": 0.5}, {"auprc": 0.4}, 2)
    wide = Data(x=torch.cat([x, torch.rand(40, 2, generator=gen)], 1), edge_index=ei)
    assert torch.allclose(predict(model, wide), before, atol=1e-6)
    assert config.in_dim == loaded.in_dim + 2 and loaded.config.in_dim == loaded.in_dim
    assert loaded.model.encoder.input_proj.in_features == loaded.in_dim  # the checkpoint's model is untouched
    assert torch.allclose(predict(loaded.model, Data(x=x, edge_index=ei)), before)
    assert res.best_epoch == 0 and res.val == {"auprc": 0.5} and res.test == {"auprc": 0.4} and not res.history
    assert res.ensemble(model) is model
    # a snapshot ensemble (a fine-tuned checkpoint) is widened member by member
    from gcad_dist.model.snapshots import SnapshotEnsemble

    other = {k: v + 0.1 * torch.randn(v.shape, generator=gen) for k, v in loaded.model.state_dict().items()}
    snap = SnapshotEnsemble(loaded.model, [loaded.model.state_dict(), other])
    plain = predict(snap, Data(x=x, edge_index=ei))
    _, wide_snap, _ = zero_shot_fit(snap, loaded.config, plain.numpy(), {}, {}, 2)
    assert all(m.encoder.input_proj.in_features == loaded.in_dim + 2 for m in wide_snap.members)
    assert torch.allclose(predict(wide_snap, wide), plain, atol=1e-6)
    assert all(m.encoder.input_proj.in_features == loaded.in_dim for m in snap.members)
    # a candidate ensemble of snapshot ensembles and plain models (a checkpoint fine-tuned with --model auto): every
    # model in it, at any depth
    from gcad_dist.model.candidate_ensemble import CandidateEnsemble
    from gcad_dist.model.snapshots import leaf_models

    mp = GCCAD(GCCADConfig(in_dim=loaded.in_dim, hidden=16))  # a message-passing member beside them
    ens = CandidateEnsemble([snap, mp], [0.1, -0.3], [2.0, 0.5])
    plain = predict(ens, Data(x=x, edge_index=ei))
    _, wide_ens, _ = zero_shot_fit(ens, loaded.config, plain.numpy(), {}, {}, 2)
    assert len(leaf_models(wide_ens)) == 3
    assert all(m.encoder.input_proj.in_features == loaded.in_dim + 2 for m in leaf_models(wide_ens))
    assert torch.allclose(predict(wide_ens, wide), plain, atol=1e-5)


def test_auto_keeps_the_zero_shot_model_when_validation_prefers_it(small_graph, local_checkpoint, tmp_path, capsys,
                                                                  monkeypatch) -> None:
    """When the keep rule keeps only the zero-shot candidate, the run reports and writes the checkpoint unchanged
    (widened for the label columns): its scores, validation and test, are the zero-shot ones, and plots still work."""
    import gcad_dist.train as train_mod

    g, path = small_graph
    real = train_mod.keep_candidates

    def only_zero_shot(fits, y, val_mask, seed=0, names=None, cross_fitted=False, **kw):
        kept, record = real(fits, y, val_mask, seed=seed, names=names, cross_fitted=cross_fitted)
        if names and "zero-shot" in names:
            kept = [names.index("zero-shot")]
            record.update(kept=["zero-shot"], chosen="zero-shot")
        return kept, record

    monkeypatch.setattr(train_mod, "keep_candidates", only_zero_shot)
    out = tmp_path / "ft"
    code, stdout, err = _run(finetune_main, ["--checkpoint", str(local_checkpoint), "--graph", str(path), "--out",
                                            str(out), "--epochs", "2", "--seed", "0", "--label-inputs",
                                            "--candidate-scores", "--no-progress", "--threads", "1"], capsys)
    assert code == 0, err
    m = json.loads((out / "metrics.json").read_text())
    assert m["finetuned_model"] == "zero-shot" and m["best_epoch"] == 0
    # --candidate-scores: what the rule chose from, every node, with the labels and the split
    cs = np.load(out / "candidate_scores.npz")
    assert list(cs["names"]) == ["checkpoint", "graph", "scratch", "zero-shot"]
    assert cs["scores"].shape == (4, g.x.shape[0]) and cs["val"].dtype == bool and cs["y"].shape == (g.x.shape[0],)
    from gcad_dist.metrics import auprc as _auprc
    assert _auprc(cs["y"][cs["val"]], cs["scores"][3][cs["val"]]) == pytest.approx(m["zero_shot"]["val"]["auprc"])
    assert m["val"] == m["zero_shot"]["val"] and m["test"] == m["zero_shot"]["test"]
    assert (out / "roc_pr_test.png").exists()
    from gcad_dist.data.splits import make_split
    from gcad_dist.metrics import evaluate
    from gcad_dist.score import load_checkpoint_model, prepare_data
    from gcad_dist.supervised import predict
    from gcad_dist.train import load_labelled

    data = load_labelled(str(path))
    split = make_split(g.to_data(), seed=0)
    loaded = load_checkpoint_model(out / "final")
    assert loaded.label_inputs and loaded.in_dim == g.x.shape[1] + 2
    only_train = data.clone()
    only_train.y = torch.where(split.train, data.y, torch.full_like(data.y, -1))
    s = predict(loaded.model, prepare_data(only_train, loaded, normalize="none"))
    assert evaluate(data.y, s, mask=split.test)["auroc"] == pytest.approx(m["zero_shot"]["test"]["auroc"], abs=1e-6)


def test_bad_model_choice_is_a_one_line_error(small_graph, pre_checkpoint, tmp_path, capsys) -> None:
    g, path = small_graph
    code, _, err = _run(finetune_main, ["--checkpoint", str(pre_checkpoint), "--graph", str(path), "--out",
                                       str(tmp_path / "x"), "--model", "bogus"], capsys)
    assert code != 0 and "--model" in err and "Traceback" not in err


def test_transfer_comparison_counts_the_fine_tuned_model_kept() -> None:
    from bench.pretrain_transfer import comparison

    recs = _fake_records()
    for r in recs:
        if r["method"] == "fine-tune" and r["fraction"] == 0.1:
            r["finetuned_model"] = "graph" if r["seed"] == 1 else "checkpoint"
    rows = [[c.strip() for c in ln.strip("|").split("|")] for ln in comparison(recs).splitlines()[2:]]
    assert rows[0][8] == "checkpoint 2/3, graph 1/3"
    assert rows[1][8] == "checkpoint 3/3"  # runs from before --model record nothing: they fine-tuned the checkpoint


def test_candidate_ensemble_checkpoint_scores_as_trained(small_graph, tmp_path) -> None:
    """A candidate ensemble (``--contrast auto`` keeping several candidates) round-trips through ``model.pt``:
    its members (architectures differ, one a snapshot ensemble) and their score standardisation come back, and
    the whole graph and each part with its halo score as the mean of the members' standardised scores. The
    primary member stays the top-level model, which older readers load."""
    from gcad_dist.model.candidate_ensemble import CandidateEnsemble
    from gcad_dist.model.snapshots import SnapshotEnsemble, base_model
    from gcad_dist.score import score_parts_halo

    g, path = small_graph
    torch.manual_seed(0)
    graph = GCCAD(GCCADConfig(in_dim=8, hidden=16, jump="cat"))
    states = [graph.state_dict(), {n: v + 0.05 * torch.randn_like(v) if v.is_floating_point() else v
                                   for n, v in graph.state_dict().items()}]
    ego = GCCAD(GCCADConfig(in_dim=8, hidden=16, contrast="ego"))
    norm = GCCAD(GCCADConfig(in_dim=8, hidden=16, jump="cat", norm="graph"))
    ens = CandidateEnsemble([SnapshotEnsemble(graph, states), ego, norm], [0.1, -0.2, 0.3], [0.5, 2.0, 1.5])
    save_model(tmp_path / "ck", ens, graph.config, extra={"model": "gccad"}, snapshots=states)
    ck = load_model_file(tmp_path / "ck")
    assert ck["config"]["contrast"] == "graph" and len(ck["snapshot_state_dicts"]) == 2  # the primary, as before
    loaded = load_checkpoint_model(tmp_path / "ck")
    m = loaded.model
    assert isinstance(m, CandidateEnsemble) and [type(x).__name__ for x in m.members] == ["SnapshotEnsemble", "GCCAD", "GCCAD"]
    assert [base_model(x).config.contrast for x in m.members] == ["graph", "ego", "graph"]
    assert base_model(m.members[2]).config.norm == "graph" and torch.allclose(m.stds, torch.tensor([0.5, 2.0, 1.5]))
    data = prepare_data(str(path), loaded)
    members = [x.eval() for x in ens.members]
    want = np.mean([(score_data(x, data, device="cpu") - mu) / sd
                    for x, mu, sd in zip(members, (0.1, -0.2, 0.3), (0.5, 2.0, 1.5))], 0)
    np.testing.assert_allclose(score_data(m, data, device="cpu"), want, atol=1e-5)
    part = np.arange(data.num_nodes) % 3
    want = np.mean([(score_parts_halo(x, data, part, device="cpu") - mu) / sd
                    for x, mu, sd in zip(members, (0.1, -0.2, 0.3), (0.5, 2.0, 1.5))], 0)
    np.testing.assert_allclose(score_parts_halo(m, data, part, device="cpu"), want, atol=1e-5)
    with pytest.raises(ValueError, match="one mean and one std"):
        CandidateEnsemble([ego], [0.0, 1.0], [1.0])


def test_score_cli_scores_nodes_without_neighbours_at_the_median(small_graph, tmp_path, capsys, caplog) -> None:
    """``gcad_dist.score`` with a label-free (local contrast) checkpoint on a graph where some nodes have no
    neighbour: they get the median of the other nodes' scores, and the run says how many there were."""
    from partitioning.graph import csr_from_edges
    from partitioning.io import load_graph, save_npz

    _, path = small_graph
    g = load_graph(path)
    alone = np.array([0, 1, 2])
    indptr, indices = g.indptr.copy(), g.indices.copy()
    src = np.repeat(np.arange(g.num_nodes), np.diff(indptr))
    keep = ~(np.isin(src, alone) | np.isin(indices, alone))
    g.indptr, g.indices = csr_from_edges(src[keep], indices[keep], g.num_nodes)
    alone = np.flatnonzero(np.diff(g.indptr) == 0)  # the three cut off, and any the generator left alone
    assert alone.size >= 3
    other = tmp_path / "alone.npz"
    save_npz(g, other)
    torch.manual_seed(0)
    cfg = GCCADConfig(in_dim=g.x.shape[1], hidden=16, contrast="local", loss="logistic", tau=0.2, ensemble=2)
    save_model(tmp_path / "ck", GCCAD(cfg), cfg, extra={"normalize": "standard"})
    out = tmp_path / "s.parquet"
    with caplog.at_level("INFO", logger="gcad_dist.score"):
        code, _, err = _run(score_main, ["--checkpoint", str(tmp_path / "ck"), "--graph", str(other), "--out",
                                         str(out)], capsys)
    assert code == 0, err
    assert f"{alone.size} node(s) have no neighbour" in caplog.text
    s = pq.read_table(out).column("score").to_numpy()
    rest = np.ones(s.size, dtype=bool)
    rest[alone] = False
    assert np.allclose(s[alone], np.median(s[rest]), atol=1e-6)
    assert np.unique(s[rest]).size > 10  # the others keep scores of their own


def test_train_suggests_pretraining_with_few_labelled_anomalies(small_graph, tmp_path, capsys, monkeypatch) -> None:
    """Under FEW_ANOMALIES labelled training anomalies a fit from scratch logs the command that pre-trains and
    fine-tunes (its own graph in it); from FEW_ANOMALIES on it says nothing."""
    import gcad_dist.train as train

    assert train.few_labels_hint("g.npz", train.FEW_ANOMALIES) is None
    hint = train.few_labels_hint("data/g.npz", 3)
    assert hint.startswith("only 3 labelled training anomalies")
    assert "gcad_dist.train --graph data/g.npz --pretrain on" in hint
    cited = re.search(r"README, '([^']+)'", hint).group(1)  # the README part it points to exists
    assert cited in (Path(__file__).resolve().parents[1] / "README.md").read_text()
    said = []
    monkeypatch.setattr(train.log, "info", lambda msg, *a: said.append(msg % a if a else msg))
    g, path = small_graph
    code, _, err = _run(train.main, ["--graph", str(path), "--model", "mlp", "--label-fraction", "0.25", "--epochs", "2",
                                     "--out", str(tmp_path / "few"), "--no-progress", "--no-plots", "--threads", "1"],
                        capsys)
    assert code == 0, err
    n = json.loads((tmp_path / "few" / "metrics.json").read_text())["label_budget"]["train_labelled_anomalies"]
    assert n < train.FEW_ANOMALIES and said[-1] == train.few_labels_hint(str(path), n)


def test_fine_tuning_a_fine_tuned_ensemble_with_label_inputs(small_graph, local_checkpoint, tmp_path, capsys,
                                                             monkeypatch) -> None:
    """A checkpoint written by ``--model auto`` (an average of the label-free model and the graph models) can be
    fine-tuned again, here with label inputs on, which widen every member of its zero-shot candidate; and
    ``--epochs 0`` writes it as it is, so that the written model scores as the zero-shot figures say."""
    import gcad_dist.train as train_mod

    g, path = small_graph
    real = train_mod.keep_candidates

    def keep_all(fits, y, val_mask, seed=0, names=None, cross_fitted=False, **kw):
        kept, record = real(fits, y, val_mask, seed=seed, names=names, cross_fitted=cross_fitted)
        return (list(range(len(fits))), record) if names and "zero-shot" in names else (kept, record)

    monkeypatch.setattr(train_mod, "keep_candidates", keep_all)
    common = ["--graph", str(path), "--epochs", "2", "--seed", "0", "--no-progress", "--no-plots", "--threads", "1"]
    code, _, err = _run(finetune_main, ["--checkpoint", str(local_checkpoint), "--out", str(tmp_path / "ft1"),
                                       "--no-label-inputs", *common], capsys)
    assert code == 0, err
    assert len(load_model_file(tmp_path / "ft1" / "final")["candidate_members"]) > 1
    # --epochs 0 writes that checkpoint unchanged, every member of it (not its first member alone)
    code, _, err = _run(finetune_main, ["--checkpoint", str(tmp_path / "ft1" / "final"), "--out", str(tmp_path / "zs"),
                                       "--graph", str(path), "--epochs", "0", "--no-plots", "--threads", "1"],
                        capsys)
    assert code == 0, err
    assert np.array_equal(score_graph(tmp_path / "zs" / "final", path), score_graph(tmp_path / "ft1" / "final", path))
    code, _, err = _run(finetune_main, ["--checkpoint", str(tmp_path / "ft1" / "final"), "--out", str(tmp_path / "ft2"),
                                       "--label-inputs", *common], capsys)
    assert code == 0, err
    m = json.loads((tmp_path / "ft2" / "metrics.json").read_text())
    assert m["label_inputs"] and "zero-shot" in m["finetuned_model"]
    assert load_checkpoint_model(tmp_path / "ft2" / "final").in_dim == g.x.shape[1] + 2


def test_cross_fitted_keep_rule_judges_candidates_by_their_selection_scores(small_graph, local_checkpoint, tmp_path,
                                                                            capsys, monkeypatch) -> None:
    """``--keep-rule cross-fitted``: the model-level rule gets each trained candidate's cross-fitted scores (every
    validation node scored by evaluations chosen on the other validation half), the zero-shot one its plain scores;
    ``--candidate-scores`` writes both, and the record says which rule chose."""
    import gcad_dist.train as train_mod

    g, path = small_graph
    seen = {}
    real = train_mod.keep_candidates

    def spy(fits, y, val_mask, seed=0, names=None, cross_fitted=False, **kw):
        if names and "zero-shot" in names:
            seen["cross_fitted"] = cross_fitted
            seen["selection"] = [getattr(f[0], "selection_scores", None) for f in fits]
            seen["scores"] = [f[0].scores for f in fits]
        return real(fits, y, val_mask, seed=seed, names=names, cross_fitted=cross_fitted, **kw)

    monkeypatch.setattr(train_mod, "keep_candidates", spy)
    out = tmp_path / "ft"
    code, _, err = _run(finetune_main, ["--checkpoint", str(local_checkpoint), "--graph", str(path), "--out", str(out),
                                       "--epochs", "4", "--eval-every", "1", "--seed", "0", "--keep-rule",
                                       "cross-fitted", "--candidate-scores", "--no-label-inputs", "--no-progress",
                                       "--no-plots", "--threads", "1"], capsys)
    assert code == 0, err
    assert seen["cross_fitted"] is True
    trained, zero_shot = seen["selection"][:3], seen["selection"][3]
    assert zero_shot is None and all(s is not None and np.isfinite(s).all() for s in trained)
    # a trained candidate's cross-fitted scores differ from its plain scores on validation nodes
    assert any(not np.allclose(s, (sc - sc.mean()) / sc.std(), atol=1e-4) for s, sc in zip(trained, seen["scores"]))
    m = json.loads((out / "metrics.json").read_text())
    assert m["model_selection"]["cross_fitted"] is True and "cross-fitted" in m["model_selection"]["rule"]
    cs = np.load(out / "candidate_scores.npz")
    assert cs["selection_scores"].shape == cs["scores"].shape
    np.testing.assert_allclose(cs["selection_scores"][3], cs["scores"][3])  # zero-shot: its scores
    code, _, err = _run(finetune_main, ["--checkpoint", str(local_checkpoint), "--graph", str(path), "--out",
                                       str(tmp_path / "bad"), "--keep-rule", "oracle"], capsys)
    assert code == 2 and "--keep-rule" in err


def test_lift_weights_are_recorded_and_the_written_model_scores_with_them(small_graph, local_checkpoint, tmp_path,
                                                                          capsys, monkeypatch) -> None:
    """``--candidate-weights lift``: each kept candidate weighs its validation AUPRC's lift over the base rate, the
    record holds the weights (summing to 1), and the written checkpoint scores as the weighted mean the reported test
    metrics measured (the weights folded into the ensemble's stds). The small graph's validation holds fewer than
    MIN_POSITIVES anomalies, so the threshold is lowered for the test."""
    import gcad_dist.selection as selection_mod
    from gcad_dist.data.splits import make_split
    from gcad_dist.metrics import evaluate

    monkeypatch.setattr(selection_mod, "MIN_POSITIVES", 2)
    g, path = small_graph
    out = tmp_path / "ft"
    code, _, err = _run(finetune_main, ["--checkpoint", str(local_checkpoint), "--graph", str(path), "--out", str(out),
                                       "--epochs", "4", "--eval-every", "1", "--seed", "0", "--candidate-weights",
                                       "lift", "--forest", "off", "--isolation-forest", "off", "--no-label-inputs",
                                       "--no-progress", "--no-plots", "--threads", "1"], capsys)
    assert code == 0, err
    m = json.loads((out / "metrics.json").read_text())
    sel = m["model_selection"]
    assert sel["weighting"] == "lift" and "too_few_validation_anomalies" not in sel
    assert list(sel["weights"]) == sel["kept"] and sum(sel["weights"].values()) == pytest.approx(1.0)
    lift = np.array([max(0.0, sel["val_auprc"][n] - sel["base_rate"]) for n in sel["kept"]])
    np.testing.assert_allclose(list(sel["weights"].values()), lift / lift.sum())
    test = make_split(g.to_data(), seed=0).test.numpy()
    s = score_graph(out / "final", path)
    assert evaluate(g.y, s, mask=test)["auprc"] == pytest.approx(m["test"]["auprc"], abs=1e-5)
    code, _, err = _run(finetune_main, ["--checkpoint", str(local_checkpoint), "--graph", str(path), "--out",
                                       str(tmp_path / "bad"), "--candidate-weights", "best"], capsys)
    assert code == 2 and "--candidate-weights" in err


def test_anchor_reaches_the_checkpoint_fit_only(small_graph, local_checkpoint, tmp_path, capsys, monkeypatch) -> None:
    """``--anchor A`` (L2-SP) is the checkpoint candidate's fit setting, and no other candidate's: the graph and
    scratch fits start from weights that were not pre-trained (all but an input projection), so they keep A = 0.
    The settings record holds it."""
    import gcad_dist.supervised as supervised_mod
    import gcad_dist.train as train_mod

    fit_supervised = supervised_mod.fit_supervised

    seen: dict[str, list[float]] = {}

    def spy(model, data, split, cfg=None, state_name=None):
        seen.setdefault(str(state_name), []).append(cfg.anchor)
        return fit_supervised(model, data, split, cfg, state_name=state_name)

    monkeypatch.setattr(supervised_mod, "fit_supervised", spy)  # finetune imports it at run time
    monkeypatch.setattr(train_mod, "fit_supervised", spy)
    g, path = small_graph
    out = tmp_path / "ft"
    code, _, err = _run(finetune_main, ["--checkpoint", str(local_checkpoint), "--graph", str(path), "--out", str(out),
                                       "--epochs", "2", "--eval-every", "1", "--seed", "0", "--anchor", "0.3",
                                       "--forest", "off", "--isolation-forest", "off", "--no-progress", "--no-plots",
                                       "--threads", "1"], capsys)
    assert code == 0, err
    assert seen.pop("checkpoint") == [0.3]
    assert seen and all(a == 0.0 for anchors in seen.values() for a in anchors), seen
    assert json.loads((out / "metrics.json").read_text())["config"]["anchor"] == 0.3
