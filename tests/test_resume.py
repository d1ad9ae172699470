"""An interrupted labelled run continues where it stopped (gcad_dist.fit_state): a fit resumed from its saved state
ends exactly where the uninterrupted fit ends, Ctrl-C stops at an epoch end with the state written, and the CLIs
refuse to mix an unfinished run with other settings."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import numpy as np
import pytest
import torch

from gcad_dist.fit_state import FitInterrupted, ResumeMismatch
from gcad_dist.supervised import SupervisedConfig, fit_supervised
from tests.test_train import _cli, _generate, _shifted_graph


def _model(kind: str, in_dim: int) -> torch.nn.Module:
    from gcad_dist.train import build_model

    torch.manual_seed(0)
    return build_model(kind, in_dim, hidden=8, layers=2)[0]


def _same_fit(a, b) -> None:
    assert a.best_epoch == b.best_epoch and a.epochs_run == b.epochs_run
    assert a.snapshot_epochs == b.snapshot_epochs
    assert np.array_equal(a.scores, b.scores)
    for k in a.history:
        if k != "epoch_seconds":
            assert a.history[k] == b.history[k], k
    for k, v in a.state_dict.items():
        assert torch.equal(v, b.state_dict[k]), k


class _CrashAt:
    """Wraps ``model.loss``: raises at its ``n``-th call (a crash in the middle of that epoch)."""

    def __init__(self, model: torch.nn.Module, n: int, exc: BaseException | None = None) -> None:
        self.model, self.n, self.calls, self.exc = model, n, 0, exc
        self.loss = model.loss
        model.loss = self

    def __call__(self, *a, **kw):
        self.calls += 1
        if self.calls == self.n:
            if self.exc is None:
                os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C: the fit finishes this epoch, writes, stops
            else:
                raise self.exc
        return self.loss(*a, **kw)


@pytest.mark.parametrize("kind, max_degree", [("gccad", 3), ("gcn", 0)])
def test_a_crashed_fit_resumes_to_the_uninterrupted_result(tmp_path, kind, max_degree):
    """Crash inside epoch 7 (state written every epoch): a new model, fitted with the same state folder, continues
    from epoch 6 and ends with the uninterrupted fit's history, snapshots, scores and weights, to the bit. GCCAD runs
    with an in-degree cap, so the cap's own random stream is restored too."""
    data, _, split = _shifted_graph(160, 6, 1.5, 900)
    base = SupervisedConfig(epochs=14, eval_every=2, patience=0, snapshots=3, seed=3, device="cpu", progress=False,
                            max_degree=max_degree)
    ref = fit_supervised(_model(kind, 6), data, split, base)

    cfg = SupervisedConfig(**{**base.__dict__, "state_dir": str(tmp_path), "state_interval": 0})
    m = _model(kind, 6)
    _CrashAt(m, 7, RuntimeError("simulated crash"))
    with pytest.raises(RuntimeError, match="simulated crash"):
        fit_supervised(m, data, split, cfg, state_name="fit")
    saved = torch.load(tmp_path / "fit.pt", weights_only=True)  # tensors and plain data only
    assert saved["epoch"] == 6 and not saved["done"]

    resumed = fit_supervised(_model(kind, 6), data, split, cfg, state_name="fit")
    _same_fit(resumed, ref)
    assert torch.load(tmp_path / "fit.pt", weights_only=True)["done"]
    # a finished fit is taken as it is: no epoch trained again
    m = _model(kind, 6)
    _CrashAt(m, 1, AssertionError("trained again"))
    _same_fit(fit_supervised(m, data, split, cfg, state_name="fit"), ref)


def test_ctrl_c_stops_at_the_epoch_end_with_the_state_written(tmp_path):
    """A SIGINT during epoch 5 lets the epoch finish, writes the state (although the interval has not passed) and
    raises FitInterrupted; the handlers are restored; resuming gives the uninterrupted result."""
    data, _, split = _shifted_graph(120, 5, 1.5, 600)
    base = SupervisedConfig(epochs=10, eval_every=2, patience=0, snapshots=2, seed=1, device="cpu", progress=False)
    ref = fit_supervised(_model("gccad", 5), data, split, base)
    cfg = SupervisedConfig(**{**base.__dict__, "state_dir": str(tmp_path), "state_interval": 3600})
    m = _model("gccad", 5)
    _CrashAt(m, 5)
    before = signal.getsignal(signal.SIGINT)
    with pytest.raises(FitInterrupted) as exc:
        fit_supervised(m, data, split, cfg, state_name="fit")
    assert exc.value.epoch == 5 and isinstance(exc.value, KeyboardInterrupt)
    assert signal.getsignal(signal.SIGINT) is before
    assert torch.load(tmp_path / "fit.pt", weights_only=True)["epoch"] == 5
    _same_fit(fit_supervised(_model("gccad", 5), data, split, cfg, state_name="fit"), ref)


