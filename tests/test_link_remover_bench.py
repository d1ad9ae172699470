"""bench.link_remover: which edges it groups, the separation it reports, and that it reads no test label."""

from __future__ import annotations

import numpy as np

from bench.link_remover import edge_groups, run_one, separation


def test_edge_groups_and_separation():
    # nodes 0, 1 normal in the part, 2 anomalous in the part, 3 normal outside it, 4 unlabelled
    y = np.array([0, 0, 1, 0, -1])
    part = np.array([True, True, True, False, True])
    ei = np.array([[0, 1, 0, 2, 3, 0, 2, 1],
                   [1, 0, 2, 0, 0, 4, 2, 3]])
    sel, nn = edge_groups(ei, y, part, both=True)
    # both ends in the part, labelled, normal-normal or mixed, no loop: 0-1, 1-0, 0-2, 2-0
    assert sel.tolist() == [True, True, True, True, False, False, False, False]
    assert nn.tolist() == [True, True, False, False]
    sel, nn = edge_groups(ei, y, part, both=False)  # one end is enough: 3-0 and 1-3 join
    assert sel.tolist() == [True, True, True, True, True, False, False, True]
    assert separation(np.array([0.9, 0.8, 0.1, 0.2]), np.array([True, True, False, False])) == 1.0
    assert separation(np.array([0.1, 0.2, 0.9, 0.8]), np.array([True, True, False, False])) == 0.0
    assert np.isnan(separation(np.array([0.5, 0.6]), np.array([True, True])))


def test_run_reads_no_test_label(tmp_path, monkeypatch):
    import gcad_dist.supervised as supervised
    from partitioning.io import save_npz
    from partitioning.synthetic import SyntheticConfig, generate

    path = tmp_path / "g.npz"
    save_npz(generate(SyntheticConfig(nodes=300, avg_degree=6, features=8, anomaly_fraction=0.1, seed=0)), path)
    seen = []
    fit = supervised.fit_supervised

    def spy(model, data, split, cfg=None, state_name=None):
        seen.append(int(split[2].sum()))
        return fit(model, data, split, cfg, state_name)

    monkeypatch.setattr("gcad_dist.train.fit_supervised", spy)
    rows = run_one(path, 0, epochs=6, eval_every=2)
    assert seen == [0]  # the fit got an empty test mask
    assert len(rows) == 4 and {r["edges"] for r in rows} == {"train (both ends)", "validation"}
    for r in rows:
        assert 0.0 <= r["p_normal"] <= 1.0 and 0.0 <= r["p_mixed"] <= 1.0 and r["mixed"] > 0
        assert np.isnan(r["auroc_p"]) or 0.0 <= r["auroc_p"] <= 1.0
