"""partition_replace: delete the slice's partition (or a batch's partitions), insert the slice.

The partition key lives in the managed ``_partition`` VARCHAR column and is
always a bound parameter. Other partitions are never touched, so writing
partitions in any order, any number of times, leaves the last write of each.
"""

from __future__ import annotations

from lineage_defs.errors import RunError
from lineage_defs.run.write.base import PARTITION_COLUMN
from lineage_defs.run.write.context import WriteContext, ident

REPLACES_TARGET = False
MANAGED: tuple[str, ...] = (PARTITION_COLUMN,)


def validate(ctx: WriteContext) -> None:
    if ctx.req.partition is None and not ctx.req.partitions:
        raise RunError(
            f"partition_replace of {ctx.req.uri} needs a partition key",
            fix="run the step for a partition (the asset is partitioned) or use the replace strategy",
        )


def create(ctx: WriteContext) -> None:
    part, params = ctx.partition_select()
    ctx.create_as(f"SELECT {ctx.select_list()}{part} FROM {ctx.slice}", params)


def apply(ctx: WriteContext) -> None:
    if PARTITION_COLUMN not in ctx.target_names:
        if ctx.flavor == "object":
            # A per-partition object written by something else: it holds only this partition.
            part, params = ctx.partition_select(new_table=True)
            ctx.create_as(f"SELECT {ctx.select_list()}{part} FROM {ctx.slice}", params, replace=True)
            return
        raise RunError(
            f"{ctx.req.uri} has no {PARTITION_COLUMN} column, so it was not written by partition_replace",
            fix=f"drop the table (it is re-created on the next run) or add a VARCHAR column {PARTITION_COLUMN}",
        )
    known = _known_partitions(ctx)
    col = ident(PARTITION_COLUMN)
    batch = ctx.req.partitions
    if batch:
        if known is None or not known.isdisjoint(batch):
            # BETWEEN bounds the scan (and is pushed down to PostgreSQL); the list is exact
            ctx.run(
                f"DELETE FROM {ctx.target} WHERE {col} BETWEEN $first AND $last AND list_contains($partitions, {col})",
                {"first": min(batch), "last": max(batch), "partitions": list(batch)},
            )
    elif known is None or ctx.req.partition in known:
        ctx.run(f"DELETE FROM {ctx.target} WHERE {col} = $partition", {"partition": ctx.req.partition})
    part, params = ctx.partition_select()
    ctx.inserted = ctx.scalar(f"INSERT INTO {ctx.target} BY NAME SELECT {ctx.select_list(cast=True)}{part} FROM {ctx.slice}", params)
    if known is not None:
        known.update(batch or (str(ctx.req.partition),))


def _known_partitions(ctx: WriteContext) -> set[str] | None:
    """The partitions the target holds, read once per session — only where no one else can write.

    A range run writes hundreds of new partitions; deleting a partition that
    is not there still costs a scan. On the embedded catalogs (DuckDB file,
    the state dir's DuckLake) every writer holds the state lock, so the set
    read at the first write stays true for the whole session. Elsewhere
    (a PostgreSQL-catalog lake, PostgreSQL) another process may write
    concurrently: always DELETE.
    """
    settings = ctx.session.settings
    embedded = ctx.flavor == "duckdb" or (ctx.flavor == "ducklake" and ctx.req.uri.startswith("ducklake://main/") and not settings.ducklake_catalog)
    if not embedded:
        return None
    cache: dict[str, set[str]] = ctx.session.__dict__.setdefault("known_partitions", {})
    if ctx.target not in cache:
        rows = ctx.rows(f"SELECT DISTINCT {ident(PARTITION_COLUMN)} FROM {ctx.target}")
        cache[ctx.target] = {str(r[0]) for r in rows}
    return cache[ctx.target]
