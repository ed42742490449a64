"""``LineageDuckDBIOManager``: dagster-duckdb's I/O manager on the relations our steps use.

Built on dagster-duckdb: a ``DuckDBIOManager`` whose type handlers are
dagster-duckdb-pandas' ``DuckDBPandasTypeHandler`` and a pyarrow one of the
same shape. What differs from the stock ``DbIOManager``:

- an asset's relation is its URI's table (``ducklake://main/orders`` →
  ``lake.main.orders``), not ``<schema>.<key[-1]>`` of one database file;
- a partitioned asset's rows are those whose managed ``_partition`` column
  holds the partition keys (or the column the upstream's ``partition_expr``
  metadata names), the keys bound as parameters — the stock time-window
  clause compares text with timestamps and returns the wrong day;
- every read and write runs in a session holding the steps' state lock, a
  write in one transaction (the previous contents stay if it fails), and the
  connection is closed however the call ends;
- a write records the relation's columns where the next load checks the
  scripts that read it (``plan.schemas``).
"""

from __future__ import annotations

import functools
import typing
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from dagster import InputContext, IOManager, OutputContext, TableColumn, TableSchema
from dagster_duckdb import DuckDBIOManager

from lineage_defs.assets.resources import RunSettingsConfig
from lineage_defs.duckdb_io import handlers as h
from lineage_defs.duckdb_io.relations import relation, uri_of
from lineage_defs.errors import RunError
from lineage_defs.plan.spec import PARTITION_COLUMN
from lineage_defs.run.quoting import ident
from lineage_defs.settings import LineageSettings


class LineageDuckDBIOManager(DuckDBIOManager):
    """Loads our tables as pandas DataFrames (default) or pyarrow Tables; writes outputs to their URI's table.

    ``database`` names the warehouse file; the lake and the other catalogs come from ``lineage``.
    """

    lineage: RunSettingsConfig

    @staticmethod
    def type_handlers() -> Sequence[Any]:
        from dagster_duckdb_pandas import DuckDBPandasTypeHandler  # pandas: imported when a run needs it

        return [DuckDBPandasTypeHandler(), h.ArrowTypeHandler()]

    @staticmethod
    def default_load_type() -> type | None:
        import pandas as pd

        return pd.DataFrame

    # dagster-duckdb types its factory's result as its own DbIOManager; ours is an IOManager over the same handlers,
    # asked for on the first value it reads or writes: a step of ours writes its tables itself and reports no value,
    # so its run does not import dagster-duckdb-pandas (~0.3 s of a one-step run's 3.6–4 s, measured interleaved)
    def create_io_manager(self, context: Any) -> LineageIOManager:  # type: ignore[override]
        return LineageIOManager(self.lineage.settings(), self.type_handlers, self.default_load_type)


def _not_locked_by_this_process(what: str) -> None:
    from lineage_defs.duckdb_io.resource import open_connections

    if open_connections():
        raise RunError(
            f"{what}: a lineage_duckdb connection of this process is still open, and it holds the state lock the I/O manager needs",
            fix="leave the `with lineage_duckdb.get_connection()` block before returning or yielding the output",
        )