def test_a_state_from_another_fit_is_refused(tmp_path):
    data, _, split = _shifted_graph(100, 5, 1.5, 400)
    cfg = SupervisedConfig(epochs=4, eval_every=2, seed=0, device="cpu", progress=False, state_dir=str(tmp_path))
    fit_supervised(_model("gccad", 5), data, split, cfg, state_name="fit")
    with pytest.raises(ResumeMismatch, match="lr 0.001 saved, 0.01 now"):
        fit_supervised(_model("gccad", 5), data, split, SupervisedConfig(**{**cfg.__dict__, "lr": 0.01}),
                       state_name="fit")
    torch.manual_seed(1)  # other initial weights (another seed, a warm start)
    from gcad_dist.train import build_model

    with pytest.raises(ResumeMismatch, match="init_sum"):
        fit_supervised(build_model("gccad", 5, hidden=8, layers=2)[0], data, split, cfg, state_name="fit")


def _train_args(g: Path, out: Path, *extra: str) -> list[str]:
    return ["gcad_dist.train", "--graph", str(g), "--out", str(out), "--epochs", "6", "--eval-every", "2",
            "--hidden", "8", "--threads", "1", "--no-progress", "--no-plots", "--checkpoint-interval", "0", *extra]


def test_train_cli_resumes_an_interrupted_run(tmp_path, capsys, monkeypatch, caplog):
    """``gcad_dist.train`` (--contrast auto, three candidates) crashes during the second candidate. A rerun without
    --resume, or with other settings, is a one-line error; with --resume the finished candidate is not trained again
    and the run writes the uninterrupted run's metrics; the unfinished folder is then gone."""
    import gcad_dist.model.gccad as gccad_mod

    g = _generate(tmp_path / "g.npz", nodes=300, anomaly_fraction=0.15)
    code, err = _cli(_train_args(g, tmp_path / "ref"), capsys)
    assert code == 0, err
    ref = json.loads((tmp_path / "ref" / "metrics.json").read_text())
    assert not (tmp_path / "ref" / "unfinished").exists()

    out = tmp_path / "run"
    real_loss, calls = gccad_mod.GCCAD.loss, []

    def crashing_loss(self, *a, **kw):
        calls.append(1)
        if len(calls) == 9:  # candidate 1 trained its 6 epochs; candidate 2 crashes in its third
            raise RuntimeError("simulated crash")
        return real_loss(self, *a, **kw)

    monkeypatch.setattr(gccad_mod.GCCAD, "loss", crashing_loss)
    from gcad_dist.cli import run_cli
    import gcad_dist.train as train_mod

    with caplog.at_level("WARNING", logger="gcad_dist"), pytest.raises(RuntimeError, match="simulated crash"):
        run_cli(train_mod.main, _train_args(g, out)[1:])
    assert "stopped by RuntimeError: the training state is in" in caplog.text and "--resume" in caplog.text
    monkeypatch.setattr(gccad_mod.GCCAD, "loss", real_loss)
    saved = sorted(p.name for p in (out / "unfinished").glob("*.pt"))
    assert saved == ["ego-layer.pt", "graph-layer.pt"], saved
    assert not (out / "metrics.json").exists()

    code, err = _cli(_train_args(g, out), capsys)
    assert code == 2 and "unfinished run" in err and "--resume" in err and "graph-layer finished" in err, err
    code, err = _cli(_train_args(g, out, "--resume", "--lr", "0.01"), capsys)
    assert code == 2 and "--lr" in err, err
    code, err = _cli(_train_args(g, tmp_path / "fresh", "--resume"), capsys)
    assert code == 2 and "holds no unfinished run" in err, err

    with caplog.at_level("INFO", logger="gcad_dist"):
        code, err = _cli(_train_args(g, out, "--resume"), capsys)
    assert code == 0, err
    assert "graph-layer: continuing from its saved state (epoch 6, finished)" in caplog.text
    assert "ego-layer: continuing from its saved state (epoch 2)" in caplog.text
    m = json.loads((out / "metrics.json").read_text())
    for key in ("best_epoch", "epochs_run", "snapshot_epochs", "val", "test", "contrast_selection"):
        assert m[key] == ref[key], key
    assert not (out / "unfinished").exists()


