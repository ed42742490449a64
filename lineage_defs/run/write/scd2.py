"""scd2: keep every version of each key, with valid_from / valid_to / is_current.

The slice is a full snapshot of the current rows. Each key is classified
against the open versions (new, changed, gone, same) into a TEMP table, then
one UPDATE closes versions and one INSERT opens them — both at
``valid_at``, so re-running the same slice at the same ``valid_at`` finds
nothing to do. A ``<table>_current`` view shows the open versions (tables
only; a Parquet object just holds the whole history).
"""

from __future__ import annotations

from lineage_defs.errors import RunError
from lineage_defs.run.write.base import SCD2_COLUMNS
from lineage_defs.run.write.context import (
    WriteContext,
    check_unique_keys,
    ident,
    require_columns,
    timestamp_param,
)

REPLACES_TARGET = False
MANAGED: tuple[str, ...] = SCD2_COLUMNS
ACTIONS = '"_lineage_scd2_actions"'
OPEN_VERSION = ", CAST($valid_at AS TIMESTAMP) AS valid_from, CAST(NULL AS TIMESTAMP) AS valid_to, true AS is_current"


def validate(ctx: WriteContext) -> None:
    req = ctx.req
    if not req.key:
        raise RunError(f"scd2 history of {req.uri} needs key=", fix="add key=<col1,col2> to the materialize line")
    if not req.valid_at:
        raise RunError(f"scd2 write of {req.uri} has no valid_at", fix="pass the partition start or the run time as valid_at")
    timestamp_param(req.valid_at)
    require_columns(ctx, req.key, "key")
    require_columns(ctx, req.track, "track")
    if req.updated_at:
        require_columns(ctx, (req.updated_at,), "updated_at")
    check_unique_keys(ctx)


def _valid_at(ctx: WriteContext) -> dict[str, object]:
    return {"valid_at": timestamp_param(ctx.req.valid_at or "")}


def create(ctx: WriteContext) -> None:
    ctx.create_as(f"SELECT {ctx.select_list()}{OPEN_VERSION} FROM {ctx.slice}", _valid_at(ctx))
    _create_view(ctx)


def _compared(ctx: WriteContext) -> tuple[list[str], str | None]:
    """Columns whose change opens a version, and the updated_at column if any."""
    req, written = ctx.req, [n for n, _ in ctx.columns]
    for name in (*req.key, *req.track, *([req.updated_at] if req.updated_at else [])):
        if name not in written:
            raise RunError(
                f"column '{name}' (key/track/updated_at) is not in both the slice and {req.uri}",
                fix="use on_schema_change=sync to add it to the target",
            )
    if req.track:
        return list(req.track), req.updated_at
    if req.updated_at:
        return [], req.updated_at
    return [n for n in written if n not in req.key], None


