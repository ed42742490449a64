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
from collections.abc import Iterable, Iterator, Mapping, Sequence, Set as AbstractSet
from typing import Any

from lineage_defs import uris
from lineage_defs.dbt.project import DbtProject
from lineage_defs.dbt.relations import node_relation
from lineage_defs.dbt.selection import dbt_parents
from lineage_defs.plan.schemas import captured_schema
from lineage_defs.plan.spec import DbtStep
from lineage_defs.run.quoting import ident, literal
from lineage_defs.run.substrates import Session, extension_directory
from lineage_defs.settings import LineageSettings

Columns = dict[str, list[tuple[str, str]]]  # relation (database.schema.name, lower case) → [(column, type)] in table order

# No parameters: the first bound parameter of a process imports numpy (~0.4 s); the catalog's
# column list is filtered in Python instead (tens of thousands of rows take milliseconds).
_QUERY = (
    "SELECT database_name, schema_name, table_name, column_name, data_type FROM duckdb_columns() "
    "WHERE NOT internal ORDER BY database_name, schema_name, table_name, column_index"
)


def read_columns(conn: Any, relations: Iterable[str]) -> Columns:
    """One query of the connection's catalog for these relations; a relation it does not hold is absent."""
    wanted = {r.lower() for r in relations}
    out: Columns = {}
    if not wanted:
        return out
    for database, schema, table, column, data_type in conn.execute(_QUERY).fetchall():
        relation = f"{database}.{schema}.{table}".lower()
        if relation in wanted:
            out.setdefault(relation, []).append((column, data_type))
    return out


@contextlib.contextmanager
def catalog(project: DbtProject, settings: LineageSettings, lake: bool = True) -> Iterator[Any | None]:
    """A DuckDB connection that sees the project's relations, or None when no catalog is reachable.

    On the embedded default the lake (a DuckLake: attaching it costs a quarter
    of a second) is attached only when ``lake`` says a relation is there.
    """
    if project.default_profile:
        with Session(settings, skip=frozenset() if lake else frozenset({uris.DEFAULT_CATALOGS["lake"]})) as session:
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


def relations_to_read(
    built: Sequence[DbtStep], manifest: Mapping[str, Any], project: DbtProject, step_uris: AbstractSet[str], settings: LineageSettings, instance: Any = None
) -> tuple[list[str], dict[str, list[tuple[str, str]]]]:
    """The relations a build's catalog query reads (the built ones and every one they read), and those
    known without it: a source that is a script's table has the schema its last materialization in
    ``instance`` (the run's) reported."""
    nodes, sources = manifest["nodes"], manifest["sources"]
    node_uris = dict(project.node_uris)
    relations = {s.relation for s in built}
    known: dict[str, list[tuple[str, str]]] = {}
    for s in built:
        for u in dbt_parents(s.unique_id, nodes):
            node = nodes.get(u) or sources.get(u)
            if node is None:
                continue
            relation = node_relation(node)
            relations.add(relation)
            uri = node_uris.get(u, "")
            if u in sources and uri in step_uris and uris.kind_of(uri) != uris.Kind.DBT:
                captured = captured_schema(settings, uri, instance)
                if captured:
                    known[relation] = captured
    return sorted(relations), known


def build_columns(project: DbtProject, settings: LineageSettings, relations: Sequence[str], known: Mapping[str, Sequence[tuple[str, str]]] | None = None) -> tuple[Columns, str | None]:
    """The columns of ``relations`` after a build, and a note when the catalog could not be read.

    ``known`` are relations whose columns are known already (a script's table:
    the schema its last write captured); the catalog is asked for the rest only.
    """
    out: Columns = {r.lower(): list(cols) for r, cols in (known or {}).items()}
    todo = [r for r in relations if r.lower() not in out]
    if not todo:
        return out, None
    try:
        with catalog(project, settings, lake=any(r.lower().split(".", 1)[0] == "lake" for r in todo)) as conn:
            if conn is None:
                return out, f"no catalog reachable for a {project.adapter or 'unknown'} target: column types unknown"
            out.update(read_columns(conn, todo))
            return out, None
    except Exception as e:  # a locked or missing file: the build's result stands
        return out, f"could not read the catalog: {type(e).__name__}: {e}"
