"""merge: upsert the slice on ``key``.

DELETE the target rows whose key is in the slice, then INSERT the slice, in
one transaction — portable across DuckDB, DuckLake and the postgres
extension, none of which needs a unique constraint for it. NULL keys match
NULL keys so a re-run never duplicates. A partitioned merge upserts across
the whole target; ``_partition`` records which run wrote the row last.
"""

from __future__ import annotations

from lineage_defs.errors import RunError
from lineage_defs.run.write.base import PARTITION_COLUMN
from lineage_defs.run.write.context import WriteContext, check_unique_keys, require_columns

REPLACES_TARGET = False
MANAGED: tuple[str, ...] = (PARTITION_COLUMN,)


def validate(ctx: WriteContext) -> None:
    if not ctx.req.key:
        raise RunError(f"merge into {ctx.req.uri} needs key=", fix="add key=<col1,col2> to the materialize line")
    require_columns(ctx, ctx.req.key, "key")
    check_unique_keys(ctx)


def create(ctx: WriteContext) -> None:
    part, params = ctx.partition_select()
    ctx.create_as(f"SELECT {ctx.select_list()}{part} FROM {ctx.slice}", params)


def apply(ctx: WriteContext) -> None:
    missing = [k for k in ctx.req.key if k not in ctx.target_names]
    if missing:
        raise RunError(
            f"key column(s) {', '.join(missing)} are not in {ctx.req.uri}",
            fix="use on_schema_change=sync to add them, or drop the target so the next run re-creates it",
        )
    ctx.run(f"DELETE FROM {ctx.target} AS _t USING {ctx.slice} AS _s WHERE {ctx.key_match('_t', '_s')}")
    part, params = ctx.partition_select()
    ctx.run(f"INSERT INTO {ctx.target} BY NAME SELECT {ctx.select_list(cast=True)}{part} FROM {ctx.slice}", params)
