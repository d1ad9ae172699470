"""gcad_dist.finetune's zero-shot candidate with the label-free views (``--zero-shot-views``, session 73): the
candidate is the checkpoint as gcad_dist.score scores it, and the written ensemble applies the same views when it
scores (a member's views read the raw features, an input block of their own)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from gcad_dist.checkpoint import INPUT_BLOCKS_KEY, load_model_file, save_model
from gcad_dist.cli import run_cli
from gcad_dist.finetune import main as finetune_main
from gcad_dist.label_free_views import apply_views
from gcad_dist.model import GCCAD, GCCADConfig
from gcad_dist.model.candidate_ensemble import CandidateEnsemble, flat_ensemble
from gcad_dist.score import load_checkpoint_model, score_graph

VIEWS = {"feature_view": True, "signature_view": True}


@pytest.fixture(scope="module")
def graph(tmp_path_factory: pytest.TempPathFactory):
    """1,200 nodes (enough top nodes for both views to be measured), links drawn at random so that they say nothing
    about the features (the feature view joins there), planted contextual and camouflaged anomalies."""
    from partitioning.io import save_npz
    from partitioning.synthetic import SyntheticConfig, generate

    g = generate(SyntheticConfig(nodes=1200, avg_degree=8, features=8, anomaly_fraction=0.05, mixing=1.0,
                                 anomaly_mix=(0.0, 1.0, 0.0, 1.0), contextual_candidates=10, seed=11))
    path = tmp_path_factory.mktemp("zsv") / "g.npz"
    save_npz(g, path)
    return g, path


@pytest.fixture(scope="module")
def viewed_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A label-free recipe's checkpoint (local contrast) that records both views, as gcad_dist.pretrain writes it."""
    torch.manual_seed(1)
    cfg = GCCADConfig(in_dim=8, hidden=16, contrast="local", loss="logistic", tau=0.2, ensemble=3, **VIEWS)
    d = tmp_path_factory.mktemp("pre_viewed") / "final"
    save_model(d, GCCAD(cfg), cfg, extra={"stage": "pretrain", "normalize": "standard"})
    return d


def _run(argv: list[str], capsys) -> tuple[int, str]:
    with pytest.raises(SystemExit) as e:
        run_cli(finetune_main, argv)
    _, err = capsys.readouterr()
    return int(e.value.code or 0), err


COMMON = ["--epochs", "4", "--eval-every", "2", "--seed", "0", "--label-fraction", "0.5", "--no-progress",
          "--no-plots", "--threads", "1", "--forest", "off", "--isolation-forest", "off", "--no-label-inputs"]
#: the zero-shot candidate's views alone (the fine-tuned checkpoint candidate bare, as before session 77)
ZS_ONLY = [*COMMON, "--no-checkpoint-views"]


def _local(seed: int, views: bool) -> GCCAD:
    torch.manual_seed(seed)
    cfg = GCCADConfig(in_dim=8, hidden=16, contrast="local", loss="logistic", tau=0.2,
                      **(VIEWS if views else {}))
    return GCCAD(cfg).eval()


