"""bench.labelfree_contexts: the local-context scores and the table (no pre-training here)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from bench.labelfree_contexts import edge_suspicion, neighbour_contrast, table


def test_neighbour_contrast_ranks_a_node_unlike_its_neighbours_first() -> None:
    # a ring of 8 nodes with similar features; node 3 carries the opposite vector
    n = 8
    src = torch.arange(n)
    dst = (src + 1) % n
    ei = torch.stack([torch.cat([src, dst]), torch.cat([dst, src])])
    h = torch.ones(n, 4) + 0.01 * torch.randn(n, 4, generator=torch.Generator().manual_seed(0))
    h[3] = -h[3]
    s = neighbour_contrast(h, ei)
    assert s.shape == (n,) and int(np.argmax(s)) == 3
    assert s[3] > 1.5 and np.delete(s, [2, 3, 4]).max() < 0.01  # 2 and 4 have node 3 as one of two neighbours


def test_edge_suspicion_is_the_mean_of_one_minus_p_over_in_edges() -> None:
    ei = torch.tensor([[0, 1, 2], [1, 2, 1]])
    p = torch.tensor([0.9, 0.2, 0.5])
    s = edge_suspicion(p, ei, 3)
    np.testing.assert_allclose(s, [0.0, (0.1 + 0.5) / 2, 0.8], rtol=1e-6)


def test_table_has_one_row_per_run_and_only_the_contexts_present() -> None:
    rows = [{"dataset": "g", "val_nodes": 10, "val_anomalies": 2, "mix": "inject", "hops": 2, "edges_kept": 0.5,
             "seed": 0, "val_auroc": {"halo": 0.61, "nbr-cosine": 0.7}}]
    t = table(rows).splitlines()
    assert len(t) == 3 and "| halo | nbr-cosine |" in t[0] and "links" not in t[0]
    assert "| g (10 / 2) | inject | 2 | graph | 50% | 0 | 0.610 | 0.700 |" == t[2]
    rows[0].update(contrast="ego", swap=0.15)
    assert "| inject | 2 | ego swap 0.15 | 50% |" in table(rows).splitlines()[2]
    rows[0].update(hidden=256)
    assert "| inject | 2 | ego swap 0.15 hidden 256 | 50% |" in table(rows).splitlines()[2]


def test_labelfree_pretext_variants_and_paired_table():
    """``bench.labelfree_pretext``: variants parse to harness options (a bad one is a usage error), and the table
    pairs each variant with the first on the same seeds."""
    from gcad_dist.cli import UsageError
    from bench.labelfree_pretext import parse_variant, table

    assert parse_variant("B") == ("B", {})
    assert parse_variant("T5=pre_tails:0.05,pre_epochs:2") == ("T5", {"pre_tails": 0.05, "pre_epochs": 2})
    assert parse_variant("M=pre_sample_threshold:1000,pre_fanout:-1") == (
        "M", {"pre_sample_threshold": 1000, "pre_fanout": -1})
    for bad in ("T=pre_tail:0.05", "T=pre_tails", "T=pre_epochs:x", "=pre_tails:0.1"):
        with pytest.raises(UsageError, match="--variants"):
            parse_variant(bad)
    rows = [{"dataset": "g", "variant": v, "seed": s, "auroc": a, "auprc": p}
            for v, s, a, p in (("B", 0, 0.6, 0.1), ("B", 1, 0.7, 0.2), ("T", 0, 0.65, 0.1), ("T", 1, 0.68, 0.3))]
    out = table(rows, ["B", "T"])
    assert "| g | B | 2 | 0.650 / 0.1500 |  |  |" in out
    assert "| g | T | 2 | 0.665 / 0.2000 | +0.015 / +0.0500 | 1/2 |" in out
