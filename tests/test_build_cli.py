"""`python -m partitioning.build`: end to end on small graphs, determinism, multi-graph, bad options."""

from __future__ import annotations

import os
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
    code, stdout, _ = run(["--graph", str(tmp_path / "multi.npz"), "--out", str(out)], capsys)
    assert code == 0
    r = StoreReader(str(out))
    assert len(r) == 4 and r.manifest["partition"]["method"] == "graph_id"
    # graphs are parts as they are: no minimum, no merging, but the smallest one is reported
    p = r.manifest["partition"]
    assert p["smallest_part"] == 20 and p["min_part_size"] is None and p["merged_parts"] == 0
    assert "smallest 20 nodes (one part per graph, no minimum)" in stdout
    assert p["edges_kept"] == 1.0  # no edge between two graphs
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
        (["--k", "1", "--corruption-mix", "inject"], "--k: 1 part (the whole graph) stores no corruption"),
        (["--k", "0"], "--k: must be at least 1"),
        (["--k", "many"], "--k"),
        (["--k", "500"], "--k: K=500 exceeds the number of nodes"),
        (["--k", "5"], "--k: K=5 exceeds the 3 distinct"),
        (["--k-grid", "2,3"], "--k-grid"),
        (["--k-grid", "2,3,x"], "--k-grid"),
        (["--corruptions", "0"], "--corruptions"),
        (["--gpu", "maybe"], "--gpu"),
        (["--normalize", "zscore"], "--normalize"),
        (["--min-part-size", "0"], "--min-part-size"),
        (["--min-part-size", "tiny"], "--min-part-size"),
    ],
)
def test_bad_options(dup_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture, extra: list, needle: str) -> None:
    code, _, err = run(["--graph", str(dup_file), "--out", str(tmp_path / "s.zarr")] + extra, capsys)
    assert code == 2
    last = err.strip().splitlines()[-1]
    assert last.startswith("error: ") and needle in last
    assert "Traceback" not in err
    assert not (tmp_path / "s.zarr").exists()


def test_default_build_stores_power_transformed_features(graph_file: Path, tmp_path: Path,
                                                          capsys: pytest.CaptureFixture) -> None:
    """Default --normalize power: stored x = partitioning.features.power_normalize(raw), the transform that
    training's and scoring's normalize_features(x, "power") apply; the manifest records its statistics."""
    import torch

    from gcad_dist.train import normalize_features
    from partitioning.features import power_normalize

    out = tmp_path / "p.zarr"
    code, stdout, _ = run(["--graph", str(graph_file), "--out", str(out), "--k", "3"], capsys)
    assert code == 0 and "power-transformed, z-scored (power)" in stdout
    graph = load_graph(graph_file)
    r = StoreReader(str(out))
    assert r.feature_normalization() == "power" and r.manifest["params"]["normalize"] == "power"
    expect, entry = power_normalize(graph.x)
    f = r.manifest["features"]
    assert set(f) == {"normalize", "power_fit", "mean", "std", "lambdas", "mean2", "std2"}
    assert f["power_fit"] == "majority-excluded"
    np.testing.assert_allclose(f["lambdas"], entry["lambdas"])
    torch_expect = normalize_features(torch.from_numpy(graph.x), "power").numpy()
    np.testing.assert_allclose(torch_expect, expect, atol=1e-6)
    seen = 0
    for i in range(len(r)):
        c = r.get_csr(i)
        np.testing.assert_allclose(c["x"], expect[c["global_id"]], rtol=0, atol=1e-6)
        seen += int((c["y"] == 0).sum())
    assert seen == graph.num_nodes


