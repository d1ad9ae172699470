"""gcad_dist.finetune's fine-tuned checkpoint candidate with the checkpoint's label-free views (``--checkpoint-views``,
session 77): its scores and cross-fitted selection scores pass through the same views as the zero-shot candidate's,
the written ensemble's member carries them, and ``bench.checkpoint_views`` replays the product's run exactly."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from gcad_dist.checkpoint import load_model_file
from gcad_dist.label_free_views import apply_views
from tests.test_finetune_zero_shot_views import COMMON, VIEWS, _reproduces, _run, graph, viewed_checkpoint  # noqa: F401


def test_viewed_fit_adds_the_views_to_the_scores_and_the_selection_scores(graph) -> None:
    from types import SimpleNamespace

    from gcad_dist.finetune import viewed_fit
    from gcad_dist.metrics import evaluate
    from gcad_dist.supervised import FitResult

    g, _ = graph
    data = g.to_data()
    y = np.asarray(g.y)
    rng = np.random.default_rng(0)
    scores, selection = rng.standard_normal(len(y)).astype(np.float32), rng.standard_normal(len(y))
    i = np.arange(len(y))
    split = SimpleNamespace(val=torch.as_tensor(i % 5 == 2), test=torch.as_tensor(i % 5 > 2))
    res = FitResult(best_epoch=3, val=evaluate(y, scores, None, split.val.numpy()), test={}, history={},
                    state_dict={}, scores=scores, epochs_run=5, seconds=0.0, device="cpu",
                    selection_scores=selection, best_scores=scores)
    raw = np.asarray(g.x, dtype=np.float32)
    out, record = viewed_fit(res, raw, data, VIEWS, y, None, split)
    want, fv, _ = apply_views(scores, raw, data.edge_index, data.num_nodes, **VIEWS)
    assert fv["used"]  # the links say nothing on this graph: the views change the score
    np.testing.assert_array_equal(out.scores, want)
    np.testing.assert_array_equal(out.selection_scores, apply_views(selection, raw, data.edge_index,
                                                                    data.num_nodes, **VIEWS)[0])
    assert out.val == evaluate(y, want, None, split.val.numpy()) and out.best_epoch == 3 and out.best_scores is None
    assert record["bare"]["val"] == res.val and record["feature_view"]["used"]
    scrambled = y.copy()  # the views read no label: other labels, the same scores
    scrambled[split.test.numpy()] = rng.permutation(y[split.test.numpy()])
    np.testing.assert_array_equal(viewed_fit(res, raw, data, VIEWS, scrambled, None, split)[0].scores, want)


@pytest.mark.parametrize("keep", ["all", "checkpoint"])
def test_finetune_checkpoint_candidate_with_views_is_written_as_it_scored(graph, viewed_checkpoint, tmp_path, capsys,
                                                                          monkeypatch, keep) -> None:
    """--checkpoint-views: the checkpoint candidate's metrics are its viewed scores', the written model's member carries
    the views, and gcad_dist.score of it gives the run's test figures, kept with the others or alone;
    --no-checkpoint-views: the bare contrast, as before session 77."""
    import gcad_dist.train as train_mod

    g, path = graph
    real = train_mod.keep_candidates

    def forced(fits, y, val_mask, seed=0, names=None, **kw):
        kept, record = real(fits, y, val_mask, seed=seed, names=names, **kw)
        if not names or "checkpoint" not in names:
            return kept, record
        record = {k: v for k, v in record.items() if k != "weights"}
        return (list(range(len(fits))) if keep == "all" else [names.index("checkpoint")]), record

    monkeypatch.setattr(train_mod, "keep_candidates", forced)
    runs = {}
    for name, flag in (("views", "--checkpoint-views"), ("bare", "--no-checkpoint-views")):
        out = tmp_path / name
        code, err = _run(["--checkpoint", str(viewed_checkpoint), "--graph", str(path), "--out", str(out), flag,
                          *COMMON], capsys)
        assert code == 0, err
        runs[name] = m = json.loads((out / "metrics.json").read_text())
        _reproduces(g, path, out, m)
    v, b = runs["views"], runs["bare"]
    assert v["checkpoint_views"]["feature_view"]["used"] and "checkpoint_views" not in b
    assert v["checkpoint_views"]["bare"]["val"] == b["model_selection"]["candidates"]["checkpoint"]["val"]
    assert v["model_selection"]["candidates"]["checkpoint"]["val"] != b["model_selection"]["candidates"]["checkpoint"]["val"]
    members = load_model_file(tmp_path / "views" / "final")["candidate_members"]
    assert sum(r.get("views") == {"block": 1, **VIEWS} for r in members) == (2 if keep == "all" else 1)


def test_bench_checkpoint_views_replays_the_product(graph, viewed_checkpoint, tmp_path, capsys) -> None:
    """bench.checkpoint_views on a run fitted without the views: its old arm reproduces that run, its new arm equals a
    run of --checkpoint-views with the same fits (the views change no fit)."""
    from bench.checkpoint_views import main as bench_main
    from gcad_dist.cli import run_cli

    g, path = graph
    root = tmp_path / "pt"
    for name, flag in (("g/ft0.5-s0", "--no-checkpoint-views"), ("views", "--checkpoint-views")):
        code, err = _run(["--checkpoint", str(viewed_checkpoint), "--graph", str(path), "--out", str(root / name),
                          "--candidate-scores", flag, *COMMON], capsys)
        assert code == 0, err
    with pytest.raises(SystemExit) as e:
        run_cli(bench_main, [str(root)])
    assert int(e.value.code or 0) == 0
    out = capsys.readouterr().out
    row = next(line for line in out.splitlines() if line.startswith("| g 0.5 |"))
    assert "| 1/1 |" in row  # the old arm reproduces the run
    viewed = json.loads((root / "views" / "metrics.json").read_text())
    new = row.split("|")[6].strip()  # the viewed arm's "AUROC / AUPRC"
    assert new == f"{viewed['test']['auroc']:.3f} / {viewed['test']['auprc']:.3f}"
    from bench.checkpoint_views import replay

    rec = replay(root / "g" / "ft0.5-s0")  # to every digit, not only the table's three
    assert rec["reproduced"] and rec["new"][0] == pytest.approx(viewed["test"]["auroc"], abs=1e-6)
    assert rec["new"][1] == pytest.approx(viewed["test"]["auprc"], abs=1e-6)
    with pytest.raises(SystemExit) as e:
        run_cli(bench_main, [str(tmp_path / "none")])
    assert int(e.value.code) != 0 and "no such folder" in capsys.readouterr().err
