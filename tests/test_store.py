"""The Zarr store: exact round trip, atomic writes, refusal of incomplete or damaged stores."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

from partitioning.corrupt import corrupt_subgraphs
from partitioning.errors import GraphInputError
from partitioning.graph import csr_from_edges
from partitioning.store import StoreError, StoreReader, write_store
from partitioning.store import writer as writer_mod
from partitioning.store.format import MANIFEST_KEY


def make_input(n: int = 400, k: int = 4, reps: int = 2, f: int = 6, seed: int = 0):
    rng = np.random.default_rng(seed)
    indptr, indices = csr_from_edges(rng.integers(0, n, 4 * n), rng.integers(0, n, 4 * n), n)
    x = rng.normal(size=(n, f)).astype(np.float32)
    parts = rng.integers(0, k, n)
    subs = list(corrupt_subgraphs(indptr, indices, parts, corruptions=reps, seed=seed))
    return x, subs, parts


def write(path: Path, x, subs, **kw) -> dict:
    return write_store(path, x, subs, {"note": "test"}, **kw)


def test_round_trip_is_exact(tmp_path: Path) -> None:
    x, subs, parts = make_input()
    out = tmp_path / "s.zarr"
    manifest = write(out, x, subs, node_part=parts)
    r = StoreReader(str(out))
    assert len(r) == len(subs) == r.num_subgraphs and r.num_features == x.shape[1]
    assert r.manifest["complete"] is True and r.manifest["note"] == "test"
    assert manifest["counts"]["injected_nodes"] == sum(s.num_injected for s in subs)
    np.testing.assert_array_equal(r.node_counts, [s.num_nodes for s in subs])
    np.testing.assert_array_equal(r.edge_counts, [s.indices.size for s in subs])
    np.testing.assert_array_equal(r.node_part(), parts)
    for i, s in enumerate(subs):
        c = r.get_csr(i)
        np.testing.assert_array_equal(c["indptr"], s.indptr)
        np.testing.assert_array_equal(c["indices"], s.indices)
        np.testing.assert_array_equal(c["global_id"], s.nodes)
        np.testing.assert_array_equal(c["x"], x[s.nodes])
        np.testing.assert_array_equal(c["y"], s.y)
        assert c["num_own"] == s.num_own and c["part"] == s.part and c["replica"] == s.replica


def test_feature_normalization_missing_key_reads_as_none(tmp_path: Path) -> None:
    """Stores written before manifest["features"] existed hold raw features: they read as "none"."""
    x, subs, _ = make_input()
    write(tmp_path / "old.zarr", x, subs)
    r = StoreReader(str(tmp_path / "old.zarr"))
    assert "features" not in r.manifest and r.feature_normalization() == "none"
    features = {"normalize": "standard", "mean": [0.0] * 6, "std": [1.0] * 6}
    write_store(tmp_path / "z.zarr", x, subs, {"features": features})
    assert StoreReader(str(tmp_path / "z.zarr")).feature_normalization() == "standard"


def test_get_returns_pyg_data(tmp_path: Path) -> None:
    x, subs, _ = make_input()
    out = tmp_path / "s.zarr"
    write(out, x, subs)
    r = StoreReader(str(out))
    for i, s in enumerate(subs):
        d = r.get(i)
        assert d.num_nodes == s.num_nodes and d.part == s.part and d.subgraph_id == i
        assert d.y.dtype.is_floating_point is False and int(d.y.sum()) == s.num_injected
        rows = np.repeat(np.arange(s.num_nodes), np.diff(s.indptr))
        np.testing.assert_array_equal(d.edge_index.numpy(), np.stack([rows, s.indices]))
        np.testing.assert_array_equal(d.x.numpy(), x[s.nodes])
    assert [d.subgraph_id for d in r] == list(range(len(subs)))


def test_many_small_subgraphs_across_chunks(tmp_path: Path) -> None:
    # 300 parts of ~10 nodes: chunks of 1024 rows hold many subgraphs (exercises the span cache)
    x, subs, _ = make_input(n=3000, k=300, reps=1, f=3, seed=1)
    out = tmp_path / "small.zarr"
    write(out, x, subs, chunk_mib=0.001)
    r = StoreReader(str(out))
    for i in [0, 1, 150, 299, 5, 298]:  # forwards and backwards
        c = r.get_csr(i)
        np.testing.assert_array_equal(c["x"], x[subs[i].nodes])
        np.testing.assert_array_equal(c["indices"], subs[i].indices)


def test_fsspec_url(tmp_path: Path) -> None:
    x, subs, _ = make_input()
    out = tmp_path / "u.zarr"
    write(out, x, subs)
    r = StoreReader(out.resolve().as_uri())
    np.testing.assert_array_equal(r.get_csr(1)["x"], x[subs[1].nodes])


def test_refuses_overwrite_unless_asked(tmp_path: Path) -> None:
    x, subs, _ = make_input()
    out = tmp_path / "s.zarr"
    write(out, x, subs)
    with pytest.raises(GraphInputError, match="--overwrite"):
        write(out, x, subs)
    write(out, x, subs[:3], overwrite=True)
    assert len(StoreReader(str(out))) == 3
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.zarr"]


def test_failure_mid_write_leaves_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    x, subs, _ = make_input()
    out = tmp_path / "s.zarr"

    def boom(*args, **kwargs):
        raise RuntimeError("disk on fire")

    monkeypatch.setattr(writer_mod, "_write_block", boom)
    with pytest.raises(RuntimeError):
        write(out, x, subs)
    assert list(tmp_path.iterdir()) == []


def test_killed_build_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # a build killed before its manifest: no cleanup runs, the .tmp folder stays, readers refuse it
    x, subs, _ = make_input()
    out = tmp_path / "s.zarr"

    def killed(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(writer_mod, "_commit", killed)
    monkeypatch.setattr(writer_mod.shutil, "rmtree", lambda *a, **k: None)
    with pytest.raises(KeyboardInterrupt):
        write(out, x, subs)
    monkeypatch.undo()
    assert not out.exists()
    (tmp,) = tmp_path.iterdir()
    assert tmp.name == f"s.zarr.tmp-{os.getpid()}"
    with pytest.raises(StoreError, match="incomplete"):
        StoreReader(str(tmp))
    # the next build replaces it cleanly
    write(out, x, subs)
    assert len(StoreReader(str(out))) == len(subs)


def _edit_manifest(out: Path, **changes) -> None:
    meta = out / "zarr.json"
    doc = json.loads(meta.read_text())
    doc["attributes"][MANIFEST_KEY].update(changes)
    meta.write_text(json.dumps(doc))


@pytest.fixture
def store(tmp_path: Path):
    x, subs, _ = make_input()
    out = tmp_path / "s.zarr"
    write(out, x, subs)
    return out, x, subs


def test_missing_marker_is_refused(store) -> None:
    out, _, _ = store
    _edit_manifest(out, complete=False)
    with pytest.raises(StoreError, match="incomplete"):
        StoreReader(str(out))


def test_other_version_is_refused(store) -> None:
    out, _, _ = store
    _edit_manifest(out, format_version=999)
    with pytest.raises(StoreError, match="version 999"):
        StoreReader(str(out))


def test_removed_array_is_refused(store) -> None:
    import shutil

    out, _, _ = store
    shutil.rmtree(out / "indices")
    with pytest.raises(StoreError, match="indices"):
        StoreReader(str(out))


def test_removed_chunk_is_refused(store) -> None:
    out, _, _ = store
    chunk = sorted((out / "y" / "c").rglob("*"))[-1]
    chunk.unlink()
    with pytest.raises(StoreError, match="chunks missing"):
        StoreReader(str(out))


def test_truncated_chunk_is_refused_on_read(store) -> None:
    out, _, _ = store
    chunk = next(p for p in (out / "x" / "c").rglob("*") if p.is_file())
    data = chunk.read_bytes()
    chunk.write_bytes(data[: len(data) // 2])
    with pytest.raises(StoreError, match="array x: file x/c/0/0 does not match its checksum"):
        StoreReader(str(out))  # the manifest's SHA-256 of every file, checked on open (tests/test_bad_inputs.py)
    with pytest.raises(StoreError, match="array x: file x/c/0/0 does not match its checksum"):
        StoreReader(str(out), verify=False).get(0)  # and as each file is read
    _drop_checksums(out)  # a store built before checksums: the chunk's CRC32C still catches it on read
    r = StoreReader(str(out))
    with pytest.raises(StoreError, match="cannot read"):
        r.get(0)


def _drop_checksums(out: Path) -> None:
    meta = out / "zarr.json"
    doc = json.loads(meta.read_text())
    del doc["attributes"][MANIFEST_KEY]["checksums"]
    meta.write_text(json.dumps(doc))


def test_altered_offsets_are_refused(store) -> None:
    out, _, _ = store
    import zarr

    g = zarr.open_group(str(out), mode="r+")
    g["node_offsets"][1] = 1  # still a valid chunk, wrong content
    with pytest.raises(StoreError, match="array node_offsets: file node_offsets/c/0 does not match its checksum"):
        StoreReader(str(out))
    _drop_checksums(out)  # without checksums (older stores) the offsets' digest still catches it
    with pytest.raises(StoreError, match="digest"):
        StoreReader(str(out))


def test_not_a_store(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="no such store|not a"):
        StoreReader(str(tmp_path / "nothing.zarr"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(StoreError):
        StoreReader(str(tmp_path / "empty"))
    assert issubclass(StoreError, GraphInputError)
