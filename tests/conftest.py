"""Shared pytest fixtures."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = Path(os.environ.get("GCAD_SHARED_DATA", REPO.parent / "shared" / "data"))


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """Folder of the real datasets (../shared/data); tests that need it skip when it is absent."""
    if not (SHARED_DATA / "tolokers.npz").exists():
        pytest.skip(f"real datasets not found at {SHARED_DATA}")
    return SHARED_DATA


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return REPO


@pytest.fixture(scope="session")
def rings_graph(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 400-node generated graph of fraud rings (``--clique-features shared``), saved as .npz."""
    from partitioning.io import save_npz
    from partitioning.synthetic import SyntheticConfig, generate

    g = generate(SyntheticConfig(nodes=400, avg_degree=6, features=8, anomaly_fraction=0.1, anomaly_mix=(0, 0, 1),
                                 clique_size=8, clique_features="shared", seed=2))
    path = tmp_path_factory.mktemp("graph") / "rings.npz"
    save_npz(g, path)
    return path


@pytest.fixture(scope="module")
def small_graph(tmp_path_factory: pytest.TempPathFactory):
    """A 300-node synthetic graph with planted anomalies, 8 features, saved as .npz: (graph, path)."""
    from partitioning.io import save_npz
    from partitioning.synthetic import SyntheticConfig, generate

    g = generate(SyntheticConfig(nodes=300, avg_degree=6, features=8, anomaly_fraction=0.1, clique_size=5,
                                 contextual_candidates=10, seed=3))
    path = tmp_path_factory.mktemp("graph") / "g.npz"
    save_npz(g, path)
    return g, path


@pytest.fixture(scope="module")
def make_local_checkpoint(tmp_path_factory: pytest.TempPathFactory):
    """``make_local_checkpoint(normalize)``: a checkpoint of the label-free recipe's model (the local contrast, no
    message passing, 3 members; in_dim 8, torch seed 1) recording the store normalisation ``normalize``."""
    import torch

    from gcad_dist.checkpoint import save_model
    from gcad_dist.model import GCCAD, GCCADConfig

    def make(normalize: str) -> Path:
        torch.manual_seed(1)
        cfg = GCCADConfig(in_dim=8, hidden=16, contrast="local", loss="logistic", tau=0.2, ensemble=3)
        d = tmp_path_factory.mktemp(f"pre_local_{normalize}") / "final"
        save_model(d, GCCAD(cfg), cfg, extra={"stage": "pretrain", "normalize": normalize})
        return d

    return make


@pytest.fixture
def make_checkpoint(tmp_path: Path):
    """``make_checkpoint(name, **GCCADConfig fields)``: an untrained GCCAD (8 features, hidden 16, torch seed 0) saved
    as a pre-training checkpoint ``TMP/name/final``; returns that folder."""
    import torch

    from gcad_dist.checkpoint import save_model
    from gcad_dist.model import GCCAD, GCCADConfig

    def make(name: str, **kw) -> Path:
        torch.manual_seed(0)
        cfg = GCCADConfig(in_dim=8, hidden=16, **kw)
        d = tmp_path / name / "final"
        save_model(d, GCCAD(cfg), cfg, extra={"stage": "pretrain"})
        return d

    return make


@pytest.fixture
def train_run_reproduces():
    """``train_run_reproduces(out, graph_path, metrics, label)``: assert that ``gcad_dist.score``'s model of the
    ``gcad_dist.train`` run in ``out`` (split seed 0) gives its ``metrics``' validation and test AUROC / AUPRC."""
    from gcad_dist.data.label_inputs import with_label_inputs
    from gcad_dist.data.splits import make_split
    from gcad_dist.metrics import evaluate
    from gcad_dist.score import load_checkpoint_model
    from gcad_dist.supervised import predict
    from gcad_dist.train import load_labelled

    def check(out: Path, graph_path: Path, metrics: dict, label: str = "") -> None:
        data = load_labelled(str(graph_path))
        split = make_split(data, seed=0)
        loaded = load_checkpoint_model(out)
        s = predict(loaded.model, with_label_inputs(data, split.train) if loaded.label_inputs else data)
        for part, mask in (("val", split.val), ("test", split.test)):
            got = evaluate(data.y, s, mask=mask)
            assert got["auroc"] == pytest.approx(metrics[part]["auroc"], abs=1e-6), (label, part)
            assert got["auprc"] == pytest.approx(metrics[part]["auprc"], abs=1e-6), (label, part)

    return check


@pytest.fixture
def run_score(capsys: pytest.CaptureFixture):
    """``run_score(argv)``: ``gcad_dist.score``'s command line; returns (exit code, stderr)."""
    from gcad_dist.cli import run_cli
    from gcad_dist.score import main

    def score(argv: list[str]) -> tuple[int, str]:
        with pytest.raises(SystemExit) as e:
            run_cli(main, argv)
        return int(e.value.code or 0), capsys.readouterr().err

    return score


@pytest.fixture(scope="session")
def planted_trees_npz(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A small generated graph (1,500 nodes, 8 features) with 6% planted anomalies, written once a session: the
    tree benches' tests (``bench.tree_blend``, ``bench.forest_hops``) read it."""
    from partitioning.io import save_npz
    from partitioning.synthetic import SyntheticConfig, generate

    out = tmp_path_factory.mktemp("planted_trees") / "g.npz"
    save_npz(generate(SyntheticConfig(nodes=1500, avg_degree=6, features=8, anomaly_fraction=0.06, seed=2)), out)
    return out


@pytest.fixture
def unlabelled_npz(tmp_path: Path) -> Path:
    """A 300-node ring with 4 random features and no labels, saved as .npz."""
    import numpy as np

    n = 300
    path = tmp_path / "unlabelled.npz"
    np.savez(path, x=np.random.default_rng(0).normal(size=(n, 4)).astype(np.float32),
             edge_index=np.stack([np.arange(n), (np.arange(n) + 1) % n]))
    return path