def test_standard_build_stores_z_scored_features(graph_file: Path, tmp_path: Path,
                                                  capsys: pytest.CaptureFixture) -> None:
    """--normalize standard: stored x = (raw - mean) / std (unbiased, over all source nodes), the
    same transform as training's normalize_features; the fingerprint stays the raw graph's."""
    import torch

    from gcad_dist.train import normalize_features

    out = tmp_path / "z.zarr"
    code, stdout, _ = run(["--graph", str(graph_file), "--out", str(out), "--k", "3", "--normalize", "standard"],
                          capsys)
    assert code == 0 and "z-scored (standard)" in stdout
    graph = load_graph(graph_file)
    raw = graph.x.astype(np.float64)
    r = StoreReader(str(out))
    assert r.feature_normalization() == "standard"
    f = r.manifest["features"]
    assert f["normalize"] == "standard" and r.manifest["params"]["normalize"] == "standard"
    mean, std = raw.mean(axis=0), raw.std(axis=0, ddof=1)
    np.testing.assert_allclose(f["mean"], mean, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(f["std"], std, rtol=1e-10)
    assert r.manifest["source"]["fingerprint"] == graph.fingerprint()
    expect = ((raw - mean) / std).astype(np.float32)
    torch_expect = normalize_features(torch.from_numpy(graph.x), "standard").numpy()
    seen = 0
    for i in range(len(r)):
        c = r.get_csr(i)
        own = c["y"] == 0
        gid = c["global_id"][own]
        np.testing.assert_allclose(c["x"][own], expect[gid], rtol=0, atol=1e-6)
        np.testing.assert_allclose(c["x"][own], torch_expect[gid], rtol=0, atol=1e-5)
        np.testing.assert_allclose(c["x"][~own], expect[c["global_id"][~own]], rtol=0, atol=1e-6)
        seen += int(own.sum())
    assert seen == graph.num_nodes


def test_normalize_none_stores_raw_features(graph_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    out = tmp_path / "raw.zarr"
    code, stdout, _ = run(["--graph", str(graph_file), "--out", str(out), "--k", "3", "--normalize", "none"], capsys)
    assert code == 0 and "features        raw" in stdout
    raw = load_graph(graph_file).x
    r = StoreReader(str(out))
    assert r.manifest["features"] == {"normalize": "none"} and r.feature_normalization() == "none"
    for i in range(len(r)):
        c = r.get_csr(i)
        np.testing.assert_array_equal(c["x"], raw[c["global_id"]])


def test_build_leaves_the_callers_graph_untouched(tmp_path: Path) -> None:
    """The input may be a read-only memmap or shared: build normalises a copy, and fingerprints the original."""
    from gcad_dist.cli import UsageError

    g = generate(SyntheticConfig(nodes=400, avg_degree=6, communities=3, features=5, seed=2))
    x0 = g.x.copy()
    g.x.flags.writeable = False
    fp = g.fingerprint()
    cfg = build_mod.BuildConfig(graph="mem", out=str(tmp_path / "s.zarr"), k=3, threads=1, plot=False, progress=False)
    res = build_mod.build(cfg, graph=g)
    np.testing.assert_array_equal(g.x, x0)
    assert res.manifest["source"]["fingerprint"] == fp and res.manifest["features"]["normalize"] == "power"
    with pytest.raises(UsageError, match="^--normalize"):
        build_mod.check_config(build_mod.BuildConfig(graph="g", out="o", normalize="minmax"))


def test_feature_stats_blocked_match_numpy() -> None:
    from partitioning.features import feature_stats, normalize_store_features

    rng = np.random.default_rng(0)
    x = (rng.normal(size=(1001, 4)) * [1e-3, 1.0, 50.0, 0.0] + [5.0, -2.0, 1e4, 3.0]).astype(np.float32)
    ref_mean, ref_std = x.astype(np.float64).mean(0), x.astype(np.float64).std(0, ddof=1)
    for block in (1, 7, 1000, 5000):
        mean, std = feature_stats(x, block_rows=block)
        np.testing.assert_allclose(mean, ref_mean, rtol=1e-12)
        np.testing.assert_allclose(std, ref_std, rtol=1e-9, atol=1e-12)
    z, entry = normalize_store_features(x, "standard", block_rows=64)
    assert z.dtype == np.float32 and z.flags.c_contiguous and entry["std"][3] == 1.0  # constant feature: / 1
    np.testing.assert_allclose(z[:, :3].std(0, ddof=1), 1.0, rtol=1e-4)
    np.testing.assert_allclose(z.mean(0), 0.0, atol=1e-4)
    np.testing.assert_array_equal(z[:, 3], 0.0)
    same, none = normalize_store_features(x, "none")
    assert same is x and none == {"normalize": "none"}


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
                "--niter", "--gpu", "--overwrite", "--min-part-size", "--corruption-mix"):
        assert opt in h.stdout
    assert "exactly the paper's setting" in " ".join(h.stdout.split())
    e = subprocess.run(cmd + ["--graph", "x.npz", "--out", str(tmp_path / "o"), "--ratio", "2"], cwd=REPO,
                       capture_output=True, text=True, timeout=120)
    assert e.returncode == 2 and e.stderr.strip().count("\n") == 0 and e.stderr.startswith("error: --ratio")


def outlier_graph(path: Path, blob: int = 100, seed: int = 0) -> Graph:
    """Three feature blobs of ``blob`` nodes (edges mostly inside a blob) and a planted outlier pair far
    from everything, linked to each other and to a few blob nodes."""
    rng = np.random.default_rng(seed)
    centres = np.array([[0.0] * 4, [8.0] * 4, [-8.0, 8.0, -8.0, 8.0], [60.0] * 4])
    comm = np.repeat(np.arange(4), [blob, blob, blob, 2])
    n = comm.size
    x = (centres[comm] + rng.normal(size=(n, 4))).astype(np.float32)
    src = rng.integers(0, n - 2, 6 * n)
    same = rng.random(src.size) < 0.8
    dst = np.where(same, comm[src] * blob + rng.integers(0, blob, src.size), rng.integers(0, n - 2, src.size))
    src = np.r_[src, n - 2, n - 2, n - 1]
    dst = np.r_[dst, n - 1, 5, 150]
    indptr, indices = csr_from_edges(src, dst, n)
    g = Graph(x=x, indptr=indptr, indices=indices)
    save_npz(g, path)
    return g


def _edge_shares(g: Graph, r: StoreReader) -> tuple[float, float]:
    """Brute-force edge shares: (inside one part, inside some subgraph), via dense membership."""
    n = g.num_nodes
    rows = np.repeat(np.arange(n), np.diff(g.indptr))
    u, v = rows[rows < g.indices], g.indices[rows < g.indices]
    node_part = r.node_part()
    member = np.zeros((len(r), n), dtype=bool)
    for i in range(len(r)):
        member[i, r.get_csr(i)["global_id"]] = True
    return float(np.mean(node_part[u] == node_part[v])), float(np.mean((member[:, u] & member[:, v]).any(0)))


def test_outlier_pair_is_merged_and_summary_shows_smallest_part(tmp_path: Path, capsys: pytest.CaptureFixture,
                                                               caplog: pytest.LogCaptureFixture) -> None:
    g = outlier_graph(tmp_path / "o.npz")
    out = tmp_path / "o.zarr"
    code, stdout, _ = run(["--graph", str(tmp_path / "o.npz"), "--out", str(out), "--k", "6"], capsys)
    assert code == 0
    r = StoreReader(str(out))
    p = r.manifest["partition"]
    sizes = np.bincount(r.node_part())
    assert r.manifest["params"]["min_part_size"] == "auto" and p["min_part_size"] == 32
    assert sizes.min() >= 32 and p["smallest_part"] == sizes.min() and p["part_sizes"] == sizes.tolist()
    assert p["merged_parts"] >= 1 and p["k"] == len(r) == 6 - p["merged_parts"] and p["k_trained"] == 6
    assert "merged into their nearest parts" in caplog.text and f"K={p['k']}" in caplog.text
    # the outlier pair went to the nearest blob's part (with its own nodes among the part's own nodes)
    node_part = r.node_part()
    assert node_part[-1] == node_part[-2] and sizes[node_part[-1]] >= 100
    kept, kept_sub = _edge_shares(g, r)
    assert p["edges_kept"] == pytest.approx(kept, abs=1e-12)
    assert p["edges_kept_subgraphs"] == pytest.approx(kept_sub, abs=1e-12)
    assert 0 < kept <= kept_sub <= 1
    assert f"smallest {sizes.min()} nodes (minimum 32; {p['merged_parts']} smaller part" in stdout
    assert f"edges kept      {100 * kept:.1f}% inside one part (not cut), {100 * kept_sub:.1f}% inside" in stdout


def test_k_above_what_the_minimum_allows_is_reduced(tmp_path: Path, capsys: pytest.CaptureFixture,
                                                   caplog: pytest.LogCaptureFixture) -> None:
    outlier_graph(tmp_path / "o.npz")  # 302 nodes: at most 9 parts of 32
    out = tmp_path / "o.zarr"
    code, _, _ = run(["--graph", str(tmp_path / "o.npz"), "--out", str(out), "--k", "40"], capsys)
    assert code == 0 and "training K=9" in caplog.text
    r = StoreReader(str(out))
    assert r.manifest["partition"]["k_trained"] == 9 and 2 <= len(r) <= 9
    assert np.bincount(r.node_part()).min() >= 32
    # --min-part-size 1 turns merging off (the outlier pair keeps its own part)
    code, stdout, _ = run(["--graph", str(tmp_path / "o.npz"), "--out", str(tmp_path / "one.zarr"), "--k", "6",
                           "--min-part-size", "1"], capsys)
    r1 = StoreReader(str(tmp_path / "one.zarr"))
    assert code == 0 and len(r1) == 6 and r1.manifest["partition"]["merged_parts"] == 0
    assert r1.manifest["partition"]["smallest_part"] == 2 and "smallest 2 nodes (minimum 1)" in stdout


@pytest.mark.parametrize("n, extra, minimum",
                         [(100, [], 32), (40, ["--k-grid", "2,3,4,5"], 20), (60, ["--k", "5"], 30)])
def test_tiny_graphs_keep_at_least_two_parts_of_the_minimum(tmp_path: Path, capsys: pytest.CaptureFixture,
                                                            caplog: pytest.LogCaptureFixture,
                                                            n: int, extra: list, minimum: int) -> None:
    rng = np.random.default_rng(n)
    indptr, indices = csr_from_edges(rng.integers(0, n, 3 * n), rng.integers(0, n, 3 * n), n)
    save_npz(Graph(x=rng.normal(size=(n, 5)).astype(np.float32), indptr=indptr, indices=indices), tmp_path / "t.npz")
    args = ["--graph", str(tmp_path / "t.npz"), "--out", str(tmp_path / "t.zarr"), "--no-plot"] + extra
    if n == 60:
        args += ["--min-part-size", "45"]  # capped at n // 2 = 30, with a warning
    code, _, err = run(args, capsys)
    assert code == 0, err
    r = StoreReader(str(tmp_path / "t.zarr"))
    sizes = np.bincount(r.node_part())
    assert len(r) >= 2 and sizes.size == len(r) and sizes.min() >= minimum
    assert r.manifest["partition"]["min_part_size"] == minimum
    if n == 60:
        assert "--min-part-size 45 capped at 30" in caplog.text


def test_faiss_loader_lines_only_with_verbose() -> None:
    """FAISS logs its failed AVX512 import as INFO ("Could not load library ..."); a default run hides it."""
    code = "import sys; from partitioning.cli import setup_logging; setup_logging(sys.argv[1] == 'v'); import faiss"
    quiet = subprocess.run([sys.executable, "-c", code, "q"], capture_output=True, text=True, timeout=120)
    assert quiet.returncode == 0, quiet.stderr
    assert "faiss.loader" not in quiet.stderr, quiet.stderr
    loud = subprocess.run([sys.executable, "-c", code, "v"], capture_output=True, text=True, timeout=120)
    assert "faiss.loader" in loud.stderr  # still there for --verbose


def test_matplotlib_font_cache_line_only_with_verbose(tmp_path) -> None:
    """A first plot on a machine makes matplotlib log "generated new fontManager" at INFO; a default run hides it."""
    code = ("import sys; from partitioning.cli import setup_logging; setup_logging(sys.argv[1] == 'v'); "
            "import matplotlib; matplotlib.use('Agg'); import matplotlib.font_manager")
    for mode, shown in (("q", False), ("v", True)):
        env = {**os.environ, "MPLCONFIGDIR": str(tmp_path / mode)}  # an empty cache: the font list is built anew
        r = subprocess.run([sys.executable, "-c", code, mode], capture_output=True, text=True, timeout=120, env=env)
        assert r.returncode == 0, r.stderr
        assert ("generated new fontManager" in r.stderr) is shown, r.stderr
