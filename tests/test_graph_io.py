"""partitioning.io / validate / graph: every input format, every bad input, CSR invariants (hypothesis)."""

from __future__ import annotations

import argparse
import zipfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from partitioning.errors import GraphInputError
from partitioning.graph import Graph, csr_from_edges, gather_rows, induced_subgraph, sorted_unique
from partitioning.io import load_graph, save_npz
from partitioning.validate import check_int_range, check_positive, check_ratio

N = 6
# duplicates (0-1 twice, 1-0 reversed), a self-loop (2-2), node 5 isolated
EDGES = np.array([[0, 1, 1, 2, 2, 3, 0], [1, 0, 2, 2, 3, 4, 1]])
UNDIRECTED = {(0, 1), (1, 2), (2, 3), (3, 4)}


def _arrays() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    return {
        "x": rng.standard_normal((N, 3)),  # float64 on purpose: must come back float32
        "edge_index": EDGES.copy(),
        "y": np.array([0, 1, 0, 0, 1, 0], dtype=np.int64),
        "graph_id": np.array([0, 0, 0, 1, 1, 1]),
        "train_masks": np.array([[1, 1, 0, 0, 1, 0], [0, 1, 1, 0, 0, 1]], dtype=bool),
    }


def _edge_set(g: Graph) -> set[tuple[int, int]]:
    ei = g.edge_index()
    return {(int(a), int(b)) for a, b in ei.T if a < b}


def _check_graph(g: Graph, a: dict[str, np.ndarray], masks: bool = True) -> None:
    assert g.num_nodes == N
    assert g.x.dtype == np.float32 and g.x.flags.c_contiguous
    np.testing.assert_allclose(g.x, a["x"].astype(np.float32))
    assert _edge_set(g) == UNDIRECTED
    assert g.num_edges == len(UNDIRECTED)
    assert g.indptr.dtype == np.int64 and g.indices.dtype == np.int64
    assert g.y.dtype == np.int8
    np.testing.assert_array_equal(g.y, a["y"])
    np.testing.assert_array_equal(g.graph_id, a["graph_id"])
    if masks:
        np.testing.assert_array_equal(g.masks["train"], a["train_masks"])


# --------------------------------------------------------------------------------------------------
# Round trips of every format


def test_npz_round_trip(tmp_path: Path) -> None:
    a = _arrays()
    np.savez(tmp_path / "g.npz", **a, anomaly_type=np.zeros(N, np.int8))  # extra key is ignored
    g = load_graph(tmp_path / "g.npz")
    _check_graph(g, a)
    assert g.source == str(tmp_path / "g.npz")
    save_npz(g, tmp_path / "again.npz", extra={"note": np.arange(3)})
    g2 = load_graph(tmp_path / "again.npz")
    assert g2.fingerprint() == g.fingerprint()
    np.testing.assert_array_equal(g2.masks["train"], g.masks["train"])
    with np.load(tmp_path / "again.npz") as f:
        ei = f["edge_index"]
        assert (ei[0] < ei[1]).all() and ei.shape == (2, len(UNDIRECTED))  # each edge once
        np.testing.assert_array_equal(f["note"], np.arange(3))


def test_npz_optional_keys(tmp_path: Path) -> None:
    a = _arrays()
    np.savez(tmp_path / "g.npz", x=a["x"], edge_index=a["edge_index"])
    g = load_graph(str(tmp_path / "g.npz"))
    assert g.y is None and g.graph_id is None and g.masks == {}
    assert _edge_set(g) == UNDIRECTED


def test_save_npz_compressed(tmp_path: Path) -> None:
    a = _arrays()
    np.savez(tmp_path / "g.npz", **a)
    g = load_graph(tmp_path / "g.npz")
    save_npz(g, tmp_path / "sub" / "c.npz", compress=True)
    assert load_graph(tmp_path / "sub" / "c.npz").fingerprint() == g.fingerprint()


