"""``gcad_dist.train --pretrain``: when a run pre-trains first, what it hands to fine-tuning, and the whole chain."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest

from gcad_dist import pretrain_first
from gcad_dist.cli import UsageError, run_cli
from gcad_dist.pretrain_first import changed_model_options, check_pretrain_option, check_stage, choose
from gcad_dist.train import FEW_ANOMALIES, TrainConfig


def _cfg(**kw) -> TrainConfig:
    return TrainConfig(graph="g.npz", out="runs/x", **kw)


def test_auto_pretrains_below_few_anomalies_only() -> None:
    below = choose(_cfg(pretrain="auto"), FEW_ANOMALIES - 1)
    assert below.used and below.mode == "auto" and str(FEW_ANOMALIES - 1) in below.reason
    at = choose(_cfg(pretrain="auto"), FEW_ANOMALIES)
    assert not at.used and "at least" in at.reason
    assert not choose(_cfg(pretrain="off"), 1).used
    assert choose(_cfg(pretrain="on"), 10 * FEW_ANOMALIES).used
    assert choose(_cfg(pretrain="on"), 3).record() == {"mode": "on", "used": True, "reason": "--pretrain on",
                                                       "train_anomalies": 3}


@pytest.mark.parametrize("field,value,option", [("model", "gcn", "--model"), ("hidden", 32, "--hidden"),
                                                ("contrast", "graph", "--contrast"), ("ablation", "ce", "--ablation"),
                                                ("class_weight", False, "--no-class-weight")])
def test_a_changed_model_option_keeps_auto_from_scratch_and_refuses_on(field, value, option) -> None:
    cfg = _cfg(pretrain="auto", **{field: value})
    assert changed_model_options(cfg) == [option]
    c = choose(cfg, 1)
    assert not c.used and option in c.reason
    check_pretrain_option(cfg)  # auto: no error, it trains from scratch
    with pytest.raises(UsageError, match=option):
        check_pretrain_option(dataclasses.replace(cfg, pretrain="on"))
    assert changed_model_options(_cfg()) == []


def test_fine_tuning_gets_the_run_s_split_labels_and_settings() -> None:
    from gcad_dist.finetune import FinetuneConfig

    cfg = _cfg(seed=7, split_index=2, label_fraction=0.3, epochs=11, lr=2e-3, patience=4, forest="off",
               normalize="power", threads=1, plots=False, progress=False, resume=True, snapshots=3,
               link_eval="threshold", score_space="encoder", train_frac=0.5, val_frac=0.25)
    f = pretrain_first.finetune_settings(cfg, Path("ck/final"))
    assert f.checkpoint == "ck/final" and f.graph == cfg.graph and f.out == cfg.out
    assert f.scratch_normalize == "power"  # train's --normalize is the scratch candidate's
    own = {"normalize", "rejoin", "few_anomalies", "model", "checkpoint", "graph", "out"}  # fine-tuning's own
    shared = {x.name for x in dataclasses.fields(FinetuneConfig)} & {x.name for x in dataclasses.fields(TrainConfig)}
    for name in shared - own:
        assert getattr(f, name) == getattr(cfg, name), name
    assert f.rejoin == FinetuneConfig.rejoin and f.few_anomalies == FinetuneConfig.few_anomalies


def test_an_unfinished_stage_needs_resume_or_overwrite(tmp_path) -> None:
    out = tmp_path / "run"
    with pytest.raises(UsageError, match="no unfinished run"):
        check_stage(dataclasses.replace(_cfg(resume=True), out=str(out)))
    (out / "pretrain" / "run" / "ray_train").mkdir(parents=True)  # a pre-training that stopped after a checkpoint
    cfg = dataclasses.replace(_cfg(), out=str(out))
    with pytest.raises(UsageError, match="--resume to continue"):
        check_stage(cfg)
    check_stage(dataclasses.replace(cfg, resume=True))
    check_stage(dataclasses.replace(cfg, overwrite=True))
    (out / "pretrain" / "run" / "final").mkdir()
    (out / "pretrain" / "run" / "final" / "model.pt").write_bytes(b"")
    check_stage(cfg)  # a finished pre-training: a new run starts over


def test_train_pretrains_fine_tunes_and_writes_a_scoreable_model(small_graph, tmp_path, capsys) -> None:
    """The whole chain on a 300-node graph: store, Ray pre-training, fine-tuning; the model at train's place scores
    every node; metrics.json says why; --model mlp with --pretrain auto trains from scratch and says why not."""
    from gcad_dist.score import main as score_main
    from gcad_dist.train import main as train_main

    g, path = small_graph
    out = tmp_path / "pre"
    args = ["--graph", str(path), "--label-fraction", "0.5", "--epochs", "3", "--no-progress", "--no-plots",
            "--threads", "1"]
    with pytest.raises(SystemExit) as e:
        run_cli(train_main, [*args, "--out", str(out), "--pretrain", "auto"])
    printed, err = capsys.readouterr()
    assert (e.value.code or 0) == 0, err
    m = json.loads((out / "metrics.json").read_text())
    p = m["pretraining"]
    assert p["used"] and p["mode"] == "auto" and p["train_anomalies"] < FEW_ANOMALIES
    assert p["train_anomalies"] == m["labels"]["train_labelled_anomalies"]
    assert "pre-trained without labels" in printed and "test AUROC" in printed
    assert (out / "model.pt").exists() and not (out / "final").exists()
    assert (out / "pretrain" / "run" / "final" / "model.pt").exists()  # the label-free checkpoint stays
    store = json.loads((out / "pretrain" / "store.zarr" / "zarr.json").read_text())["attributes"]["gcad_store"]
    assert store["counts"]["parts"] == 1 and store["counts"]["injected_nodes"] == 0
    assert 0.0 <= m["test"]["auroc"] <= 1.0
    scores = tmp_path / "s.parquet"
    with pytest.raises(SystemExit) as e:
        run_cli(score_main, ["--checkpoint", str(out), "--graph", str(path), "--out", str(scores)])
    assert (e.value.code or 0) == 0, capsys.readouterr()
    import pyarrow.parquet as pq

    assert np.isfinite(pq.read_table(scores).column("score").to_numpy()).all()

    with pytest.raises(SystemExit) as e:
        run_cli(train_main, [*args, "--out", str(tmp_path / "mlp"), "--model", "mlp", "--pretrain", "auto"])
    assert (e.value.code or 0) == 0, capsys.readouterr()
    p = json.loads((tmp_path / "mlp" / "metrics.json").read_text())["pretraining"]
    assert not p["used"] and "--model" in p["reason"]
    assert not (tmp_path / "mlp" / "pretrain").exists()


def test_quality_runs_gccad_as_train_does_with_pretrain(small_graph, tmp_path, monkeypatch) -> None:
    """gcad_dist.quality's GCCAD column follows --pretrain: the chain where it is chosen (in <run>.pretrain, deleted
    after), its own key; the baselines never pre-train."""
    import gcad_dist.pretrain_first as pf
    from gcad_dist import quality

    g, path = small_graph
    calls = []

    def fake(cfg, choice):
        calls.append((cfg, choice))
        Path(cfg.out).mkdir(parents=True)
        return {"val": {"auprc": 0.5}, "test": {"auroc": 0.9}, "history": {"eval_epoch": [1], "val_auroc": [0.7],
                                                                           "val_auprc": [0.5]},
                "pretraining": choice.record(), "finetuned_model": "checkpoint + scratch",
                "contrast_selection": {"scratch": {"chosen": "ego"}}}

    monkeypatch.setattr(pf, "run_pretrained", fake)
    qcfg = quality.QualityConfig(pretrain="on", epochs=2)
    state = tmp_path / "seed0.unfinished"
    summary = quality.run_gnn(qcfg, path, "gccad", None, 0, state)
    assert len(calls) == 1 and calls[0][0].out == str(tmp_path / "seed0.pretrain") and calls[0][1].used
    assert summary["test"]["auroc"] == 0.9 and summary["pretraining"]["mode"] == "on"
    assert summary["history"]["val_auprc"] == [0.5] and not (tmp_path / "seed0.pretrain").exists()
    # the report lists the model fine-tuning kept where it lists train's kept contrasts
    assert summary["contrast_selection"] == {"chosen": "checkpoint + scratch",
                                             "graph_models": {"scratch": {"chosen": "ego"}}}
    assert quality.train_config(qcfg, path, "gcn", 0).pretrain == "off"
    on = quality.run_settings(qcfg, "g", path, "gccad")["train"]
    off = quality.run_settings(quality.QualityConfig(pretrain="off"), "g", path, "gccad")["train"]
    assert on["pretrain"] == "on" and "pretrain" not in off  # absent = off: earlier runs' keys unchanged
    assert "pretrain_below" not in on  # the threshold matters to auto alone, which keys it (20 before session 81)
    auto = quality.run_settings(quality.QualityConfig(), "g", path, "gccad")["train"]
    assert auto["pretrain"] == "auto" and auto["pretrain_below"] == FEW_ANOMALIES


def test_auto_is_the_default_of_train_and_quality() -> None:
    from gcad_dist import quality
    from gcad_dist.train import build_parser

    assert TrainConfig(graph="", out="").pretrain == "auto"
    assert build_parser().parse_args(["--graph", "g", "--out", "o"]).pretrain == "auto"
    assert quality.QualityConfig().pretrain == "auto"
