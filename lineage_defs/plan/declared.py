"""Declared column lineage (``column <out> <- <uri>.<col> [copy|mod]`` lines) → the step's column edges.

Python and Bash steps have no inferred column lineage: their ``column`` lines
are all of it. Each source must be an input of the step (an ``on`` line, or a
read inferred from the body, muted or not), so a typo in a URI is an error at
the word, not a silent external asset. In a SQL step the lines win over what
sqlglot inferred for that output column (SPEC section 7), with a warning when
inference had found sources (the declaration then hides them), and an error
when the SELECT's columns are known and lack the declared one.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from lineage_defs.errors import AnnotationError, LineageDefsError, SpecError
from lineage_defs.parse.model import ColumnDecl, Header
from lineage_defs.plan.spec import Analysis, ColumnEdge, EdgeKind


def declared_edges(
    h: Header,
    a: Analysis,
    target: str,
    inputs: Iterable[str],
    resolve: Callable[[str], str],
    errors: list[LineageDefsError],
    warnings: list[LineageDefsError],
) -> list[ColumnEdge]:
    """The edges of ``h.columns`` into ``target`` (the step's primary output); problems go to the lists."""
    known = set(inputs)
    marker = "--" if h.language.is_sql else "#"
    edges: list[ColumnEdge] = []
    for c in h.columns:
        for src in c.sources:
            uri = resolve(src.uri)
            if uri not in known and src.at is not None:
                reads = ", ".join(sorted(known)) or "nothing"
                errors.append(AnnotationError(
                    f"{src.uri} is not an input of this step (it reads {reads})",
                    src.at,
                    f"add '{marker} on {src.uri}' if the script reads it (e.g. through runtime.connect()), or correct the URI",
                ))
                continue
            edges.append(ColumnEdge(f"{uri}.{src.column}", f"{target}.{c.output}", EdgeKind(c.kind)))
    if h.language.is_sql:
        _sql_checks(h, a, resolve, errors, warnings)
    return edges


def _sql_checks(h: Header, a: Analysis, resolve: Callable[[str], str], errors: list[LineageDefsError], warnings: list[LineageDefsError]) -> None:
    """A declared column the SELECT does not have is an error; one whose lineage was inferred, a warning."""
    if not h.columns:  # most steps declare none: skip indexing the inferred edges (every warm load)
        return
    fold = (lambda n: n) if h.language.value == "postgres" else str.lower  # DuckDB ignores case
    outputs = {fold(n) for n in a.output_columns} if a.output_columns is not None else None
    inferred: dict[str, list[str]] = {}
    for e in a.edges:
        if e.target_column is not None and e.kind is not EdgeKind.SCAN:
            inferred.setdefault(fold(e.target_column), []).append(f"{resolve(e.source_uri)}.{e.source_column}")
    warned: set[str] = set()
    for c in h.columns:
        name = fold(c.output)
        if outputs is not None and name not in outputs:
            errors.append(SpecError(
                f"column '{c.output}' is not a column of the step's SELECT (it has {', '.join(a.output_columns or ()) or 'none'})",
                c.at,
                "name an output column of the SELECT, or remove the line",
            ))
        elif name in inferred and name not in warned:
            warned.add(name)
            found = ", ".join(sorted(set(inferred[name])))
            warnings.append(SpecError(
                f"column '{c.output}' of a SQL step has inferred lineage ({found}): the 'column' line replaces it",
                c.at,
                "remove the line unless the inferred lineage is wrong (column lines are for Python and Bash steps, whose lineage cannot be inferred)",
                severity="warning",
            ))


def declared_outputs(decls: Iterable[ColumnDecl]) -> tuple[str, ...]:
    """The declared output columns, each once, in order of first declaration."""
    return tuple(dict.fromkeys(c.output for c in decls))