def test_pt_round_trip(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    pytest.importorskip("torch_geometric")
    from torch_geometric.data import Data

    a = _arrays()
    data = Data(
        x=torch.from_numpy(a["x"]),
        edge_index=torch.from_numpy(a["edge_index"]),
        y=torch.from_numpy(a["y"]),
        graph_id=torch.from_numpy(a["graph_id"]),
        train_mask=torch.from_numpy(a["train_masks"].T.copy()),  # PyG convention [N, S]
        val_mask=torch.from_numpy(a["train_masks"][0].copy()),  # a single split [N]
    )
    torch.save(data, tmp_path / "g.pt")
    g = load_graph(tmp_path / "g.pt")
    _check_graph(g, a)
    assert g.masks["val"].shape == (1, N)
    # Graph.to_data() -> torch.save -> load_graph is the identity
    torch.save(g.to_data(), tmp_path / "g2.pth")
    assert load_graph(tmp_path / "g2.pth").fingerprint() == g.fingerprint()


def test_pt_dict_of_tensors(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    a = _arrays()
    torch.save({k: torch.from_numpy(v) for k, v in a.items()}, tmp_path / "g.pt")
    _check_graph(load_graph(tmp_path / "g.pt"), a)


def _write_folder(folder: Path, a: dict[str, np.ndarray], kind: str) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    folder.mkdir(exist_ok=True)
    src, dst = a["edge_index"]
    if kind == "csv":
        lines = ["dst,weight,src"] + [f"{d},0.5,{s}" for s, d in zip(src, dst)]  # column order is free
        (folder / "edges.csv").write_text("\n".join(lines) + "\n")
    else:
        pq.write_table(pa.table({"src": src, "dst": dst}), folder / "edges.parquet")
    np.save(folder / "features.npy", a["x"])
    np.save(folder / "labels.npy", a["y"])
    np.save(folder / "graph_id.npy", a["graph_id"])
    np.save(folder / "train_masks.npy", a["train_masks"])


@pytest.mark.parametrize("kind", ["csv", "parquet"])
def test_folder_round_trip(tmp_path: Path, kind: str) -> None:
    a = _arrays()
    _write_folder(tmp_path / "g", a, kind)
    g = load_graph(tmp_path / "g")
    _check_graph(g, a)
    assert g.source == str(tmp_path / "g")


def test_folder_minimal(tmp_path: Path) -> None:
    (tmp_path / "edges.csv").write_text("src,dst\n")  # no edges at all is a valid (edgeless) graph
    np.save(tmp_path / "features.npy", np.ones((3, 2), np.float32))
    g = load_graph(tmp_path)
    assert g.num_nodes == 3 and g.num_edges == 0 and g.y is None


def test_real_dataset_loads(shared_data: Path) -> None:
    path = shared_data / "disney.npz"
    g = load_graph(path)
    with np.load(path) as raw:
        assert g.num_nodes == raw["x"].shape[0]
        assert int(g.y.sum()) == int(raw["y"].sum())
        ei = raw["edge_index"]
        expected = {(int(min(s, d)), int(max(s, d))) for s, d in ei.T if s != d}
    assert _edge_set(g) == expected


# --------------------------------------------------------------------------------------------------
# Bad inputs: GraphInputError, one line, naming the file and the problem


def _npz(**over):
    def make(tmp: Path) -> Path:
        a = _arrays()
        for k, v in over.items():
            if v is None:
                a.pop(k)
            else:
                a[k] = v
        np.savez(tmp / "bad.npz", **a)
        return tmp / "bad.npz"

    return make


def _with_nan(tmp: Path) -> Path:
    x = _arrays()["x"]
    x[1, 0] = np.nan
    x[4, 2] = np.inf
    np.savez(tmp / "bad.npz", **{**_arrays(), "x": x})
    return tmp / "bad.npz"


def _garbage(name: str):
    def make(tmp: Path) -> Path:
        (tmp / name).write_bytes(b"this is not a graph file\x00\x01\x02" * 10)
        return tmp / name

    return make


def _truncated_npz(tmp: Path) -> Path:
    np.savez(tmp / "full.npz", **_arrays())
    data = (tmp / "full.npz").read_bytes()
    (tmp / "bad.npz").write_bytes(data[: len(data) // 2])
    return tmp / "bad.npz"


def _crc_npz(tmp: Path) -> Path:
    """A zip whose directory is intact but whose member bytes are damaged."""
    np.savez(tmp / "full.npz", **_arrays())
    data = bytearray((tmp / "full.npz").read_bytes())
    with zipfile.ZipFile(tmp / "full.npz") as z:
        info = z.getinfo("x.npy")
    start = info.header_offset + 30 + len(info.filename) + 140  # inside the x payload
    data[start : start + 20] = b"\xff" * 20
    (tmp / "bad.npz").write_bytes(bytes(data))
    return tmp / "bad.npz"


def _single_npy(tmp: Path) -> Path:
    with open(tmp / "bad.npz", "wb") as f:
        np.save(f, np.ones((3, 3)))
    return tmp / "bad.npz"


def _object_npz(tmp: Path) -> Path:
    a = _arrays()
    a["y"] = np.array([0, 1, "a", None, 0, 0], dtype=object)
    np.savez(tmp / "bad.npz", **a)
    return tmp / "bad.npz"


def _truncated_pt(tmp: Path) -> Path:
    torch = pytest.importorskip("torch")
    torch.save({k: torch.from_numpy(v) for k, v in _arrays().items()}, tmp / "full.pt")
    data = (tmp / "full.pt").read_bytes()
    (tmp / "bad.pt").write_bytes(data[: len(data) // 2])
    return tmp / "bad.pt"


def _pt(obj_factory):
    def make(tmp: Path) -> Path:
        torch = pytest.importorskip("torch")
        torch.save(obj_factory(torch), tmp / "bad.pt")
        return tmp / "bad.pt"

    return make


def _folder(kind: str = "csv", edges_text: str | None = None, drop: str | None = None, **npy):
    def make(tmp: Path) -> Path:
        folder = tmp / "bad"
        _write_folder(folder, _arrays(), kind)
        if edges_text is not None:
            (folder / "edges.csv").write_text(edges_text)
        if drop is not None:
            (folder / drop).unlink()
        for name, value in npy.items():
            np.save(folder / f"{name}.npy", value)
        return folder

    return make


def _parquet_missing_column(tmp: Path) -> Path:
    import pyarrow as pa
    import pyarrow.parquet as pq

    folder = tmp / "bad"
    _write_folder(folder, _arrays(), "parquet")
    pq.write_table(pa.table({"source": [0, 1], "dst": [1, 2]}), folder / "edges.parquet")
    return folder


BAD_INPUTS = {
    # name: (factory, file the message must name relative to tmp, words the message must contain)
    "missing file": (lambda t: t / "nope.npz", "nope.npz", ["no such file"]),
    "unknown format": (_garbage("graph.txt"), "graph.txt", ["unknown format", ".txt"]),
    "missing x": (_npz(x=None), "bad.npz", ["missing key 'x'", "keys found", "edge_index"]),
    "missing edge_index": (_npz(edge_index=None), "bad.npz", ["missing key 'edge_index'", "x"]),
    "nan features": (_with_nan, "bad.npz", ["NaN or inf", "2 of 6 rows"]),
    "features 1-D": (_npz(x=np.ones(N)), "bad.npz", ["2-D", "(6)"]),
    "features text": (_npz(x=np.array([["a"]] * N)), "bad.npz", ["dtype", "expected numbers"]),
    "empty graph": (_npz(x=np.zeros((0, 3)), edge_index=np.zeros((2, 0), np.int64), y=None, graph_id=None,
                         train_masks=None), "bad.npz", ["empty graph", "0 rows"]),
    "negative edge id": (_npz(edge_index=np.array([[0, -3], [1, 2]])), "bad.npz", ["-3", "< 0"]),
    "edge id too large": (_npz(edge_index=np.array([[0, 9], [1, 2]])), "bad.npz", ["node id 9", "6"]),
    "edge_index 3 rows": (_npz(edge_index=np.zeros((3, 4), np.int64)), "bad.npz", ["[2, E]", "(3, 4)"]),
    "edge_index [E,2]": (_npz(edge_index=EDGES.T.copy()), "bad.npz", ["[2, E]", "transpose"]),
    "edge_index 1-D": (_npz(edge_index=np.arange(4)), "bad.npz", ["[2, E]"]),
    "edge_index fractional": (_npz(edge_index=np.array([[0.5, 1.0], [1.0, 2.0]])), "bad.npz", ["non-integer"]),
    "labels not 0/1": (_npz(y=np.array([0, 1, 2, 0, -3, 0])), "bad.npz", ["0/1", "-3", "2", "-1 (unknown)"]),
    "labels inf": (_npz(y=np.array([0, 1, np.inf, 0, 0, 0])), "bad.npz", ["0/1", "inf"]),
    "label_mask wrong shape": (_npz(label_mask=np.ones(N + 1, bool)), "bad.npz", ["'label_mask'", "(7)", "[6]"]),
    "label_mask 2-D": (_npz(labelled_mask=np.ones((2, N), bool)), "bad.npz", ["'labelled_mask'", "(2, 6)"]),
    "label_mask not boolean": (_npz(label_mask=np.full(N, 3)), "bad.npz", ["'label_mask'", "boolean"]),
    "label_mask text": (_npz(label_mask=np.array(["yes"] * N)), "bad.npz", ["'label_mask'", "boolean"]),
    "label_mask without y": (_npz(y=None, label_mask=np.ones(N, bool)), "bad.npz", ["'label_mask'", "no labels"]),
    "labelled node with y -1": (_npz(y=np.array([0, 1, -1, 0, 0, 0]), label_mask=np.ones(N, bool)), "bad.npz",
                                ["label mask", "0/1", "-1"]),
    "labelled node with y 5": (_npz(y=np.array([0, 1, 5, 0, 0, 0]), label_mask=np.arange(N) < 4), "bad.npz",
                               ["4 nodes marked labelled", "5"]),
    "two label masks": (_npz(label_mask=np.ones(N, bool), labeled_mask=np.ones(N, bool)), "bad.npz",
                        ["several label masks", "label_mask", "labeled_mask"]),
    "labels too short": (_npz(y=np.array([0, 1, 0])), "bad.npz", ["length 3", "6 nodes"]),
    "graph_id mismatch": (_npz(graph_id=np.zeros(N + 2, np.int64)), "bad.npz", ["graph_id", "length 8", "6 nodes"]),
    "graph_id float": (_npz(graph_id=np.zeros(N)), "bad.npz", ["graph_id", "integers"]),
    "mask wrong shape": (_npz(train_masks=np.ones((2, N + 1), bool)), "bad.npz", ["mask 'train'", "(2, 7)"]),
    "mask not boolean": (_npz(train_masks=np.full((2, N), 3)), "bad.npz", ["mask 'train'", "boolean"]),
    "garbage npz": (_garbage("bad.npz"), "bad.npz", ["not a valid .npz"]),
    "truncated npz": (_truncated_npz, "bad.npz", [".npz"]),
    "corrupted npz member": (_crc_npz, "bad.npz", ["corrupted"]),
    "npy named npz": (_single_npy, "bad.npz", ["single .npy array"]),
    "object array": (_object_npz, "bad.npz", ["'y'", "Python objects"]),
    "garbage pt": (_garbage("bad.pt"), "bad.pt", ["not a readable torch file"]),
    "truncated pt": (_truncated_pt, "bad.pt", ["not a readable torch file"]),
    "pt unsafe global": (_pt(lambda torch: argparse.Namespace(a=1)), "bad.pt", ["refusing to unpickle", "Namespace"]),
    "pt a list": (_pt(lambda torch: [torch.zeros(3)]), "bad.pt", ["holds a list"]),
    "pt label_mask shape": (_pt(lambda torch: {**{k: torch.from_numpy(v) for k, v in _arrays().items()},
                                              "label_mask": torch.ones(N + 2, dtype=torch.bool)}),
                            "bad.pt", ["'label_mask'", "(8)"]),
    "pt missing x": (_pt(lambda torch: {"edge_index": torch.zeros(2, 1, dtype=torch.long)}), "bad.pt",
                     ["missing attribute 'x'", "edge_index"]),
    "folder no edges": (_folder(drop="edges.csv"), "bad", ["no edges.csv or edges.parquet", "features.npy"]),
    "folder no features": (_folder(drop="features.npy"), "bad/features.npy", ["missing file", "edges.csv"]),
    "csv missing column": (_folder(edges_text="a,dst\n0,1\n"), "bad/edges.csv", ["missing column 'src'", "a, dst"]),
    "csv not integer": (_folder(edges_text="src,dst\n0,1\n1,x\n"), "bad/edges.csv", ["cannot parse edges"]),
    "csv empty value": (_folder(edges_text="src,dst\n0,1\n1,\n"), "bad/edges.csv", ["'dst'", "1 empty"]),
    "csv id too large": (_folder(edges_text="src,dst\n0,1\n1,60\n"), "bad/edges.csv", ["node id 60", "6"]),
    "parquet missing column": (_parquet_missing_column, "bad/edges.parquet", ["missing column 'src'", "source"]),
    "folder labels length": (_folder(labels=np.zeros(N - 1, np.int8)), "bad/labels.npy", ["length 5", "6 nodes"]),
    "folder labels values": (_folder(labels=np.full(N, 7)), "bad/labels.npy", ["0/1", "7"]),
    "folder features nan": (_folder(features=np.full((N, 2), np.nan)), "bad/features.npy", ["NaN", "6 of 6"]),
    "folder labels -2": (_folder(labels=np.array([0, 1, -2, 0, 0, 0])), "bad/labels.npy", ["0/1", "-2"]),
    "folder label_mask shape": (_folder(label_mask=np.ones(3, bool)), "bad/label_mask.npy", ["label mask", "(3)"]),
    "folder label_mask no labels": (_folder(drop="labels.npy", label_mask=np.ones(N, bool)), "bad/label_mask.npy",
                                    ["no labels.npy"]),
    "folder graph_id length": (_folder(graph_id=np.zeros(3, np.int64)), "bad/graph_id.npy", ["length 3"]),
    "folder mask shape": (_folder(train_masks=np.ones((N, 2), bool)), "bad/train_masks.npy", ["mask 'train'"]),
}


@pytest.mark.parametrize("case", list(BAD_INPUTS), ids=list(BAD_INPUTS))
def test_bad_input_one_line_error(tmp_path: Path, case: str) -> None:
    factory, named, words = BAD_INPUTS[case]
    path = factory(tmp_path)
    with pytest.raises(GraphInputError) as info:
        load_graph(path)
    msg = str(info.value)
    assert "\n" not in msg, msg
    assert info.value.source == str(tmp_path / named), msg
    assert msg.startswith(str(tmp_path / named) + ": "), msg
    for w in words:
        assert w in msg, f"{w!r} not in {msg!r}"


def test_option_checks() -> None:
    assert check_ratio("--corrupt-ratio", 0.15) == 0.15
    for bad in (0, 1, -0.1, 1.5, float("nan"), "x"):
        with pytest.raises(GraphInputError, match="--corrupt-ratio"):
            check_ratio("--corrupt-ratio", bad)
    assert check_ratio("--f", 0.0, low_inclusive=True) == 0.0
    with pytest.raises(GraphInputError, match=r"--k: must be >= 2, got 1"):
        check_int_range("--k", 1, low=2)
    with pytest.raises(GraphInputError, match="integer"):
        check_int_range("--k", 2.5, low=2)
    with pytest.raises(GraphInputError, match="> 0"):
        check_positive("--lr", 0)


# --------------------------------------------------------------------------------------------------
# graph.py invariants (hypothesis)

edge_lists = st.integers(min_value=1, max_value=12).flatmap(
    lambda n: st.tuples(
        st.just(n),
        st.lists(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1)), max_size=40),
    )
)


def _dense(n: int, pairs: list[tuple[int, int]]) -> np.ndarray:
    a = np.zeros((n, n), dtype=bool)
    for s, d in pairs:
        if s != d:
            a[s, d] = a[d, s] = True
    return a


def _csr_to_dense(indptr: np.ndarray, indices: np.ndarray) -> np.ndarray:
    n = indptr.size - 1
    a = np.zeros((n, n), dtype=bool)
    rows = np.repeat(np.arange(n), np.diff(indptr))
    a[rows, indices] = True
    return a


@settings(max_examples=150, deadline=None)
@given(edge_lists)
def test_csr_from_edges_invariants(case) -> None:
    n, pairs = case
    src = np.array([p[0] for p in pairs], dtype=np.int64)
    dst = np.array([p[1] for p in pairs], dtype=np.int64)
    indptr, indices = csr_from_edges(src, dst, n)
    assert indptr.shape == (n + 1,) and indptr[0] == 0 and indptr[-1] == indices.size
    assert (np.diff(indptr) >= 0).all()
    rows = np.repeat(np.arange(n), np.diff(indptr))
    assert (rows != indices).all()  # no self-loops
    for r in range(n):  # strictly increasing within each row: sorted, no duplicates
        assert (np.diff(indices[indptr[r] : indptr[r + 1]]) > 0).all()
    dense = _csr_to_dense(indptr, indices)
    assert (dense == dense.T).all()
    np.testing.assert_array_equal(dense, _dense(n, pairs))
    assert indices.size == 2 * int(np.triu(dense, 1).sum())


@settings(max_examples=150, deadline=None)
@given(edge_lists, st.data())
def test_induced_subgraph_matches_dense(case, data) -> None:
    n, pairs = case
    src = np.array([p[0] for p in pairs], dtype=np.int64)
    dst = np.array([p[1] for p in pairs], dtype=np.int64)
    indptr, indices = csr_from_edges(src, dst, n)
    nodes = np.array(data.draw(st.permutations(range(n)))[: data.draw(st.integers(0, n))], dtype=np.int64)
    sub_ptr, sub_idx = induced_subgraph(indptr, indices, nodes)
    assert sub_ptr.shape == (nodes.size + 1,)
    for r in range(nodes.size):
        assert (np.diff(sub_idx[sub_ptr[r] : sub_ptr[r + 1]]) > 0).all()
    dense = _dense(n, pairs)
    np.testing.assert_array_equal(_csr_to_dense(sub_ptr, sub_idx), dense[np.ix_(nodes, nodes)])
    # gather_rows returns the concatenated rows
    rows = np.array(data.draw(st.lists(st.integers(0, n - 1), max_size=8)), dtype=np.int64)
    owner, nbr = gather_rows(indptr, indices, rows)
    expect = [(i, int(v)) for i, r in enumerate(rows) for v in indices[indptr[r] : indptr[r + 1]]]
    assert list(zip(owner.tolist(), nbr.tolist())) == expect


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(-(2**40), 2**40), max_size=60))
def test_sorted_unique_matches_numpy(values) -> None:
    a = np.array(values, dtype=np.int64)
    np.testing.assert_array_equal(sorted_unique(a.copy()), np.unique(a))
