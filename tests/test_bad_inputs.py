"""Bad inputs and hostile files: each is refused with one line ``error: <file or option>: <problem>``,
exit status 2, and no output that a later command would accept.

* a store that does not exist, or only as the ``.tmp-<pid>`` folder of a build that died;
* a store of an older or newer format version; a store whose completion marker is missing;
* a store whose files were edited after the build (SHA-256 of every array file in the manifest);
* ``--resume`` with a checkpoint of another model config;
* a checkpoint file that is not ours (a pickle that would run code): never unpickled, for
  ``gcad_dist.score``, ``gcad_dist.finetune`` and ``gcad_dist.pretrain --resume``.

A job submitted to the cluster without the token is refused: see
``tests/test_job_submit.py::test_submit_pretrain_job_to_local_cluster`` (HTTP 401 without a token,
403 with a wrong one; slow, it starts a Ray head).
"""

from __future__ import annotations

import json
import logging
import os
import pickle
import re
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from partitioning.cli import run_cli
from partitioning.corrupt import corrupt_subgraphs
from partitioning.graph import csr_from_edges
from partitioning.store import StoreError, StoreReader, write_store
from partitioning.store import writer as writer_mod
from partitioning.store.format import FORMAT_VERSION, MANIFEST_KEY

REPO = Path(__file__).resolve().parents[1]


# ---------------------------------------------------------------------------------------------
# helpers


def _make_store(path: Path, n: int = 3000, k: int = 6, f: int = 8, chunk_mib: float = 0.01, seed: int = 0) -> Path:
    """A store whose node arrays span several chunks (1024 rows each), so chunk files can be swapped."""
    rng = np.random.default_rng(seed)
    indptr, indices = csr_from_edges(rng.integers(0, n, 4 * n), rng.integers(0, n, 4 * n), n)
    x = rng.normal(size=(n, f)).astype(np.float32)
    parts = rng.integers(0, k, n)
    subs = list(corrupt_subgraphs(indptr, indices, parts, corruptions=1, seed=seed))
    write_store(path, x, subs, {"source": "test"}, node_part=parts.astype(np.int32), chunk_mib=chunk_mib)
    return path


def _cli(main, argv: list[str], capsys) -> str:
    """Run a CLI through run_cli; assert exit 2 and exactly one ``error: `` line; return that line."""
    with pytest.raises(SystemExit) as exc:
        run_cli(main, argv)
    out, err = capsys.readouterr()
    lines = err.strip().splitlines()
    assert exc.value.code == 2, (argv, out, err)
    assert len(lines) == 1 and lines[0].startswith("error: "), lines
    return lines[0]


def _verify_main(argv):
    from partitioning.store.verify import main

    return main(argv)


def _pretrain_main(argv):
    from gcad_dist.pretrain import main

    return main(argv)


def _edit_manifest(store: Path, **changes) -> None:
    meta = store / "zarr.json"
    doc = json.loads(meta.read_text())
    doc["attributes"][MANIFEST_KEY].update(changes)
    meta.write_text(json.dumps(doc))


def _drop_checksums(store: Path) -> None:
    meta = store / "zarr.json"
    doc = json.loads(meta.read_text())
    del doc["attributes"][MANIFEST_KEY]["checksums"]
    meta.write_text(json.dumps(doc))


@pytest.fixture
def store(tmp_path: Path) -> Path:
    return _make_store(tmp_path / "s.zarr")


def _refused_everywhere(path: Path, needle: str, tmp_path: Path, capsys) -> None:
    """The store is refused by StoreReader, the verify CLI and pretrain (before Ray, writing nothing)."""
    with pytest.raises(StoreError, match=re.escape(needle)):
        StoreReader(str(path))
    line = _cli(_verify_main, [str(path)], capsys)
    assert needle in line, line
    out = tmp_path / "pre-out"
    line = _cli(_pretrain_main, ["--store", str(path), "--out", str(out)], capsys)
    assert needle in line, line
    assert not out.exists()  # nothing a later --resume could pick up


# ---------------------------------------------------------------------------------------------
# missing, unfinished, other version


