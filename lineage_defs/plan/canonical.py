"""What a step's code means, without comments and formatting, and the column types its SQL fixes.

``canonical(text, language)`` is equal for two versions of a script exactly
when they differ only in comments, prose and layout: SQL through sqlglot
(parsed, printed back without comments, identifiers normalized), Python through
its AST, Bash and dbt's Jinja SQL with comments dropped and white space
collapsed; the header's annotation lines (not its prose) are part of it.
``planned_types`` reads the types a SQL step's final query spells out
(``CAST``, ``::``, typed literals): "types where known".
"""

from __future__ import annotations

import ast
import re

from lineage_defs.parse.header import leading_comments
from lineage_defs.parse.model import Language
from lineage_defs.parse.tokens import is_annotation

_JINJA_COMMENT = re.compile(r"\{#.*?#\}", re.S)
_SQL_COMMENT = re.compile(r"--[^\n]*|/\*.*?\*/", re.S)


def _annotations(text: str, language: Language) -> list[str]:
    comments, _ = leading_comments(text, language)
    return [" ".join(c.content.split()) for c in comments if is_annotation(c.content)]


def _body(text: str, language: Language) -> str:
    _, body_line = leading_comments(text, language)
    return "\n".join(text.splitlines()[body_line - 1 :])


def canonical_sql(sql: str, dialect: str) -> str:
    """sqlglot's reading of ``sql``, printed back without comments; the collapsed text if it does not parse."""
    import sqlglot
    from sqlglot.optimizer.normalize_identifiers import normalize_identifiers

    try:
        trees = [t for t in sqlglot.parse(sql, read=dialect) if t is not None]
        return ";\n".join(normalize_identifiers(t, dialect=dialect).sql(dialect=dialect, comments=False) for t in trees)
    except Exception:  # sqlglot raises several error types; the fallback is still comment-blind
        return " ".join(_SQL_COMMENT.sub(" ", sql).split())


def canonical(text: str, language: Language) -> str:
    """The meaning of one script (or dbt model file) as a comparable string."""
    if language is Language.DBT:
        return " ".join(_SQL_COMMENT.sub(" ", _JINJA_COMMENT.sub(" ", text)).split())
    head = "\n".join(_annotations(text, language))
    body = _body(text, language)
    if language.is_sql:
        code = canonical_sql(body, "postgres" if language is Language.POSTGRES else "duckdb")
    elif language is Language.PYTHON:
        try:
            code = ast.dump(ast.parse(body))
        except SyntaxError:
            code = " ".join(body.split())
    else:  # Bash: drop comment lines, collapse white space
        code = "\n".join(" ".join(line.split()) for line in body.splitlines() if line.strip() and not line.lstrip().startswith("#"))
    return f"{head}\n--\n{code}"


def normalize_type(name: str, dialect: str = "duckdb") -> str | None:
    """One spelling per type (``VARCHAR`` and ``TEXT``, ``INTEGER`` and ``INT``), as sqlglot prints it; None if unknown."""
    from sqlglot import exp

    if not name or name.lower() == "unknown":
        return None
    try:
        return exp.DataType.build(name, dialect=dialect).sql(dialect=dialect).upper()
    except Exception:  # a type sqlglot does not know: compare it as written
        return name.upper()


def planned_types(sql: str, dialect: str) -> dict[str, str]:
    """Output column (lower case) → type, for the columns the final query's SELECT list types itself."""
    import sqlglot
    from sqlglot import exp
    from sqlglot.optimizer.annotate_types import annotate_types

    try:
        trees = [t for t in sqlglot.parse(sql, read=dialect) if t is not None]
    except Exception:  # unparsable: no types known
        return {}
    query = next((t for t in reversed(trees) if isinstance(t, exp.Query)), None)
    if query is None:
        return {}
    select = query if isinstance(query, exp.Select) else query.find(exp.Select)
    if select is None:
        return {}
    try:
        annotate_types(select, dialect=dialect)
    except Exception:  # an expression sqlglot cannot type: keep the casts only
        pass
    out: dict[str, str] = {}
    for proj in select.expressions:
        name, inner = proj.output_name, proj.unalias()
        if not name or isinstance(inner, exp.Star):
            continue
        if isinstance(inner, (exp.Cast, exp.TryCast)):
            out[name.lower()] = inner.to.sql(dialect=dialect).upper()
        elif inner.type is not None and not inner.is_type(exp.DataType.Type.UNKNOWN) and not isinstance(inner, exp.Column):
            out[name.lower()] = inner.type.sql(dialect=dialect).upper()
    return out
