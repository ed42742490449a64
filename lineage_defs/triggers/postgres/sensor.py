"""What an ``on postgres table=...`` sensor's tick reads with (``Source.connect``; the row: ``source``).

A pull source (``triggers.pull``): a tick peeks the step's replication slot,
stores whole transactions' changes and advances the slot after the store
(``reader.PgReader``), then asks for one run per batch (``emit``). Each change
is an event whose value is ``{"op", "table", "new", "old_key", "xid"}``. The
server comes from ``LINEAGE_PG_DSN[_<CONNECTION>]``; without one the sensor
skips and says which variable to set.
"""

from __future__ import annotations

from lineage_defs.plan.spec import ScriptStep
from lineage_defs.settings import LineageSettings
from lineage_defs.triggers.keys import PartitionOf
from lineage_defs.triggers.postgres.source import SOURCE, Postgres
from lineage_defs.triggers.pull import NotConfigured, Pull, Reader


def connect(step: ScriptStep, p: Postgres, settings: LineageSettings, partition_of: PartitionOf | None) -> Pull:
    from lineage_defs.triggers.postgres.reader import slot_name  # no psycopg here: only the slot's name

    env = SOURCE.connection_env(p.connection)
    slot = slot_name(step.name, p.table)

    def reader() -> Reader:
        from lineage_defs.triggers.postgres.reader import PgReader, PgSource  # psycopg: imported when a tick runs

        dsn = settings.postgres_dsn if p.connection == "default" else settings.postgres_dsns.get(p.connection.lower())
        if not dsn:
            raise NotConfigured(f"no PostgreSQL for connection '{p.connection}': set {env} (a libpq DSN of a server with wal_level=logical)")
        return PgReader(PgSource(dsn, p.table, slot, p.events, partition_of))

    return Pull(reader, f"{','.join(p.events)}; slot and publication {slot}, server from {env}")
