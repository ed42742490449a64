"""Quoting names and literals into SQL text — the one place it is done.

Only for identifiers and for configuration (paths, catalog names); partition
keys and payloads are never quoted into SQL: they are bound parameters.
"""

from __future__ import annotations


def ident(name: str) -> str:
    """A double-quoted identifier (DuckDB and PostgreSQL quote the same way).

    >>> ident('we"ird')
    '"we""ird"'
    """
    return '"' + name.replace('"', '""') + '"'


def literal(text: str) -> str:
    """A single-quoted string literal.

    >>> literal("it's")
    "'it''s'"
    """
    return "'" + text.replace("'", "''") + "'"
