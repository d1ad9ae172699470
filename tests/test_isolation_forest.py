"""The isolation forest held as tensors (gcad_dist.model.isolation_forest) and as gcad_dist.finetune's candidate."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from gcad_dist.cli import run_cli
from gcad_dist.model.isolation_forest import IsolationForestScorer, average_path_length, fit_isolation_forest


def _rows(n: int = 800, f: int = 6, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    x = rng.lognormal(size=(n, f)).astype(np.float32)
    x[:, 1] = rng.normal(size=n)  # a column with negative values and one with repeats
    x[:, 2] = np.round(x[:, 2])
    return x


def test_average_path_length_is_scikit_learns() -> None:
    from sklearn.ensemble._iforest import _average_path_length

    n = np.array([0, 1, 2, 3, 7, 256, 1e6])
    assert np.allclose(average_path_length(n), _average_path_length(n), rtol=0, atol=1e-12)


@pytest.mark.parametrize("max_features", [1.0, 0.5])
def test_the_scorer_scores_as_scikit_learn(max_features: float) -> None:
    """The trees as tensors give ``-score_samples`` (float32) of every row, on the rows fitted and on new ones, also
    with a feature subsample per tree (the tree's columns mapped to the input's)."""
    from sklearn.ensemble import IsolationForest

    x, new = _rows(seed=0), _rows(300, seed=1) * 3
    forest = IsolationForest(n_estimators=40, max_features=max_features, random_state=2).fit(x)
    scorer = IsolationForestScorer.from_sklearn(forest, x.shape[1])
    for rows in (x, new):
        got = scorer(torch.from_numpy(rows)).numpy()
        assert got.dtype == np.float32
        np.testing.assert_allclose(got, -forest.score_samples(rows), rtol=0, atol=1e-6)
    # extra columns after the features (label inputs) are not read
    wide = torch.cat([torch.from_numpy(x), torch.full((x.shape[0], 2), 1e9)], dim=1)
    assert torch.equal(scorer(wide), scorer(torch.from_numpy(x)))
    with pytest.raises(ValueError, match="reads 6 columns"):
        scorer(torch.from_numpy(x[:, :4]))


def test_fit_is_the_feature_views_forest_and_the_state_round_trips() -> None:
    from gcad_dist.feature_view import forest_scores

    x = _rows()
    scorer = fit_isolation_forest(x)
    s = scorer(torch.from_numpy(x)).numpy()
    np.testing.assert_allclose(s, forest_scores(x), rtol=0, atol=1e-6)
    again = IsolationForestScorer.from_state(scorer.state_dict())
    assert torch.equal(again(torch.from_numpy(x)), torch.from_numpy(s))
    assert "max_samples=256" in repr(again)
    with pytest.raises(ValueError, match="missing path"):
        IsolationForestScorer.from_state({k: v for k, v in scorer.state_dict().items() if k != "path"})
    with pytest.raises(ValueError, match="shape"):
        fit_isolation_forest(np.zeros((0, 3)))


def test_extreme_rows_score_highest() -> None:
    """Rows planted far out in one column score above chance (near 1 AUROC) against the others."""
    from gcad_dist.metrics import auroc

    x = _rows(1000, seed=3)
    y = np.zeros(1000, dtype=np.int64)
    y[:20] = 1
    x[:20, 4] += 50
    assert auroc(y, fit_isolation_forest(x)(torch.from_numpy(x)).numpy()) > 0.95


# ---------------------------------------------------------------------------------------------
# gcad_dist.finetune's candidate


def test_the_forest_is_offered_beside_the_zero_shot_model_with_ten_validation_anomalies() -> None:
    from gcad_dist.finetune import ISOLATION_FOREST, FinetuneConfig, isolation_forest_offer

    y = np.zeros(100, dtype=np.int64)
    y[:12] = 1
    val = np.zeros(100, dtype=bool)
    val[:50] = True
    cfg = FinetuneConfig(checkpoint="c", graph="g")
    auto = ["checkpoint", "graph", "scratch", "zero-shot"]
    assert cfg.isolation_forest == "auto" and ISOLATION_FOREST == "isolation-forest"
    assert isolation_forest_offer(cfg, auto, y, val)["offered"]
    few = isolation_forest_offer(cfg, auto, y, val & (np.arange(100) >= 3))  # 9 validation anomalies
    assert not few["offered"] and few["val_anomalies"] == 9 and "fewer than the 10" in few["why"]
    assert not isolation_forest_offer(cfg, ["checkpoint"], y, val)["offered"]  # a message-passing checkpoint
    from gcad_dist.finetune import build_parser

    off = FinetuneConfig(**vars(build_parser().parse_args(["--checkpoint", "c", "--graph", "g", "--isolation-forest",
                                                           "off"])))
    assert isolation_forest_offer(off, auto, y, val)["why"] == "--isolation-forest off"


@pytest.fixture(scope="module")
def outlier_graph(tmp_path_factory: pytest.TempPathFactory):
    """A 700-node generated graph (8 features) whose anomalies are also far out in feature 3: (graph, path)."""
    from partitioning.io import save_npz
    from partitioning.synthetic import SyntheticConfig, generate

    g = generate(SyntheticConfig(nodes=700, avg_degree=6, features=8, anomaly_fraction=0.1, clique_size=5,
                                 contextual_candidates=10, seed=5))
    x = np.asarray(g.x, dtype=np.float32).copy()
    x[np.asarray(g.y) == 1, 3] += 8.0
    g.x = x
    path = tmp_path_factory.mktemp("outliers") / "g.npz"
    save_npz(g, path)
    return g, path


def _finetune(path: Path, local: Path, out: Path, capsys, *extra: str) -> dict:
    from gcad_dist.finetune import main as finetune_main

    with pytest.raises(SystemExit) as e:
        run_cli(finetune_main, ["--checkpoint", str(local), "--graph", str(path), "--out", str(out), "--epochs", "2",
                                "--seed", "0", "--candidate-scores", "--no-progress", "--no-plots", "--threads", "1",
                                *extra])
    _, err = capsys.readouterr()
    assert int(e.value.code or 0) == 0, err
    return json.loads((out / "metrics.json").read_text())


def _rescored(out: Path, g, train: torch.Tensor) -> np.ndarray:
    """The written checkpoint's scores of the graph, as gcad_dist.score builds its input; its label inputs read the
    training labels only, as fine-tuning's did."""
    from gcad_dist.score import load_checkpoint_model, prepare_data
    from gcad_dist.supervised import predict

    loaded = load_checkpoint_model(out / "final")
    data = g.to_data()
    data.y = torch.where(train, data.y, torch.full_like(data.y, -1))
    return predict(loaded.model, prepare_data(data, loaded)).numpy()


