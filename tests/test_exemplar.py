"""The exemplar candidate (``gcad_dist.model.exemplar``, ``gcad_dist.finetune --exemplar``, session 78): each node's
cosine similarity to the nearest labelled training anomaly on z-scored raw features, offered to fine-tuning's keep
rule where validation finds it above chance, written into the checkpoint, and replayed by ``bench.exemplar``."""

from __future__ import annotations

import json
import math
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from gcad_dist.checkpoint import load_model_file, save_model
from gcad_dist.model import GCCAD, GCCADConfig
from gcad_dist.model.exemplar import ExemplarScorer, above_chance, chance_bar, fit_exemplars
from tests.test_finetune_zero_shot_views import COMMON, VIEWS, _reproduces, _run

#: 30% of the training labels: 7 kept training anomalies, fewer than the 10 from which the exemplar is not offered
FEW = [*COMMON, "--label-fraction", "0.3"]


@pytest.fixture(scope="module")
def graph(tmp_path_factory: pytest.TempPathFactory):
    """1,200 nodes linked at random, 5% camouflaged anomalies: a few of the 32 columns shifted by a signature that all
    of them share (what a known case finds)."""
    from partitioning.io import save_npz
    from partitioning.synthetic import SyntheticConfig, generate

    g = generate(SyntheticConfig(nodes=1200, avg_degree=8, features=32, anomaly_fraction=0.05, mixing=1.0,
                                 anomaly_mix=(0.0, 0.0, 0.0, 1.0), seed=12))
    path = tmp_path_factory.mktemp("exemplar") / "g.npz"
    save_npz(g, path)
    return g, path


@pytest.fixture(scope="module")
def viewed_checkpoint(tmp_path_factory: pytest.TempPathFactory):
    """A label-free recipe's checkpoint (local contrast, both views recorded) for the graph's 32 columns."""
    torch.manual_seed(1)
    cfg = GCCADConfig(in_dim=32, hidden=16, contrast="local", loss="logistic", tau=0.2, ensemble=3, **VIEWS)
    d = tmp_path_factory.mktemp("pre_exemplar") / "final"
    save_model(d, GCCAD(cfg), cfg, extra={"stage": "pretrain", "normalize": "standard"})
    return d


def _cosine_max(x: np.ndarray, anomalies: np.ndarray) -> np.ndarray:
    """The score written out plainly: z-score every column over all rows, then each row's largest cosine to the
    anomalies' rows."""
    sd = x.std(0)
    z = (x - x.mean(0)) / np.where(sd > 0, sd, 1.0)
    z = z / np.maximum(np.linalg.norm(z, axis=1, keepdims=True), 1e-12)
    return (z @ z[anomalies].T).max(1)


def test_the_score_is_the_largest_cosine_to_a_known_anomaly() -> None:
    rng = np.random.default_rng(0)
    x = rng.standard_normal((300, 6)) * [1, 2, 3, 1, 1, 5] + [0, 1, -2, 0, 3, 0]
    x[:, 4] = 7.0  # a constant column: std 1, zero after the z-score
    anomalies = np.zeros(300, dtype=bool)
    anomalies[[3, 50, 200]] = True
    model = fit_exemplars(x, anomalies)
    with torch.no_grad():
        got = model(torch.as_tensor(x, dtype=torch.float32)).numpy()
    np.testing.assert_allclose(got, _cosine_max(x, anomalies), atol=1e-5)
    np.testing.assert_allclose(got[anomalies], 1.0, atol=1e-5)  # a known anomaly is its own nearest exemplar
    assert model.score(torch.as_tensor(got)).numpy() is not None and got.dtype == np.float32
    # wider inputs (label columns after the raw block) read only the first in_features columns
    wide = torch.cat([torch.as_tensor(x, dtype=torch.float32), torch.ones(300, 2)], dim=1)
    with torch.no_grad():
        np.testing.assert_allclose(model(wide).numpy(), got, atol=1e-6)
    # the state alone rebuilds it
    again = ExemplarScorer.from_state(model.state_dict())
    with torch.no_grad():
        np.testing.assert_array_equal(again(torch.as_tensor(x, dtype=torch.float32)).numpy(), got)


def test_exemplar_inputs_are_checked() -> None:
    x = np.ones((5, 3))
    with pytest.raises(ValueError, match="no labelled anomaly"):
        fit_exemplars(x, np.zeros(5, dtype=bool))
    with pytest.raises(ValueError, match="one mask entry per row"):
        fit_exemplars(x, np.ones(4, dtype=bool))
    with pytest.raises(ValueError, match="std > 0"):
        ExemplarScorer(torch.zeros(3), torch.zeros(3), torch.ones(1, 3))
    with pytest.raises(ValueError, match="exemplars"):
        ExemplarScorer(torch.zeros(3), torch.ones(3), torch.ones(1, 4))
    with pytest.raises(ValueError, match="missing"):
        ExemplarScorer.from_state({"mean": torch.zeros(3)})
    model = fit_exemplars(np.random.default_rng(0).standard_normal((5, 3)), np.array([1, 0, 0, 0, 0], dtype=bool))
    with pytest.raises(ValueError, match="reads 3 columns"):
        model(torch.zeros(5, 2))