class LineageIOManager(IOManager):
    """``handlers`` and ``default_load_type`` are called on the first value read or written (they import pandas)."""

    def __init__(self, settings: LineageSettings, handlers: Callable[[], Sequence[Any]], default_load_type: Callable[[], type | None]) -> None:
        self.settings = settings
        self._handlers = handlers
        self._default_load_type = default_load_type

    @functools.cached_property
    def handlers(self) -> list[Any]:
        return list(self._handlers())

    @functools.cached_property
    def default_load_type(self) -> type | None:
        return self._default_load_type()

    def _handler(self, tp: Any, what: str) -> Any:
        if tp in (None, Any, object) or isinstance(tp, typing.TypeVar):
            tp = self.default_load_type
        for handler in self.handlers:
            if any(isinstance(tp, type) and issubclass(tp, t) for t in handler.supported_types):
                return handler
        names = ", ".join(t.__module__.split(".")[0] + "." + t.__name__ for hd in self.handlers for t in hd.supported_types)
        raise RunError(f"{what}: the lineage I/O manager reads and writes {names}, not {tp!r}", fix="annotate the input or return a pandas DataFrame or a pyarrow Table")

    # -- writing -----------------------------------------------------------------------
    def handle_output(self, context: OutputContext, obj: Any) -> None:
        if obj is None:  # our steps write their tables themselves and report no value
            return
        from lineage_defs.plan.schemas import record_schema

        key = context.asset_key
        _not_locked_by_this_process(f"writing {key.to_user_string()}")
        uri = uri_of(key.path, context.definition_metadata or {})
        handler = self._handler(type(obj), f"asset {key.to_user_string()}")
        keys = sorted(context.asset_partition_keys) if context.has_asset_partitions else []
        obj = self._partitioned(obj, keys, uri)
        with _opened(self.settings, uri) as t:
            conn, schema_sql, table_sql, target, shown, existing = t.conn, t.schema_sql, t.table_sql, t.target, t.shown, t.existing
            if existing is not None and keys:
                names = h.columns_of(obj)
                if sorted(names) != sorted(existing):
                    raise RunError(
                        f"{uri}: the output's columns {names} are not the table's {existing}",
                        fix=f"return the table's columns, or drop {shown} to re-create it on the next run (every partition must be written again)",
                    )
                obj = h.reordered(obj, existing)  # the pandas handler inserts by position
            conn.execute("BEGIN")
            try:
                if "." in schema_sql and not schema_sql.endswith('"main"'):
                    conn.execute(f"CREATE SCHEMA IF NOT EXISTS {schema_sql}")
                if keys:
                    if existing is not None:
                        # delete this run's partitions; the keys are bound, never spliced
                        conn.execute(f"DELETE FROM {target} WHERE CAST({ident(PARTITION_COLUMN)} AS VARCHAR) IN (SELECT unnest($keys::VARCHAR[]))", {"keys": keys})
                elif existing is not None:
                    conn.execute(f"DROP TABLE {target}")  # replaced whole: its columns may change
                if h.is_empty(obj):
                    # the handlers skip an empty frame; the table still exists (with no rows) for its readers
                    conn.register("__lineage_empty", obj)
                    conn.execute(f"CREATE TABLE IF NOT EXISTS {target} AS SELECT * FROM __lineage_empty")
                    conn.unregister("__lineage_empty")
                else:
                    handler.handle_output(context, h.Slice(schema_sql, table_sql), obj, conn)
                conn.execute("COMMIT")
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            schema = [(str(r[0]), str(r[1])) for r in conn.execute(f"DESCRIBE {target}").fetchall()]
            alias = schema_sql.split(".")[0].strip('"')
            snapshot = t.session.snapshot_id(alias, committed_here=True)
        record_schema(self.settings, uri, schema)
        meta: dict[str, Any] = {
            "dagster/table_name": shown,
            "dagster/column_schema": TableSchema(columns=[TableColumn(name=n, type=t) for n, t in schema]),
            "lineage/uri": uri,
        }
        if h.is_empty(obj):  # the handlers report the row count of what they wrote
            meta["dagster/partition_row_count" if keys else "dagster/row_count"] = 0
        if snapshot is not None:
            meta["lineage/ducklake_snapshot_id"] = snapshot
        context.add_output_metadata(meta)

    @staticmethod
    def _partitioned(obj: Any, keys: list[str], uri: str) -> Any:
        """The output with its managed ``_partition`` column (added for one key; checked when the output brings it)."""
        if not keys:
            return obj
        if PARTITION_COLUMN in h.columns_of(obj):
            outside = h.partition_values(obj, PARTITION_COLUMN) - set(keys)
            if outside:
                raise RunError(
                    f"{uri}: rows for partitions {sorted(outside)[:5]} outside this run's {keys[:5]}",
                    fix=f"return only the rows of the run's partitions in {PARTITION_COLUMN}",
                )
            return obj
        if len(keys) > 1:
            raise RunError(
                f"{uri}: a run of {len(keys)} partitions needs each row's partition",
                fix=f"add a {PARTITION_COLUMN} column holding each row's partition key, or run one partition per run",
            )
        return h.with_column(obj, PARTITION_COLUMN, keys[0])

    # -- reading -----------------------------------------------------------------------
    def load_input(self, context: InputContext) -> Any:
        upstream = context.upstream_output
        key = context.asset_key
        _not_locked_by_this_process(f"loading {key.to_user_string()}")
        meta = dict(upstream.definition_metadata or {}) if upstream is not None else {}
        uri = uri_of(key.path, meta)
        handler = self._handler(context.dagster_type.typing_type, f"input {context.name}")
        columns = (context.definition_metadata or {}).get("columns")
        keys = list(context.asset_partition_keys) if context.has_asset_partitions else None
        with _opened(self.settings, uri) as t:
            conn, target, shown, existing = t.conn, t.target, t.shown, t.existing
            if existing is None:
                raise RunError(
                    f"input not there yet: {uri} ({shown} does not exist)",
                    fix=f"materialize {key.to_user_string()} first",
                )
            table = h.Slice(t.schema_sql, t.table_sql, columns)
            if keys is not None:
                column = str(getattr(meta.get("partition_expr"), "value", meta.get("partition_expr")) or PARTITION_COLUMN)
                if column not in existing:
                    raise RunError(
                        f"{uri} is partitioned but {shown} has no {column} column",
                        fix=f"write it with the partition key in {PARTITION_COLUMN}, or name its partition column in the asset's partition_expr metadata",
                    )
                # The slice is a view over the partitions' rows: the keys bound in a temp table, never spliced.
                conn.execute("CREATE TEMP TABLE __lineage_keys AS SELECT unnest($keys::VARCHAR[]) AS k", {"keys": keys})
                conn.execute(
                    f"CREATE TEMP VIEW __lineage_slice AS SELECT * FROM {target} "
                    f"WHERE CAST({ident(column)} AS VARCHAR) IN (SELECT k FROM temp.main.__lineage_keys)"
                )
                table = h.Slice('"temp"."main"', '"__lineage_slice"', columns)
            return handler.load_input(context, table, conn)


@dataclass(frozen=True)
class _Target:
    session: Any
    conn: Any
    schema_sql: str  # '"lake"."main"'
    table_sql: str  # '"orders"'
    target: str  # the two joined
    shown: str  # lake.main.orders, for messages
    existing: list[str] | None  # its columns; None: no such table yet


@contextmanager
def _opened(settings: LineageSettings, uri: str) -> Iterator[_Target]:
    """A session (lake and warehouse under their usual names, the state lock held) and the asset's table in it."""
    from lineage_defs.run.substrates import Session

    with Session(settings) as session:
        schema_sql, table_sql = relation(session, uri)
        target = f"{schema_sql}.{table_sql}"
        yield _Target(session, session.conn, schema_sql, table_sql, target, target.replace('"', ""), _columns(session.conn, target))


def _columns(conn: Any, target: str) -> list[str] | None:
    """The relation's column names, or None when it does not exist."""
    try:
        return [str(r[0]) for r in conn.execute(f"DESCRIBE {target}").fetchall()]
    except Exception as e:  # duckdb.CatalogException: no such table
        if "does not exist" in str(e) or "not found" in str(e).lower():
            return None
        raise

