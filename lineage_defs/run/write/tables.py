"""Table targets: DuckLake, a DuckDB file, PostgreSQL — one path for all three.

They are all catalogs attached to the session's one DuckDB connection
(PostgreSQL through DuckDB's postgres extension), so a write is one DuckDB
transaction: BEGIN, schema policy, the strategy's statements, the audit,
COMMIT. Any exception rolls back and the previous contents stay. DuckDB lets
one transaction write a single attached database (TEMP tables aside), which
is exactly one target.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from lineage_defs import uris
from lineage_defs.errors import RunError
from lineage_defs.run.write import ledger
from lineage_defs.run.write.base import Audit, WriteRequest, WriteResult
from lineage_defs.run.write.context import Strategy, WriteContext, ident, prepare, result, rollback, split_qualified
from lineage_defs.run.write.schema import plan_columns

if TYPE_CHECKING:
    from lineage_defs.run.substrates import Session

FLAVORS = {"ducklake": "ducklake", "duckdb": "duckdb", "datatable": "postgres"}
# Two processes (runs on two workers) creating one new DuckLake table at the same time: the second
# COMMIT fails with "Transaction conflict ... created by another transaction already". The whole
# write rolled back, so it is tried again: then the table exists and the strategy applies to it.
CONFLICT_ATTEMPTS = 3


def write_table(session: Session, req: WriteRequest, strategy: Strategy, audit: Audit | None) -> WriteResult:
    import duckdb

    for attempt in range(1, CONFLICT_ATTEMPTS + 1):
        try:
            return _write_table(session, req, strategy, audit)
        except RunError as e:
            cause = e.__cause__
            conflict = isinstance(cause, duckdb.TransactionException) and "conflict" in str(cause).lower()
            if not conflict or FLAVORS[uris.parse(req.uri).kind] != "ducklake" or attempt == CONFLICT_ATTEMPTS:
                raise
    raise AssertionError("unreachable")


def _write_table(session: Session, req: WriteRequest, strategy: Strategy, audit: Audit | None) -> WriteResult:
    flavor = FLAVORS[uris.parse(req.uri).kind]
    target = session.table_sql(req.uri)
    catalog, schema, table = split_qualified(target)
    ctx = WriteContext(session, req, target, flavor, catalog, schema, table, managed=strategy.MANAGED)
    rows = prepare(ctx, strategy)
    # A range run writes the same target once per partition: its schema is
    # looked up once per session and kept while our own writes leave it as is.
    cache: dict[str, list[tuple[str, str]]] = session.__dict__.setdefault("target_schemas", {})
    ctx.run("BEGIN")
    try:
        if target in cache:
            ctx.existing = list(cache[target])
        elif _exists(ctx):
            ctx.existing = ctx.describe(target)
        else:
            _ensure_schema(ctx)
        if req.batch and ledger.table_holds(ctx, req.batch):
            ctx.run("ROLLBACK")
            return _already_written(ctx)
        plan_columns(ctx, strategy)
        if ctx.existing is None:
            strategy.create(ctx)
        else:
            strategy.apply(ctx)
        if audit is not None:
            audit(session.conn)
        if req.batch:
            ledger.table_record(ctx, req.batch, rows if rows is not None else int(ctx.inserted or 0))
        ctx.run("COMMIT")
    except BaseException:
        cache.pop(target, None)
        session.__dict__.get("known_partitions", {}).pop(target, None)
        rollback(ctx)
        raise
    snapshot = session.snapshot_id(catalog, committed_here=True) if flavor == "ducklake" else None
    unchanged = ctx.existing is not None and not ctx.synced and not strategy.REPLACES_TARGET
    columns = list(cache[target]) if unchanged and target in cache else ctx.describe(target)
    cache[target] = columns
    return result(ctx, rows, columns, snapshot)


def _already_written(ctx: WriteContext) -> WriteResult:
    out = result(ctx, 0, [])
    out.skipped = True
    out.warnings.append(f"batch {ctx.req.batch} is already in {ctx.req.uri} (a retry or re-execution): nothing written")
    out.schema = ctx.describe(ctx.session.table_sql(ctx.req.uri))
    return out


def _exists(ctx: WriteContext) -> bool:
    n = ctx.scalar(
        "SELECT count(*) FROM duckdb_tables() WHERE database_name = $catalog AND schema_name = $schema AND table_name = $table",
        {"catalog": ctx.catalog, "schema": ctx.schema, "table": ctx.table},
    )
    return bool(n)


def _ensure_schema(ctx: WriteContext) -> None:
    n = ctx.scalar(
        "SELECT count(*) FROM duckdb_schemas() WHERE database_name = $catalog AND schema_name = $schema",
        {"catalog": ctx.catalog, "schema": ctx.schema},
    )
    if not n:
        ctx.run(f"CREATE SCHEMA {ident(ctx.catalog)}.{ident(ctx.schema)}")
