"""Compile a step's SQL statement for execution, touching only tokens.

- ``'{partition}'`` becomes the bound parameter ``$partition``;
- a string holding an ``s3://`` URI (or any ``{partition}``) becomes a bound
  parameter whose value is the resolved location — partition values are never
  spliced into SQL text;
- ``ATTACH '<uri>' AS x`` is handed to the session, which attaches the
  configured catalog, file or DSN.

The rest of the statement is passed through byte for byte (no transpiling).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from lineage_defs import uris
from lineage_defs.errors import RunError
from lineage_defs.run.context import PartitionWindow, bind_params, resolve_token
from lineage_defs.run.substrates import canonical_substrate

_SUBSTRATE = re.compile(r"^(ducklake|duckdb|datatable)(://[^/\s]*/?)?\Z")


@dataclass(frozen=True)
class Compiled:
    sql: str
    params: dict[str, Any] = field(default_factory=dict)
    attach: tuple[str, str] | None = None  # (substrate URI, alias) for ATTACH '<uri>' AS alias


_PATH = re.compile(r"(/|\\|\.[A-Za-z0-9]{1,8}$)")  # a string that names a file or folder


def _tokens(sql: str, dialect: str) -> list[Any] | None:
    """The statement's tokens, or None when it cannot be tokenized (an open quote or comment)."""
    from sqlglot.dialects.dialect import Dialect

    try:
        return list(Dialect.get_or_raise("postgres" if dialect == "postgres" else "duckdb").tokenize(sql))
    except Exception:
        return None


def attach_target(sql: str, dialect: str = "duckdb") -> tuple[str, str] | None:
    """(substrate, alias) when the statement is ``ATTACH '<asset substrate>' AS alias``."""
    toks = _tokens(sql, dialect) or []
    words = [t for t in toks if t.text.upper() != "DATABASE"]
    if len(words) < 2 or words[0].text.upper() != "ATTACH":
        return None
    i = 1
    if words[i].text.upper() == "IF" and len(words) > i + 3:
        i += 3  # IF NOT EXISTS
    lit = words[i]
    if lit.token_type.name != "STRING" or not _SUBSTRATE.match(lit.text):
        return None
    alias = None
    for a, b in zip(words, words[1:]):
        if a.text.upper() == "AS":
            alias = b.text
    if alias is None:
        alias = lit.text.split("://", 1)[-1].strip("/") or lit.text
    return canonical_substrate(lit.text), alias


def compile_statement(
    sql: str,
    dialect: str,
    window: PartitionWindow | None,
    object_path: Any = None,
    macro: bool = False,
    paramstyle: str = "dollar",
) -> Compiled:
    """Rewrite one statement's tokens; ``object_path(uri)`` resolves s3:// objects.

    ``macro=True`` makes ``CREATE MACRO`` temporary so a macro library never
    persists into the warehouse. ``paramstyle="pyformat"`` emits ``%(name)s``
    placeholders (psycopg) and escapes every other ``%``.
    """
    pyformat = paramstyle == "pyformat"

    def ph(name: str) -> str:
        return f"%({name})s" if pyformat else f"${name}"

    def raw(text: str) -> str:
        return text.replace("%", "%%") if pyformat else text

    at = attach_target(sql, dialect)
    if at:
        return Compiled("", {}, at)
    toks = _tokens(sql, dialect)
    if toks is None:
        if uris.PARTITION_TOKEN in sql or "$partition" in sql:
            # passing it on would run the statement with '{partition}' unbound
            raise RunError(
                "this statement cannot be split into SQL tokens, so its partition cannot be bound",
                fix="close every string, quoted name and block comment in the statement",
            )
        toks = []  # nothing to bind: the engine reports the syntax error in its own words
    pieces: list[str] = []
    params: dict[str, Any] = {}
    values = bind_params(window)
    pos = 0
    prev: Any = None
    for t in toks:
        replacement: str | None = None
        kind = t.token_type.name
        if kind == "STRING":
            text = t.text
            if text == uris.PARTITION_TOKEN:
                replacement = ph("partition")
                params["partition"] = values["partition"]
            elif "://" in text and text.split("://", 1)[0] == "s3" and object_path is not None:
                name = f"__lineage_{len(params)}"
                params[name] = object_path(resolve_token(text, window))
                replacement = ph(name)
            elif uris.PARTITION_TOKEN in text:
                name = f"__lineage_{len(params)}"
                # a path gets the same rule as object keys: the key must be one safe segment
                params[name] = resolve_token(text, window) if _PATH.search(text) else text.replace(uris.PARTITION_TOKEN, values["partition"] or "")
                replacement = ph(name)
        elif uris.PARTITION_TOKEN in t.text:
            raise RunError(
                f"'{uris.PARTITION_TOKEN}' is bound only inside a string literal (here it is in {t.text!r})",
                fix=f"write '{uris.PARTITION_TOKEN}' in single quotes, or use $partition",
            )
        elif prev is not None and prev.token_type.name == "PARAMETER" and t.start == prev.end + 1 and t.text in values:
            params[t.text] = values[t.text]
            if pyformat:  # replace the `$` and the name together
                pieces.append(raw(sql[pos : prev.start]))
                pieces.append(ph(t.text))
                pos = t.end + 1
                prev = t
                continue
        elif macro and t.text.upper() == "MACRO" and prev is not None and prev.text.upper() in ("CREATE", "REPLACE"):
            replacement = "TEMP MACRO"
        if replacement is not None:
            pieces.append(raw(sql[pos : t.start]))
            pieces.append(replacement)
            pos = t.end + 1
        prev = t
    pieces.append(raw(sql[pos:]))
    return Compiled("".join(pieces), params, None)


def uses_substrates(statements: list[str], dialect: str) -> dict[str, str]:
    """Substrates a script attaches itself, by URI → alias."""
    out = {}
    for s in statements:
        at = attach_target(s, dialect)
        if at:
            out[at[0]] = at[1]
    return out
