"""Parquet object targets (``s3://.../*.parquet``), local or on an S3 endpoint.

An object cannot be changed in place, so the new full contents are computed
in DuckDB in a TEMP stand-in table (the old object loaded, then the same
strategy SQL as for tables), audited there, and published in one step: a
local file is written under a temporary name and ``os.replace``d; an S3
object is written by one COPY to the final key (S3 makes a PUT or a
completed multipart upload visible atomically). A crash before that leaves
the old object.

A per-partition object (``{partition}`` resolved into the key) holds only its
own partition, so partition_replace keeping "the other partitions" of it
keeps none: it is a plain replace of that object, with no special case.
"""

from __future__ import annotations

import os
import uuid
from typing import TYPE_CHECKING

from lineage_defs.run.write import ledger
from lineage_defs.run.write.base import Audit, WriteRequest, WriteResult
from lineage_defs.run.write.context import Strategy, WriteContext, ident, prepare, result, rollback
from lineage_defs.run.write.schema import plan_columns

if TYPE_CHECKING:
    from lineage_defs.run.substrates import Session

STAND_IN = "_lineage_object"  # the audit can read the new contents here: temp.main._lineage_object


def write_object(session: Session, req: WriteRequest, strategy: Strategy, audit: Audit | None) -> WriteResult:
    path = session.object_path(req.uri)
    target = f"temp.main.{ident(STAND_IN)}"
    ctx = WriteContext(session, req, target, "object", "temp", "main", STAND_IN, managed=strategy.MANAGED)
    rows = prepare(ctx, strategy)
    remote = path.startswith("s3://")
    exists = _remote_exists(ctx, path) if remote else os.path.exists(path)
    staged = path if remote else os.path.join(os.path.dirname(path), f".{os.path.basename(path)}.{uuid.uuid4().hex}.tmp")
    # the object's ledger travels with it (see ledger.py); a batch it holds is not written again
    batches = ledger.object_batches(ctx, path) if exists else []
    if req.batch and ledger.check_id(req.batch) in batches:
        out = result(ctx, 0, [])
        out.skipped = True
        out.warnings.append(f"batch {req.batch} is already in {req.uri} (a retry or re-execution): nothing written")
        return out
    if req.batch:
        batches.append(req.batch)
    kv, kv_params = ledger.object_option(batches)
    ctx.run(f"DROP TABLE IF EXISTS {target}")
    ctx.run("BEGIN")
    try:
        if exists:
            # replace needs only the old schema (for on_schema_change=fail), not the rows
            limit = " LIMIT 0" if strategy.REPLACES_TARGET else ""
            ctx.create_as(f"SELECT * FROM read_parquet($path){limit}", {"path": path})
            ctx.existing = ctx.describe(target)
        plan_columns(ctx, strategy)
        if ctx.existing is None:
            strategy.create(ctx)
        else:
            strategy.apply(ctx)
        schema = ctx.describe(target)
        if audit is not None:
            audit(session.conn)
        ctx.run(f"COPY {target} TO $path (FORMAT parquet{kv})", {"path": staged, **kv_params})
        ctx.run("COMMIT")
        if not remote:
            _fsync(staged)
            os.replace(staged, path)
    except BaseException:
        rollback(ctx)
        if not remote and os.path.exists(staged):
            os.remove(staged)
        raise
    finally:
        session.conn.execute(f"DROP TABLE IF EXISTS {target}")
    return result(ctx, rows, schema)


def _remote_exists(ctx: WriteContext, path: str) -> bool:
    """read_blob lists nothing for a missing key (a HEAD, never the object's bytes)."""
    return bool(ctx.scalar("SELECT count(*) FROM read_blob($path)", {"path": path}))


def _fsync(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
