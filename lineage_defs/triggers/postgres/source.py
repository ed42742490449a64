"""``on postgres table=<schema>.<table> [connection=…] [events=…]``: the PostgreSQL change source as data
(see ``triggers.source``). No Dagster, no psycopg."""

from __future__ import annotations

import re
from dataclasses import dataclass

from lineage_defs.errors import Location, did_you_mean
from lineage_defs.triggers.source import BadValue, Option, Source

CHANGES = ("insert", "update", "delete")


@dataclass(frozen=True)
class Postgres:
    """``on postgres table=<schema>.<table> [connection=…] [events=insert,update,delete]``."""

    table: str  # schema.table
    connection: str
    events: tuple[str, ...]  # of insert, update, delete
    partition_from: str | None
    max_batch: int | None
    at: Location


_PG_TABLE = re.compile(r"[a-z_][a-z0-9_]*\.[a-z_][a-z0-9_]*")


def pg_table(v: str) -> str:
    """``<schema>.<table>``: plain lower-case identifiers (what PostgreSQL folds an unquoted name to)."""
    if _PG_TABLE.fullmatch(v):
        return v
    name = v.rsplit(".", 1)[-1].lower()
    fixed = re.sub(r"[^a-z0-9_]", "_", name) or "orders"
    raise BadValue(f"bad table '{v}'", f"write <schema>.<table> in lower case, e.g. table=public.{fixed}")


def change_events(v: str) -> tuple[str, ...]:
    """``insert,update,delete`` or a part of it."""
    given = v.split(",")
    bad = [e for e in given if e not in CHANGES]
    if not bad and given and len(set(given)) == len(given):
        return tuple(e for e in CHANGES if e in given)
    guess = did_you_mean(bad[0], CHANGES) if bad else None
    raise BadValue(f"bad events '{v}'", f"did you mean '{guess}'?" if guess else "write a comma list of insert, update, delete, e.g. events=insert,update")


SOURCE = Source(
    keyword="postgres",
    record=Postgres,
    options=(
        Option("table", (pg_table,), required=True, example="public.orders"),
        Option("connection", ("connection",), default="default"),
        Option("events", (change_events,), default=CHANGES),
    ),
    identity=lambda step, t: (t.table,),
    # the server is the substrate's (LINEAGE_PG_DSN[_<NAME>], settings.postgres_dsn[s]), not a setting of its own
    env="LINEAGE_PG_DSN",
    settings_field=False,
    connect="lineage_defs.triggers.postgres.sensor:connect",
    label="table {t.table}",
)
