"""Shared command-line plumbing: logging set-up and one-line errors for user mistakes."""

from __future__ import annotations

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
