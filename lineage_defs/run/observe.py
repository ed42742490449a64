"""What a manual step left in its target: row count and column schema."""

from __future__ import annotations

import os
from typing import Any

from lineage_defs.run.context import PartitionWindow
from lineage_defs.run.substrates import RunSettings, Session


def observe(settings: RunSettings, target: str, window: PartitionWindow | None) -> dict[str, Any]:
    out: dict[str, Any] = {"target": target, "partition": window.key if window else None}
    with Session(settings) as s:
        try:
            if target.startswith("s3://"):
                loc = s.object_path(target)
                if not loc.startswith("s3://") and not os.path.exists(loc):
                    return out
                if target.endswith(".parquet"):
                    rel = f"read_parquet('{loc.replace(chr(39), chr(39) * 2)}')"
                elif target.endswith(".csv"):
                    rel = f"read_csv('{loc.replace(chr(39), chr(39) * 2)}')"
                elif target.endswith((".json", ".jsonl", ".ndjson")):
                    rel = f"read_json_auto('{loc.replace(chr(39), chr(39) * 2)}')"
                else:
                    return out
            else:
                rel = s.table_sql(target)
                alias = s.alias_for(target)
                out["snapshot_id"] = s.snapshot_id(alias)
            row = s.conn.execute(f"SELECT count(*) FROM {rel}").fetchone()
            if row is None:
                raise RuntimeError(f"SELECT count(*) FROM {rel} returned no row")
            out["rows"] = int(row[0])
            out["schema"] = [(r[0], r[1]) for r in s.conn.execute(f"DESCRIBE SELECT * FROM {rel}").fetchall()]
        except Exception as e:  # observing is best effort: the step itself succeeded
            out["observe_error"] = str(e)
    return out