def test_a_member_with_views_scores_its_contrast_with_them(graph, tmp_path) -> None:
    """A viewed member's score is apply_views on its contrast over the raw-feature block, then standardised; the other
    member is untouched; the record survives a checkpoint round trip and the reloaded ensemble scores alike."""
    g, _ = graph
    raw = torch.as_tensor(g.x, dtype=torch.float32)
    z = (raw - raw.mean(0)) / raw.std(0)
    data = g.to_data()
    ei = data.edge_index
    plain, viewed = _local(0, False), _local(1, True)
    rec = {"block": 1, **VIEWS}
    ens = CandidateEnsemble([plain, viewed], [0.1, 0.2], [1.5, 2.0], blocks=[0, 0], width=8, views=[None, rec]).eval()
    with torch.no_grad():
        got = ens.score(ens(torch.cat([z, raw], dim=1), ei)).numpy()
        s0 = plain.score(plain(z, ei)).numpy()
        s1 = viewed.score(viewed(z, ei)).numpy()
    v1, fv, sv = apply_views(s1, raw.numpy(), ei, data.num_nodes, **VIEWS)
    assert fv["used"]  # the links say nothing here: the forest joins, so the views change the member's score
    assert not np.allclose(v1, s1)
    want = ((s0 - 0.1) / 1.5 + (v1 - 0.2) / 2.0) / 2
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-5)
    # through a checkpoint: the member record keeps its views, the reload scores the same
    save_model(tmp_path / "ck", ens, plain.config, extra={"normalize": "standard", INPUT_BLOCKS_KEY: ["standard", "none"]})
    members = load_model_file(tmp_path / "ck")["candidate_members"]
    assert [m.get("views") for m in members] == [None, rec]
    loaded = load_checkpoint_model(tmp_path / "ck")
    assert loaded.model.views == [None, rec]
    np.testing.assert_allclose(score_graph(tmp_path / "ck", graph[1]), got, rtol=0, atol=1e-5)


def test_views_records_are_checked() -> None:
    m = _local(0, True)
    with pytest.raises(ValueError, match="views record"):
        CandidateEnsemble([m], [0.0], [1.0], blocks=[0], width=8, views=[{"block": 1}])
    with pytest.raises(ValueError, match="blocks needed"):
        CandidateEnsemble([m], [0.0], [1.0], views=[{"block": 1, **VIEWS}])
    # a flat ensemble passes a plain part's views to its member; none on a nested ensemble's members
    inner = CandidateEnsemble([_local(2, False), _local(3, False)], [0.0, 0.0], [1.0, 1.0])
    flat = flat_ensemble([(inner, 0.0, 1.0), (m, 0.5, 2.0)], blocks=[0, 0], width=8,
                         views=[None, {"block": 1, **VIEWS}])
    assert flat.views == [None, None, {"block": 1, **VIEWS}]
    with pytest.raises(ValueError, match="single model"):
        flat_ensemble([(inner, 0.0, 1.0)], blocks=[0], width=8, views=[{"block": 1, **VIEWS}])


def _reproduces(g, path: Path, out: Path, m: dict) -> None:
    from gcad_dist.data.splits import make_split
    from gcad_dist.metrics import evaluate

    test = make_split(g.to_data(), seed=0).test.numpy()
    s = score_graph(out / "final", path)
    assert evaluate(g.y, s, mask=test)["auprc"] == pytest.approx(m["test"]["auprc"], abs=1e-6)
    assert evaluate(g.y, s, mask=test)["auroc"] == pytest.approx(m["test"]["auroc"], abs=1e-6)