def apply(ctx: WriteContext) -> None:
    req = ctx.req
    track, updated_at = _compared(ctx)
    types = ctx.target_types
    used = list(dict.fromkeys([*req.key, *track, *([updated_at] if updated_at else [])]))
    slice_types = dict(ctx.columns)
    s_cols = ", ".join(
        ident(c) if slice_types[c] == types[c] else f"CAST({ident(c)} AS {types[c]}) AS {ident(c)}" for c in used
    )
    o_cols = ", ".join(ident(c) for c in used)
    changed = [f"_o.{ident(c)} IS DISTINCT FROM _s.{ident(c)}" for c in track]
    if updated_at:
        changed.append(f"_s.{ident(updated_at)} > _o.{ident(updated_at)}")
    keys = ", ".join(f"CASE WHEN _s._seen THEN _s.{ident(k)} ELSE _o.{ident(k)} END AS {ident(k)}" for k in req.key)
    # 1. Classify every key of the open versions and of the slice.
    ctx.run(
        f"CREATE OR REPLACE TEMP TABLE {ACTIONS} AS SELECT CASE WHEN _o._open IS NULL THEN 'new' "
        f"WHEN _s._seen IS NULL THEN 'gone' WHEN {' OR '.join(changed) or 'false'} THEN 'changed' ELSE 'same' END AS _action, {keys} "
        f"FROM (SELECT {o_cols}, true AS _open FROM {ctx.target} WHERE is_current) AS _o "
        f"FULL OUTER JOIN (SELECT {s_cols}, true AS _seen FROM {ctx.slice}) AS _s ON {ctx.key_match('_o', '_s', cast_right=False)}"
    )
    # 2. Close changed keys (and vanished ones when deletes=close) at valid_at.
    closing = "('changed', 'gone')" if req.deletes == "close" else "('changed')"
    ctx.run(
        f"UPDATE {ctx.target} AS _t SET valid_to = CAST($valid_at AS TIMESTAMP), is_current = false "
        f"FROM {ACTIONS} AS _a WHERE _t.is_current AND _a._action IN {closing} AND {ctx.key_match('_t', '_a', cast_right=False)}",
        _valid_at(ctx),
    )
    # 3. Open a version for new and changed keys.
    ctx.run(
        f"INSERT INTO {ctx.target} BY NAME SELECT {ctx.select_list('_s', cast=True)}{OPEN_VERSION} "
        f"FROM {ctx.slice} AS _s JOIN {ACTIONS} AS _a ON {ctx.key_match('_a', '_s')} WHERE _a._action IN ('new', 'changed')",
        _valid_at(ctx),
    )
    ctx.run(f"DROP TABLE {ACTIONS}")
    if ctx.synced or not _view_exists(ctx):
        _create_view(ctx)


# -- the <table>_current view ---------------------------------------------------------
def _view_name(ctx: WriteContext) -> str:
    return f"{ctx.table}_current"


def _view_exists(ctx: WriteContext) -> bool:
    if ctx.flavor == "object":
        return True
    n = ctx.scalar(
        "SELECT count(*) FROM (SELECT database_name, schema_name, view_name AS name FROM duckdb_views() "
        "UNION ALL SELECT database_name, schema_name, table_name FROM duckdb_tables()) "
        "WHERE database_name = $catalog AND schema_name = $schema AND name = $name",
        {"catalog": ctx.catalog, "schema": ctx.schema, "name": _view_name(ctx)},
    )
    return bool(n)


def _postgres(ctx: WriteContext, statement: str) -> None:
    """A statement DuckDB cannot express on an attached PostgreSQL (views), in the same transaction."""
    ctx.run(
        "CALL postgres_execute($catalog, $statement)",
        {"catalog": ctx.catalog, "statement": statement},
        shown=f"CALL postgres_execute($catalog, $statement) /* {statement} */",
    )
    ctx.run("CALL pg_clear_cache()")  # else DuckDB's catalog cache never learns of the view


def _create_view(ctx: WriteContext) -> None:
    if ctx.flavor == "object":
        return
    view, table = ident(_view_name(ctx)), f"{ident(ctx.schema)}.{ident(ctx.table)}"
    if ctx.flavor == "postgres":
        # DuckDB would send its own catalog alias to PostgreSQL, which PostgreSQL cannot resolve.
        _postgres(ctx, f"CREATE OR REPLACE VIEW {ident(ctx.schema)}.{view} AS SELECT * FROM {table} WHERE is_current")
        return
    # Catalog-relative, so the view still works when the lake is attached under another alias.
    ctx.run(f"CREATE OR REPLACE VIEW {ident(ctx.catalog)}.{ident(ctx.schema)}.{view} AS SELECT * FROM {table} WHERE is_current")


def before_sync(ctx: WriteContext) -> None:
    """PostgreSQL refuses to drop or alter a column a view depends on: drop the view first."""
    if ctx.flavor == "postgres":
        _postgres(ctx, f"DROP VIEW IF EXISTS {ident(ctx.schema)}.{ident(_view_name(ctx))}")
