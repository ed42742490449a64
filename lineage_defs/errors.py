"""One error tree for everything the user can get wrong.

Every user-facing error carries where (``path``, ``line``, ``col``), what (the
offending ``text`` and a message) and how to fix it (``fix``), both as
attributes and in the rendered message::

    pipelines/shop/orders.sql:3:15: unknown option 'keys' — did you mean 'key'?
        -- materialize ducklake://main/orders keys=id
                                              ^^^^
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass


def did_you_mean(word: str, choices: Iterable[str], cutoff: float = 0.6) -> str | None:
    """The closest of ``choices`` to ``word``, or None."""
    matches = difflib.get_close_matches(word, list(choices), n=1, cutoff=cutoff)
    return matches[0] if matches else None


@dataclass(frozen=True)
class Location:
    """A place in a user's file; ``line`` and ``col`` are 1-based."""

    path: str
    line: int = 0
    col: int = 0
    text: str = ""  # the whole source line
    width: int = 1  # how many characters the caret underlines

    def __str__(self) -> str:
        if not self.line:
            return self.path
        return f"{self.path}:{self.line}:{self.col}"


class LineageDefsError(Exception):
    """Base of every error lineage_defs raises on purpose."""

    def __init__(
        self,
        message: str,
        location: Location | None = None,
        fix: str | None = None,
        severity: str = "error",
    ) -> None:
        self.message = message
        self.location = location
        self.fix = fix
        self.severity = severity
        super().__init__(self.render())

    @property
    def path(self) -> str | None:
        return self.location.path if self.location else None

    @property
    def line(self) -> int:
        return self.location.line if self.location else 0

    @property
    def col(self) -> int:
        return self.location.col if self.location else 0

    @property
    def text(self) -> str:
        return self.location.text if self.location else ""

    def headline(self) -> str:
        where = f"{self.location}: " if self.location else ""
        warn = "warning: " if self.severity == "warning" else ""
        fix = f" — {self.fix}" if self.fix else ""
        return f"{where}{warn}{self.message}{fix}"

    def render(self) -> str:
        out = self.headline()
        loc = self.location
        if loc and loc.text:
            caret = " " * (max(loc.col, 1) - 1) + "^" * max(loc.width, 1)
            out += f"\n    {loc.text}\n    {caret}"
        return out


class AnnotationError(LineageDefsError):
    """A malformed or unknown annotation in a script header."""


class SpecError(LineageDefsError):
    """A problem across scripts: duplicate outputs, cycles, bad references."""


class RunError(LineageDefsError):
    """A step failed while running; names the script, statement and line."""


class ProjectErrors(LineageDefsError):
    """All problems of a pipelines folder, reported together like a compiler."""

    def __init__(self, errors: Sequence[LineageDefsError]) -> None:
        self.errors = list(errors)
        n = len(self.errors)
        body = "\n".join(e.render() for e in self.errors)
        super().__init__(f"{n} error{'s' if n != 1 else ''} in the pipelines folder:\n{body}")

    def render(self) -> str:  # the message is already the full list
        return self.message


def interruption(e: BaseException) -> BaseException | None:
    """The interruption behind ``e``, or None: a cancellation's ``KeyboardInterrupt`` (or Dagster's own
    interrupt), ``SystemExit``… — anything not an ``Exception`` — raised itself, or the cause of an error.

    DuckDB answers a signal that arrives during a query with ``RuntimeError('Query interrupted')``, the
    signal handler's exception as its cause: that run was cancelled, it did not fail.
    """
    seen: set[int] = set()
    cur: BaseException | None = e
    while cur is not None and id(cur) not in seen:
        if not isinstance(cur, Exception):
            return cur
        seen.add(id(cur))
        cur = cur.__cause__ or cur.__context__
    return None