@pytest.mark.parametrize("keep", ["all", "zero-shot"])
def test_finetune_zero_shot_candidate_is_the_viewed_score_and_the_checkpoint_reproduces_it(
        graph, viewed_checkpoint, tmp_path, capsys, monkeypatch, keep) -> None:
    """The zero-shot candidate's metrics are the checkpoint's with its views (metrics "zero_shot_feature_view"), the
    written model carries them (a raw "none" block, the member's views record) and gcad_dist.score of it gives the
    run's test figures, whether it is kept with the others or alone; --no-zero-shot-views is the bare contrast."""
    import gcad_dist.train as train_mod

    g, path = graph
    real = train_mod.keep_candidates

    def forced(fits, y, val_mask, seed=0, names=None, **kw):
        kept, record = real(fits, y, val_mask, seed=seed, names=names, **kw)
        if not names or "zero-shot" not in names:
            return kept, record
        record = {k: v for k, v in record.items() if k != "weights"}
        return (list(range(len(fits))) if keep == "all" else [names.index("zero-shot")]), record

    monkeypatch.setattr(train_mod, "keep_candidates", forced)
    runs = {}
    for name, flag in (("views", "--zero-shot-views"), ("bare", "--no-zero-shot-views")):
        out = tmp_path / name
        code, err = _run(["--checkpoint", str(viewed_checkpoint), "--graph", str(path), "--out", str(out),
                          "--candidate-scores", flag, *ZS_ONLY], capsys)
        assert code == 0, err
        runs[name] = m = json.loads((out / "metrics.json").read_text())
        _reproduces(g, path, out, m)
    v, b = runs["views"], runs["bare"]
    assert v["zero_shot_feature_view"]["choice"]["used"]  # the views change the zero-shot score on this graph
    assert v["model_selection"]["candidates"]["zero-shot"]["val"] == v["zero_shot_feature_view"]["val"]
    assert b["model_selection"]["candidates"]["zero-shot"]["val"] == b["zero_shot"]["val"]
    assert v["zero_shot_feature_view"]["val"] != v["zero_shot"]["val"]
    members = load_model_file(tmp_path / "views" / "final")["candidate_members"]
    assert [r.get("views") for r in members if r.get("views")] == [{"block": 1, **VIEWS}]
    assert load_model_file(tmp_path / "views" / "final")["extra"][INPUT_BLOCKS_KEY] == ["standard", "none"]
    assert not any(r.get("views") for r in load_model_file(tmp_path / "bare" / "final").get("candidate_members") or [])
    if keep == "zero-shot":  # kept alone: the pre-trained checkpoint's score as gcad_dist.score gives it, standardised
        s_pre, s_ft = score_graph(viewed_checkpoint, path), score_graph(tmp_path / "views" / "final", path)
        ens = load_checkpoint_model(tmp_path / "views" / "final").model
        np.testing.assert_allclose(s_ft, (s_pre - float(ens.means[0])) / float(ens.stds[0]), rtol=0, atol=1e-5)
        # the bare one kept alone is the checkpoint's contrast without any view (its signature view is off too)
        assert load_model_file(tmp_path / "bare" / "final")["config"]["signature_view"] is False


def test_with_label_inputs_the_viewed_member_reads_the_raw_block_not_the_label_columns(graph, viewed_checkpoint,
                                                                                     tmp_path, capsys,
                                                                                     monkeypatch) -> None:
    """With label inputs on (two more columns after the blocks), the written model still scores as the run did when
    only the kept training labels are known, and its viewed member's views read the raw features alone."""
    from gcad_dist.data.splits import make_split, subsample_split
    from gcad_dist.metrics import evaluate
    from gcad_dist.score import prepare_data
    from gcad_dist.supervised import predict

    import gcad_dist.train as train_mod

    real = train_mod.keep_candidates

    def keep_all(fits, y, val_mask, seed=0, names=None, **kw):
        kept, record = real(fits, y, val_mask, seed=seed, names=names, **kw)
        if names and "zero-shot" in names:
            return list(range(len(fits))), {k: v for k, v in record.items() if k != "weights"}
        return kept, record

    monkeypatch.setattr(train_mod, "keep_candidates", keep_all)
    g, path = graph
    out = tmp_path / "li"
    argv = [a for a in COMMON if a != "--no-label-inputs"]
    code, err = _run(["--checkpoint", str(viewed_checkpoint), "--graph", str(path), "--out", str(out),
                      "--label-inputs", *argv], capsys)
    assert code == 0, err
    m = json.loads((out / "metrics.json").read_text())
    assert m["label_inputs"]
    loaded = load_checkpoint_model(out / "final")
    assert any(loaded.model.views) and loaded.model.label_columns == 2
    split = make_split(g.to_data(), seed=0)
    sub, _ = subsample_split(split, torch.as_tensor(g.y).long(), 0.5, seed=0)
    known = g.to_data()
    known.y = torch.where(sub.train, known.y, torch.full_like(known.y, -1))
    s = predict(loaded.model, prepare_data(known, loaded))
    assert evaluate(g.y, s, mask=split.val.numpy())["auprc"] == pytest.approx(m["val"]["auprc"], abs=1e-5)
