"""bench.supervised_sweep: variant parsing, and a seed ensemble that reads validation labels only."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch_geometric.data import Data

import bench.supervised_sweep as sweep
from bench.supervised_sweep import parse_variant, run_one
from gcad_dist.cli import UsageError


def test_parse_variant_keys():
    name, model_o, fit_o = parse_variant("v=contrast:neighbors,score_space:projection,ensemble:3,lr:0.005")
    assert name == "v" and model_o == {"contrast": "neighbors", "score_space": "projection"}
    assert fit_o == {"ensemble": 3, "lr": 0.005}
    with pytest.raises(UsageError):
        parse_variant("v=colour:red")


def test_variant_key_follows_a_changed_default(monkeypatch):
    """Runs made under the legacy defaults keep their keys; a default changed since gets a key of its own, so
    a sweep never reuses a run trained under another default."""
    d = sweep.SupervisedConfig()
    monkeypatch.setattr(sweep, "LEGACY_FIT", {"epochs": d.epochs})
    same = sweep.variant_key({"tau": 0.2}, {"lr": 0.01})
    explicit = sweep.variant_key({"tau": 0.2}, {"lr": 0.01, "epochs": 7})
    monkeypatch.setattr(sweep, "LEGACY_FIT", {"epochs": d.epochs + 1})
    changed = sweep.variant_key({"tau": 0.2}, {"lr": 0.01})
    assert same != changed
    assert explicit == sweep.variant_key({"tau": 0.2}, {"lr": 0.01, "epochs": 7})  # an override wins either way
    assert changed != sweep.variant_key({"tau": 0.1}, {"lr": 0.01})


def test_ensemble_of_two_members_scores_validation_only():
    g = torch.Generator().manual_seed(0)
    n = 200
    y = (torch.rand(n, generator=g) < 0.1).long()
    x = torch.randn(n, 5, generator=g) + 2.0 * y[:, None]  # anomalies stand out in the features
    src, dst = torch.randint(0, n, (2, 800), generator=g)
    data = Data(x=x, edge_index=torch.cat([torch.stack([src, dst]), torch.stack([dst, src])], 1), y=y, num_nodes=n)
    single = run_one(data, "g", 0, {"score_space": "projection"}, {"epochs": 4, "eval_every": 2})
    ens = run_one(data, "g", 0, {"score_space": "projection"}, {"epochs": 4, "eval_every": 2, "ensemble": 2})
    assert len(ens["member_epochs"]) == 2 and ens["fit"]["ensemble"] == 2
    assert ens["member_epochs"][0] == single["best_epoch"]  # member 0 is the single run
    for r in (single, ens):
        assert 0.0 <= r["val"]["auroc"] <= 1.0 and np.isfinite(r["val"]["auprc"])
    # scored on the validation split only: as many nodes as the single run's validation metrics
    assert ens["val"]["num_nodes"] == single["val"]["num_nodes"] < n


def test_paired_rows_compare_seed_by_seed_on_the_seeds_both_ran():
    def rec(auroc, auprc):
        return {"val": {"auroc": auroc, "auprc": auprc}}

    runs = {"def": {0: rec(0.80, 0.50), 1: rec(0.70, 0.40), 2: rec(0.60, 0.30)},
            "v": {0: rec(0.90, 0.45), 1: rec(0.75, 0.50), 3: rec(0.99, 0.99)},  # seed 3: no reference run
            "w": {5: rec(0.5, 0.5)}}  # no seed in common: no row
    (row,) = sweep.paired_rows(runs, "def")
    name, seeds, d_auroc, d_auprc, ahead_auroc, ahead_auprc = row
    assert (name, seeds, ahead_auroc, ahead_auprc) == ("v", 2, 2, 1)
    assert d_auroc == pytest.approx(0.075) and d_auprc == pytest.approx(0.025)
    assert sweep.paired_rows(runs, "missing") == []
