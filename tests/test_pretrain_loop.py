"""The pre-training loop in-process (no Ray): work per epoch on a small store, checkpoint frequency,
resume. ``run_worker`` is the loop Ray Train runs; here a stand-in reporter keeps the checkpoints."""

from __future__ import annotations

import contextlib
import shutil
from collections.abc import Iterator
from dataclasses import asdict
from pathlib import Path

import numpy as np
import pytest
import torch

from gcad_dist.checkpoint import load_model_file, load_train_state
from gcad_dist.data.sharding import ShardConfig, epoch_plan, passes_per_epoch
from gcad_dist.distributed.train_loop import EventLog, checkpoint_due, run_worker
from gcad_dist.pretrain import PretrainConfig, build_parser, parse_config

FAST = dict(hidden=16, fanouts="5,3", prefetch=0)


class LocalReporter:
    """Keeps every checkpoint directory it is given (a copy), and every metrics dict."""

    def __init__(self, root: Path, fail_at_checkpoint: int = 0) -> None:
        self.root = root
        self.checkpoints: list[Path] = []
        self.metrics: list[dict] = []
        self.fail_at_checkpoint = fail_at_checkpoint

    @contextlib.contextmanager
    def latest_checkpoint(self) -> Iterator[str | None]:
        yield str(self.checkpoints[-1]) if self.checkpoints else None

    def report(self, metrics: dict, checkpoint_dir: str | None) -> None:
        self.metrics.append(dict(metrics))
        if checkpoint_dir is not None:
            dst = self.root / f"ckpt{len(self.checkpoints):03d}"
            shutil.copytree(checkpoint_dir, dst)
            self.checkpoints.append(dst)
            if self.fail_at_checkpoint and len(self.checkpoints) == self.fail_at_checkpoint:
                self.fail_at_checkpoint = 0
                raise RuntimeError("simulated worker failure")

    def state(self) -> dict:
        return load_train_state(self.checkpoints[-1])


