"""A Python or Bash step's declared column lineage, checked against what it wrote and what it read.

``column <out> <- <uri>.<col>`` lines are the only column lineage such a step
has, so a line naming a column the step does not write (or an input column
that does not exist) would put a false edge into the graph, ``impact`` and
``dagster/column_lineage``. A managed write checks its output columns inside
its transaction (as the write's audit: a failure rolls the write back) and its
source columns before it begins; a manual step's target is checked once the
step wrote it (observed, like its row count). Either way the step fails, at
the ``column`` line, naming the column.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from lineage_defs import uris
from lineage_defs.errors import LineageDefsError, Location, RunError, did_you_mean
from lineage_defs.plan.spec import ScriptStep

if TYPE_CHECKING:
    from lineage_defs.run.substrates import Session


def checks_declared(step: ScriptStep) -> bool:
    """Whether a run checks the step's ``column`` lines (SQL steps' are checked at load, against the SELECT)."""
    return bool(step.column_decls) and not step.language.is_sql


def check_written(step: ScriptStep, uri: str, written: Sequence[str]) -> None:
    """RunError at the first ``column`` line whose output column ``written`` lacks (names compare as DuckDB does: without case)."""
    have = {c.lower() for c in written}
    missing = [c for c in step.column_decls if c.output.lower() not in have]
    if not missing:
        return
    first = missing[0]
    others = sorted({c.output for c in missing[1:]} - {first.output})
    also = f"; nor {', '.join(repr(o) for o in others)}" if others else ""
    guess = did_you_mean(first.output, list(written))
    managed = step.materialize is not None and not step.materialize.manual
    kept = "nothing was written: the write was rolled back" if managed else "the step wrote its target itself, which stays as written"
    raise RunError(
        f"{step.path} declares column '{first.output}' (a 'column' line) but did not write it to {uri}{also}; it wrote {', '.join(written) or 'no columns'}",
        first.at or Location(step.path),
        (f"did you mean '{guess}'? " if guess else "") + f"write that column, or correct the 'column' line ({kept})",
    )


def written_audit(session: Session, step: ScriptStep, uri: str) -> Any:
    """The write's audit that checks the target's columns after the write, before COMMIT."""

    def audit(conn: Any) -> None:
        relation = "temp.main._lineage_object" if not uris.is_table(uri) else session.table_sql(uri)
        names = [str(d[0]) for d in conn.execute(f"SELECT * FROM {relation} LIMIT 0").description]
        check_written(step, uri, names)

    return audit


def check_sources(session: Session, step: ScriptStep) -> None:
    """RunError at the first declared source column its input table does not have; inputs whose
    columns cannot be read here (objects, tables not built yet, unconfigured catalogs) are not judged."""
    import duckdb

    columns: dict[str, set[str] | None] = {}
    for decl in step.column_decls:
        for src in decl.sources:
            if src.uri not in columns:
                columns[src.uri] = None
                if uris.is_table(src.uri) and not src.uri.startswith("dbt://"):
                    try:
                        cur = session.conn.execute(f"SELECT * FROM {session.table_sql(src.uri)} LIMIT 0")
                        columns[src.uri] = {str(d[0]).lower() for d in cur.description}
                    except (duckdb.Error, LineageDefsError):
                        pass
            have = columns[src.uri]
            if have is not None and src.column.lower() not in have:
                guess = did_you_mean(src.column, sorted(have))
                raise RunError(
                    f"{step.path} declares {src.uri}.{src.column} as a source of column '{decl.output}', but {src.uri} has no column '{src.column}' (it has {', '.join(sorted(have))})",
                    src.at or decl.at or Location(step.path),
                    (f"did you mean '{guess}'? " if guess else "") + "correct the 'column' line; nothing was written",
                )