def test_a_run_that_saved_nothing_does_not_block_the_next(tmp_path, capsys):
    """A run that failed before any fit wrote its state (here: an option error found late) leaves nothing to resume:
    the next run starts, and --resume says there is nothing to continue."""
    g = _generate(tmp_path / "g.npz", nodes=120)
    out = tmp_path / "run"
    (out / "unfinished").mkdir(parents=True)
    (out / "unfinished" / "run.json").write_text("{}")
    code, err = _cli(_train_args(g, out, "--resume"), capsys)
    assert code == 2 and "holds no unfinished run" in err, err
    code, err = _cli(_train_args(g, out, "--contrast", "graph"), capsys)
    assert code == 0, err
    assert (out / "metrics.json").exists() and not (out / "unfinished").exists()
    # a run that fails before any fit saved its state leaves no folder behind
    code, err = _cli(_train_args(tmp_path / "missing.npz", tmp_path / "bad"), capsys)
    assert code == 2 and "missing.npz" in err, err
    assert not (tmp_path / "bad" / "unfinished").exists()


def test_a_run_saved_before_a_setting_existed_resumes_with_the_value_it_ran(tmp_path):
    """An unfinished run whose run.json predates a setting (``added``: --forest-columns came in session 89, the trees'
    inputs "none" before it) resumes where that setting is given the value the code ran then, and is refused,
    naming the option, where another value is asked for."""
    from gcad_dist.cli import UsageError
    from gcad_dist.fit_state import prepare_state_dir
    from gcad_dist.train import ADDED_SETTINGS

    assert ADDED_SETTINGS["forest_columns"] == "none"
    out = tmp_path / "run"
    folder = prepare_state_dir(out, {"seed": 0}, resume=False, overwrite=False)  # written before the setting existed
    torch.save({"epoch": 3}, folder / "checkpoint.pt")
    now = {"seed": 0, "forest_columns": "none"}
    with pytest.raises(UsageError, match="forest-columns"):  # without the record of what it ran: a difference
        prepare_state_dir(out, now, resume=True, overwrite=False, options={"forest_columns": "--forest-columns"})
    assert prepare_state_dir(out, now, resume=True, overwrite=False, added=ADDED_SETTINGS) == folder
    with pytest.raises(UsageError, match="--forest-columns: 'none' in the unfinished run, 'local' now"):
        prepare_state_dir(out, {**now, "forest_columns": "local"}, resume=True, overwrite=False,
                          options={"forest_columns": "--forest-columns"}, added=ADDED_SETTINGS)


