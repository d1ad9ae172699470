"""Splits: stratified, disjoint and covering, deterministic, given masks respected, by graph."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch_geometric.data import Data

from gcad_dist.data.splits import make_split, split_from_masks, stratified_split


def _labels(n=1000, rate=0.05, seed=0):
    return (np.random.default_rng(seed).random(n) < rate).astype(np.int64)


def test_stratified_disjoint_covering_and_proportional():
    y = _labels()
    sp = stratified_split(y, seed=1)
    tr, va, te = (m.numpy() for m in sp)
    assert not (tr & va).any() and not (tr & te).any() and not (va & te).any()
    assert (tr | va | te).all()
    n_pos = y.sum()
    for m, frac in ((tr, 0.4), (va, 0.2), (te, 0.4)):
        assert abs(y[m].sum() - frac * n_pos) <= 1  # each class split in proportion
        assert abs(m.sum() - frac * y.size) <= 2


def test_deterministic_and_seed_dependent():
    y = _labels()
    a, b, c = stratified_split(y, seed=3), stratified_split(y, seed=3), stratified_split(y, seed=4)
    assert torch.equal(a.train, b.train) and torch.equal(a.test, b.test)
    assert not torch.equal(a.train, c.train)


def test_custom_fractions_and_bad_fractions():
    y = _labels(500)
    sp = stratified_split(y, seed=0, train=0.6, val=0.1)
    assert sp.sizes()["train"] == pytest.approx(300, abs=2)
    with pytest.raises(ValueError):
        stratified_split(y, train=0.7, val=0.4)


def test_given_masks_respected_and_index_by_seed():
    n, S = 50, 3
    rng = np.random.default_rng(0)
    part = rng.integers(0, 3, (S, n))
    data = Data(x=torch.zeros(n, 2), y=torch.zeros(n, dtype=torch.long),
                train_mask=torch.from_numpy(part == 0), val_mask=torch.from_numpy(part == 1),
                test_mask=torch.from_numpy(part == 2))
    sp = make_split(data, seed=4)  # 4 % 3 = 1
    assert torch.equal(sp.train, torch.from_numpy(part[1] == 0))
    assert torch.equal(sp.test, torch.from_numpy(part[1] == 2))
    assert sp.source == "given[1]"
    sp2 = make_split(data, seed=4, split_index=2)
    assert torch.equal(sp2.val, torch.from_numpy(part[2] == 1))
    with pytest.raises(ValueError):
        make_split(data, split_index=3)


def test_overlapping_given_masks_rejected():
    m = torch.ones(1, 5, dtype=torch.bool)
    with pytest.raises(ValueError):
        split_from_masks(m, m, ~m, 0)


def test_without_masks_falls_back_to_stratified():
    y = torch.from_numpy(_labels(300))
    sp = make_split(Data(x=torch.zeros(300, 1), y=y), seed=7)
    assert sp.source.startswith("random")
    assert torch.equal(sp.train, stratified_split(y, seed=7).train)


def test_multi_graph_split_keeps_graphs_whole():
    rng = np.random.default_rng(0)
    gid = np.repeat(np.arange(40), rng.integers(3, 10, 40))
    y = (rng.random(gid.size) < 0.1).astype(np.int64)
    sp = stratified_split(y, seed=0, graph_id=gid)
    part = np.select([sp.train.numpy(), sp.val.numpy(), sp.test.numpy()], [0, 1, 2])
    for g in np.unique(gid):
        assert np.unique(part[gid == g]).size == 1
    assert {0, 1, 2} <= set(np.unique(part))
