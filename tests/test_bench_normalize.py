"""bench/normalize.py: the table of the build's normalisations, and its checks."""

from __future__ import annotations

import pytest


def test_table_has_the_methods_and_the_ratios(capsys: pytest.CaptureFixture) -> None:
    from bench.normalize import main

    assert main(["--nodes", "500", "--features", "4", "--heavy", "2", "--repeats", "1"]) == 0
    out = capsys.readouterr().out
    assert "500 x 4, 2 log-normal columns" in out
    rows = [line for line in out.splitlines() if line.startswith("| standard") or line.startswith("| power")]
    assert [r.split(" | ")[0] for r in rows] == ["| standard", "| power", "| power-sklearn"]
    assert " | 1.0x | " in rows[0] and rows[2].endswith("| 1.00x |")
    assert "exponent fit alone (CPU s, median): vectorised" in out


def test_the_reference_fit_is_scikit_learns_and_is_put_back() -> None:
    """``power-sklearn`` times the former fit, whose exponents the vectorised one reproduces."""
    import numpy as np

    from bench.normalize import _normalize, _sklearn_fit_power_lambdas
    from partitioning import features

    rng = np.random.default_rng(0)
    z = np.c_[rng.lognormal(size=800), rng.normal(size=800), np.ones(800)]
    np.testing.assert_allclose(_sklearn_fit_power_lambdas(z), features.fit_power_lambdas(z), atol=1e-5)
    fit = features.fit_power_lambdas
    _normalize(z.astype(np.float32), "power-sklearn")
    assert features.fit_power_lambdas is fit


def test_bad_options_are_one_line_errors() -> None:
    from gcad_dist.cli import UsageError
    from bench.normalize import main

    with pytest.raises(UsageError, match="--heavy"):
        main(["--features", "4", "--heavy", "5"])
