"""The real columns and types of the relations a dbt build produced: one catalog query per build.

dbt's manifest knows the columns a ``schema.yml`` declares, often a subset
and without types; the warehouse knows them all. After the build, one query of
DuckDB's catalog (``duckdb_columns()``) reads every built relation and every
relation the built models read, so the lineage pass expands ``*`` against what
is really there and the materializations carry types that read like a
script's (``BIGINT``, ``DATE``, ``DECIMAL(18,2)``: DuckDB's own spelling).

Where the relations are: on the embedded default, the scripts' own session
(``run.substrates.Session``: ``warehouse`` and the ``lake``); with a project's
own ``profiles.yml``, its DuckDB files opened read-only. Any other adapter has
no catalog reachable here: the caller keeps the columns the SQL analysis
gives, typed ``unknown``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from lineage_defs.dbt.project import DbtProject
from lineage_defs.run.quoting import ident, literal
from lineage_defs.run.substrates import Session, extension_directory
from lineage_defs.settings import LineageSettings

Columns = dict[str, list[tuple[str, str]]]  # relation (database.schema.name, lower case) → [(column, type)] in table order

_QUERY = (
    "SELECT lower(database_name || '.' || schema_name || '.' || table_name), column_name, data_type "
    "FROM duckdb_columns() WHERE list_contains($relations, lower(database_name || '.' || schema_name || '.' || table_name)) "
    "ORDER BY database_name, schema_name, table_name, column_index"
)


def read_columns(conn: Any, relations: Iterable[str]) -> Columns:
    """One query of the connection's catalog for these relations; a relation it does not hold is absent."""
    wanted = sorted({r.lower() for r in relations})
    out: Columns = {}
    if not wanted:
        return out
    for relation, column, data_type in conn.execute(_QUERY, {"relations": wanted}).fetchall():
        out.setdefault(relation, []).append((column, data_type))
    return out


@contextlib.contextmanager
def catalog(project: DbtProject, settings: LineageSettings) -> Iterator[Any | None]:
    """A DuckDB connection that sees the project's relations, or None when no catalog is reachable."""
    if project.default_profile:
        with Session(settings) as session:
            yield session.conn
        return
    if project.adapter != "duckdb" or not project.database_files:
        yield None
        return
    import duckdb

    conn = duckdb.connect(config={"extension_directory": extension_directory(), "autoinstall_known_extensions": False, "autoload_known_extensions": True})
    try:
        for name, path in project.database_files:
            conn.execute(f"ATTACH {literal(path)} AS {ident(name)} (READ_ONLY)")
        yield conn
    finally:
        conn.close()


def build_columns(project: DbtProject, settings: LineageSettings, relations: Sequence[str]) -> tuple[Columns, str | None]:
    """The columns of ``relations`` after a build, and a note when the catalog could not be read."""
    try:
        with catalog(project, settings) as conn:
            if conn is None:
                return {}, f"no catalog reachable for a {project.adapter or 'unknown'} target: column types unknown"
            return read_columns(conn, relations), None
    except Exception as e:  # a locked or missing file: the build's result stands
        return {}, f"could not read the catalog: {type(e).__name__}: {e}"
