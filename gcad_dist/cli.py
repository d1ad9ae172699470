"""Shared command-line plumbing: logging set-up and one-line errors for user mistakes."""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Callable

from partitioning.errors import GraphInputError

log = logging.getLogger("gcad_dist")


class UsageError(ValueError):
    """A bad option value or combination, reported as one line without a traceback."""


def setup_logging(verbose: bool = False) -> None:
    """Log to stderr with timestamps; ``verbose`` turns on DEBUG."""
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        datefmt="%H:%M:%S",
    )


def run_cli(main: Callable[[list[str] | None], int | None], argv: list[str] | None = None) -> None:
    """Run ``main`` and turn user errors (bad files, bad options) into ``error: ...`` + exit status 2."""
    try:
        code = main(argv)
    except (GraphInputError, UsageError, FileNotFoundError) as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        sys.exit(130)
    sys.exit(code or 0)


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
