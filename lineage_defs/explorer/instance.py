"""What the Dagster instance knows of each asset: its last materialization (time, run, column types) and last status.

Read once for all assets (``DagsterInstance.get_asset_records``), only when
``DAGSTER_HOME`` is set: the explorer of a folder that never ran needs no
instance.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from lineage_defs import uris

COLUMN_SCHEMA = "dagster/column_schema"


@dataclass(frozen=True)
class LastRun:
    status: str  # "materialized" | "failed"
    timestamp: float
    run_id: str
    partition: str | None = None
    types: dict[str, str] = field(default_factory=dict)  # column → type, as the last materialization recorded it


def last_runs(asset_uris: Iterable[str]) -> dict[str, LastRun]:
    """URI → its last status ({} without ``DAGSTER_HOME`` or without runs)."""
    if not os.environ.get("DAGSTER_HOME"):
        return {}
    from dagster import AssetKey, DagsterInstance

    by_key = {AssetKey(list(uris.key_path(u))): u for u in asset_uris}
    out: dict[str, LastRun] = {}
    with DagsterInstance.get() as instance:
        for record in instance.get_asset_records(list(by_key)):
            entry = record.asset_entry
            uri = by_key.get(entry.asset_key)
            if uri is not None:
                last = _last(entry)
                if last is not None:
                    out[uri] = last
    return out


def _last(entry: Any) -> LastRun | None:
    ok, failed = entry.last_materialization_record, entry.last_failed_to_materialize_record
    if ok is None and failed is None:
        return None
    if failed is not None and (ok is None or failed.storage_id > ok.storage_id):
        e = failed.event_log_entry
        return LastRun("failed", e.timestamp, e.run_id, _partition(e))
    e = ok.event_log_entry
    m = e.asset_materialization
    types: dict[str, str] = {}
    schema = getattr(m.metadata.get(COLUMN_SCHEMA), "schema", None) if m is not None else None
    for c in getattr(schema, "columns", None) or ():
        types[c.name] = c.type
    return LastRun("materialized", e.timestamp, e.run_id, _partition(e), types)


def _partition(e: Any) -> str | None:
    dagster_event = e.dagster_event
    return getattr(dagster_event, "partition", None) if dagster_event is not None else None
