"""The signature view (gcad_dist.signature_view; GCCADConfig.signature_view; pretrain / score --signature-view): the
label-free score's top nodes learnt by a cross-fitted linear classifier, its rank added where it tells them apart."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from gcad_dist import signature_view as sv
from gcad_dist.metrics import auroc

LOCAL = dict(contrast="local", loss="logistic", tau=0.2, ensemble=2, degree_detrend=True)


def _graph(n: int = 2000, f: int = 8, seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(x, edge_index, found, hidden): random links; 10% of the nodes carry a signature (+3 in column 0), of which
    ``found`` (half) are what a contrast ranks on top and ``hidden`` (the other half) look ordinary to it."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, f)).astype(np.float32)
    edge_index = rng.integers(0, n, size=(2, 8 * n))
    sig = rng.permutation(n)[: n // 10]
    x[sig, 0] += 3.0
    return x, edge_index, sig[: sig.size // 2], sig[sig.size // 2:]


def test_the_view_joins_where_the_top_nodes_share_a_signature_and_lifts_the_others_that_carry_it() -> None:
    x, ei, found, hidden = _graph()
    n = x.shape[0]
    rng = np.random.default_rng(1)
    scores = rng.normal(size=n)
    scores[found] += 4.0  # the contrast ranks half the signature nodes on top, the other half not at all
    out, info = sv.apply_signature_view(scores, x, ei)
    assert info["used"] and info["fit"] >= sv.FIT and info["top_nodes"] == 100 and info["always"] is False
    y = np.zeros(n, dtype=np.int64)
    y[hidden] = 1
    others = np.ones(n, dtype=bool)
    others[found] = False
    assert auroc(y[others], scores[others]) < 0.6  # the contrast does not see them
    assert auroc(y[others], out[others]) > 0.75  # the view lifts them (half its rank is the contrast's noise)
    assert out.dtype == np.float32
    again, _ = sv.apply_signature_view(scores, x, ei)
    np.testing.assert_array_equal(out, again)  # fixed folds and samples: the same scores twice


def test_the_view_stays_off_where_the_top_nodes_share_nothing() -> None:
    x, ei, _, _ = _graph(seed=2)
    scores = np.random.default_rng(3).normal(size=x.shape[0])  # top nodes unrelated to any feature
    out, info = sv.apply_signature_view(scores, x, ei)
    assert not info["used"] and info["fit"] < 0.7
    np.testing.assert_array_equal(out, scores.astype(np.float32))
    forced, info = sv.apply_signature_view(scores, x, ei, always=True)  # score --signature-view always
    assert info["used"] and info["always"] and not np.array_equal(forced, out)
    small, info = sv.apply_signature_view(scores[:150], x[:150], ei[:, (ei < 150).all(0)])
    assert info == {"used": False, "fit": None, "top_nodes": 8, "threshold": sv.FIT, "always": False}
    np.testing.assert_array_equal(small, scores[:150].astype(np.float32))
    with pytest.raises(ValueError, match="feature rows"):
        sv.apply_signature_view(scores, x[:10], ei)


def test_cross_fitting_scores_no_node_with_a_model_that_saw_it() -> None:
    """Wide noise features and random pseudo labels: a model scoring its own training nodes would separate them
    (in-sample AUROC near 1); out of fold they stay at chance."""
    rng = np.random.default_rng(4)
    n, f = 400, 150
    z, nbr, logdeg = (rng.normal(size=(n, f)).astype(np.float32), rng.normal(size=(n, f)).astype(np.float32),
                      rng.normal(size=n).astype(np.float32))
    pseudo = (rng.random(n) < 0.1).astype(np.int64)
    fold = sv.folds_of(pseudo)
    counts = np.bincount(fold[pseudo == 1], minlength=sv.FOLDS)
    assert counts.max() - counts.min() <= 1  # stratified: the pseudo anomalies dealt round the folds
    assert 0.3 < auroc(pseudo, sv.out_of_fold(z, nbr, logdeg, pseudo)) < 0.7
    from sklearn.linear_model import LogisticRegression

    inputs = np.concatenate([z, nbr, logdeg[:, None]], axis=1)
    in_sample = LogisticRegression(C=sv.C, max_iter=300).fit(inputs, pseudo).decision_function(inputs)
    assert auroc(pseudo, in_sample) > 0.95


def test_a_sample_of_rows_fits_each_fold_on_a_large_graph() -> None:
    x, ei, found, _ = _graph(n=3000, seed=5)
    scores = np.random.default_rng(6).normal(size=3000)
    scores[found] += 4.0
    pseudo = sv.pseudo_labels(scores)
    inputs = sv.node_inputs(x, ei)
    whole = sv.out_of_fold(*inputs, pseudo)
    sampled = sv.out_of_fold(*inputs, pseudo, max_rows=500)
    assert auroc(pseudo, sampled) > 0.8 and abs(auroc(pseudo, sampled) - auroc(pseudo, whole)) < 0.05


def test_node_inputs_are_z_scores_their_in_neighbours_mean_and_log_degree() -> None:
    x = np.array([[1.0, 5.0], [3.0, 5.0], [5.0, 5.0]], dtype=np.float32)
    ei = np.array([[0, 2, 0], [1, 1, 2]])  # 0 -> 1, 2 -> 1, 0 -> 2; node 0 has no in-neighbour
    z, nbr, logdeg = sv.node_inputs(x, ei)
    np.testing.assert_allclose(z[:, 0], [-1.2247449, 0.0, 1.2247449], rtol=1e-6)
    assert (z[:, 1] == 0).all()  # a constant column stays 0
    np.testing.assert_allclose(nbr[:, 0], [0.0, 0.0, -1.2247449], rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(logdeg, np.log1p([0, 2, 1]), rtol=1e-6)


def test_the_local_recipe_records_the_view_and_the_paper_does_not(monkeypatch) -> None:
    from gcad_dist.detectors import gccad_pre
    from gcad_dist.distributed.train_loop import model_config
    from gcad_dist.pretrain import PretrainConfig, apply_recipe, parse_config
    from gcad_dist.detectors import settings_of

    local = apply_recipe(PretrainConfig(store="s"), store_corrupted=False)
    assert local.signature_view is True and model_config(local, in_dim=4).signature_view is True
    assert apply_recipe(PretrainConfig(store="s"), store_corrupted=True).signature_view is False
    assert apply_recipe(PretrainConfig(store="s", contrast="graph"), store_corrupted=False).signature_view is False
    assert parse_config(["--store", "s", "--no-signature-view"]).signature_view is False
    assert (sv.TOP_SHARE, sv.FOLDS, sv.C, sv.FIT) == (0.05, 5, 0.1, 0.85)  # documented
    assert "pre_signature_view" not in settings_of("gccad-pre", {"pre_signature_view": False})  # earlier keys kept
    assert settings_of("gccad-pre", {})["pre_signature_view"] is True
    seen: list[dict] = []
    monkeypatch.setattr(gccad_pre, "_pipeline", lambda *a: seen.append(a[6]) or np.zeros(1))
    gccad_pre.fit_score(None, None, 0)
    gccad_pre.fit_score(None, None, 0, pre_signature_view=False)
    assert seen[0]["signature_view"] is True and seen[1]["signature_view"] is False


def test_score_applies_the_recorded_view_and_its_flag_overrides_it(tmp_path, make_checkpoint, run_score) -> None:
    pytest.importorskip("pyarrow")
    import pandas as pd

    from gcad_dist.score import load_checkpoint_model, prepare_data, score_data
    from partitioning.io import save_npz
    from partitioning.synthetic import SyntheticConfig, generate

    g = generate(SyntheticConfig(nodes=1500, avg_degree=8, features=8, anomaly_fraction=0.06, seed=4))
    path = tmp_path / "g.npz"
    save_npz(g, path)
    ck = make_checkpoint("sig", **LOCAL, signature_view=True)
    runs = {}
    for name, flag in (("auto", []), ("off", ["--signature-view", "off"]), ("always", ["--signature-view", "always"])):
        out = tmp_path / f"{name}.parquet"
        code, err = run_score(["--checkpoint", str(ck), "--graph", str(path), "--out", str(out), "--normalize",
                               "standard", *flag])
        assert code == 0, err
        runs[name] = (pd.read_parquet(out)["score"].to_numpy(), json.loads(out.with_name(out.name + ".metrics.json")
                                                                           .read_text()))
    view = runs["auto"][1]["signature_view"]
    assert view["top_nodes"] == 75 and 0 <= view["fit"] <= 1 and view["threshold"] == sv.FIT
    assert "signature_view" not in runs["off"][1]
    loaded = load_checkpoint_model(ck)
    data = prepare_data(g, loaded, "standard")
    plain = score_data(loaded.model, data, device="cpu")
    np.testing.assert_allclose(runs["off"][0], plain, rtol=1e-5, atol=1e-6)
    want = sv.apply_signature_view(plain, g.x, data.edge_index, always=True)[0]
    np.testing.assert_allclose(runs["always"][0], want, rtol=1e-4, atol=1e-4)
    assert runs["always"][1]["signature_view"]["used"] is True
    other = make_checkpoint("graph", contrast="graph")
    code, err = run_score(["--checkpoint", str(other), "--graph", str(path), "--out", str(tmp_path / "c.parquet"),
                           "--signature-view", "auto"])
    assert code == 2 and "--signature-view: applies to label-free local checkpoints" in err


def test_fine_tuning_with_no_epochs_reports_the_checkpoint_as_score_scores_it(tmp_path, capsys) -> None:
    """``finetune --epochs 0`` writes the checkpoint unchanged; its reported figures are those of the scores that
    ``gcad_dist.score`` gives it, the signature view included (``always``: applied whatever its fit)."""
    from gcad_dist.checkpoint import save_model
    from gcad_dist.cli import run_cli
    from gcad_dist.finetune import main as finetune_main
    from gcad_dist.model import GCCAD, GCCADConfig
    from gcad_dist.score import load_checkpoint_model, prepare_data, score_data
    from partitioning.io import save_npz
    from partitioning.synthetic import SyntheticConfig, generate

    g = generate(SyntheticConfig(nodes=1500, avg_degree=8, features=8, anomaly_fraction=0.06, seed=5))
    path = tmp_path / "g.npz"
    save_npz(g, path)
    torch.manual_seed(3)
    cfg = GCCADConfig(in_dim=8, hidden=16, **LOCAL, signature_view=True)
    pre = tmp_path / "pre" / "final"
    save_model(pre, GCCAD(cfg), cfg, extra={"stage": "pretrain", "normalize": "standard"})
    out = tmp_path / "zs"
    with pytest.raises(SystemExit) as e:
        run_cli(finetune_main, ["--checkpoint", str(pre), "--graph", str(path), "--out", str(out), "--model",
                                "checkpoint", "--epochs", "0", "--seed", "0", "--no-progress", "--no-plots",
                                "--threads", "1"])
    assert int(e.value.code or 0) == 0, capsys.readouterr().err
    m = json.loads((out / "metrics.json").read_text())
    record = m["zero_shot_feature_view"]
    assert record["choice"] is None and record["signature_view"]["top_nodes"] == 75
    assert m["test"] == record["test"]
    loaded = load_checkpoint_model(out / "final")
    data = prepare_data(g, loaded, "standard")
    want = sv.apply_signature_view(score_data(loaded.model, data, device="cpu"), g.x, data.edge_index)
    assert want[1]["fit"] == record["signature_view"]["fit"]
