"""Shared command-line plumbing for every CLI of the project: logging set-up and one-line errors.

It lives in ``partitioning`` (the lower layer) so that both ``partitioning`` and ``gcad_dist`` can use
it while imports run one way (``gcad_dist`` -> ``partitioning``); :mod:`gcad_dist.cli` re-exports it.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Callable
from typing import TypeVar

from partitioning.errors import GraphInputError

__all__ = ["UsageError", "setup_logging", "run_cli", "ArgumentParser", "DefaultsHelpFormatter", "bar_disable"]


class ArgumentParser(argparse.ArgumentParser):
    """argparse's parser, whose errors (an unknown option, a value of the wrong type, a missing required option) end
    like every other user error: one line ``error: <problem>`` naming where to read more, exit status 2, no usage
    block (argparse prints about thirty lines of usage before its error)."""

    def error(self, message: str) -> None:  # noqa: D102 - argparse's hook
        self.exit(2, f"error: {message} (see {self.prog} --help)\n")


class DefaultsHelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """``--help`` shows each option's default, except where there is none to show: a default of None (the help
    then says what decides the value), a help text that already states it, or a flag that takes no value (its help
    says what it turns on or off; ``--no-progress (default: True)`` would read as "off by default")."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if action.default is None or "(default" in text or action.nargs == 0:
            return text
        return super()._get_help_string(action)


class UsageError(ValueError):
    """A bad option value or combination, reported as one line without a traceback."""


T = TypeVar("T")


def auto_or(cast: Callable[[str], T], what: str) -> Callable[[str], T | None]:
    """An argparse ``type``: ``auto`` -> None (the program chooses), else ``cast(text)`` (``what`` names the kind
    in the error, e.g. "an integer")."""

    def parse(text: str) -> T | None:
        if text == "auto":
            return None
        try:
            return cast(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected 'auto' or {what}, got {text!r}") from None

    return parse


def bar_disable(progress: bool = True) -> bool | None:
    """tqdm's ``disable`` for a progress bar the user asked for (``progress``) or not: None when asked, so that tqdm
    draws it on a terminal only and a log redirected to a file gets no bar lines; True when not asked."""
    return None if progress else True


def setup_logging(verbose: bool = False) -> None:
    """Log to stderr with timestamps; ``verbose`` turns on DEBUG."""
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        datefmt="%H:%M:%S",
    )
    # their DEBUG lines (font scans: 150 a plot) would drown --verbose's own, and matplotlib's one INFO line ("generated
    # new fontManager", a first plot on a machine) says nothing to a user: shown with --verbose only
    for noisy in ("matplotlib", "PIL"):
        logging.getLogger(noisy).setLevel(logging.INFO if verbose else logging.WARNING)
    # FAISS's loader tries its AVX512 build first and logs the failed import as a multi-line INFO
    # ("Could not load library ... ModuleNotFoundError"): not an error, so shown with --verbose only
    logging.getLogger("faiss.loader").setLevel(logging.DEBUG if verbose else logging.WARNING)


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
