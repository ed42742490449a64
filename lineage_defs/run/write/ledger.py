"""The batch ledger: which trigger batches a target already holds, kept in the write's own transaction.

A run started by a Kafka or webhook sensor writes one batch of events (SPEC
section 6). Its id is recorded beside the data, atomically with it, so a
retried or re-executed run of the same batch finds it and writes nothing —
``append`` included.

- Tables (DuckLake, DuckDB file, PostgreSQL): a table ``_lineage_batches``
  in the target's own catalog and schema, written in the same transaction as
  the target (DuckDB lets one transaction write one attached database: this
  is that database).
- Parquet objects: the ids live in the object's own key-value metadata
  (``lineage_batches``), published in the same atomic replace as the rows.
"""

from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING

from lineage_defs.errors import RunError
from lineage_defs.run.quoting import ident

if TYPE_CHECKING:
    from lineage_defs.run.write.context import WriteContext

TABLE = "_lineage_batches"
KV_KEY = "lineage_batches"
_BATCH_ID = re.compile(r"[A-Za-z0-9_.:-]{1,200}")


def check_id(batch: str) -> str:
    if not _BATCH_ID.fullmatch(batch):
        raise RunError(f"batch id {batch!r} is not a lineage batch id", fix="runs get their batch id from the sensor's lineage/batch tag; do not set it by hand")
    return batch


def table_name(ctx: WriteContext) -> str:
    return f"{ident(ctx.catalog)}.{ident(ctx.schema)}.{ident(TABLE)}"


def table_holds(ctx: WriteContext, batch: str) -> bool:
    """Inside the write's transaction: create the ledger if needed; has ``batch`` been written to this target?"""
    ledger = table_name(ctx)
    ctx.run(f"CREATE TABLE IF NOT EXISTS {ledger} (target VARCHAR, batch VARCHAR, rows BIGINT, written_at TIMESTAMP)")
    n = ctx.scalar(f"SELECT count(*) FROM {ledger} WHERE target = $target AND batch = $batch", {"target": ctx.req.uri, "batch": check_id(batch)})
    return bool(n)


def table_record(ctx: WriteContext, batch: str, rows: int) -> None:
    """Inside the write's transaction, after the data: this batch is in the target."""
    ctx.run(
        f"INSERT INTO {table_name(ctx)} VALUES ($target, $batch, $rows, CAST(now() AS TIMESTAMP))",
        {"target": ctx.req.uri, "batch": check_id(batch), "rows": rows},
    )


def object_batches(ctx: WriteContext, path: str) -> list[str]:
    """The batch ids an existing Parquet object records (empty for one written without a batch)."""
    rows = ctx.rows("SELECT value FROM parquet_kv_metadata($path) WHERE key = $key", {"path": path, "key": KV_KEY.encode()})
    out: list[str] = []
    for (value,) in rows:
        out.extend(str(b) for b in json.loads(bytes(value).decode()))
    return out


def object_option(batches: list[str]) -> tuple[str, dict[str, str]]:
    """The COPY option that carries the ledger into the new object (empty when there is none)."""
    if not batches:
        return "", {}
    return f", KV_METADATA {{{KV_KEY}: $ledger}}", {"ledger": json.dumps(batches)}
