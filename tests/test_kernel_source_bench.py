"""bench.kernel_source: one process per kernel source, a table with the ratios to the first (a small graph)."""

from __future__ import annotations

import numpy as np
import pytest

from bench import kernel_source
from gcad_dist.model import native


def test_bad_source_is_a_one_line_error(capsys):
    from gcad_dist.cli import run_cli

    with pytest.raises(SystemExit) as e:
        run_cli(kernel_source.main, ["--graph", "g.npz", "--sources", "/no/such/edge_kernels.cpp"])
    assert e.value.code != 0 and "no such file" in capsys.readouterr().err


def test_two_sources_are_timed_alternately(tmp_path, capsys):
    if not native.available():
        pytest.skip(native.status())
    rng = np.random.default_rng(0)
    n = 300
    g = tmp_path / "g.npz"
    np.savez(g, x=rng.normal(size=(n, 8)).astype(np.float32), edge_index=rng.integers(0, n, (2, 3000)),
             y=(rng.random(n) < 0.1).astype(np.int64))
    src = str(native.SOURCE)
    assert kernel_source.main(["--graph", str(g), "--sources", src, src, "--caps", "0", "--rounds", "1",
                               "--steps", "1"]) == 0
    rows = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith(f"| {src} |")]
    assert len(rows) == 2 and rows[0].split("|")[4].strip() == "1.00x"
