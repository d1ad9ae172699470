"""bench.boosted_settings: the blend with other boosted-trees settings, against the shipped blend, on validation."""

from __future__ import annotations

import re

import pytest

from bench.boosted_settings import SETTINGS, main, measure
from gcad_dist.cli import UsageError


@pytest.fixture(scope="module")
def path(tmp_path_factory):
    """A small generated graph with 6% planted anomalies, written once for this module's tests."""
    from partitioning.io import save_npz
    from partitioning.synthetic import SyntheticConfig, generate

    out = tmp_path_factory.mktemp("boosted_settings") / "g.npz"
    save_npz(generate(SyntheticConfig(nodes=1500, avg_degree=6, features=8, anomaly_fraction=0.06, seed=2)), out)
    return out


def test_the_defaults_row_is_the_shipped_blend_and_settings_change_the_trees(path) -> None:
    """'defaults' measures what gcad_dist's forest view fits (fit_tree_blend) on the same split; another setting
    fits other trees; every blend finds the planted anomalies on validation."""
    import torch

    from gcad_dist.data.splits import make_split
    from gcad_dist.metrics import auprc, auroc
    from gcad_dist.model.tree_blend import fit_tree_blend
    from gcad_dist.quality import _load

    _, data = _load(path)
    out = measure(data, seed=0, label_fraction=1.0, settings=["defaults", "regularised"])
    split = make_split(data, seed=0)
    y = torch.as_tensor(data.y).numpy()
    shipped = fit_tree_blend(data.x, data.edge_index, y, split.train.numpy(), seed=0)(data.x, data.edge_index).numpy()
    val = split.val.numpy()
    assert out["defaults"] == pytest.approx((auroc(y[val], shipped[val]), auprc(y[val], shipped[val])), abs=1e-9)
    assert out["regularised"] != out["defaults"]
    for key in ("forest", "defaults", "regularised"):
        assert 0.6 < out[key][0] <= 1.0 and 0.0 < out[key][1] <= 1.0
    assert out["anomalies"][1] >= 10


def test_the_table_has_a_row_per_graph_and_fraction_and_a_summary(path, capsys) -> None:
    assert main(["--datasets", str(path), "--seeds", "0", "--label-fractions", "1", "0.5",
                 "--settings", "slow", "early-stop"]) == 0
    out = capsys.readouterr().out
    rows = [line for line in out.splitlines() if line.startswith(f"| {path} |")]
    assert len(rows) == 2
    cells = [c.strip() for c in rows[0].strip("|").split("|")]
    assert cells[1] == "1" and len(cells) == 8  # graph, fraction, seeds, anomalies, forest, defaults, 2 settings
    for cell in cells[6:]:
        assert re.fullmatch(r"\d\.\d{3} / \d\.\d{3} \([+-]\d\.\d{4} / [+-]\d\.\d{4}\)", cell)
    summary = next(line for line in out.splitlines() if line.startswith("| mean change"))
    assert len(re.findall(r"[+-]\d\.\d{4} / [+-]\d\.\d{4} \(", summary)) == 2


def test_bad_input_is_refused(path) -> None:
    with pytest.raises(UsageError, match="--label-fractions"):
        main(["--datasets", str(path), "--label-fractions", "0"])
    with pytest.raises(SystemExit):
        main(["--datasets", str(path), "--settings", "deep"])
    assert set(SETTINGS) >= {"defaults"} and SETTINGS["defaults"] == {}
