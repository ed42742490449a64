"""``on_schema_change``: compare the slice with the target, then warn, ignore, fail or sync.

Each catalog stores some DuckDB types as another type (PostgreSQL has no
TINYINT, Parquet no HUGEINT), so the slice's type is first mapped to what the
catalog would store; otherwise every re-run would report a change.

Syncing a changed type differs per catalog: DuckDB ALTERs any castable type;
DuckLake only widens in place (other changes rebuild the table in the same
transaction); DuckDB's postgres extension cannot ALTER a type at all, so the
column is swapped (add, copy, drop, rename).
"""

from __future__ import annotations

import re

from lineage_defs.errors import RunError
from lineage_defs.run.write.base import SchemaChange
from lineage_defs.run.write.context import Column, Strategy, WriteContext, ident

_PG_STORED = {
    "TINYINT": "SMALLINT",
    "HUGEINT": "DOUBLE",
    "UTINYINT": "BIGINT",
    "USMALLINT": "BIGINT",
    "UINTEGER": "BIGINT",
    "UBIGINT": "DECIMAL(20,0)",
    "TIMESTAMP_NS": "TIMESTAMP",
    "TIMESTAMP_MS": "TIMESTAMP",
    "TIMESTAMP_S": "TIMESTAMP",
}
_PARQUET_STORED = {"HUGEINT": "DOUBLE", "TIMESTAMP_MS": "TIMESTAMP", "TIMESTAMP_S": "TIMESTAMP"}

# DuckLake's in-place type promotions; anything else rebuilds the table.
_DUCKLAKE_WIDENING = {
    "TINYINT": {"SMALLINT", "INTEGER", "BIGINT"},
    "SMALLINT": {"INTEGER", "BIGINT"},
    "INTEGER": {"BIGINT"},
    "UTINYINT": {"USMALLINT", "UINTEGER", "UBIGINT", "SMALLINT", "INTEGER", "BIGINT"},
    "USMALLINT": {"UINTEGER", "UBIGINT", "INTEGER", "BIGINT"},
    "UINTEGER": {"UBIGINT", "BIGINT"},
    "FLOAT": {"DOUBLE"},
}


def stored_type(flavor: str, typ: str) -> str:
    """The type a catalog ends up with when a column of DuckDB type ``typ`` is written to it."""
    if flavor == "postgres":
        if typ.startswith("MAP("):
            return "VARCHAR"
        return _PG_STORED.get(typ, typ)
    if flavor == "object":
        if typ.startswith("ENUM("):
            return "VARCHAR"
        return _PARQUET_STORED.get(typ, typ)
    return typ


def _norm(typ: str) -> str:
    return re.sub(r"\s+", "", typ).upper()


def diff(slice_cols: list[Column], target_cols: list[Column], flavor: str) -> SchemaChange:
    target = dict(target_cols)
    names = {n for n, _ in slice_cols}
    added = tuple((n, t) for n, t in slice_cols if n not in target)
    removed = tuple((n, t) for n, t in target_cols if n not in names)
    changed = tuple(
        (n, target[n], t) for n, t in slice_cols if n in target and _norm(stored_type(flavor, t)) != _norm(target[n])
    )
    return SchemaChange(added, removed, changed)


def plan_columns(ctx: WriteContext, strategy: Strategy) -> None:
    """Decide which slice columns are written, applying ``on_schema_change`` (inside the transaction)."""
    slice_cols = ctx.slice_columns()
    ctx.columns = slice_cols
    if ctx.existing is None:
        return
    target_cols = [c for c in ctx.existing if c[0] not in strategy.MANAGED]
    change = diff(slice_cols, target_cols, ctx.flavor)
    if not change:
        return
    ctx.change = change
    policy, uri = ctx.req.on_schema_change, ctx.req.uri
    if policy == "fail":
        raise RunError(
            f"schema of {uri} differs from the slice: {change.describe()}",
            fix="set on_schema_change=sync to alter the target, warn or ignore to write the common columns, or change the SELECT",
        )
    if strategy.REPLACES_TARGET:
        if policy == "warn":
            ctx.warnings.append(f"schema of {uri} changed ({change.describe()}); the replace wrote the new schema")
        return
    if policy == "sync":
        before = getattr(strategy, "before_sync", None)
        if before is not None:
            before(ctx)
        sync(ctx, change)
        ctx.existing = ctx.describe(ctx.target)
        ctx.synced = True
        return
    common = {n for n, _ in target_cols}
    ctx.columns = [c for c in slice_cols if c[0] in common]
    if policy == "warn":
        notes = []
        if change.added:
            notes.append("new columns were not added")
        if change.removed:
            notes.append("missing columns are NULL in the new rows")
        if change.changed:
            notes.append("changed types were cast to the target's")
        ctx.warnings.append(
            f"schema of {uri} differs from the slice ({change.describe()}): wrote the common columns by name; "
            f"{', '.join(notes)} — set on_schema_change=sync to alter the target"
        )


def sync(ctx: WriteContext, change: SchemaChange) -> None:
    """ALTER the target to the slice's columns, in the write's transaction."""
    t = ctx.target
    if ctx.flavor == "ducklake" and any(b not in _DUCKLAKE_WIDENING.get(a, ()) for _, a, b in change.changed):
        _rebuild(ctx, change)
        return
    for name, typ in change.added:
        ctx.run(f"ALTER TABLE {t} ADD COLUMN {ident(name)} {typ}")
    for name, _ in change.removed:
        ctx.run(f"ALTER TABLE {t} DROP COLUMN {ident(name)}")
    for name, _, new in change.changed:
        if ctx.flavor == "postgres":
            tmp = f"{name}__lineage_new"
            ctx.run(f"ALTER TABLE {t} ADD COLUMN {ident(tmp)} {new}")
            ctx.run(f"UPDATE {t} SET {ident(tmp)} = CAST({ident(name)} AS {new})")
            ctx.run(f"ALTER TABLE {t} DROP COLUMN {ident(name)}")
            ctx.run(f"ALTER TABLE {t} RENAME COLUMN {ident(tmp)} TO {ident(name)}")
        else:
            ctx.run(f"ALTER TABLE {t} ALTER COLUMN {ident(name)} SET DATA TYPE {new}")


def _rebuild(ctx: WriteContext, change: SchemaChange) -> None:
    """One CREATE OR REPLACE from itself: DuckLake breaks on DROP+RENAME of a column in one transaction."""
    removed = {n for n, _ in change.removed}
    changed = {n: new for n, _, new in change.changed}
    cols = []
    for name, _ in ctx.existing or []:
        if name in removed:
            continue
        cols.append(f"CAST({ident(name)} AS {changed[name]}) AS {ident(name)}" if name in changed else ident(name))
    cols += [f"CAST(NULL AS {typ}) AS {ident(name)}" for name, typ in change.added]
    ctx.create_as(f"SELECT {', '.join(cols)} FROM {ctx.target}", replace=True)