def test_store_that_does_not_exist(tmp_path: Path, capsys) -> None:
    missing = tmp_path / "nothing.zarr"
    with pytest.raises(StoreError, match="no such store$"):
        StoreReader(str(missing))
    assert _cli(_verify_main, [str(missing)], capsys) == f"error: {missing}: no such store"
    out = tmp_path / "pre-out"
    assert _cli(_pretrain_main, ["--store", str(missing), "--out", str(out)], capsys) == f"error: {missing}: no such store"
    assert not out.exists()


def test_half_written_store_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    """A build killed before its completion marker: only <out>.tmp-<pid> is left, and both it and <out>
    are refused, the latter with a hint that names the leftover."""
    out = tmp_path / "s.zarr"

    def killed(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(writer_mod, "_commit", killed)
    monkeypatch.setattr(writer_mod.shutil, "rmtree", lambda *a, **k: None)  # as if the process died
    with pytest.raises(KeyboardInterrupt):
        _make_store(out)
    monkeypatch.undo()
    tmp = tmp_path / f"s.zarr.tmp-{os.getpid()}"
    assert tmp.is_dir() and not out.exists()
    line = _cli(_verify_main, [str(out)], capsys)
    assert line == (f"error: {out}: no such store (a build to it did not finish: {tmp.name} is left; "
                    "rebuild with python -m partitioning.build)")
    line = _cli(_verify_main, [str(tmp)], capsys)
    assert line == (f"error: {tmp}: incomplete store (the build did not finish, or is still running: "
                    "this is its temporary folder); rebuild it")
    pre = tmp_path / "pre-out"
    assert "incomplete store" in _cli(_pretrain_main, ["--store", str(tmp), "--out", str(pre)], capsys)
    assert not pre.exists()


def test_missing_completion_marker_is_refused(store: Path, tmp_path: Path, capsys) -> None:
    _edit_manifest(store, complete=False)
    _refused_everywhere(store, f"{store}: incomplete store (the build did not finish); rebuild it", tmp_path, capsys)


@pytest.mark.parametrize("version,word", [(FORMAT_VERSION - 1, "older"), (FORMAT_VERSION + 1, "newer")])
def test_other_format_version_names_both_versions(store: Path, tmp_path: Path, capsys, version: int, word: str) -> None:
    _edit_manifest(store, format_version=version)
    line = _cli(_verify_main, [str(store)], capsys)
    assert line.startswith(f"error: {store}: store format version {version} is {word} than this code reads "
                           f"(version {FORMAT_VERSION}); "), line
    _refused_everywhere(store, f"store format version {version} is {word}", tmp_path, capsys)


# ---------------------------------------------------------------------------------------------
# files edited after the build


def test_checksums_recorded_and_verified(store: Path, capsys) -> None:
    r = StoreReader(str(store))
    sums = r.manifest["checksums"]
    assert sums["algorithm"] == "sha256"
    files = [p for p in store.rglob("*") if p.is_file() and p.parent != store]
    assert sums["files"] == len(files) and sums["bytes"] == sum(p.stat().st_size for p in files)
    assert set(sums["arrays"]) >= {"x", "y", "indices", "indptr", "node_offsets", "node_part"}
    assert "zarr.json" in sums["arrays"]["x"] and len(sums["arrays"]["x"]) >= 3  # metadata + >= 2 chunks
    res = r.verify()
    assert res["files"] == sums["files"]
    with pytest.raises(SystemExit) as exc:
        run_cli(_verify_main, [str(store)])
    assert exc.value.code == 0
    assert capsys.readouterr().out.startswith(f"ok: {store}: {sums['files']} files")


def test_flipped_byte_in_a_chunk_is_refused_naming_the_array(store: Path, tmp_path: Path, capsys) -> None:
    chunk = store / "indices" / "c" / "0"
    data = bytearray(chunk.read_bytes())
    data[len(data) // 2] ^= 0xFF
    chunk.write_bytes(bytes(data))
    line = _cli(_verify_main, [str(store)], capsys)
    assert line == (f"error: {store}: array indices: file indices/c/0 does not match its checksum in the manifest "
                    "(edited or damaged after the build); rebuild the store")
    _refused_everywhere(store, "array indices: file indices/c/0 does not match its checksum", tmp_path, capsys)


def test_rewritten_chunk_with_valid_crc_is_refused(store: Path, tmp_path: Path, capsys) -> None:
    """Rewritten through zarr (a valid chunk, CRC32C and all): only the manifest checksum can tell."""
    import zarr

    g = zarr.open_group(str(store), mode="r+")
    x = g["x"]
    x[0, 0] = float(x[0, 0]) + 1.0
    _refused_everywhere(store, "array x: file x/c/0/0 does not match its checksum", tmp_path, capsys)


def test_swapped_chunk_files_are_refused(store: Path, tmp_path: Path, capsys) -> None:
    """Two chunk files of one array exchanged: each passes its own CRC32C, the data is wrong."""
    a, b = store / "y" / "c" / "0", store / "y" / "c" / "1"
    da, db = a.read_bytes(), b.read_bytes()
    assert da != db
    a.write_bytes(db)
    b.write_bytes(da)
    _refused_everywhere(store, "array y: file y/c/0 does not match its checksum", tmp_path, capsys)


def test_edited_array_metadata_is_refused(store: Path, tmp_path: Path, capsys) -> None:
    meta = store / "global_id" / "zarr.json"
    doc = json.loads(meta.read_text())
    doc["fill_value"] = 7
    meta.write_text(json.dumps(doc))
    _refused_everywhere(store, "array global_id: file global_id/zarr.json does not match its checksum", tmp_path, capsys)


def test_chunks_are_checked_when_read_without_a_full_verify(store: Path) -> None:
    """verify=False (what a large or remote store gets): every file is still checked as it is read,
    also one edited after the store was opened; a chunk deleted after opening is not read as zeros."""
    r = StoreReader(str(store), verify=False)
    last = len(r) - 1
    chunk = store / "x" / "c" / "1" / "0"
    data = bytearray(chunk.read_bytes())
    data[-1] ^= 0x01
    chunk.write_bytes(bytes(data))
    with pytest.raises(StoreError, match="array x: file x/c/1/0 does not match its checksum"):
        for i in range(len(r)):
            r.get_csr(i)
    r = StoreReader(str(store), verify=False)
    (store / "node_part" / "c" / "0").unlink()
    with pytest.raises(StoreError, match="array node_part: file node_part/c/0 is missing"):
        r.node_part()
    assert last >= 0


def test_store_without_checksums_still_opens_with_a_log_line(store: Path, caplog, capsys) -> None:
    """Stores built before checksums were added open as before, saying they cannot be verified."""
    _drop_checksums(store)
    with caplog.at_level(logging.INFO, logger="partitioning.store.reader"):
        r = StoreReader(str(store))
    assert r.checksums is None and len(r) > 0
    assert any("built without checksums" in m and "cannot be verified" in m for m in caplog.messages)
    with pytest.raises(StoreError, match="cannot be verified"):
        r.verify()
    with pytest.raises(SystemExit) as exc:
        run_cli(_verify_main, [str(store)])
    assert exc.value.code == 0
    assert "no checksums in its manifest" in capsys.readouterr().out


# ---------------------------------------------------------------------------------------------
# checkpoints


def _fake_run(out: Path, hidden: int, in_dim: int = 8) -> Path:
    """A pre-training run folder as Ray Train leaves it: <out>/ray_train/checkpoint_<time>/{model.pt,train_state.pt}."""
    from gcad_dist.checkpoint import rng_state, save_model, save_train_state
    from gcad_dist.model import GCCAD, GCCADConfig

    d = out / "ray_train" / "checkpoint_2026-01-01_00-00-00.000000"
    torch.manual_seed(0)
    cfg = GCCADConfig(in_dim=in_dim, hidden=hidden, num_layers=2, conv="gin", readout="memory", dropout=0.1, tau=0.1)
    model = GCCAD(cfg)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    save_model(d, model, cfg, extra={"global_step": 3})
    save_train_state(d, {"optimizer": opt.state_dict(), "epoch": 0, "position": 3, "global_step": 3,
                         "rng": [rng_state()], "history": []})
    return d


def _tree(p: Path) -> dict[str, int]:
    return {str(q.relative_to(p)): q.stat().st_mtime_ns for q in p.rglob("*")}


def test_resume_with_another_model_config_names_the_settings(store: Path, tmp_path: Path, capsys) -> None:
    import ray

    from gcad_dist.pretrain import PretrainConfig, validate

    out = tmp_path / "pre"
    ck = _fake_run(out, hidden=16)
    before = _tree(out)
    line = _cli(_pretrain_main, ["--store", str(store), "--out", str(out), "--resume", "--hidden", "32",
                                 "--layers", "3"], capsys)
    assert line == (f"error: --resume: checkpoint {ck} was trained with --hidden 16, --layers 2, this run asks for "
                    "--hidden 32, --layers 3; resume with the same settings, or start over with --overwrite")
    assert _tree(out) == before and not ray.is_initialized()
    # the same settings pass the check (training itself is tests/test_pretrain.py's business)
    info = validate(PretrainConfig(store=str(store), out=str(out), resume=True, hidden=16))
    assert info["features"] == 8


def _evil(marker: Path):
    class Evil:
        def __reduce__(self):
            return (exec, (f"open({str(marker)!r}, 'w').write('pwned')",))

    return Evil()


@pytest.fixture
def graph_file(tmp_path: Path) -> Path:
    from partitioning.io import save_npz
    from partitioning.synthetic import SyntheticConfig, generate

    g = generate(SyntheticConfig(nodes=200, avg_degree=6, features=8, clique_size=4, contextual_candidates=8, seed=0))
    path = tmp_path / "g.npz"
    save_npz(g, path)
    return path


@pytest.mark.parametrize("how", ["torch.save", "raw pickle"])
def test_malicious_checkpoint_is_never_unpickled(how: str, store: Path, graph_file: Path, tmp_path: Path,
                                                 capsys) -> None:
    """A model.pt / train_state.pt whose unpickling would write a marker file: score, finetune and
    pretrain --resume refuse it in one line, the marker never appears, and no output is written."""
    from gcad_dist.finetune import main as finetune_main
    from gcad_dist.score import main as score_main

    marker = tmp_path / "PWNED"

    def plant(path: Path) -> None:
        payload = {"config": {"in_dim": 8}, "state_dict": {}, "extra": _evil(marker)}
        if how == "torch.save":
            torch.save(payload, path)
        else:
            path.write_bytes(pickle.dumps(payload))

    bad = tmp_path / "bad"
    bad.mkdir()
    plant(bad / "model.pt")
    want = f"error: {bad / 'model.pt'}: refusing to unpickle: "

    scores = tmp_path / "scores.parquet"
    line = _cli(score_main, ["--checkpoint", str(bad), "--graph", str(graph_file), "--out", str(scores)], capsys)
    assert line.startswith(want) and "nothing in the file was run" in line, line
    assert not scores.exists()

    ft = tmp_path / "ft"
    line = _cli(finetune_main, ["--checkpoint", str(bad), "--graph", str(graph_file), "--out", str(ft)], capsys)
    assert line.startswith(want), line
    assert not (ft / "final").exists()

    out = tmp_path / "pre"  # pretrain --resume: a poisoned model.pt, then a good model.pt + poisoned train_state.pt
    ck = _fake_run(out, hidden=64)
    plant(ck / "model.pt")
    line = _cli(_pretrain_main, ["--store", str(store), "--out", str(out), "--resume"], capsys)
    assert line.startswith(f"error: {ck / 'model.pt'}: refusing to unpickle: "), line
    shutil.rmtree(out)
    ck = _fake_run(out, hidden=64)
    plant(ck / "train_state.pt")
    line = _cli(_pretrain_main, ["--store", str(store), "--out", str(out), "--resume"], capsys)
    assert line.startswith(f"error: {ck / 'train_state.pt'}: refusing to unpickle: "), line
    assert not (out / "final").exists() and not (out / "metrics.json").exists()

    from gcad_dist.checkpoint import CheckpointError, load_train_state

    with pytest.raises(CheckpointError, match="refusing to unpickle"):  # what a training worker calls
        load_train_state(ck)

    assert not marker.exists()
    # the file really is hostile: a plain unpickling runs the payload
    pickle.loads((bad / "model.pt").read_bytes()) if how == "raw pickle" else torch.load(bad / "model.pt",
                                                                                            weights_only=False)
    assert marker.read_text() == "pwned"


def test_our_own_checkpoints_load_with_weights_only(tmp_path: Path) -> None:
    """model.pt and train_state.pt (optimizer, RNG states) need nothing beyond weights_only, and the
    RNG states round-trip; a train_state.pt of the older layout (NumPy RNG key array) still loads."""
    import random

    from gcad_dist.checkpoint import load_model_file, load_train_state, set_rng_state

    d = _fake_run(tmp_path / "pre", hidden=8)
    torch.load(d / "model.pt", weights_only=True)
    state = torch.load(d / "train_state.pt", weights_only=True)
    assert state["global_step"] == 3 and load_model_file(d)["config"]["hidden"] == 8

    np.random.seed(5)
    random.seed(6)
    legacy = {"rng": [{"torch": torch.get_rng_state(), "numpy": np.random.get_state(), "python": random.getstate()}]}
    torch.save(legacy, d / "train_state.pt")
    expect = (np.random.rand(), random.random())
    set_rng_state(load_train_state(d)["rng"][0])
    assert (np.random.rand(), random.random()) == expect


def test_every_torch_load_is_weights_only() -> None:
    """No torch.load in the package code may unpickle arbitrary objects."""
    bad = []
    for root in ("gcad_dist", "partitioning", "bench"):
        for p in (REPO / root).rglob("*.py"):
            text = p.read_text()
            for m in re.finditer(r"torch\.load\(", text):
                depth, end = 0, m.end() - 1
                for end in range(m.end() - 1, len(text)):  # to the matching parenthesis
                    depth += {"(": 1, ")": -1}.get(text[end], 0)
                    if depth == 0:
                        break
                call = text[m.start(): end + 1]
                if "weights_only=True" not in call:
                    bad.append(f"{p.relative_to(REPO)}:{text.count(chr(10), 0, m.start()) + 1}: {call}")
    assert not bad, bad


@pytest.mark.parametrize("option,value,message", [
    ("--eval-every", "0", "--eval-every: must be >= 1"),
    ("--patience", "-1", "--patience: must be >= 0"),
    ("--snapshots", "0", "--snapshots: must be >= 1"),
    ("--max-degree", "-5", "--max-degree: must be >= 0"),
    ("--lr", "0", "--lr: must be > 0"),
    ("--label-fraction", "1.5", "--label-fraction: must be in (0, 1]"),
    ("--candidate-workers", "0", "--candidate-workers: must be >= 1"),
    ("--threads", "-1", "--threads: must be >= 0"),
    ("--checkpoint-interval", "-1", "--checkpoint-interval: must be >= 0"),
])
@pytest.mark.parametrize("cli", ["train", "finetune"])
def test_fit_options_are_checked_alike_by_train_and_finetune(cli: str, option: str, value: str, message: str,
                                                            tmp_path: Path, capsys) -> None:
    """The fitting options both CLIs share are refused with the same one line, before any file is read (the graph
    and the checkpoint do not exist here)."""
    from gcad_dist.finetune import main as finetune_main
    from gcad_dist.train import main as train_main

    main = train_main if cli == "train" else finetune_main
    argv = ["--graph", str(tmp_path / "none.npz"), "--out", str(tmp_path / "out"), option, value]
    if cli == "finetune":
        argv += ["--checkpoint", str(tmp_path / "no-checkpoint")]
    line = _cli(main, argv, capsys)
    assert line.startswith(f"error: {message}"), line



@pytest.mark.parametrize("value", ["-0.5", "nan"])
def test_finetune_anchor_must_be_non_negative(value: str, tmp_path: Path, capsys) -> None:
    """``gcad_dist.finetune --anchor`` (L2-SP strength) below 0 or NaN is one line, before any file is read."""
    from gcad_dist.finetune import main as finetune_main

    line = _cli(finetune_main, ["--graph", str(tmp_path / "none.npz"), "--out", str(tmp_path / "out"),
                                "--checkpoint", str(tmp_path / "no-checkpoint"), "--anchor", value], capsys)
    assert line.startswith("error: --anchor: must be >= 0"), line

@pytest.mark.parametrize("module,argv,expected", [
    ("gcad_dist.train", ["--graph", "g.npz", "--out", "o", "--epochs", "abc"], "argument --epochs: invalid int value"),
    ("gcad_dist.train", ["--graph", "g.npz"], "the following arguments are required: --out"),
    ("gcad_dist.quality", ["--models", "nosuch"], "argument --models: invalid choice: 'nosuch'"),
    ("gcad_dist.pretrain", ["--epochs", "3"], "the following arguments are required: --store"),
    ("gcad_dist.finetune", ["--graph", "g.npz", "--out", "o"], "required: --checkpoint"),
    ("gcad_dist.score", ["--checkpoint", "c", "--graph", "g.npz", "--out", "s.parquet", "--no-such-option", "1"],
     "unrecognized arguments: --no-such-option 1"),
    ("partitioning.build", ["--graph", "g.npz", "--out", "o.zarr", "--k", "two"], "argument --k"),
    ("partitioning.synthetic", ["--out", "g.npz", "--nodes", "many"], "argument --nodes: invalid int value"),
    ("partitioning.store.verify", [], "the following arguments are required: store"),
])
def test_option_mistakes_are_one_line(module: str, argv: list[str], expected: str, capsys) -> None:
    """argparse's own errors (wrong type, unknown choice or option, a required option missing) end as every user
    error does: one ``error:`` line that points to --help, exit status 2, no usage block."""
    import importlib

    main = importlib.import_module(module).main
    line = _cli(main, argv, capsys)
    assert expected in line and line.endswith(f"(see python -m {module} --help)"), line


@pytest.mark.parametrize("cli", ["train", "finetune"])
def test_failed_run_leaves_no_empty_out_folder(cli: str, tmp_path: Path, capsys) -> None:
    """A run that fails before writing anything (here: a graph or checkpoint that does not exist) removes the --out
    folder it created, and leaves alone one the user made."""
    from gcad_dist.finetune import main as finetune_main
    from gcad_dist.train import main as train_main

    main = train_main if cli == "train" else finetune_main
    extra = ["--checkpoint", str(tmp_path / "no-checkpoint")] if cli == "finetune" else []
    new = tmp_path / "runs" / "new"
    _cli(main, ["--graph", str(tmp_path / "missing.npz"), "--out", str(new), *extra], capsys)
    assert not new.exists()
    mine = tmp_path / "mine"
    mine.mkdir()
    _cli(main, ["--graph", str(tmp_path / "missing.npz"), "--out", str(mine), *extra], capsys)
    assert mine.is_dir() and not any(mine.iterdir())


def test_checkpoint_mistakes_say_what_is_wrong(tmp_path: Path) -> None:
    """A checkpoint path that does not exist, a folder without model.pt, a text file and a truncated file each get
    their own one-line reason."""
    import torch

    from gcad_dist.checkpoint import CheckpointError, load_model_file

    with pytest.raises(FileNotFoundError, match="no such checkpoint folder or file"):
        load_model_file(tmp_path / "nowhere")
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="no model.pt here"):
        load_model_file(tmp_path / "empty")
    text = tmp_path / "text" / "model.pt"
    text.parent.mkdir()
    text.write_text("gcad weights, honest\n")
    with pytest.raises(CheckpointError, match="not a PyTorch checkpoint file"):
        load_model_file(text.parent)
    good = tmp_path / "good.pt"
    torch.save({"config": {}, "state_dict": {"w": torch.zeros(1000)}}, good)
    cut = tmp_path / "cut" / "model.pt"
    cut.parent.mkdir()
    cut.write_bytes(good.read_bytes()[:300])
    with pytest.raises(CheckpointError, match="cannot read checkpoint") as e:
        load_model_file(cut.parent)
    assert "\n" not in str(e.value)