def test_above_chance_is_the_one_sided_mann_whitney_bar() -> None:
    assert chance_bar(6, 294) == pytest.approx(0.5 + 1.6448536 * math.sqrt(301 / (12 * 6 * 294)))
    assert chance_bar(40, 760) < chance_bar(6, 294) < chance_bar(1, 299) < 1.0  # fewer anomalies: a higher bar
    assert math.isinf(chance_bar(0, 10)) and math.isinf(chance_bar(3, 0))
    y = np.r_[np.ones(6), np.zeros(294), -np.ones(5)]  # -1: unlabelled, ignored
    perfect = np.r_[np.ones(6), np.zeros(294), 5 * np.ones(5)]
    ok, auc, bar = above_chance(y, perfect)
    assert ok and auc == 1.0 and bar == chance_bar(6, 294)
    weak = np.r_[np.full(6, 0.6), np.linspace(0, 1, 294), np.zeros(5)]  # AUROC 0.6, below the bar of about 0.70
    assert not above_chance(y, weak)[0]
    assert above_chance(np.zeros(10), np.arange(10))[:1] == (False,)


def _split(n: int) -> SimpleNamespace:
    i = np.arange(n)
    return SimpleNamespace(train=torch.as_tensor(i % 5 < 2), val=torch.as_tensor(i % 5 == 2),
                           test=torch.as_tensor(i % 5 > 2))


def test_exemplar_offer_reads_the_kept_training_and_validation_labels_only(graph) -> None:
    from gcad_dist.finetune import EXEMPLAR, ZERO_SHOT, FinetuneConfig, exemplar_offer

    g, path = graph
    y, x = np.asarray(g.y), np.asarray(g.x, dtype=np.float32)
    split = _split(len(y))
    kept = split.train.numpy() & (np.arange(len(y)) % 3 == 0)  # the kept training nodes
    cfg = FinetuneConfig(checkpoint="c", graph=str(path))
    names = ["checkpoint", ZERO_SHOT]
    record, fit = exemplar_offer(cfg, names, x, y, None, split, torch.as_tensor(kept), "config")
    assert record["offered"] and fit is not None and fit[2] == "config"  # camouflaged anomalies share a signature
    assert record["exemplars"] == int((y[kept] == 1).sum()) and record["val_auroc"] > record["chance_bar"]
    np.testing.assert_allclose(fit[0].scores, _cosine_max(x.astype(np.float64), kept & (y == 1)), atol=1e-5)
    assert isinstance(fit[1], ExemplarScorer) and EXEMPLAR == "exemplar"
    # other labels outside the kept training nodes and validation: the same offer and scores
    scrambled = y.copy()
    other = ~kept & ~split.val.numpy()
    scrambled[other] = np.random.default_rng(1).permutation(y[other])
    again, fit2 = exemplar_offer(cfg, names, x, scrambled, None, split, torch.as_tensor(kept), "config")
    assert again["offered"] and again["val_auroc"] == record["val_auroc"]
    np.testing.assert_array_equal(fit2[0].scores, fit[0].scores)
    # off, without the zero-shot candidate, without a kept anomaly, or at chance on validation: not offered
    assert exemplar_offer(FinetuneConfig(checkpoint="c", graph="g", exemplar="off"), names, x, y, None, split,
                          torch.as_tensor(kept), None) == ({"mode": "off", "exemplars": int((y[kept] == 1).sum()),
                                                             "offered": False, "why": "--exemplar off"}, None)
    assert exemplar_offer(cfg, ["checkpoint"], x, y, None, split, torch.as_tensor(kept), None)[1] is None
    many = split.train.numpy()  # every training node kept: 10 or more anomalies, the fits learn from the labels
    assert (y[many] == 1).sum() >= 10
    rec_many, fit_many = exemplar_offer(cfg, names, x, y, None, split, torch.as_tensor(many), None)
    assert fit_many is None and not rec_many["offered"] and "offered below 10 only" in rec_many["why"]
    none_kept = kept & (y == 0)
    assert exemplar_offer(cfg, names, x, y, None, split, torch.as_tensor(none_kept), None)[0]["why"] == \
        "no labelled training anomaly"
    noise = np.random.default_rng(2).standard_normal(x.shape).astype(np.float32)  # features that say nothing
    rec, fit3 = exemplar_offer(cfg, names, noise, y, None, split, torch.as_tensor(kept), None)
    assert fit3 is None and not rec["offered"] and "not above chance" in rec["why"]


