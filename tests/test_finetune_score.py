"""Fine-tuning from a pre-training checkpoint and per-node scoring (gcad_dist.finetune, gcad_dist.score)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from gcad_dist.checkpoint import load_model_file, save_model
from gcad_dist.cli import run_cli
from gcad_dist.finetune import main as finetune_main
from gcad_dist.finetune import subsample_labels
from gcad_dist.model import GCCAD, GCCADConfig
from gcad_dist.score import main as score_main
from gcad_dist.score import load_checkpoint_model, prepare_data, score_data, score_graph

pq = pytest.importorskip("pyarrow.parquet")


@pytest.fixture(scope="module")
def small_graph(tmp_path_factory: pytest.TempPathFactory):
    """A 300-node synthetic graph with planted anomalies, saved as .npz."""
    from partitioning.io import save_npz
    from partitioning.synthetic import SyntheticConfig, generate

    g = generate(SyntheticConfig(nodes=300, avg_degree=6, features=8, anomaly_fraction=0.1, clique_size=5,
                                 contextual_candidates=10, seed=3))
    path = tmp_path_factory.mktemp("graph") / "g.npz"
    save_npz(g, path)
    return g, path


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
                                            "--seed", "1", "--no-progress", "--no-plots", "--threads", "1"], capsys)
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
    # The written checkpoint loads, keeps the pre-training config and says where it came from.
    ck = load_model_file(out / "final")
    assert ck["config"] == load_model_file(pre_checkpoint)["config"]
    assert ck["extra"]["finetuned_from"] == str(pre_checkpoint) and ck["extra"]["label_fraction"] == 0.25
    loaded = load_checkpoint_model(out / "final")
    assert isinstance(loaded.model, GCCAD)


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


def test_score_writes_one_row_per_node_with_correct_ids(small_graph, pre_checkpoint, tmp_path, capsys) -> None:
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
    assert json.loads(out.with_name(out.name + ".metrics.json").read_text())["num_nodes"] == g.num_nodes

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
