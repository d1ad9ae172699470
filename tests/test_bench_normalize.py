"""bench/normalize.py: the table of the build's normalisations, and its checks."""

from __future__ import annotations

import pytest


def test_table_has_both_methods_and_the_ratio(capsys: pytest.CaptureFixture) -> None:
    from bench.normalize import main

    assert main(["--nodes", "500", "--features", "4", "--heavy", "2", "--repeats", "1"]) == 0
    out = capsys.readouterr().out
    assert "500 x 4, 2 log-normal columns" in out
    rows = [line for line in out.splitlines() if line.startswith("| standard") or line.startswith("| power")]
    assert len(rows) == 2 and rows[0].endswith("| 1.0x |")


def test_bad_options_are_one_line_errors() -> None:
    from gcad_dist.cli import UsageError
    from bench.normalize import main

    with pytest.raises(UsageError, match="--heavy"):
        main(["--features", "4", "--heavy", "5"])
