"""User-facing errors: one line naming the file (or option) and the problem."""

from __future__ import annotations


class GraphInputError(ValueError):
    """A problem with the user's input, reported as ``<source>: <problem>``.

    Entry points catch this and print the message alone (no traceback), exiting with status 2.
    """

    def __init__(self, source: str, problem: str) -> None:
        self.source = str(source)
        self.problem = problem
        super().__init__(f"{self.source}: {problem}")
