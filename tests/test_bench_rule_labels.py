"""bench.rule_labels: the graph's labels are the rule (plus the asked label noise), the rest of the graph is the
generator's, and bad settings are refused with a one-line error."""

from __future__ import annotations

import numpy as np
import pytest

from bench.rule_labels import RuleLabelsConfig, main, make_rule_graph, rule_labels
from gcad_dist.cli import UsageError


def test_the_labels_are_the_rule_over_the_count_columns(tmp_path) -> None:
    from partitioning.io import load_graph

    cfg = RuleLabelsConfig(out=str(tmp_path / "r.npz"), nodes=3000, features=10, label_noise=0.0, seed=2)
    assert main(["--out", cfg.out, "--nodes", "3000", "--features", "10", "--label-noise", "0", "--seed", "2"]) == 0
    g = load_graph(cfg.out)
    counts = g.x[:, :3]
    assert np.array_equal(counts, np.floor(counts)) and (counts >= 0).all()  # integer counts
    assert np.array_equal(g.y.astype(bool), rule_labels(g.x[:, :6], cfg.anomaly_fraction))
    assert 0.02 < g.y.mean() < 0.05  # about --anomaly-fraction (ties among the counts take a little)
    # each part of the rule marks anomalies; a node that meets neither is normal
    assert g.y[counts[:, 2] > np.quantile(counts[:, 2], 0.99)].all()
    assert (g.y[(counts[:, 0] <= np.median(counts[:, 0])) & (counts[:, 2] <= np.median(counts[:, 2]))] == 0).all()
    # the same seed gives the same graph; label noise swaps as many anomalies out as normal nodes in
    again = make_rule_graph(cfg)
    assert np.array_equal(again.x, g.x) and np.array_equal(again.y, g.y)
    noisy = make_rule_graph(RuleLabelsConfig(nodes=3000, features=10, label_noise=0.2, seed=2))
    assert noisy.y.sum() == g.y.sum() and 0 < (noisy.y != g.y).sum() <= 0.4 * g.y.sum() + 1
    assert np.array_equal(noisy.x, g.x)


@pytest.mark.parametrize("args, match", [
    (["--count-columns", "2"], "--count-columns"),
    (["--features", "4", "--count-columns", "5"], "--count-columns"),
    (["--anomaly-fraction", "0.5"], "--anomaly-fraction"),
    (["--label-noise", "0.6"], "--label-noise"),
    (["--community-share", "1.5"], "--community-share"),
])
def test_bad_settings_are_refused(tmp_path, args, match) -> None:
    with pytest.raises(UsageError, match=match):
        main(["--out", str(tmp_path / "r.npz"), *args])
