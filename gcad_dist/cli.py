"""Command-line plumbing of the training CLIs: the shared helpers of :mod:`partitioning.cli`
(``UsageError``, ``setup_logging``, ``run_cli``, ``auto_or``) and the runtime options every training CLI has."""

from __future__ import annotations

import argparse

from partitioning.cli import (ArgumentParser, DefaultsHelpFormatter, UsageError, auto_or, bar_disable, run_cli,
                              setup_logging)

__all__ = ["UsageError", "setup_logging", "run_cli", "add_runtime_options", "ArgumentParser", "DefaultsHelpFormatter",
           "auto_or", "bar_disable"]


def add_runtime_options(p: argparse.ArgumentParser, defaults: object, plots: bool = True) -> None:
    """The options every training CLI shares: --device, --threads, [--no-plots], --no-progress, -v.

    --no-plots / --no-progress leave ``plots`` / ``progress`` out of the namespace unless given, so the
    settings dataclass default (True) applies.
    """
    p.add_argument("--device", default=getattr(defaults, "device"), help="auto (CUDA when available), cpu, cuda, cuda:N")
    p.add_argument("--threads", type=int, default=getattr(defaults, "threads"), help="torch CPU threads (0 = torch default)")
    if plots:
        p.add_argument("--no-plots", dest="plots", action="store_false", default=argparse.SUPPRESS,
                       help="do not write the PNG plots (written by default)")
    p.add_argument("--no-progress", dest="progress", action="store_false", default=argparse.SUPPRESS,
                   help="no tqdm progress bar (shown by default)")
    p.add_argument("-v", "--verbose", action="store_true", help="debug logging")