def test_finetune_with_the_exemplar_writes_what_it_scored(graph, viewed_checkpoint, tmp_path, capsys) -> None:
    """--exemplar auto: the candidate is offered, kept, written as a member of its own kind reading the raw features,
    and gcad_dist.score of the written model gives the run's test figures; --exemplar off: no such candidate."""
    g, path = graph
    runs = {}
    for name, flag in (("on", "auto"), ("off", "off")):
        out = tmp_path / name
        code, err = _run(["--checkpoint", str(viewed_checkpoint), "--graph", str(path), "--out", str(out),
                          "--exemplar", flag, *FEW], capsys)
        assert code == 0, err
        runs[name] = m = json.loads((out / "metrics.json").read_text())
        _reproduces(g, path, out, m)
    on, off = runs["on"], runs["off"]
    assert on["exemplar"]["offered"] and "exemplar" in on["model_selection"]["candidates"]
    assert off["exemplar"] == {"mode": "off", "exemplars": on["exemplar"]["exemplars"], "offered": False,
                               "why": "--exemplar off"}
    assert "exemplar" not in off["model_selection"]["candidates"]
    assert "exemplar" in on["model_selection"]["chosen"].split(" + ")  # kept: the anomalies share their signature
    members = load_model_file(tmp_path / "on" / "final")["candidate_members"]
    assert sum(r.get("kind") == "exemplar" for r in members) == 1


def test_finetune_with_the_exemplar_kept_alone_scores_as_it_ran(graph, viewed_checkpoint, tmp_path, capsys,
                                                                 monkeypatch) -> None:
    """The exemplar kept alone: the written checkpoint holds no GCCAD state at the top, and still scores as the run."""
    import gcad_dist.train as train_mod

    g, path = graph
    real = train_mod.keep_candidates

    def alone(fits, y, val_mask, seed=0, names=None, **kw):
        kept, record = real(fits, y, val_mask, seed=seed, names=names, **kw)
        if not names or "exemplar" not in names:
            return kept, record
        record = {k: v for k, v in record.items() if k != "weights"}
        return [names.index("exemplar")], {**record, "chosen": "exemplar"}

    monkeypatch.setattr(train_mod, "keep_candidates", alone)
    out = tmp_path / "alone"
    code, err = _run(["--checkpoint", str(viewed_checkpoint), "--graph", str(path), "--out", str(out), *FEW], capsys)
    assert code == 0, err
    m = json.loads((out / "metrics.json").read_text())
    assert m["finetuned_model"] == "exemplar"
    _reproduces(g, path, out, m)
    members = load_model_file(out / "final")["candidate_members"]
    assert [r.get("kind") for r in members] == ["exemplar"]


def test_a_malformed_exemplar_member_is_a_clear_error(graph, viewed_checkpoint, tmp_path, capsys) -> None:
    from gcad_dist.checkpoint import MODEL_FILE
    from gcad_dist.score import load_checkpoint_model
    from partitioning.errors import GraphInputError

    g, path = graph
    out = tmp_path / "run"
    code, err = _run(["--checkpoint", str(viewed_checkpoint), "--graph", str(path), "--out", str(out), *FEW], capsys)
    assert code == 0, err
    obj = load_model_file(out / "final")
    recs = obj["candidate_members"]
    assert any(r.get("kind") == "exemplar" for r in recs)
    for r in recs:
        if r.get("kind") == "exemplar":
            r["exemplar"] = {"mean": r["exemplar"]["mean"]}
    torch.save(obj, out / "final" / MODEL_FILE)
    with pytest.raises(GraphInputError, match="malformed exemplar scorer"):
        load_checkpoint_model(out / "final")


def test_bench_exemplar_replays_the_product(graph, viewed_checkpoint, tmp_path, capsys) -> None:
    """bench.exemplar on a run fitted without the exemplar: its old arm reproduces that run, its new arm equals a run of
    --exemplar auto with the same fits (the exemplar changes no fit)."""
    from bench.exemplar import main as bench_main
    from bench.exemplar import replay
    from gcad_dist.cli import run_cli

    g, path = graph
    root = tmp_path / "pt"
    for name, flag in (("g/ft0.5-s0", "off"), ("on", "auto")):
        code, err = _run(["--checkpoint", str(viewed_checkpoint), "--graph", str(path), "--out", str(root / name),
                          "--candidate-scores", "--exemplar", flag, *FEW], capsys)
        assert code == 0, err
    with pytest.raises(SystemExit) as e:
        run_cli(bench_main, [str(root)])
    assert int(e.value.code or 0) == 0
    row = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("| g 0.5 |"))
    assert "| 1/1 |" in row and "| 1, " in row  # reproduced; offered
    on = json.loads((root / "on" / "metrics.json").read_text())
    rec = replay(root / "g" / "ft0.5-s0")
    assert rec["reproduced"] and rec["offer"]["offered"]
    assert rec["new"][0] == pytest.approx(on["test"]["auroc"], abs=1e-6)
    assert rec["new"][1] == pytest.approx(on["test"]["auprc"], abs=1e-6)
    import shutil

    shutil.copytree(root / "on", tmp_path / "pt2" / "g" / "ft0.5-s0")  # a run made with the exemplar offered
    with pytest.raises(SystemExit) as e:
        run_cli(bench_main, [str(tmp_path / "pt2")])
    assert int(e.value.code) != 0 and "--exemplar auto" in capsys.readouterr().err
