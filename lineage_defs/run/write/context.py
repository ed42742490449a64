"""What every strategy shares: the statement log, quoting, and checks on the slice.

A strategy never talks to the connection directly: it calls ``ctx.run`` so
that ``WriteResult.sql`` is exactly what ran, in order, with ``$placeholders``
where values were bound. Identifiers are quoted here; values never enter SQL
text.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, Protocol

from lineage_defs.errors import RunError, did_you_mean
from lineage_defs.run import cancel
from lineage_defs.run.substrates import execute
from lineage_defs.run.quoting import ident
from lineage_defs.run.write.base import PARTITION_COLUMN, SchemaChange, WriteRequest, WriteResult

if TYPE_CHECKING:
    from lineage_defs.run.substrates import Session

Column = tuple[str, str]  # (name, DuckDB type)

ON_SCHEMA_CHANGE = ("warn", "ignore", "fail", "sync")
DELETES = ("close", "ignore")
DUPLICATE_SAMPLES = 5


class Strategy(Protocol):
    """A write strategy module (``replace.py``, ``merge.py`` ...)."""

    REPLACES_TARGET: bool  # the new contents do not depend on the old (no ALTER, no load)
    MANAGED: tuple[str, ...]  # columns the write owns: never in the slice, never in schema diffs

    def validate(self, ctx: WriteContext) -> None: ...

    def create(self, ctx: WriteContext) -> None: ...

    def apply(self, ctx: WriteContext) -> None: ...


def split_qualified(name: str) -> tuple[str, ...]:
    """``"a"."b"."c"`` → ``("a", "b", "c")``: the inverse of joining ``ident`` parts."""
    parts = re.findall(r'"((?:[^"]|"")*)"', name)
    return tuple(p.replace('""', '"') for p in parts)


def relation(name: str) -> str:
    """The slice table as SQL: bare names are quoted, qualified names used as given."""
    return ident(name) if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_$]*", name) else name


def timestamp_param(text: str) -> datetime:
    """``valid_at`` as a naive UTC datetime (DuckDB ignores an offset when casting text)."""
    try:
        ts = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError as e:
        raise RunError(f"valid_at '{text}' is not an ISO 8601 timestamp", fix="pass e.g. 2024-01-01T00:00:00") from e
    if ts.tzinfo is not None:
        ts = ts.astimezone(timezone.utc).replace(tzinfo=None)
    return ts


@dataclass
class WriteContext:
    """One write in progress: where it goes and what has run so far."""

    session: Session
    req: WriteRequest
    target: str  # qualified SQL name the strategy writes (a TEMP stand-in for objects)
    flavor: str  # ducklake | duckdb | postgres | object
    catalog: str
    schema: str
    table: str
    managed: tuple[str, ...] = ()
    sql: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    existing: list[Column] | None = None  # target columns before the write; None on the first run
    columns: list[Column] = field(default_factory=list)  # slice columns that are written
    change: SchemaChange | None = None
    synced: bool = False  # the target was ALTERed to the slice's schema
    _slice_columns: list[Column] | None = None
    inserted: int | None = None  # rows the strategy's INSERT / CREATE ... AS reported

    # -- running statements ---------------------------------------------------
    def run(self, sql: str, params: dict[str, Any] | None = None, shown: str | None = None) -> Any:
        """Execute and log one statement (``shown`` if given); engine errors become a RunError naming it."""
        import duckdb

        cancel.raise_if_cancelled()  # nothing more is written once the run was cancelled
        self.sql.append(shown or sql)
        unstaged = self.req.slice_params is not None and self.slice in sql
        if unstaged:
            params = {**(self.req.slice_params or {}), **(params or {})}
        try:
            return execute(self.session.conn, sql, params)
        except duckdb.Error as e:
            if unstaged:  # the step's own SELECT runs inside this statement: its failure is the statement's
                raise RunError(f"statement failed: {e}", fix="fix the statement shown above") from e
            raise RunError(
                f"{self.req.strategy} write to {self.req.uri} failed: {e}\n    while running: {sql}",
                fix="the previous contents are untouched; fix the slice or the target and re-run",
            ) from e

    def rows(self, sql: str, params: dict[str, Any] | None = None) -> list[tuple[Any, ...]]:
        return list(self.run(sql, params).fetchall())

    def scalar(self, sql: str, params: dict[str, Any] | None = None) -> Any:
        row = self.run(sql, params).fetchone()
        return row[0] if row else None

    def create_as(self, select: str, params: dict[str, Any] | None = None, replace: bool = False) -> None:
        """``CREATE [OR REPLACE] TABLE target AS <select>`` (TEMP for an object's stand-in)."""
        temp = "TEMP " if self.flavor == "object" else ""
        verb = "CREATE OR REPLACE" if replace else "CREATE"
        self.inserted = self.scalar(f"{verb} {temp}TABLE {self.target} AS {select}", params)

    def describe(self, name: str) -> list[Column]:
        return [(r[0], r[1]) for r in self.rows(f"DESCRIBE {name}")]

    # -- names ----------------------------------------------------------------
    @property
    def slice(self) -> str:
        return relation(self.req.slice_table)

    def slice_columns(self) -> list[Column]:
        """The slice's columns (described once: the slice does not change during a write)."""
        if self._slice_columns is None:
            if self.req.slice_columns is not None:
                cols = list(self.req.slice_columns)
            elif self.req.slice_params is not None:  # bind the query, run nothing: its columns
                cols = [(d[0], str(d[1])) for d in self.run(f"SELECT * FROM {self.slice} LIMIT 0").description]
            else:
                cols = self.describe(self.slice)
            if self.req.partitions:  # a batch's own partition column is the write's, not the user's
                cols = [c for c in cols if c[0] != PARTITION_COLUMN]
            self._slice_columns = cols
        return self._slice_columns

    @property
    def target_names(self) -> set[str]:
        return {n for n, _ in self.existing or []}

    @property
    def target_types(self) -> dict[str, str]:
        return dict(self.existing or [])

    def select_list(self, alias: str | None = None, cast: bool = False) -> str:
        """The written slice columns; ``cast`` converts them to the target's types."""
        prefix = f"{alias}." if alias else ""
        types = self.target_types if cast else {}
        out = []
        for name, typ in self.columns:
            col = prefix + ident(name)
            want = types.get(name)
            out.append(f"CAST({col} AS {want}) AS {ident(name)}" if want and want != typ else col)
        return ", ".join(out)

    def partition_select(self, new_table: bool = False) -> tuple[str, dict[str, Any]]:
        """``, CAST($partition AS VARCHAR) AS "_partition"`` when this write carries one.

        Left out when inserting into an existing target that has no such column.
        """
        if self.req.partitions:
            return f", {ident(PARTITION_COLUMN)}", {}  # each row's partition, derived when the batch was staged
        if self.req.partition is None:
            return "", {}
        if not new_table and self.existing is not None and PARTITION_COLUMN not in self.target_names:
            return "", {}
        return f", CAST($partition AS VARCHAR) AS {ident(PARTITION_COLUMN)}", {"partition": self.req.partition}

    def key_match(self, left: str, right: str, cast_right: bool = True) -> str:
        """Key equality treating NULL keys as equal, so re-runs stay idempotent."""
        types = self.target_types if cast_right else {}
        parts = []
        for k in self.req.key:
            r = f"{right}.{ident(k)}"
            if types.get(k) and types[k] != dict(self.columns).get(k):
                r = f"CAST({r} AS {types[k]})"
            parts.append(f"{left}.{ident(k)} IS NOT DISTINCT FROM {r}")
        return " AND ".join(parts)


# -- checks that need only the slice ------------------------------------------------
def validate_request(req: WriteRequest, strategies: list[str]) -> None:
    """Options a strategy cannot run without, named with a fix."""
    if req.strategy not in strategies:
        guess = did_you_mean(req.strategy, strategies)
        raise RunError(
            f"unknown write strategy '{req.strategy}'",
            fix=f"did you mean '{guess}'?" if guess else f"use one of {', '.join(strategies)}",
        )
    if req.on_schema_change not in ON_SCHEMA_CHANGE:
        guess = did_you_mean(req.on_schema_change, ON_SCHEMA_CHANGE)
        raise RunError(
            f"unknown on_schema_change '{req.on_schema_change}'",
            fix=f"did you mean '{guess}'?" if guess else f"use one of {', '.join(ON_SCHEMA_CHANGE)}",
        )
    if req.deletes not in DELETES:
        raise RunError(f"unknown deletes '{req.deletes}'", fix="use deletes=close or deletes=ignore")


def require_columns(ctx: WriteContext, names: tuple[str, ...], what: str) -> None:
    have = [n for n, _ in ctx.slice_columns()]
    for name in names:
        if name not in have:
            guess = did_you_mean(name, have)
            raise RunError(
                f"{what} column '{name}' is not in the slice of {ctx.req.uri} (columns: {', '.join(have)})",
                fix=f"did you mean '{guess}'?" if guess else f"select a column named '{name}' or change {what}=",
            )


def check_unique_keys(ctx: WriteContext) -> None:
    """Duplicate keys in one slice would make the upsert order-dependent: refuse them."""
    keys = ", ".join(ident(k) for k in ctx.req.key)
    rows = ctx.rows(
        f"SELECT {keys}, count(*) AS n, count(*) OVER () AS dup_keys, sum(count(*)) OVER () AS dup_rows "
        f"FROM {ctx.slice} GROUP BY ALL HAVING count(*) > 1 ORDER BY n DESC, {keys} LIMIT {DUPLICATE_SAMPLES}"
    )
    if not rows:
        return
    nk = len(ctx.req.key)
    samples = []
    for row in rows:
        key = ", ".join(f"{k}={v!r}" for k, v in zip(ctx.req.key, row[:nk]))
        samples.append(f"({key}) ×{row[nk]}")
    dup_keys, dup_rows = int(rows[0][nk + 1]), int(rows[0][nk + 2])
    raise RunError(
        f"{dup_keys} key{'s' if dup_keys != 1 else ''} of {ctx.req.uri} appear more than once in the slice "
        f"({dup_rows} rows, key={','.join(ctx.req.key)}), e.g. {'; '.join(samples)}",
        fix="deduplicate the result (e.g. QUALIFY row_number() OVER (PARTITION BY <key> ORDER BY <newest>) = 1) or fix key=",
    )


def check_no_managed(ctx: WriteContext) -> None:
    clash = [n for n, _ in ctx.slice_columns() if n in ctx.managed]
    if clash:
        raise RunError(
            f"the slice of {ctx.req.uri} has column(s) {', '.join(clash)} that the {ctx.req.strategy} write manages",
            fix=f"rename them or SELECT * EXCLUDE ({', '.join(clash)})",
        )


# -- the frame every target shares ---------------------------------------------------
def prepare(ctx: WriteContext, strategy: Strategy) -> int | None:
    """Checks that need only the slice, before BEGIN; returns the slice's row count (None: the write counts it)."""
    known = ctx.req.slice_rows
    if known is None and ctx.req.slice_params is not None:
        rows = None  # an unstaged slice is read once, by the write itself
    else:
        rows = known if known is not None else int(ctx.scalar(f"SELECT count(*) FROM {ctx.slice}"))
    check_no_managed(ctx)
    strategy.validate(ctx)
    return rows


def rollback(ctx: WriteContext) -> None:
    """Undo the transaction if one is open; never masks the error that got us here."""
    import duckdb

    conn = ctx.session.conn
    # A query interrupted by a cancellation can leave DuckLake's transaction busy, and ROLLBACK then
    # waits for it (DuckDB 1.4.4); interrupting the connection first ends that (a no-op otherwise).
    conn.interrupt()
    try:
        conn.execute("ROLLBACK")
    except duckdb.Error:
        pass  # no transaction was open
    if ctx.flavor == "postgres":
        # The postgres extension keeps catalog entries of rolled-back CREATEs: forget them.
        try:
            conn.execute("CALL pg_clear_cache()")
        except duckdb.Error:
            pass


def result(ctx: WriteContext, rows: int | None, schema: list[Column], snapshot_id: int | None = None) -> WriteResult:
    return WriteResult(
        rows=rows if rows is not None else int(ctx.inserted or 0), sql=ctx.sql, schema=schema, schema_change=ctx.change, snapshot_id=snapshot_id, warnings=ctx.warnings
    )