@pytest.mark.parametrize("keep", ["forest-alone", "all"])
def test_a_kept_forest_is_written_and_scored_again_as_fine_tuning_scored(outlier_graph, make_local_checkpoint,
                                                                          tmp_path, capsys, monkeypatch,
                                                                          keep: str) -> None:
    """Kept alone or beside the GCCAD fits, the forest is written into the checkpoint (its trees; the raw features as an
    input block of their own, after the checkpoint's power block and the scratch fit's z-scores) and the checkpoint
    scores the graph as fine-tuning did: the same validation and test figures."""
    import gcad_dist.train as train_mod
    from gcad_dist.data.splits import make_split
    from gcad_dist.feature_view import forest_scores
    from gcad_dist.metrics import evaluate

    g, path = outlier_graph
    real = train_mod.keep_candidates

    def forced(fits, y, val_mask, seed=0, names=None, cross_fitted=False, **kw):
        kept, record = real(fits, y, val_mask, seed=seed, names=names, cross_fitted=cross_fitted)
        if names and "isolation-forest" in names:
            kept = [names.index("isolation-forest")] if keep == "forest-alone" else list(range(len(names)))
            record.update(kept=[names[i] for i in kept], chosen=" + ".join(names[i] for i in kept))
        return kept, record

    monkeypatch.setattr(train_mod, "keep_candidates", forced)
    out = tmp_path / "ft"
    m = _finetune(path, make_local_checkpoint("power"), out, capsys, "--forest", "off", "--exemplar", "off")
    assert m["isolation_forest"]["offered"] and m["isolation_forest"]["val_anomalies"] >= 10
    cs = np.load(out / "candidate_scores.npz")
    assert list(cs["names"]) == ["checkpoint", "graph", "scratch", "zero-shot", "isolation-forest"]
    x = np.asarray(g.x, dtype=np.float32)
    np.testing.assert_allclose(cs["scores"][4], forest_scores(x), rtol=0, atol=1e-6)  # the label-free forest
    assert m["input_blocks"]["blocks"] == (["power", "none"] if keep == "forest-alone"
                                           else ["power", "standard", "none"])
    y = np.asarray(g.y)
    split = make_split(g.to_data(), seed=0)
    assert m["label_inputs"]  # the members read two label columns after the blocks, the forest does not
    s = _rescored(out, g, split.train)
    for part in ("val", "test"):
        assert evaluate(y, s, mask=getattr(split, part).numpy())["auroc"] == pytest.approx(m[part]["auroc"], abs=1e-6)
    if keep == "forest-alone":
        assert m["finetuned_model"] == "isolation-forest" and m["best_epoch"] == 0
        assert np.corrcoef(s, forest_scores(x))[0, 1] > 0.999999  # the forest's score, standardised
    # gcad_dist.score reads the checkpoint as every other: one row per node
    from gcad_dist.score import main as score_main

    with pytest.raises(SystemExit) as e:
        run_cli(score_main, ["--checkpoint", str(out / "final"), "--graph", str(path), "--out",
                             str(tmp_path / "s.csv")])
    assert int(e.value.code or 0) == 0, capsys.readouterr().err
    assert len((tmp_path / "s.csv").read_text().strip().splitlines()) == g.x.shape[0] + 1
