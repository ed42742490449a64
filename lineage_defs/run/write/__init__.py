"""Managed writes (SPEC section 4): a staged slice into its target, in one transaction.

``write(session, req, audit)`` picks the strategy from ``STRATEGIES`` (one
module each) and the target kind: a table in a catalog attached to the
session (``ducklake://``, ``duckdb://``, ``datatable://``) or a Parquet
object (``s3://.../*.parquet``). Example::

    with Session(settings) as s:
        s.conn.execute("CREATE TEMP TABLE slice AS SELECT ...")
        res = write(s, WriteRequest("ducklake://main/orders", "partition_replace", "slice", partition="2024-01-01"))
        res.rows, res.schema, res.snapshot_id

``audit(conn)`` runs after the data is written and before COMMIT; raising
rolls the write back. For Parquet objects the new contents are in the TEMP
table ``temp.main._lineage_object`` while the audit runs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from lineage_defs import uris
from lineage_defs.errors import RunError
from lineage_defs.run.write import append, merge, partition_replace, replace, scd2
from lineage_defs.run.write.base import Audit, WriteRequest, WriteResult
from lineage_defs.run.write.context import Strategy, validate_request
from lineage_defs.run.write.objects import write_object
from lineage_defs.run.write.tables import write_table

if TYPE_CHECKING:
    from lineage_defs.run.substrates import Session

STRATEGIES: dict[str, Strategy] = {
    "replace": replace,
    "partition_replace": partition_replace,
    "merge": merge,
    "append": append,
    "scd2": scd2,
}


def write(session: Session, req: WriteRequest, audit: Audit | None = None) -> WriteResult:
    """Write ``req.slice_table`` to ``req.uri`` with ``req.strategy``; see the module docstring."""
    validate_request(req, list(STRATEGIES))
    strategy = STRATEGIES[req.strategy]
    try:
        u = uris.parse(req.uri)
    except uris.UriError as e:
        raise RunError(f"cannot write to '{req.uri}': {e.message}", fix=e.fix) from e
    if uris.PARTITION_TOKEN in req.uri:
        raise RunError(f"'{req.uri}' still holds {uris.PARTITION_TOKEN}", fix="resolve the partition into the URI before writing")
    if u.kind.is_table:
        return write_table(session, req, strategy, audit)
    if u.is_parquet:
        return write_object(session, req, strategy, audit)
    raise RunError(
        f"cannot write to '{req.uri}': managed writes go to tables or Parquet objects",
        fix="write to ducklake://, duckdb://, datatable:// or an s3://…/<name>.parquet object, or use materialize manual",
    )


__all__ = ["STRATEGIES", "Audit", "WriteRequest", "WriteResult", "write"]
