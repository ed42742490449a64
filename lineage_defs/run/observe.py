"""What a manual step left in its target: row count and column schema."""

from __future__ import annotations

import os
from typing import Any

from lineage_defs.run.context import PartitionWindow
from lineage_defs.run.contract import SliceReport
from lineage_defs.run.substrates import Session, execute
from lineage_defs.settings import LineageSettings

_READERS = {".parquet": "read_parquet", ".csv": "read_csv", ".json": "read_json_auto", ".jsonl": "read_json_auto", ".ndjson": "read_json_auto"}


def observe(settings: LineageSettings, target: str, window: PartitionWindow | None) -> SliceReport:
    """Row count, schema and snapshot of ``target``; ``observe_error`` says why they are missing."""
    partition = window.key if window else None
    with Session(settings) as s:
        try:
            params: dict[str, Any] = {}
            snapshot = None
            if target.startswith("s3://"):
                loc = s.object_path(target)
                if not loc.startswith("s3://") and not os.path.exists(loc):
                    return SliceReport(target, partition, observe_error=f"the step wrote nothing at {target}")
                reader = next((r for ext, r in _READERS.items() if target.endswith(ext)), None)
                if reader is None:
                    return SliceReport(target, partition)  # an object DuckDB cannot read as a table: nothing to count
                rel, params = f"{reader}($path)", {"path": loc}  # the path holds the partition key: bound
            else:
                rel = s.table_sql(target)
                snapshot = s.snapshot_id(s.alias_for(target))
            row = execute(s.conn, f"SELECT count(*) FROM {rel}", params).fetchone()
            cur = execute(s.conn, f"SELECT * FROM {rel} LIMIT 0", params)
            schema = tuple((d[0], str(d[1])) for d in cur.description)
            return SliceReport(target, partition, rows=int(row[0]) if row else 0, schema=schema, snapshot_id=snapshot)
        except Exception as e:  # observing is best effort: the step itself succeeded
            return SliceReport(target, partition, observe_error=str(e))
