"""bench/gemm_precision.py: it times the link MLP's three products in fp32 and bf16 and prints their ratios."""

from __future__ import annotations

import pytest

from bench.gemm_precision import GemmPrecisionConfig, main, measure


def test_every_product_and_variant_is_timed() -> None:
    res = measure(GemmPrecisionConfig(edges=1000, hidden=8, chunk=256, repeats=1))
    assert set(res) == {"forward z = A W1^T", "backward dW1 = G^T A", "backward dA = G W1"}
    for times in res.values():
        assert set(times) == {"fp32", "bf16", "bf16 + conversions"} and all(t > 0 for t in times.values())


def test_cli_prints_the_table_with_ratios(capsys) -> None:
    assert main(["--edges", "600", "--hidden", "8", "--chunk", "128", "--repeats", "1"]) == 0
    out = capsys.readouterr().out
    assert "fp32 / bf16 + conversions" in out and out.count("x |") >= 8  # 4 rows x 2 ratios
    with pytest.raises(Exception, match="--chunk"):
        main(["--chunk", "0"])
