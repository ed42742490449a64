"""A triggered run's batch of events: loaded from the store by id, offered to the step.

SQL steps read it as the TEMP table ``_events`` (key, value, headers,
timestamp, topic, partition, offset) — DuckDB steps in their DuckDB
connection, `.pg.sql` steps in their PostgreSQL session; Python steps through
``runtime.events()`` (a JSON file named by ``LINEAGE_EVENTS_FILE``). The same
batch id always yields the same rows, so a re-executed run sees what the
first one saw.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lineage_defs.errors import Location, RunError
from lineage_defs.events.store import BATCH_TAG, Event, EventStore
from lineage_defs.plan.names import stream_of
from lineage_defs.plan.spec import EVENTS_TABLE, ScriptStep
from lineage_defs.run.substrates import temp_table_from_arrow
from lineage_defs.settings import LineageSettings


@dataclass(frozen=True)
class RunBatch:
    id: str
    stream: str
    events: tuple[Event, ...]


def streams_of(step: ScriptStep) -> tuple[str, ...]:
    """The event streams that may feed this step (one per `on kafka` / `on webhook` … line)."""
    return tuple(stream_of(step.name, t) for t in step.events)


def load_batch(settings: LineageSettings, step: ScriptStep, batch_id: str) -> RunBatch:
    """The batch a sensor cut for this step; a RunError naming the fix when it is not there."""
    path = settings.events_where
    if not settings.events_made:
        raise RunError(f"run tagged {BATCH_TAG}={batch_id} but there is no event store at {path}", Location(step.path), "runs with a batch come from the step's Kafka or webhook sensor; check LINEAGE_STATE_DIR")
    with EventStore(settings.events_location) as store:
        batch = store.batch(batch_id)
        if batch is None:
            raise RunError(f"batch {batch_id} is not in the event store {path}", Location(step.path), "the store was replaced or the tag edited: launch the step without the lineage/batch tag, or from its sensor")
        if batch.stream not in streams_of(step):
            raise RunError(f"batch {batch_id} belongs to {batch.stream}, not to a trigger of {step.path}", Location(step.path), "re-execute the run of the step the batch was cut for")
        return RunBatch(batch.id, batch.stream, tuple(store.events(batch_id)))


def arrow_table(events: tuple[Event, ...] | list[Event]) -> Any:
    import pyarrow as pa

    schema = pa.schema(
        [
            ("key", pa.string()),
            ("value", pa.string()),
            ("headers", pa.map_(pa.string(), pa.string())),
            ("timestamp", pa.timestamp("ms", tz="UTC")),
            ("topic", pa.string()),
            ("partition", pa.int32()),
            ("offset", pa.int64()),
        ]
    )
    if not events:
        return schema.empty_table()
    keys, values, headers, ts, topics, parts, offsets = zip(*events)  # an Event is a tuple in this order
    columns = [_text_array(keys), _text_array(values), pa.array(headers, schema.field("headers").type), pa.array(ts, pa.int64()).cast(schema.field("timestamp").type),
               pa.array(topics, pa.string()), pa.array(parts, pa.int32()), pa.array(offsets, pa.int64())]
    return pa.table(columns, schema=schema)


def _text_array(items: tuple[bytes | None, ...]) -> Any:
    """Bytes as text: validated in one Arrow cast; undecodable values replaced (U+FFFD) instead of failing the run."""
    import pyarrow as pa

    raw = pa.array(items, pa.binary())
    try:
        return raw.cast(pa.string())
    except pa.ArrowInvalid:
        return pa.array([None if b is None else b.decode("utf-8", errors="replace") for b in items], pa.string())


def stage_events(conn: Any, events: tuple[Event, ...] | list[Event]) -> None:
    """``_events`` as a TEMP table of the DuckDB connection (empty, with its columns, when there is no batch)."""
    temp_table_from_arrow(conn, f'"{EVENTS_TABLE}"', arrow_table(events))


# `.pg.sql` steps: the same columns in PostgreSQL types (headers as a JSON object)
PG_COLUMNS = (("key", "text"), ("value", "text"), ("headers", "jsonb"), ("timestamp", "timestamptz"), ("topic", "text"), ("partition", "integer"), ("offset", "bigint"))


def stage_events_postgres(pg: Any, events: tuple[Event, ...] | list[Event]) -> None:
    """``_events`` as a TEMP table of a PostgreSQL session, loaded with COPY (values never enter the SQL text).

    Committed at once: each partition's statements run in a transaction that is
    rolled back after its SELECT is fetched, and the table must outlive them.
    PostgreSQL text cannot hold NUL: a NUL in a key or value arrives as U+FFFD.
    """
    import datetime as dt

    from psycopg.types.json import Jsonb

    columns = ", ".join(f'"{name}" {kind}' for name, kind in PG_COLUMNS)
    names = ", ".join(f'"{name}"' for name, _ in PG_COLUMNS)
    with pg.cursor() as cur:
        cur.execute(f'DROP TABLE IF EXISTS pg_temp."{EVENTS_TABLE}"')
        cur.execute(f'CREATE TEMP TABLE "{EVENTS_TABLE}" ({columns})')
        with cur.copy(f'COPY "{EVENTS_TABLE}" ({names}) FROM STDIN') as copy:
            for e in events:
                d = e.as_dict()
                copy.write_row((
                    _no_nul(d["key"]),
                    _no_nul(d["value"]),
                    Jsonb(d["headers"]),
                    None if e.timestamp is None else dt.datetime.fromtimestamp(e.timestamp / 1000, dt.timezone.utc),
                    e.topic,
                    e.partition,
                    e.offset,
                ))
    pg.commit()


def _no_nul(text: str | None) -> str | None:
    return text.replace("\x00", "\ufffd") if text and "\x00" in text else text


def write_events_file(events: tuple[Event, ...], path: Path) -> None:
    with open(path, "w") as f:
        json.dump([e.as_dict() for e in events], f)
