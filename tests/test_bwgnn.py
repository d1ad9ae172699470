"""BWGNN (gcad_dist.model.bwgnn): the Beta wavelets' coefficients, the filter bank against a dense Laplacian, and the
baseline end to end: it trains in the harness, finds planted anomalies, and its checkpoint scores as the run did."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from scipy.special import beta as beta_fn

from gcad_dist.model.baselines import BaselineConfig, build_baseline
from gcad_dist.model.bwgnn import BWGNN, BetaWaveletConv, beta_wavelet_coefficients


@pytest.mark.parametrize("order", [1, 2, 3, 5])
def test_coefficients_are_the_beta_densities_and_a_partition_of_unity(order):
    """Each polynomial equals (x/2)^i (1 - x/2)^(C-i) / B(i+1, C+1-i) on [0, 2]; their sum over i is C + 1 (the
    Bernstein basis sums to 1)."""
    theta = np.array(beta_wavelet_coefficients(order))
    assert theta.shape == (order + 1, order + 1)
    xs = np.linspace(0.0, 2.0, 11)
    powers = np.stack([xs ** k for k in range(order + 1)])
    values = theta @ powers  # [filter, x]
    for i in range(order + 1):
        want = (xs / 2) ** i * (1 - xs / 2) ** (order - i) / beta_fn(i + 1, order + 1 - i)
        np.testing.assert_allclose(values[i], want, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(values.sum(axis=0), order + 1, rtol=1e-12)
    with pytest.raises(ValueError, match="order"):
        beta_wavelet_coefficients(0)


def test_filter_bank_is_the_polynomials_of_the_normalised_laplacian():
    """``BetaWaveletConv`` gives [beta_0(L) x || ... || beta_C(L) x] with L = I - D^-1/2 A D^-1/2 built densely; an
    isolated node (zero row of A) gets beta_i(1) x."""
    torch.manual_seed(0)
    n = 7
    ei = torch.tensor([[0, 1, 1, 2, 2, 3, 4, 5, 0, 3], [1, 0, 2, 1, 3, 2, 5, 4, 3, 0]])  # node 6 has no link
    x = torch.randn(n, 3)
    a = torch.zeros(n, n, dtype=torch.float64)
    a[ei[1], ei[0]] = 1.0
    d = a.sum(1).clamp(min=1).rsqrt()
    lap = torch.eye(n, dtype=torch.float64) - d[:, None] * a * d[None, :]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # torch: "sparse CSR support is in beta"
        adj = BetaWaveletConv.normalized_adjacency(ei, n)
    for order in (1, 2, 3):
        theta = beta_wavelet_coefficients(order)
        got = BetaWaveletConv(order)(x, adj).double()
        want = torch.cat([sum(theta[i][k] * torch.linalg.matrix_power(lap, k) for k in range(order + 1))
                          @ x.double() for i in range(order + 1)], dim=1)
        assert got.shape == (n, 3 * (order + 1))
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
        # an isolated node: L's row is the identity's (eigenvalue 1), so beta_i(L) x_6 = beta_i(1) x_6
        at_one = torch.tensor(theta, dtype=torch.float64).sum(1, keepdim=True)
        torch.testing.assert_close(got[6].view(order + 1, 3), at_one * x[6].double(), rtol=1e-5, atol=1e-5)


def test_bwgnn_is_built_from_the_baseline_settings():
    """``--layers`` is the wavelets' order (C + 1 filters side by side); the filters hold no weights and nothing of
    them is saved; the adjacency is cached per edge tensor, as every baseline's."""
    model = build_baseline(BaselineConfig(in_dim=5, kind="bwgnn", hidden=8, num_layers=3))
    assert isinstance(model, BWGNN) and model.conv.order == 3
    assert model.mlp1.in_features == 8 * 4
    assert not any("conv" in k for k in model.state_dict())
    x, ei = torch.randn(9, 5), torch.randint(0, 9, (2, 30))
    out = model.eval()(x, ei)
    assert out.shape == (9, 2) and model._adj_src is ei
    again = build_baseline(BaselineConfig(in_dim=5, kind="bwgnn", hidden=8, num_layers=3)).eval()
    again.load_state_dict(model.state_dict())
    torch.testing.assert_close(again(x, ei), out)


def test_bwgnn_finds_anomalies_that_differ_from_their_neighbours():
    """On a graph whose anomalies carry another community's features among neighbours of their own (a contextual
    anomaly an MLP cannot see), BWGNN trained by the harness ranks the test anomalies far above chance, and above
    what the same budget gives an MLP."""
    from torch_geometric.data import Data

    from gcad_dist.data.splits import stratified_split
    from gcad_dist.supervised import SupervisedConfig, fit_supervised

    torch.manual_seed(0)
    torch.set_num_threads(1)
    n, k = 1200, 4
    community = torch.arange(n) % k
    centres = 3.0 * torch.randn(k, 8)
    y = (torch.rand(n) < 0.1).long()
    source = torch.where(y == 1, (community + 1 + torch.randint(0, k - 1, (n,))) % k, community)
    x = centres[source] + torch.randn(n, 8)  # an anomaly looks like another community: normal on its own
    src = torch.randint(0, n, (6 * n,))
    dst = torch.randint(0, n // k, (6 * n,)) * k + community[src]  # links stay inside a community
    data = Data(x=x, edge_index=torch.cat([torch.stack([src, dst]), torch.stack([dst, src])], 1), y=y)
    split = stratified_split(y, seed=0)
    cfg = SupervisedConfig(epochs=150, lr=1e-2, eval_every=5, patience=40, progress=False)
    scores = {}
    for kind in ("bwgnn", "mlp"):
        torch.manual_seed(1)
        model = build_baseline(BaselineConfig(in_dim=8, kind=kind, hidden=32))
        scores[kind] = fit_supervised(model, data, split, cfg).test["auroc"]
    assert scores["bwgnn"] > 0.85, scores
    assert scores["bwgnn"] > scores["mlp"] + 0.1, scores


def test_train_cli_bwgnn_checkpoint_scores_as_the_run(tmp_path):
    """``gcad_dist.train --model bwgnn`` writes a checkpoint that ``gcad_dist.score`` rebuilds: its validation AUPRC
    is the run's."""
    from gcad_dist.cli import run_cli
    from gcad_dist.data.splits import make_split
    from gcad_dist.metrics import evaluate
    from gcad_dist.score import load_checkpoint_model
    from gcad_dist.supervised import predict
    from gcad_dist.train import load_labelled, main
    from partitioning.io import save_npz
    from partitioning.synthetic import SyntheticConfig, generate

    g = tmp_path / "g.npz"
    save_npz(generate(SyntheticConfig(nodes=400, avg_degree=6, features=8, anomaly_fraction=0.1, seed=3)), g)
    out = tmp_path / "run"
    with pytest.raises(SystemExit) as exc:
        run_cli(main, ["--graph", str(g), "--out", str(out), "--model", "bwgnn", "--epochs", "20", "--eval-every",
                       "2", "--hidden", "16", "--threads", "1", "--no-progress", "--no-plots"])
    assert int(exc.value.code or 0) == 0
    m = json.loads(Path(out / "metrics.json").read_text())
    assert m["config"]["model"] == "bwgnn"
    loaded = load_checkpoint_model(out)
    assert isinstance(getattr(loaded.model, "members", [loaded.model])[0], BWGNN)
    data = load_labelled(str(g))
    s = predict(loaded.model, data)
    assert evaluate(data.y, s, mask=make_split(data, seed=0).val)["auprc"] == pytest.approx(m["val"]["auprc"], abs=1e-6)
