"""bench.labelfree_scale: per-kind AUROC, reading the scores back, the table, and a stage that fails."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from bench.labelfree_scale import LabelFreeScaleConfig, _parquet_scores, by_kind, epoch_checkpoints, run, table


def _graph(path, kinds):
    n = kinds.size
    np.savez(path, x=np.zeros((n, 2), np.float32), edge_index=np.zeros((2, 0), np.int64),
             y=(kinds > 0).astype(np.int8), anomaly_type=kinds.astype(np.int8))


def test_by_kind_scores_each_kind_against_the_normal_nodes(tmp_path):
    kinds = np.array([0] * 20 + [1] * 5 + [3] * 5)
    _graph(tmp_path / "g.npz", kinds)
    score = np.where(kinds == 1, 2.0, 0.0)  # finds the swaps, not the cliques
    score[kinds == 3] = np.linspace(-1, 1, 5)
    out = by_kind(tmp_path / "g.npz", score)
    assert set(out) == {"community_swap", "structural"}
    assert out["community_swap"] == 1.0
    assert 0.2 < out["structural"] < 0.8


def test_by_kind_is_empty_without_planted_kinds(tmp_path):
    np.savez(tmp_path / "g.npz", x=np.zeros((3, 2), np.float32), edge_index=np.zeros((2, 0), np.int64))
    assert by_kind(tmp_path / "g.npz", np.zeros(3)) == {}


def test_parquet_scores_come_back_in_node_order(tmp_path):
    ids = np.array([3, 0, 2, 1])
    pq.write_table(pa.table({"node_id": ids, "score": ids * 10.0}), tmp_path / "s.parquet")
    assert np.array_equal(_parquet_scores(tmp_path / "s.parquet"), [0.0, 10.0, 20.0, 30.0])


def test_table_gives_the_scoring_ratio_and_the_choices():
    rec = {"nodes": 1000, "device": "cuda", "stages": [{"stage": "pretrain", "seconds": 5.0, "rc": 0},
                                                       {"stage": "build --k 1", "seconds": 1.0, "rc": 1}],
           "scores": [{"model": "gccad-pre", "device": "cuda", "seconds": 2.0, "auroc": 0.9, "auprc": 0.5,
                       "context": {"context": "neighbours"}, "feature_view": {"used": True},
                       "by_kind": {"contextual": 0.99}},
                      {"model": "gccad-pre", "device": "cpu", "seconds": 3.0, "auroc": 0.9, "auprc": 0.5},
                      {"model": "nbr-cosine", "seconds": 0.1, "auroc": 0.8, "auprc": 0.4}]}
    t = table([rec])
    assert "| 1,000 | pretrain (cuda) | 5.0 |" in t
    assert "FAILED: 1" in t
    assert "feature view joined" in t and "context: neighbours" in t and "contextual 0.990" in t
    assert "1.50x the cuda scoring time" in t
    assert "0.8000 / 0.4000" in t


def test_a_failed_stage_is_reported_and_stops_that_size(tmp_path):
    cfg = LabelFreeScaleConfig(nodes=[500], out=str(tmp_path), stage_timeout=0,  # every stage times out at once
                               generator_args="--communities 7")
    records = run(cfg)
    assert [s["stage"] for s in records[0]["stages"]] == ["generate"]
    assert records[0]["stages"][0]["cmd"].endswith("--communities 7")
    assert records[0]["stages"][0]["rc"] == "timeout"
    assert records[0]["scores"] == []  # no graph: neither the model nor the baselines were scored
    assert json.loads((tmp_path / "labelfree_scale.json").read_text())[0]["nodes"] == 500


def test_epoch_checkpoints_are_the_earlier_epochs_oldest_first(tmp_path):
    for name in ("checkpoint_2026-12-01_10-00-02", "checkpoint_2026-12-01_09-59-59", "checkpoint_2026-12-01_10-00-05"):
        (tmp_path / "ray_train" / name).mkdir(parents=True)
        (tmp_path / "ray_train" / name / "model.pt").write_bytes(b"")
    (tmp_path / "ray_train" / "checkpoint_2026-12-01_10-00-09").mkdir()  # no model: not a checkpoint
    assert [p.name for p in epoch_checkpoints(tmp_path)] == ["checkpoint_2026-12-01_09-59-59",
                                                              "checkpoint_2026-12-01_10-00-02"]
    assert epoch_checkpoints(tmp_path / "missing") == []


def test_score_epochs_keeps_every_checkpoint_and_scores_the_earlier_ones(tmp_path, monkeypatch):
    import bench.labelfree_scale as bench

    pre = tmp_path / "n500" / "pre" / "ray_train"
    for name in ("checkpoint_1", "checkpoint_2", "checkpoint_3"):
        (pre / name).mkdir(parents=True)
        (pre / name / "model.pt").write_bytes(b"")
    calls = []
    monkeypatch.setattr(bench, "_stage", lambda name, cmd, *a: calls.append((name, cmd)) or
                        {"stage": name, "rc": 0, "seconds": 1.0, "cmd": " ".join(cmd)})
    records = run(LabelFreeScaleConfig(nodes=[500], out=str(tmp_path), baselines=[], score_epochs=True))
    pretrain = dict(calls)["pretrain"]
    assert pretrain[pretrain.index("--keep-checkpoints") + 1] == "10000"
    assert pretrain[pretrain.index("--checkpoint-interval") + 1] == "0"  # one at every epoch end, however short
    scored = [(name, cmd[cmd.index("--checkpoint") + 1]) for name, cmd in calls if name.startswith("score")]
    assert [name for name, _ in scored] == ["score on cpu", "score epoch 1", "score epoch 2"]
    assert scored[1][1].endswith("checkpoint_1") and scored[2][1].endswith("checkpoint_2")
    assert [s["model"] for s in records[0]["scores"]] == ["gccad-pre", "gccad-pre, epoch 1", "gccad-pre, epoch 2"]
    # without the flag, pre-training keeps its default and only the final model is scored
    calls.clear()
    run(LabelFreeScaleConfig(nodes=[500], out=str(tmp_path), baselines=[]))
    pretrain = dict(calls)["pretrain"]
    assert "--keep-checkpoints" not in pretrain and "--checkpoint-interval" not in pretrain
    assert [name for name, _ in calls if name.startswith("score")] == ["score on cpu"]