def test_finetune_resumes_an_interrupted_run(tmp_path, capsys, monkeypatch):
    """gcad_dist.finetune from a label-free checkpoint fits seven models (the checkpoint's, then gcad_dist.train's
    three candidates warm-started and from scratch), each with its own state. It crashes in the third; --resume ends
    with the uninterrupted run's metrics and models kept."""
    import gcad_dist.finetune as ft_mod
    import gcad_dist.model.gccad as gccad_mod
    from gcad_dist.checkpoint import save_model
    from gcad_dist.cli import run_cli
    from gcad_dist.model import GCCAD, GCCADConfig

    torch.manual_seed(1)
    cfg = GCCADConfig(in_dim=8, hidden=16, contrast="local", loss="logistic", tau=0.2, ensemble=3)
    ck = tmp_path / "pre" / "final"
    save_model(ck, GCCAD(cfg), cfg, extra={"stage": "pretrain", "normalize": "standard"})
    g = _generate(tmp_path / "g.npz", nodes=300, anomaly_fraction=0.15)

    def args(out: Path, *extra: str) -> list[str]:
        return ["--checkpoint", str(ck), "--graph", str(g), "--out", str(out), "--epochs", "4", "--eval-every", "2",
                "--threads", "1", "--no-progress", "--no-plots", "--checkpoint-interval", "0", *extra]

    code, err = _cli(["gcad_dist.finetune", *args(tmp_path / "ref")], capsys)
    assert code == 0, err
    ref = json.loads((tmp_path / "ref" / "metrics.json").read_text())

    real_loss, calls = gccad_mod.GCCAD.loss, []

    def crashing_loss(self, *a, **kw):
        calls.append(1)
        if len(calls) == 10:  # the checkpoint's model and the first warm-started candidate done, 4 epochs each
            raise RuntimeError("simulated crash")
        return real_loss(self, *a, **kw)

    monkeypatch.setattr(gccad_mod.GCCAD, "loss", crashing_loss)
    out = tmp_path / "run"
    with pytest.raises(RuntimeError, match="simulated crash"):
        run_cli(ft_mod.main, args(out))
    monkeypatch.setattr(gccad_mod.GCCAD, "loss", real_loss)
    saved = sorted(p.name for p in (out / "unfinished").glob("*.pt"))
    assert saved == ["checkpoint.pt", "graph-ego-layer.pt", "graph-graph-layer.pt"], saved

    code, err = _cli(["gcad_dist.finetune", *args(out, "--resume")], capsys)
    assert code == 0, err
    m = json.loads((out / "metrics.json").read_text())
    for key in ("best_epoch", "epochs_run", "snapshot_epochs", "val", "test", "finetuned_model", "model_selection"):
        assert m[key] == ref[key], key
    assert not (out / "unfinished").exists()


def test_fit_state_bench_prints_its_table(tmp_path, capsys):
    import bench.fit_state as bench_mod
    from gcad_dist.cli import run_cli

    g = _generate(tmp_path / "g.npz", nodes=150)
    capsys.readouterr()
    with pytest.raises(SystemExit) as exc:
        run_cli(bench_mod.main, ["--graph", str(g), "--epochs", "3", "--rounds", "1"])
    out = capsys.readouterr().out
    assert exc.value.code in (0, None), out
    assert "| no state |" in out and "| state every epoch |" in out and "1.000x" in out
    assert "state file" in out and "MiB" in out


def test_quality_harness_continues_an_interrupted_run(tmp_path, capsys, monkeypatch, caplog):
    """Ctrl-C during a GNN run of gcad_dist.quality (exit 130) leaves that run's fit state beside its JSON; the
    rerun continues it from there and records what the uninterrupted harness records."""
    import gcad_dist.model.gccad as gccad_mod

    g = _generate(tmp_path / "tiny.npz", nodes=200)

    def args(out: Path) -> list[str]:
        return ["gcad_dist.quality", "--datasets", str(g), "--seeds", "1", "--models", "gccad-ce", "--epochs", "6",
                "--hidden", "8", "--out", str(out), "--threads", "1"]

    code, err = _cli(args(tmp_path / "ref"), capsys)
    assert code == 0, err
    (ref,) = (tmp_path / "ref" / "runs").rglob("seed0.json")

    real_loss, calls = gccad_mod.GCCAD.loss, []

    def interrupted_loss(self, *a, **kw):
        calls.append(1)
        if len(calls) == 4:
            os.kill(os.getpid(), signal.SIGINT)
        return real_loss(self, *a, **kw)

    monkeypatch.setattr(gccad_mod.GCCAD, "loss", interrupted_loss)
    out = tmp_path / "q"
    code, err = _cli(args(out), capsys)
    assert code == 130, err
    monkeypatch.setattr(gccad_mod.GCCAD, "loss", real_loss)
    assert not list((out / "runs").rglob("seed0.json"))
    (state,) = (out / "runs").rglob("seed0.unfinished/*.pt")
    assert torch.load(state, weights_only=True)["epoch"] == 4

    with caplog.at_level("INFO", logger="gcad_dist"):
        code, err = _cli(args(out), capsys)
    assert code == 0, err
    assert "continuing from its saved state (epoch 4)" in caplog.text
    (done,) = (out / "runs").rglob("seed0.json")
    a, b = json.loads(done.read_text()), json.loads(ref.read_text())
    for key in ("best_epoch", "epochs_run", "val", "test"):
        assert a[key] == b[key], key
    assert not list((out / "runs").rglob("seed0.unfinished"))