def _two_subgraph_store(out: Path, n: int = 120, seed: int = 0) -> Path:
    from partitioning.corrupt import corrupt_subgraphs
    from partitioning.features import normalize_store_features
    from partitioning.graph import csr_from_edges
    from partitioning.store.writer import write_store

    rng = np.random.default_rng(seed)
    parts = np.repeat([0, 1], n // 2)
    x = (rng.normal(size=(n, 6)) + 2 * parts[:, None]).astype(np.float32)
    indptr, indices = csr_from_edges(rng.integers(0, n, 4 * n), rng.integers(0, n, 4 * n), n)
    subs = list(corrupt_subgraphs(indptr, indices, parts, ratio=0.15, seed=seed))
    x, features = normalize_store_features(x, "standard")
    write_store(out, x, subs, {"source": "test", "features": features}, node_part=parts.astype(np.int32))
    return out


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _two_subgraph_store(tmp_path_factory.mktemp("s") / "two.zarr")


def _run(cfg: PretrainConfig, reporter: LocalReporter) -> None:
    torch.set_num_threads(1)
    run_worker({"pretrain": asdict(cfg)}, reporter)


def test_passes_per_epoch_and_plan_repeats_whole_passes() -> None:
    assert passes_per_epoch(1, 100) == 100 and passes_per_epoch(30, 100) == 4 and passes_per_epoch(200, 100) == 1
    assert passes_per_epoch(5, 0) == 1 and passes_per_epoch(0, 100) == 1
    nodes = np.array([40, 60, 50, 300, 35])
    edges = nodes * 6
    cfg = ShardConfig(sample_threshold=100, batch_cost=150, batch_size=64, seed=0, min_steps=20)
    base = epoch_plan(nodes, edges, 0, 2, 0, ShardConfig(**{**asdict(cfg), "min_steps": 0}))
    plans = [epoch_plan(nodes, edges, r, 2, 0, cfg) for r in range(2)]
    assert plans[0].passes == passes_per_epoch(len(base), 20) > 1
    assert len(plans[0]) == len(plans[1]) == plans[0].passes * len(base) >= 20
    for pos in range(len(plans[0])):  # workers stay in step, pass by pass
        a, b = plans[0].steps[pos], plans[1].steps[pos]
        assert a.kind == b.kind and a.rep == b.rep
    # pass 0 is the plain epoch; every pass covers the worker's share exactly once per batch set
    first = plans[0].steps[: len(base)]
    assert [(s.kind, s.subgraphs.tolist(), s.index) for s in first] == \
        [(s.kind, s.subgraphs.tolist(), s.index) for s in base.steps]
    for rep in range(plans[0].passes):
        steps = [s for s in plans[0].steps if s.rep == rep]
        assert len(steps) == len(base)
        assert sorted(int(s.index) for s in steps if s.kind == "seeds") == sorted(
            int(s.index) for s in base.steps if s.kind == "seeds")


def test_small_store_gets_the_minimum_steps_per_epoch_with_default_flags(store: Path, tmp_path: Path) -> None:
    cfg = PretrainConfig(store=str(store), epochs=2)  # every other option at its default
    assert cfg.min_steps_per_epoch == 100
    rep = LocalReporter(tmp_path)
    _run(cfg, rep)
    state = rep.state()
    assert state["steps_per_epoch"] >= 100 and state["passes_per_epoch"] >= 50  # one pass = one or two steps
    assert state["global_step"] == 2 * state["steps_per_epoch"]
    assert [h["steps"] for h in state["history"]] == [state["steps_per_epoch"]] * 2
    assert all(np.isfinite(h["loss"]) for h in state["history"])
    assert state["history"][-1]["loss"] < state["history"][0]["loss"]  # it learns something
    assert len(rep.metrics) == 2 and rep.checkpoints  # one report per epoch, the last with a checkpoint
    ck = load_model_file(rep.checkpoints[-1])
    assert ck["extra"]["global_step"] == state["global_step"]


@pytest.mark.parametrize("interval, every, expect", [
    (0.0, 0, [5, 10, 15, 20]),  # every epoch end
    (1e9, 0, [20]),  # only the last epoch
    (1e9, 3, [3, 6, 9, 12, 18, 20]),  # every 3 steps within epochs, and the last epoch end
])
def test_checkpoint_frequency(store: Path, tmp_path: Path, interval: float, every: int, expect: list[int]) -> None:
    cfg = PretrainConfig(store=str(store), epochs=4, min_steps_per_epoch=5, checkpoint_interval=interval,
                         checkpoint_every=every, **FAST)
    rep = LocalReporter(tmp_path)
    _run(cfg, rep)
    steps = [load_train_state(d)["global_step"] for d in rep.checkpoints]
    assert steps == expect
    assert rep.state()["checkpoints"] == len(expect)


def test_event_log_says_when_a_progress_event_is_due(tmp_path: Path) -> None:
    """The loop reads its loss sums back from the device only when a progress event will be written."""
    assert not EventLog(None).due("progress") and not EventLog(None).due("epoch")
    events = EventLog(str(tmp_path / "events.jsonl"), interval_s=3600.0)
    assert events.due("progress")
    events.write("progress", step=1)
    assert not events.due("progress") and events.due("epoch")  # rate-limited; other events never are
    events.write("progress", step=2)  # not written
    events.write("epoch", step=2)
    assert [line.count('"step"') for line in (tmp_path / "events.jsonl").read_text().splitlines()] == [1, 1]


def test_checkpoint_due() -> None:
    assert checkpoint_due(True, 0.0, 60.0)  # the last epoch always
    assert not checkpoint_due(False, 59.9, 60.0)
    assert checkpoint_due(False, 60.0, 60.0)
    assert checkpoint_due(False, 0.0, 0.0)  # interval 0: every epoch


def test_resume_continues_the_step_counter_and_matches_an_uninterrupted_run(store: Path, tmp_path: Path) -> None:
    common = dict(store=str(store), min_steps_per_epoch=6, checkpoint_every=4, checkpoint_interval=1e9, **FAST)
    full = LocalReporter(tmp_path / "full")
    (tmp_path / "full").mkdir()
    _run(PretrainConfig(epochs=3, **common), full)

    # A worker failure after the 2nd checkpoint (step 8, mid-epoch 1): the next start resumes from it.
    (tmp_path / "cut").mkdir()
    cut = LocalReporter(tmp_path / "cut", fail_at_checkpoint=2)
    with pytest.raises(RuntimeError, match="simulated"):
        _run(PretrainConfig(epochs=3, **common), cut)
    assert load_train_state(cut.checkpoints[-1])["global_step"] == 8
    _run(PretrainConfig(epochs=3, **common), cut)
    a, b = full.state(), cut.state()
    assert a["global_step"] == b["global_step"] == 3 * a["steps_per_epoch"] == 18
    assert [h["step"] for h in b["history"]] == [6, 12, 18] and b["restarts"] == 1
    wa = load_model_file(full.checkpoints[-1])["state_dict"]
    wb = load_model_file(cut.checkpoints[-1])["state_dict"]
    for k in wa:  # same data order, same RNG streams: the resumed run ends where the uninterrupted one did
        torch.testing.assert_close(wa[k], wb[k], rtol=1e-5, atol=1e-6)

    # --resume with more epochs: the counter goes on from the final checkpoint.
    _run(PretrainConfig(epochs=4, **common), cut)
    c = cut.state()
    assert c["global_step"] == 24 and [h["epoch"] for h in c["history"]] == [0, 1, 2, 3] and c["restarts"] == 2


def test_new_options_in_help_and_validated(store: Path, tmp_path: Path) -> None:
    from gcad_dist.cli import UsageError
    from gcad_dist.pretrain import validate

    text = build_parser().format_help()
    for opt in ("--min-steps-per-epoch", "--checkpoint-interval", "--checkpoint-every"):
        assert opt in text
    cfg = parse_config(["--store", str(store)])
    assert cfg.min_steps_per_epoch == 100 and cfg.checkpoint_interval == 60.0
    for args, needle in ((["--min-steps-per-epoch", "-1"], "--min-steps-per-epoch"),
                         (["--checkpoint-interval", "-5"], "--checkpoint-interval"),
                         (["--sample-on", "gpu"], "--sample-on gpu: needs GPU workers"),
                         (["--sample-on", "gpu", "--gpus-per-worker", "1", "--backend", "torch-sparse"],
                          "--sample-on gpu: needs the built-in sampler")):
        with pytest.raises(UsageError, match=f"^{needle}"):
            validate(parse_config(["--store", str(store), "--out", str(tmp_path / "o")] + args))


def test_bf16_pretraining_steps_stay_close_to_fp32(store: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``--precision bf16``: the step runs under bf16 autocast (forced on here, as on a bf16 CPU or GPU), the
    losses stay finite and within a few per cent of the fp32 run's, the saved weights stay fp32."""
    import gcad_dist.model.precision as prec

    monkeypatch.setattr(prec, "bf16_supported", lambda device: True)
    seen: list[bool] = []
    real_loss = __import__("gcad_dist.model", fromlist=["GCCAD"]).GCCAD.loss

    def spy(self, *a, **k):  # records whether the loss runs inside an autocast region
        seen.append(prec.autocast_enabled("cpu"))
        return real_loss(self, *a, **k)

    monkeypatch.setattr("gcad_dist.model.GCCAD.loss", spy)
    runs = {}
    for precision in ("fp32", "bf16"):
        cfg = PretrainConfig(store=str(store), epochs=2, min_steps_per_epoch=10, precision=precision, **FAST)
        rep = LocalReporter(tmp_path / precision)
        seen.clear()
        _run(cfg, rep)
        runs[precision] = rep.state()["history"]
        assert seen and all(s == (precision == "bf16") for s in seen)
        ck = load_model_file(rep.checkpoints[-1])
        assert all(v.dtype == torch.float32 for v in ck["state_dict"].values() if v.is_floating_point())
    l32 = np.array([h["loss"] for h in runs["fp32"]])
    l16 = np.array([h["loss"] for h in runs["bf16"]])
    assert np.isfinite(l16).all()
    assert np.allclose(l16, l32, rtol=0.1, atol=0.02), (l32, l16)


def test_precision_option_is_validated() -> None:
    from gcad_dist.pretrain import validate

    assert parse_config(["--store", "s", "--precision", "bf16"]).precision == "bf16"
    with pytest.raises(SystemExit):
        parse_config(["--store", "s", "--precision", "fp16"])
    from gcad_dist.cli import UsageError

    with pytest.raises(UsageError, match="--precision"):
        validate(PretrainConfig(store="s", precision="fp16"))


def test_local_contrast_with_fresh_feature_swaps_trains(store: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``--contrast ego --swap-features 0.2``: each step sees a fresh draw of swapped nodes (labelled 1 on top
    of the store's injected ones), the model is built with the contrast, and the loss stays finite."""
    import gcad_dist.distributed.train_loop as loop

    draws: list[torch.Tensor] = []
    real = loop.swap_features

    def spy(x, y, mask, fraction, generator=None):
        x2, y2 = real(x, y, mask, fraction, generator)
        draws.append((y2 != y).nonzero().squeeze(1))
        return x2, y2

    monkeypatch.setattr(loop, "swap_features", spy)
    cfg = PretrainConfig(store=str(store), epochs=1, min_steps_per_epoch=6, contrast="ego", swap_features=0.2, **FAST)
    rep = LocalReporter(tmp_path)
    _run(cfg, rep)
    assert len(draws) == 6 and all(d.numel() > 0 for d in draws)
    assert len({tuple(d.tolist()) for d in draws}) > 1  # redrawn, not fixed
    assert load_model_file(rep.checkpoints[-1])["config"]["contrast"] == "ego"
    assert np.isfinite(rep.state()["history"][0]["loss"])


def test_jump_reaches_the_pretrained_model() -> None:
    """``--jump`` is the paper's ``last`` by default and reaches the model's config (so score/finetune use it)."""
    from gcad_dist.distributed.train_loop import model_config
    from gcad_dist.pretrain import apply_recipe

    cfg = apply_recipe(parse_config(["--store", "s", "--out", "o"]), store_corrupted=True)
    assert cfg.jump == "last" and model_config(cfg, 5).jump == "last"
    cfg = apply_recipe(parse_config(["--store", "s", "--out", "o", "--jump", "cat"]), store_corrupted=True)
    assert model_config(cfg, 5).jump == "cat"


def test_missing_ray_dashboard_is_a_usage_error(store: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Ray Train needs the dashboard's state API: with ``ray[train]`` but not ``ray[default]`` installed, the
    in-process start says what to install instead of Ray's "Cannot include dashboard with missing packages"."""
    import ray
    import ray._private.utils as ray_utils

    from gcad_dist import pretrain
    from gcad_dist.cli import UsageError

    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", lambda *a, **k: pytest.fail("ray.init must not be reached"))
    monkeypatch.setattr(ray_utils, "get_dashboard_dependency_error", lambda: "No module named 'aiohttp_cors'")
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    cfg = parse_config(["--store", str(store), "--out", str(tmp_path / "o")])
    with pytest.raises(UsageError, match=r"aiohttp_cors.*pip install 'ray\[default,train\]=="):
        pretrain._start_ray(cfg)


def test_where_a_worker_samples() -> None:
    """--sample-on: auto samples on a GPU worker's GPU with the built-in sampler, never on a CPU worker."""
    cuda, cpu = torch.device("cuda"), torch.device("cpu")
    assert PretrainConfig(store="s").samples_on_gpu(cuda)
    assert not PretrainConfig(store="s").samples_on_gpu(cpu)
    assert not PretrainConfig(store="s", backend="torch-sparse").samples_on_gpu(cuda)
    assert PretrainConfig(store="s", backend="builtin", sample_on="gpu").samples_on_gpu(cuda)
    assert not PretrainConfig(store="s", sample_on="cpu").samples_on_gpu(cuda)
