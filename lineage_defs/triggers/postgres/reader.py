"""A table's changes as a ``pull.Reader``: logical replication through SQL functions (psycopg 3). No Dagster.

First use creates a publication for the table (``publish=`` the step's
``events=``) and then a logical replication slot with the built-in
``pgoutput`` plugin, both named after the step — in that order: a slot made
before its publication cannot decode the changes in between. A tick *peeks*
changes (``pg_logical_slot_peek_binary_changes``: nothing is consumed), keeps
whole committed transactions only, and after ``pull.drain`` stored them
advances the slot to the end of the last one (``pg_replication_slot_advance``).
A crash before the advance peeks the same transactions again; their dedupe
ids (``<commit LSN>:<ordinal>``) are in the store already. psycopg 3 has no
replication protocol: the SQL interface is what works with it.

The store remembers (``positions``, partition 0 → past the last commit LSN)
that the slot existed: a slot missing after that was dropped, and the changes
since are gone — a clear error, never a silent restart.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from lineage_defs.events.store import NewEvent
from lineage_defs.triggers.keys import PartitionOf
from lineage_defs.triggers.postgres.pgoutput import Change, Commit, Decoder, lsn_text
from lineage_defs.triggers.pull import Chunk, SourceUnavailable


@dataclass(frozen=True)
class PgSource:
    dsn: str
    table: str  # schema.table
    name: str  # the slot's and the publication's name
    events: tuple[str, ...] = ("insert", "update", "delete")
    partition_of: PartitionOf | None = None
    chunk: int = 5000  # changes per peek (each peek decodes from the slot's start again: keep it large)


def slot_name(step_name: str, table: str) -> str:
    """``lineage_<step>_<schema>_<table>`` in lower case: one slot per step and table (two tables of one
    step never share one). Longer than PostgreSQL's 63 characters: cut, with a hash of the whole name."""
    import hashlib
    import re

    name = "lineage_" + re.sub(r"[^a-z0-9_]", "_", f"{step_name}_{table}".lower())
    return name if len(name) <= 63 else f"{name[:54]}_{hashlib.sha1(name.encode()).hexdigest()[:8]}"


class PgReader:
    def __init__(self, source: PgSource) -> None:
        self.source = source
        self.chunk = source.chunk
        self.conn: Any = None

    def _fail(self, e: Exception) -> SourceUnavailable:
        s = self.source
        state = getattr(e, "sqlstate", None)
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        if state == "42501":
            return SourceUnavailable(f"PostgreSQL table {s.table}: {first}: grant the role REPLICATION (ALTER ROLE … REPLICATION)")
        if state == "55006":
            return SourceUnavailable(f"PostgreSQL table {s.table}: {first}: another consumer uses slot {s.name}")
        return SourceUnavailable(f"PostgreSQL table {s.table}: {first}" + (f" [{state}]" if state else ""))

    def connect(self, positions: Mapping[int, int]) -> None:
        import psycopg

        s = self.source
        try:
            self.conn = psycopg.connect(s.dsn, autocommit=True, connect_timeout=10)
        except psycopg.Error as e:
            raise SourceUnavailable(f"cannot reach PostgreSQL for table {s.table}: {str(e).strip().splitlines()[0]}") from e
        try:
            self._ensure(positions)
        except psycopg.Error as e:
            raise self._fail(e) from e

    def _ensure(self, positions: Mapping[int, int]) -> None:
        s, c = self.source, self.conn
        (level,) = c.execute("SHOW wal_level").fetchone()
        if level != "logical":
            raise SourceUnavailable(f"PostgreSQL table {s.table}: wal_level is {level}: set wal_level=logical on the server and restart it")
        slot = c.execute("SELECT 1 FROM pg_replication_slots WHERE slot_name = %s", (s.name,)).fetchone()
        if slot is not None:
            return
        if 0 in positions:
            raise SourceUnavailable(
                f"PostgreSQL table {s.table}: replication slot {s.name} was dropped; the changes since the last stored one "
                f"(LSN {lsn_text(positions[0] - 1)}) are lost. To go on from now: "
                f"SELECT pg_create_logical_replication_slot('{s.name}', 'pgoutput')"
            )
        row = c.execute(
            "SELECT c.relreplident, EXISTS (SELECT 1 FROM pg_index i WHERE i.indrelid = c.oid AND i.indisprimary) "
            "FROM pg_class c WHERE c.oid = to_regclass(%s)",
            (s.table,),
        ).fetchone()
        if row is None:
            raise SourceUnavailable(f"PostgreSQL table {s.table} does not exist: create it, or fix table= in the step")
        ident, has_pk = row
        if {"update", "delete"} & set(s.events) and (ident == "n" or (ident == "d" and not has_pk)):
            raise SourceUnavailable(
                f"PostgreSQL table {s.table} has no replica identity, so its updates and deletes cannot be published: "
                f"add a primary key, or ALTER TABLE {s.table} REPLICA IDENTITY FULL, or write events=insert"
            )
        from psycopg import sql

        if c.execute("SELECT 1 FROM pg_publication WHERE pubname = %s", (s.name,)).fetchone() is None:
            schema, table = s.table.split(".", 1)
            c.execute(
                sql.SQL("CREATE PUBLICATION {} FOR TABLE {}.{} WITH (publish = {})").format(
                    sql.Identifier(s.name), sql.Identifier(schema), sql.Identifier(table), sql.Literal(", ".join(s.events))
                )
            )
        c.execute("SELECT pg_create_logical_replication_slot(%s, 'pgoutput')", (s.name,))

    def read(self, limit: int) -> Chunk:
        import psycopg

        s = self.source
        try:
            rows = self.conn.execute(
                "SELECT data FROM pg_logical_slot_peek_binary_changes(%s, NULL, %s, 'proto_version', '1', 'publication_names', %s)",
                (s.name, limit, s.name),
            ).fetchall()
        except psycopg.Error as e:
            raise self._fail(e) from e
        decoder = Decoder()
        events: list[NewEvent] = []
        pending: list[Change] = []
        end: int | None = None
        for (data,) in rows:
            out = decoder.decode(data)
            if isinstance(out, Change):
                pending.append(out)
            elif isinstance(out, Commit):  # only whole transactions are stored
                events += [self._event(ch, out.commit_ms) for ch in pending]
                pending, end = [], out.end_lsn
        # upto_nchanges is checked between transactions: fewer rows than asked means the slot's end
        return Chunk(events, end, caught_up=len(rows) < limit or end is None)

    def _event(self, ch: Change, commit_ms: int) -> NewEvent:
        value = ch.as_json()
        pkey, error = self.source.partition_of(None, value, [("op", ch.op)], commit_ms) if self.source.partition_of else (None, None)
        # partition 0 / offset = the commit LSN: the store's position says the slot existed (see the module doc)
        return NewEvent(f"{ch.commit_lsn:016X}:{ch.ordinal}", value, None, [("op", ch.op)], commit_ms, ch.table, 0, ch.commit_lsn, pkey, error)

    def ack(self, chunk: Chunk) -> None:
        import psycopg

        if chunk.receipt is None:
            return
        try:
            self.conn.execute("SELECT pg_replication_slot_advance(%s, %s::pg_lsn)", (self.source.name, lsn_text(chunk.receipt)))
        except psycopg.Error as e:
            raise self._fail(e) from e  # stored already: the next tick peeks them again and the store ignores them

    def lag(self) -> int | None:
        """Unknown: PostgreSQL cannot count the changes a slot holds without decoding them."""
        return None

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()
