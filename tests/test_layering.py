"""Imports run one way: ``gcad_dist`` may import ``partitioning``, never the reverse."""

from __future__ import annotations

import subprocess
import sys


def test_partitioning_never_imports_gcad_dist():
    code = (
        "import importlib, pkgutil, sys\n"
        "import partitioning\n"
        "for m in pkgutil.walk_packages(partitioning.__path__, 'partitioning.'):\n"
        "    importlib.import_module(m.name)\n"
        "from partitioning import build, synthetic\n"
        "for mod in (build, synthetic):\n"
        "    try:\n"
        "        mod.main(['--help'])\n"
        "    except SystemExit:\n"
        "        pass\n"
        "bad = sorted(n for n in sys.modules if n == 'gcad_dist' or n.startswith('gcad_dist.'))\n"
        "print('IMPORTED:' + ','.join(bad))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    line = [ln for ln in out.stdout.splitlines() if ln.startswith("IMPORTED:")][-1]
    assert line == "IMPORTED:", f"partitioning imported {line[len('IMPORTED:'):]}"
