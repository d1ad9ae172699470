"""gcad_dist.pretrain end to end on a tiny store: 2 workers, a killed worker, --resume, bad input."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from gcad_dist.checkpoint import load_model_file
from gcad_dist.model import GCCAD, GCCADConfig
from gcad_dist.pretrain import PretrainConfig, _start_ray, run

REPO = Path(__file__).resolve().parents[1]
# One big subgraph (345 nodes > threshold 250: neighbour-sampled by both workers) and three small ones.
OPTS = dict(sample_threshold=250, batch_size=64, graph_batch_nodes=200, hidden=16, fanouts="5,3")


def _build_store(out: Path, n: int = 600, big: int = 300, seed: int = 0) -> Path:
    from partitioning.corrupt import corrupt_subgraphs
    from partitioning.features import normalize_store_features
    from partitioning.graph import csr_from_edges
    from partitioning.store.writer import write_store

    rng = np.random.default_rng(seed)
    parts = np.concatenate([np.zeros(big, np.int64), 1 + rng.integers(0, 3, n - big)])
    x = (rng.normal(size=(n, 8)) + parts[:, None]).astype(np.float32)
    src = rng.integers(0, n, 4 * n)
    dst = rng.integers(0, n, 4 * n)
    indptr, indices = csr_from_edges(src, dst, n)
    subs = list(corrupt_subgraphs(indptr, indices, parts, ratio=0.15, seed=seed))
    x, features = normalize_store_features(x, "standard")  # as partitioning.build does by default
    write_store(out, x, subs, {"source": "test", "features": features}, node_part=parts.astype(np.int32))
    return out


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> Path:
    return _build_store(tmp_path_factory.mktemp("store") / "s.zarr")


def test_lr_schedule_warmup_then_linear_decay_to_a_tenth() -> None:
    from gcad_dist.distributed.train_loop import lr_lambda

    f = lr_lambda(100)
    vals = np.array([f(s) for s in range(100)])
    assert vals[0] == pytest.approx(0.1) and vals[9] == pytest.approx(1.0)  # 10 warm-up steps
    assert np.all(np.diff(vals[:10]) > 0) and np.all(np.diff(vals[10:]) < 0)
    assert f(100) == pytest.approx(0.1)  # lr/10 at the end


def test_train_state_roundtrip_restores_rng(tmp_path: Path) -> None:
    import random

    import torch

    from gcad_dist.checkpoint import load_train_state, rng_state, save_train_state, set_rng_state

    assert load_train_state(tmp_path) is None
    torch.manual_seed(3)
    save_train_state(tmp_path, {"rng": rng_state(), "global_step": 7})
    expect = (torch.rand(3), np.random.rand(), random.random())
    state = load_train_state(tmp_path)
    assert state["global_step"] == 7
    set_rng_state(state["rng"])
    got = (torch.rand(3), np.random.rand(), random.random())
    assert torch.equal(expect[0], got[0]) and expect[1:] == got[1:]


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "gcad_dist.pretrain", *args], cwd=REPO,
                          capture_output=True, text=True, timeout=120)


def test_bad_input_is_one_line_exit_2_before_ray(tmp_path: Path, store: Path, capsys) -> None:
    import ray

    from gcad_dist.cli import run_cli
    from gcad_dist.pretrain import main

    (tmp_path / "empty").mkdir()
    cases = [
        (["--store", str(tmp_path / "empty")], "empty"),
        (["--store", str(store), "--workers", "0"], "--workers"),
        (["--store", str(store), "--fanouts", "10,x"], "--fanouts"),
        (["--store", str(store), "--resume", "--out", str(tmp_path / "nothing")], "--resume"),
    ]
    for args, needle in cases:
        with pytest.raises(SystemExit) as exc:
            run_cli(main, args)
        assert exc.value.code == 2, args
        lines = capsys.readouterr().err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: ") and needle in lines[0], lines
        assert not ray.is_initialized()  # rejected before starting Ray
    # And through the real command line.
    r = _cli("--store", str(tmp_path / "missing.zarr"))
    assert r.returncode == 2
    assert r.stderr.strip().count("\n") == 0 and r.stderr.startswith("error: ") and "missing.zarr" in r.stderr


def test_help_explains_every_option() -> None:
    r = _cli("--help")
    assert r.returncode == 0
    for opt in ("--store", "--workers", "--gpus-per-worker", "--address", "--sample-threshold", "--resume",
                "--max-failures", "--checkpoint-every", "--fanouts", "--min-steps-per-epoch", "--checkpoint-interval"):
        assert opt in r.stdout


@pytest.fixture(scope="module")
def ray_instance():
    from gcad_dist.distributed.ray_runtime import stop_ray

    started = _start_ray(PretrainConfig(store="", workers=2))
    yield
    if started:
        stop_ray()


@pytest.mark.slow
def test_two_workers_survive_a_killed_worker_then_resume(store: Path, tmp_path: Path, ray_instance,
                                                         monkeypatch) -> None:
    out = tmp_path / "pre"
    marker = tmp_path / "killed"
    # 5 steps per pass on 2 workers, 2 passes per epoch (--min-steps-per-epoch 8); checkpoints every 3
    # steps within epochs (3, 6, 9, 12, 15, 18), at epoch ends only after 60 s, and at the end of the run.
    # The kill after step 17 (epoch 1, second pass) restarts the group from step 15.
    monkeypatch.setenv("GCAD_FAIL_AT_STEP", "17")
    monkeypatch.setenv("GCAD_FAIL_MARKER", str(marker))
    cfg = PretrainConfig(store=str(store), out=str(out), workers=2, epochs=2, checkpoint_every=3, max_failures=2,
                         min_steps_per_epoch=8, **OPTS)
    summary = run(cfg)
    assert marker.exists()  # the worker did kill itself
    steps = summary["steps_per_epoch"]
    assert summary["passes_per_epoch"] == 2 and steps == 2 * 5
    assert summary["checkpoints"] >= 2  # at least step 6 (restored from) and the final one
    assert summary["global_step"] == 2 * steps  # the step counter continued, not restarted or doubled
    assert summary["restarts"] == 1
    metrics = json.loads((out / "metrics.json").read_text())
    hist = metrics["history"]
    assert [h["epoch"] for h in hist] == [0, 1]
    assert [h["step"] for h in hist] == [steps, 2 * steps]
    assert hist[0]["restarts"] == 0 and hist[1]["restarts"] == 1
    assert all(np.isfinite(h["loss"]) for h in hist)

    # The final checkpoint loads into a fresh model (the format finetune and score read).
    ck = load_model_file(out / "final")
    model = GCCAD(GCCADConfig(**ck["config"]))
    model.load_state_dict(ck["state_dict"])
    assert ck["config"]["in_dim"] == 8 and ck["config"]["hidden"] == 16
    # It records the store's feature normalisation, which finetune/score --normalize auto then apply.
    from gcad_dist.score import load_checkpoint_model

    assert ck["extra"]["normalize"] == "standard" and summary["normalize"] == "standard"
    assert load_checkpoint_model(out / "final").normalize == "standard"

    # --resume with one more epoch continues from the last checkpoint.
    monkeypatch.delenv("GCAD_FAIL_AT_STEP")
    cfg2 = PretrainConfig(store=str(store), out=str(out), workers=2, epochs=3, resume=True, min_steps_per_epoch=8,
                          **OPTS)
    summary2 = run(cfg2)
    assert summary2["global_step"] == 3 * steps
    hist2 = json.loads((out / "metrics.json").read_text())["history"]
    assert [h["epoch"] for h in hist2] == [0, 1, 2]
    assert hist2[:2] == hist  # earlier epochs kept, not retrained
    assert summary2["restarts"] == 2
    assert load_model_file(out / "final")["extra"]["normalize"] == "standard"


@pytest.mark.slow
def test_two_workers_split_a_small_whole_graph_and_stay_one_model(tmp_path: Path, ray_instance) -> None:
    """The label-free recipe on 2 workers and a whole-graph store trained whole: each worker takes half of the nodes
    at every step, the gradients are averaged by hand, and the two workers' weights never part (checked every
    epoch)."""
    from partitioning.build import main as build_main
    from partitioning.synthetic import SyntheticConfig, synthesize
    from partitioning.io import save_npz

    g = synthesize(SyntheticConfig(nodes=400, avg_degree=8, features=8, anomaly_fraction=0.05, seed=0)).graph
    save_npz(g, tmp_path / "g.npz")
    assert build_main(["--graph", str(tmp_path / "g.npz"), "--out", str(tmp_path / "w.zarr"), "--k", "1",
                       "--no-progress", "--no-plot"]) == 0
    cfg = PretrainConfig(store=str(tmp_path / "w.zarr"), out=str(tmp_path / "pre"), workers=2, epochs=2,
                         min_steps_per_epoch=5, hidden=16)
    summary = run(cfg)
    assert summary["global_step"] == 10
    hist = json.loads((tmp_path / "pre" / "metrics.json").read_text())["history"]
    assert [h["weight_spread"] for h in hist] == [0.0, 0.0]
    assert all(h["workers"] == 2 and np.isfinite(h["loss"]) for h in hist)


@pytest.mark.slow
def test_two_workers_local_recipe_on_a_whole_graph_store(tmp_path: Path, ray_instance) -> None:
    """The label-free recipe on 2 workers: a whole-graph store (build --k 1) above the sample threshold is trained
    by both workers on one-hop minibatches under DDP, though the skipped GCCAD layers never get a gradient."""
    from partitioning.build import main as build_main
    from partitioning.synthetic import SyntheticConfig, synthesize
    from partitioning.io import save_npz

    g = synthesize(SyntheticConfig(nodes=800, avg_degree=8, features=8, anomaly_fraction=0.05, seed=0)).graph
    save_npz(g, tmp_path / "g.npz")
    assert build_main(["--graph", str(tmp_path / "g.npz"), "--out", str(tmp_path / "w.zarr"), "--k", "1",
                       "--no-progress", "--no-plot"]) == 0
    cfg = PretrainConfig(store=str(tmp_path / "w.zarr"), out=str(tmp_path / "pre"), workers=2, epochs=1,
                         min_steps_per_epoch=6, **OPTS)
    summary = run(cfg)
    assert cfg.recipe == "local" and cfg.contrast == "local" and cfg.swap_features == 0.15
    assert summary["global_step"] >= 6
    ck = load_model_file(tmp_path / "pre" / "final")
    assert ck["config"]["contrast"] == "local" and ck["config"]["loss"] == "logistic" and ck["config"]["tau"] == 0.2
    hist = json.loads((tmp_path / "pre" / "metrics.json").read_text())["history"]
    assert all(np.isfinite(h["loss"]) and h["loss"] > 0 for h in hist)
    assert all(h["weight_spread"] == 0.0 for h in hist)  # minibatches too: one model on both workers


def test_a_finished_run_is_recognised_for_resume(tmp_path: Path) -> None:
    """--resume on a run that finished with the same settings has nothing to do (no Ray start, the stored summary);
    other settings, more epochs, or a missing final model mean the run is not finished."""
    from dataclasses import asdict

    from gcad_dist.pretrain import finished_run

    cfg = PretrainConfig(store=str(tmp_path / "s.zarr"), out=str(tmp_path / "run"), epochs=3)
    out = Path(cfg.out)
    (out / "final").mkdir(parents=True)
    summary = {"epochs": 3, "global_step": 30, "checkpoint": str(out / "final")}
    saved = asdict(cfg) | {"out": "/elsewhere", "store": "/abs/s.zarr"}  # resolved paths are not settings
    (out / "metrics.json").write_text(json.dumps({"summary": summary, "history": [], "config": saved}))
    assert finished_run(out, cfg) is None  # no final/model.pt
    (out / "final" / "model.pt").write_bytes(b"")
    assert finished_run(out, cfg) == summary
    assert finished_run(out, PretrainConfig(store=cfg.store, out=cfg.out, epochs=3, resume=True)) == summary
    assert finished_run(out, PretrainConfig(store=cfg.store, out=cfg.out, epochs=5)) is None
    assert finished_run(out, PretrainConfig(store=cfg.store, out=cfg.out, epochs=3, hidden=32)) is None
    assert finished_run(tmp_path / "elsewhere", cfg) is None


def test_workers_without_a_subgraph_of_their_own_are_named(store: Path, tmp_path: Path, caplog) -> None:
    """More workers than small subgraphs: the extra ones repeat another's steps (with one whole-graph subgraph, the
    same graph every step), and validate says so; as many subgraphs as workers, or sampled ones, say nothing."""
    import logging

    from gcad_dist.pretrain import idle_workers, parse_config, validate
    from partitioning.build import BuildConfig, build
    from partitioning.graph import Graph, csr_from_edges

    assert idle_workers([10_000], 2, 50_000) == 1
    assert idle_workers([10_000, 300, 200], 5, 50_000) == 2
    assert idle_workers([100, 200, 300], 2, 50_000) == 0
    assert idle_workers([60_000], 4, 50_000) == 0  # sampled: all workers share its seed nodes
    assert idle_workers([100, 60_000], 3, 50_000) == 2
    rng = np.random.default_rng(0)
    indptr, indices = csr_from_edges(rng.integers(0, 300, 1200), rng.integers(0, 300, 1200), 300)
    whole = tmp_path / "w.zarr"
    build(BuildConfig(graph="test", out=str(whole), k=1, corruption_mix="none", plot=False, progress=False),
          graph=Graph(x=rng.normal(size=(300, 8)).astype(np.float32), indptr=indptr, indices=indices, source="test"))

    def said(path: Path, workers: int, *more: str, what: str = "have none of their own") -> list[str]:
        caplog.clear()
        with caplog.at_level(logging.INFO, logger="gcad_dist.pretrain"):
            validate(parse_config(["--store", str(path), "--workers", str(workers), "--out", str(tmp_path / "o"),
                                   *more]))
        return [r.getMessage() for r in caplog.records if what in r.getMessage()]

    # a whole-graph store: by default the workers split its nodes (session 59); without, the extra ones repeat
    assert said(whole, 2) == []
    split = said(whole, 2, what="takes a share")
    assert len(split) == 1 and "about 150 of its 300 nodes" in split[0]
    one = said(whole, 2, "--no-shard-targets")
    assert len(one) == 1 and "--workers 2" in one[0] and "has 1 subgraph(s)" in one[0] and "--workers 1" in one[0]
    assert said(whole, 2, "--context-hops", "2", what="takes a share") == []  # a ball reads others' in-links
    four = said(store, 6)  # four small subgraphs at the default threshold, six workers: two repeat
    assert len(four) == 1 and "has 4 subgraph(s)" in four[0] and "2 worker(s)" in four[0]
    assert "--workers 1" not in four[0]
    assert said(whole, 1) == [] and said(store, 4) == []
