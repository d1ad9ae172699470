"""`python -m partitioning.build`: end to end on small graphs, determinism, multi-graph, bad options."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import zarr

from partitioning import build as build_mod
from partitioning.graph import Graph, csr_from_edges
from partitioning.io import load_graph, save_npz
from partitioning.store import StoreReader
from partitioning.synthetic import SyntheticConfig, generate

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def graph_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("g") / "g.npz"
    save_npz(generate(SyntheticConfig(nodes=3000, avg_degree=8, communities=5, features=8, seed=1)), path)
    return path


def run(argv: list[str], capsys: pytest.CaptureFixture) -> tuple[int, str, str]:
    from gcad_dist.cli import run_cli

    with pytest.raises(SystemExit) as e:
        run_cli(build_mod.main, argv + ["--no-progress"])
    out, err = capsys.readouterr()
    return int(e.value.code or 0), out, err


def arrays(path: Path) -> dict[str, np.ndarray]:
    g = zarr.open_group(str(path), mode="r")
    return {name: np.asarray(a[...]) for name, a in g.arrays()}


def test_build_with_given_k(graph_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    out = tmp_path / "s.zarr"
    code, stdout, _ = run(["--graph", str(graph_file), "--out", str(out), "--k", "4", "--ratio", "0.2"], capsys)
    assert code == 0
    for word in ("subgraphs", "injected", "store size", "kmeans", "corrupt", "write", "total"):
        assert word in stdout
    r = StoreReader(str(out))
    m = r.manifest
    graph = load_graph(graph_file)
    assert m["source"]["fingerprint"] == graph.fingerprint()
    assert m["partition"]["k"] == len(r) == 4 and m["partition"]["method"] == "faiss-kmeans"
    assert m["params"]["ratio"] == 0.2 and m["partition"]["elbow"] is None
    # own nodes of all subgraphs partition the graph; each subgraph's own nodes share one cluster
    node_part = r.node_part()
    own = np.concatenate([r.get_csr(i)["global_id"][: r.get_csr(i)["num_own"]] for i in range(len(r))])
    np.testing.assert_array_equal(np.sort(own), np.arange(graph.num_nodes))
    for i in range(len(r)):
        c = r.get_csr(i)
        assert np.all(node_part[c["global_id"][: c["num_own"]]] == c["part"])
        assert c["y"].sum() == np.floor(0.2 * c["num_own"] + 0.5)
    assert not (tmp_path / "s.elbow.png").exists()


def test_auto_k_writes_curve_and_plot(graph_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    out = tmp_path / "a.zarr"
    code, stdout, _ = run(["--graph", str(graph_file), "--out", str(out), "--k-grid", "2,3,4,5,6,8,10,12"], capsys)
    assert code == 0
    part = StoreReader(str(out)).manifest["partition"]
    e = part["elbow"]
    assert e["ks"] == [2, 3, 4, 5, 6, 8, 10, 12] and len(e["inertias"]) == 8
    assert e["k"] in e["ks"] and part["k_trained"] == e["k"] and part["k_requested"] == "auto"
    assert e["inertias"][0] > e["inertias"][-1]  # the curve falls with K
    png = tmp_path / "a.elbow.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_same_seed_same_store(graph_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    common = ["--graph", str(graph_file), "--k", "3", "--corruptions", "2"]
    for name, seed in (("a", "0"), ("b", "0"), ("c", "1")):
        assert run(common + ["--out", str(tmp_path / f"{name}.zarr"), "--seed", seed], capsys)[0] == 0
    a, b, c = (arrays(tmp_path / f"{n}.zarr") for n in "abc")
    assert a.keys() == b.keys()
    for name in a:
        np.testing.assert_array_equal(a[name], b[name])
    assert not np.array_equal(a["global_id"], c["global_id"])


def test_multi_graph_one_part_per_graph(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    rng = np.random.default_rng(0)
    sizes = np.array([30, 50, 20, 40])
    gid = np.repeat(np.array([7, 3, 11, 5]), sizes)  # arbitrary ids, not sorted
    n = int(sizes.sum())
    starts = np.r_[0, np.cumsum(sizes)[:-1]]
    src = np.concatenate([s + rng.integers(0, z, 3 * z) for s, z in zip(starts, sizes)])
    dst = np.concatenate([s + rng.integers(0, z, 3 * z) for s, z in zip(starts, sizes)])
    indptr, indices = csr_from_edges(src, dst, n)
    g = Graph(x=rng.normal(size=(n, 4)).astype(np.float32), indptr=indptr, indices=indices, graph_id=gid)
    save_npz(g, tmp_path / "multi.npz")
    out = tmp_path / "m.zarr"
    assert run(["--graph", str(tmp_path / "multi.npz"), "--out", str(out)], capsys)[0] == 0
    r = StoreReader(str(out))
    assert len(r) == 4 and r.manifest["partition"]["method"] == "graph_id"
    for i, graph_id in enumerate([3, 5, 7, 11]):  # parts in ascending graph id
        c = r.get_csr(i)
        np.testing.assert_array_equal(c["global_id"][: c["num_own"]], np.flatnonzero(gid == graph_id))
        assert np.all(gid[c["global_id"][c["num_own"] :]] != graph_id)


@pytest.fixture(scope="module")
def dup_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """200 nodes whose features take only 3 distinct values."""
    path = tmp_path_factory.mktemp("d") / "dup.npz"
    rng = np.random.default_rng(0)
    x = np.repeat(np.eye(3, dtype=np.float32), [70, 70, 60], axis=0)
    indptr, indices = csr_from_edges(rng.integers(0, 200, 600), rng.integers(0, 200, 600), 200)
    save_npz(Graph(x=x, indptr=indptr, indices=indices), path)
    return path


@pytest.mark.parametrize(
    "extra, needle",
    [
        (["--ratio", "1.5"], "--ratio"),
        (["--ratio", "0"], "--ratio"),
        (["--k", "1"], "--k"),
        (["--k", "many"], "--k"),
        (["--k", "500"], "--k: K=500 exceeds the number of nodes"),
        (["--k", "5"], "--k: K=5 exceeds the 3 distinct"),
        (["--k-grid", "2,3"], "--k-grid"),
        (["--k-grid", "2,3,x"], "--k-grid"),
        (["--corruptions", "0"], "--corruptions"),
        (["--gpu", "maybe"], "--gpu"),
    ],
)
def test_bad_options(dup_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture, extra: list, needle: str) -> None:
    code, _, err = run(["--graph", str(dup_file), "--out", str(tmp_path / "s.zarr")] + extra, capsys)
    assert code == 2
    last = err.strip().splitlines()[-1]
    assert last.startswith("error: ") and needle in last
    assert "Traceback" not in err
    assert not (tmp_path / "s.zarr").exists()


def test_bad_inputs(dup_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    code, _, err = run(["--graph", str(tmp_path / "nope.npz"), "--out", str(tmp_path / "s.zarr")], capsys)
    assert code == 2 and "nope.npz" in err
    (tmp_path / "s.zarr").mkdir()
    code, _, err = run(["--graph", str(dup_file), "--out", str(tmp_path / "s.zarr"), "--k", "2"], capsys)
    assert code == 2 and "--overwrite" in err
    code, _, _ = run(["--graph", str(dup_file), "--out", str(tmp_path / "s.zarr"), "--k", "2", "--overwrite"], capsys)
    assert code == 0 and len(StoreReader(str(tmp_path / "s.zarr"))) == 2


def test_cli_subprocess_help_and_one_line_error(tmp_path: Path) -> None:
    cmd = [sys.executable, "-m", "partitioning.build"]
    h = subprocess.run(cmd + ["--help"], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert h.returncode == 0
    for opt in ("--graph", "--out", "--k ", "--k-grid", "--sample", "--ratio", "--corruptions", "--seed",
                "--niter", "--gpu", "--overwrite"):
        assert opt in h.stdout
    e = subprocess.run(cmd + ["--graph", "x.npz", "--out", str(tmp_path / "o"), "--ratio", "2"], cwd=REPO,
                       capture_output=True, text=True, timeout=120)
    assert e.returncode == 2 and e.stderr.strip().count("\n") == 0 and e.stderr.startswith("error: --ratio")
