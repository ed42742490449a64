"""``on postgres table=...`` → a sensor per (step, table), RUNNING by default.

A pull source (``triggers.pull``): a tick peeks the step's replication slot,
stores whole transactions' changes and advances the slot after the store
(``reader.PgReader``), then asks for one run per batch (``emit``). Each change
is an event whose value is ``{"op", "table", "new", "old_key", "xid"}``. The
server comes from ``LINEAGE_PG_DSN[_<CONNECTION>]``; without one the sensor
skips and says which variable to set.
"""

from __future__ import annotations

from collections.abc import Sequence

from dagster import AssetKey, PartitionsDefinition, SensorDefinition

from lineage_defs.parse.model import Postgres
from lineage_defs.plan.names import postgres_stream
from lineage_defs.plan.spec import ScriptStep
from lineage_defs.settings import LineageSettings
from lineage_defs.triggers.keys import default_source, partition_function
from lineage_defs.triggers.pull import NotConfigured, Reader
from lineage_defs.triggers.sensor import pull_sensor, slug


def sensor_name(step: ScriptStep, p: Postgres) -> str:
    return f"{step.name}__postgres_{slug(p.table)}"


def postgres_sensor(step: ScriptStep, p: Postgres, keys: Sequence[AssetKey], pdef: PartitionsDefinition | None, settings: LineageSettings) -> SensorDefinition:
    partition_of = partition_function(default_source(step.partitioning, p.partition_from), pdef)
    env = "LINEAGE_PG_DSN" + ("" if p.connection == "default" else f"_{p.connection.upper()}")
    from lineage_defs.triggers.postgres.reader import slot_name

    slot = slot_name(step.name, p.table)

    def reader() -> Reader:
        from lineage_defs.triggers.postgres.reader import PgReader, PgSource  # psycopg: imported when a tick runs

        dsn = settings.postgres_dsn if p.connection == "default" else settings.postgres_dsns.get(p.connection.lower())
        if not dsn:
            raise NotConfigured(f"no PostgreSQL for connection '{p.connection}': set {env} (a libpq DSN of a server with wal_level=logical)")
        return PgReader(PgSource(dsn, p.table, slot, p.events, partition_of))

    description = f"{step.path}:{p.at.line}: on postgres table={p.table} ({','.join(p.events)}; slot and publication {slot}, server from {env})"
    return pull_sensor(sensor_name(step, p), description, postgres_stream(step.name, p.table), f"table {p.table}", reader, keys, pdef, settings, p.max_batch)
