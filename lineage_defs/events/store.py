"""The durable store between a trigger and its runs: SQLite in WAL mode under the state dir, or PostgreSQL.

Three kinds of process share it — the receivers (write events), the sensors
in the Dagster code server (write Kafka events, cut batches, settle them) and
the runs (read their batch) — so it is a store built for several processes:
SQLite in WAL mode (readers never block the writer, one writer at a time,
``busy_timeout`` for the rest), ``synchronous=FULL`` so a commit is on disk
before anyone is told so. The file is created ``0600``: it holds payloads.

When processes run on several machines (``LINEAGE_EVENTS_DSN``), the store is
a PostgreSQL database instead: the same class, the same statements (only the
few the dialects spell differently branch), the same guarantees. A commit
there is durable when PostgreSQL says so (``synchronous_commit`` on, its
default); concurrent writers are PostgreSQL's row locks and a per-stream
advisory lock while batches are cut.

``EventStore`` is the whole interface, with these guarantees on both backends:

1. **An event is stored once.** ``UNIQUE(stream, dedupe)``: ``dedupe`` is
   ``<partition>:<offset>`` for a Kafka message (a message consumed again
   after a crash is ignored) or the ``Idempotency-Key`` of a webhook post.
   ``add``/``add_messages`` commit before they return (the source is
   acknowledged after that, never before).
2. **An event that cannot run is kept, not lost.** An event stored with an
   ``error`` (no usable partition value, JSON too deep, …) is *rejected*: it
   is never batched, and ``rejected`` lists it with its reason.
3. **A batch never changes.** ``cut_batches`` puts every open event into at
   most one batch, in one transaction; ``events(batch)`` returns the same rows
   every time (a re-execution sees what the first run saw).
4. **A batch is open until a run of it succeeded.** Its ``status`` is
   ``open`` until the sensor ``settle``s it ``done`` (a run succeeded) or
   ``failed`` (its attempts ran out, with the reason); ``replay`` opens a
   failed batch again. Only ``done`` batches are ever ``prune``d.
5. A batch id is the run key of its first run and is recorded by the managed
   write in the target, in the same transaction as the data (``run.write``):
   a run of a batch already written writes nothing.

No Dagster import: the receiver and the run layer use this module too.
"""

from __future__ import annotations

import json
import os
import random
import re
import sqlite3
import time
import uuid
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any, NamedTuple

# A batch's run carries its id (and stream) as tags: the run reads that batch, and
# the batch id is the run key, so Dagster never launches a batch twice.
BATCH_TAG = "lineage/batch"
STREAM_TAG = "lineage/stream"

# One schema for both backends; only these column types differ (SQLite's, PostgreSQL's).
# ``ord`` orders PostgreSQL's batches as SQLite's rowid does.
_TYPES = {
    "sqlite": {"serial": "INTEGER PRIMARY KEY AUTOINCREMENT", "blob": "BLOB", "int64": "INTEGER", "real": "REAL", "ord": ""},
    "postgresql": {"serial": "BIGSERIAL PRIMARY KEY", "blob": "BYTEA", "int64": "BIGINT", "real": "DOUBLE PRECISION", "ord": "ord BIGSERIAL UNIQUE,"},
}
_SCHEMA_TEMPLATE = """
CREATE TABLE IF NOT EXISTS meta (k TEXT PRIMARY KEY, v TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS events (
    seq {serial},
    stream TEXT NOT NULL,
    dedupe TEXT NOT NULL,
    key {blob},
    value {blob},
    headers TEXT,
    ts {int64},
    topic TEXT,
    kpartition INTEGER,
    koffset {int64},
    partition_key TEXT,
    error TEXT,
    batch TEXT,
    UNIQUE (stream, dedupe)
);
CREATE INDEX IF NOT EXISTS events_open ON events (stream, seq) WHERE batch IS NULL AND error IS NULL;
CREATE INDEX IF NOT EXISTS events_batch ON events (batch) WHERE batch IS NOT NULL;
CREATE TABLE IF NOT EXISTS positions (
    stream TEXT NOT NULL,
    kpartition INTEGER NOT NULL,
    next_offset {int64} NOT NULL,
    PRIMARY KEY (stream, kpartition)
);
CREATE TABLE IF NOT EXISTS batches (
    {ord}
    id TEXT PRIMARY KEY,
    stream TEXT NOT NULL,
    partition_key TEXT,
    n INTEGER NOT NULL,
    created {real} NOT NULL,
    status TEXT NOT NULL DEFAULT 'open',
    replay INTEGER NOT NULL DEFAULT 0,
    reason TEXT,
    settled {real}
);
"""
_SCHEMA = _SCHEMA_TEMPLATE.format(**_TYPES["sqlite"])
# Columns a store made by an earlier version lacks (its `requested` flag said "has a run",
# not "succeeded": every batch starts open and the sensor settles it again).
_ADDED = {"status": "TEXT NOT NULL DEFAULT 'open'", "replay": "INTEGER NOT NULL DEFAULT 0", "reason": "TEXT", "settled": "REAL"}
_INDEXES = "CREATE INDEX IF NOT EXISTS batches_by_status ON batches (stream, status)"
_PG_SCHEMA = _SCHEMA_TEMPLATE.format(**_TYPES["postgresql"]) + _INDEXES

# Deadlock detected, serialization failure: PostgreSQL rolled the transaction back, and it may simply run again.
_PG_RETRY = ("40P01", "40001")
_PG_ATTEMPTS = 20
# Serialises the first creation of the tables by processes starting together (CREATE ... IF NOT EXISTS races in PostgreSQL).
_PG_SETUP_LOCK = 0x6C696E65  # "line"


def is_dsn(location: str | os.PathLike[str]) -> bool:
    """Whether ``location`` names a PostgreSQL database (a ``postgresql://`` URL or ``key=value`` words), not a file."""
    return isinstance(location, str) and bool(re.match(r"postgres(ql)?://|\s*\w+\s*=", location))


class BatchStatus(StrEnum):
    """Where a batch is on its way to the target (guarantee 4)."""

    OPEN = "open"  # no run of it has succeeded yet
    DONE = "done"  # a run of it succeeded
    FAILED = "failed"  # its attempts ran out; ``replay`` opens it again


class Event(NamedTuple):
    """One stored event as a run sees it (SPEC section 6's columns). A tuple: a run reads 10⁵ of them at once."""

    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, str | None], ...]
    timestamp: int | None  # epoch milliseconds
    topic: str | None
    partition: int | None
    offset: int | None

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready: key and value as text (UTF-8, undecodable bytes replaced)."""
        return {
            "key": _text(self.key),
            "value": _text(self.value),
            "headers": dict(self.headers),
            "timestamp": self.timestamp,
            "topic": self.topic,
            "partition": self.partition,
            "offset": self.offset,
        }


class NewEvent(NamedTuple):
    """An event to store. ``dedupe`` identifies it within its stream (a tuple: a drain makes 10⁵ of them a second)."""

    dedupe: str
    value: bytes | None
    key: bytes | None = None
    headers: Sequence[tuple[str, str | None]] = ()
    timestamp: int | None = None
    topic: str | None = None
    partition: int | None = None
    offset: int | None = None
    partition_key: str | None = None
    error: str | None = None  # stored but never batched (a bad partition value, kept for inspection)


@dataclass(frozen=True)
class Batch:
    id: str
    stream: str
    partition_key: str | None
    size: int
    status: BatchStatus = BatchStatus.OPEN
    replay: int = 0  # how often it was replayed (each replay is a fresh series of attempts)
    reason: str | None = None  # why it failed
    created: float = 0.0


class Rejected(NamedTuple):
    """A stored event that will never run, and why."""

    seq: int
    dedupe: str  # Kafka: ``<partition>:<offset>``; webhook: the idempotency key or a uuid
    reason: str


_BATCH_COLUMNS = "id, stream, partition_key, n, status, replay, reason, created"


def _batch(r: Sequence[Any]) -> Batch:
    return Batch(str(r[0]), str(r[1]), r[2], int(r[3]), BatchStatus(r[4]), int(r[5]), r[6], float(r[7]))


def _text(b: bytes | None) -> str | None:
    return None if b is None else b.decode("utf-8", errors="replace")


class EventStore:
    """One connection to the store. Not thread-safe: one per thread.

    >>> s = EventStore(tmp / "events.sqlite")                     # doctest: +SKIP
    >>> s.add("webhook:orders", [NewEvent("k1", b'{"a": 1}')])    # doctest: +SKIP
    [(1, False)]
    """

    def __init__(self, path: str | os.PathLike[str], *, durable: bool = True, timeout: float = 60.0) -> None:
        """``path``: the SQLite file, or a PostgreSQL DSN (``is_dsn``; ``LINEAGE_EVENTS_DSN``)."""
        self.pg = is_dsn(path)
        self.conn: Any
        if self.pg:
            self.path = Path("<postgresql>")
            self._open_postgres(str(path), timeout)
            return
        self.path = Path(path)
        private_file(self.path)
        # isolation_level=None: transactions are ours (BEGIN IMMEDIATE takes the write lock up front)
        self.conn = sqlite3.connect(self.path, timeout=timeout, isolation_level=None, check_same_thread=False)
        self.conn.execute("PRAGMA journal_mode=WAL")
        self.conn.execute(f"PRAGMA synchronous={'FULL' if durable else 'NORMAL'}")
        self.conn.execute(f"PRAGMA busy_timeout={int(timeout * 1000)}")
        self.conn.execute("PRAGMA cache_size=-65536")  # 64 MiB: the indexes of a large drain stay in memory
        with self.transaction():
            for statement in _SCHEMA.split(";"):
                if statement.strip():
                    self.conn.execute(statement)
            have = {str(r[1]) for r in self.conn.execute("PRAGMA table_info(batches)")}
            for column, decl in _ADDED.items():
                if column not in have:
                    self.conn.execute(f"ALTER TABLE batches ADD COLUMN {column} {decl}")
            self.conn.execute(_INDEXES)
            self.store_id = self._store_id()

    def _open_postgres(self, dsn: str, timeout: float) -> None:
        import psycopg  # the `postgres` extra: only a store on PostgreSQL needs it

        # autocommit: a read is its own snapshot, a write is inside ``transaction``
        self.conn = psycopg.connect(dsn, autocommit=True, connect_timeout=max(1, int(timeout)))
        self.conn.execute(f"SET lock_timeout = {int(timeout * 1000)}")
        if self.conn.execute("SELECT to_regclass('batches_by_status')").fetchone()[0] is not None:
            # Made already: no DDL (CREATE INDEX IF NOT EXISTS still takes a table lock, and would
            # deadlock with writers at work).
            row = self.conn.execute("SELECT v FROM meta WHERE k = 'store_id'").fetchone()
            if row is not None:
                self.store_id = str(row[0])
                return
        for attempt in self._attempts():
            with attempt:
                self.conn.execute("SELECT pg_advisory_xact_lock(%s)", (_PG_SETUP_LOCK,))
                for statement in _PG_SCHEMA.split(";"):
                    if statement.strip():
                        self.conn.execute(statement)
                self.store_id = self._store_id()

    def _store_id(self) -> str:
        row = self.conn.execute(self._q("SELECT v FROM meta WHERE k = 'store_id'")).fetchone()
        if row is not None:
            return str(row[0])
        # Batch ids carry the store's id: a store deleted and made anew never
        # hands out an id a target's ledger already holds.
        store_id = uuid.uuid4().hex[:12]
        self.conn.execute(self._q("INSERT INTO meta VALUES ('store_id', ?)"), (store_id,))
        return store_id

    def _q(self, sql: str) -> str:
        """A statement in this backend's placeholders (``?`` → ``%s`` for PostgreSQL)."""
        return sql.replace("?", "%s") if self.pg else sql

    def _many(self, c: Any, sql: str, rows: Iterable[Sequence[Any]]) -> int:
        """``executemany``; returns the rows it changed."""
        if not self.pg:
            before = c.total_changes
            c.executemany(sql, rows)
            return int(c.total_changes - before)
        with c.cursor() as cur:
            cur.executemany(self._q(sql), list(rows))  # pipelined; rowcount is the sum over the rows (psycopg ≥ 3.1)
            return max(int(cur.rowcount), 0)

    def _attempts(self) -> Iterator[AbstractContextManager[Any]]:
        """Write transactions, each tried again when PostgreSQL aborted it to break a deadlock.

        ``for attempt in self._attempts(): with attempt as c: ...``: the body
        runs in a transaction until one commits. Two writers may deadlock in
        PostgreSQL (a cutter updating an event while a receiver inserts its
        duplicate: each waits on the other's index entry); PostgreSQL aborts
        one of them, which is retried here. SQLite (one writer at a time)
        never needs a second attempt.
        """
        for n in range(_PG_ATTEMPTS):
            committed: list[bool] = []
            yield self._attempt(n, committed)
            if committed:
                return

    @contextmanager
    def _attempt(self, n: int, committed: list[bool]) -> Iterator[Any]:
        try:
            with self.transaction() as c:
                yield c
        except Exception as e:
            if not (self.pg and n + 1 < _PG_ATTEMPTS and getattr(e, "sqlstate", None) in _PG_RETRY):
                raise
            time.sleep(random.uniform(0.005, 0.02 * (n + 1)))  # the other transaction finishes first
            return
        committed.append(True)

    @property
    def _order(self) -> str:
        return "ord" if self.pg else "rowid"

    def close(self) -> None:
        self.conn.close()

    def __enter__(self) -> EventStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextmanager
    def transaction(self) -> Iterator[Any]:
        if self.pg:
            with self.conn.transaction():
                yield self.conn
            return
        self.conn.execute("BEGIN IMMEDIATE")
        try:
            yield self.conn
        except BaseException:
            self.conn.execute("ROLLBACK")
            raise
        self.conn.execute("COMMIT")

    # -- writing events -------------------------------------------------------
    def add(self, stream: str, events: Sequence[NewEvent]) -> list[tuple[int, bool]]:
        """Store events in one transaction; per event its sequence number and whether it was a duplicate.

        A duplicate (same ``dedupe`` in the stream) stores nothing and answers
        the first event's number.
        """
        return self.add_many([(stream, e) for e in events])

    def add_many(self, items: Sequence[tuple[str, NewEvent]]) -> list[tuple[int, bool]]:
        """``add`` for events of several streams, still one transaction (the receiver's group commit)."""
        out: list[tuple[int, bool]] = []
        for attempt in self._attempts():
            with attempt as c:
                out = []
                for stream, e in items:
                    row = c.execute(
                        self._q(
                            "INSERT INTO events (stream, dedupe, key, value, headers, ts, topic, kpartition, koffset, partition_key, error) "
                            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (stream, dedupe) DO NOTHING RETURNING seq"
                        ),
                        _row(stream, e),
                    ).fetchone()
                    if row is not None:
                        out.append((int(row[0]), False))
                    else:
                        first = c.execute(self._q("SELECT seq FROM events WHERE stream = ? AND dedupe = ?"), (stream, e.dedupe)).fetchone()
                        out.append((int(first[0]), True))
        return out

    def add_messages(self, stream: str, events: Sequence[NewEvent]) -> int:
        """Store Kafka messages (a message already stored is ignored) and advance the stream's positions; returns how many were new."""
        if not events:
            return 0
        nxt: dict[int, int] = {}
        for e in events:
            if e.partition is not None and e.offset is not None:
                nxt[e.partition] = max(nxt.get(e.partition, -1), e.offset + 1)
        greatest = "greatest(positions.next_offset" if self.pg else "max(next_offset"
        added = 0
        for attempt in self._attempts():
            with attempt as c:
                added = self._many(
                    c,
                    "INSERT INTO events (stream, dedupe, key, value, headers, ts, topic, kpartition, koffset, partition_key, error) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (stream, dedupe) DO NOTHING",
                    (_row(stream, e) for e in events),
                )
                self._many(
                    c,
                    "INSERT INTO positions VALUES (?, ?, ?) ON CONFLICT (stream, kpartition) "
                    f"DO UPDATE SET next_offset = {greatest}, excluded.next_offset)",
                    [(stream, p, o) for p, o in nxt.items()],
                )
        return added

    def positions(self, stream: str) -> dict[int, int]:
        """The next offset to read per Kafka partition, as far as the store has events."""
        rows = self.conn.execute(self._q("SELECT kpartition, next_offset FROM positions WHERE stream = ?"), (stream,)).fetchall()
        return {int(p): int(o) for p, o in rows}

    # -- batches --------------------------------------------------------------
    def cut_batches(self, stream: str, max_batch: int, limit: int = 1_000_000) -> list[Batch]:
        """Group the stream's unbatched events into batches of at most ``max_batch``, per partition key, in one transaction."""
        if max_batch < 1:
            raise ValueError("max_batch must be at least 1")
        made: list[Batch] = []
        for attempt in self._attempts():
            with attempt as c:
                made = []
                if self.pg:  # one cutter per stream at a time (SQLite: BEGIN IMMEDIATE already is)
                    c.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (stream,))
                rows = c.execute(
                    self._q("SELECT seq, partition_key FROM events WHERE stream = ? AND batch IS NULL AND error IS NULL ORDER BY seq LIMIT ?"),
                    (stream, limit),
                ).fetchall()
                runs: dict[str | None, list[int]] = {}
                for seq, pkey in rows:
                    runs.setdefault(pkey, []).append(int(seq))
                now = time.time()
                for pkey, seqs in runs.items():
                    for i in range(0, len(seqs), max_batch):
                        chunk = seqs[i : i + max_batch]
                        bid = f"{self.store_id}-{chunk[0]}"
                        c.execute(self._q("INSERT INTO batches (id, stream, partition_key, n, created) VALUES (?, ?, ?, ?, ?)"), (bid, stream, pkey, len(chunk), now))
                        if self.pg:
                            # Writers run alongside: an event committed after the SELECT above may hold a
                            # sequence number inside [first, last], so the batch is exactly the rows read.
                            c.execute("UPDATE events SET batch = %s WHERE seq = ANY(%s)", (bid, chunk))
                            made.append(Batch(bid, stream, pkey, len(chunk)))
                            continue
                        # The chunk is every open event of this key in [first, last]: no
                        # other writer runs inside this transaction.
                        c.execute(
                            "UPDATE events SET batch = ? WHERE stream = ? AND batch IS NULL AND error IS NULL "
                            "AND partition_key IS ? AND seq BETWEEN ? AND ?",
                            (bid, stream, pkey, chunk[0], chunk[-1]),
                        )
                        made.append(Batch(bid, stream, pkey, len(chunk)))
        return made

    def open_batches(self, stream: str, limit: int = 1000) -> list[Batch]:
        """Batches no run has succeeded for yet (and not given up), oldest first."""
        rows = self.conn.execute(
            self._q(f"SELECT {_BATCH_COLUMNS} FROM batches WHERE stream = ? AND status = 'open' ORDER BY {self._order} LIMIT ?"), (stream, limit)
        ).fetchall()
        return [_batch(r) for r in rows]

    def settle(self, done: Iterable[str] = (), failed: Mapping[str, str] | None = None) -> None:
        """Record that a run of each of ``done`` succeeded, and that each of ``failed`` ran out of attempts (id → reason)."""
        done, failed = list(done), dict(failed or {})
        if not done and not failed:
            return
        now = time.time()
        for attempt in self._attempts():
            with attempt as c:
                self._many(c, "UPDATE batches SET status = 'done', reason = NULL, settled = ? WHERE id = ?", [(now, i) for i in done])
                self._many(c, "UPDATE batches SET status = 'failed', reason = ?, settled = ? WHERE id = ? AND status = 'open'", [(r, now, i) for i, r in failed.items()])

    def replay(self, batch_id: str) -> Batch | None:
        """Open a batch again for a fresh series of attempts (``lineage-defs events replay``); None if there is no such batch."""
        for attempt in self._attempts():
            with attempt as c:
                c.execute(self._q("UPDATE batches SET status = 'open', replay = replay + 1, reason = NULL, settled = NULL WHERE id = ? AND status != 'done'"), (batch_id,))
        return self.batch(batch_id)

    def batch(self, batch_id: str) -> Batch | None:
        r = self.conn.execute(self._q(f"SELECT {_BATCH_COLUMNS} FROM batches WHERE id = ?"), (batch_id,)).fetchone()
        return _batch(r) if r else None

    def batches(self, stream: str, status: BatchStatus | None = None, limit: int = 20) -> list[Batch]:
        """The stream's batches, newest first (optionally of one status): for listings."""
        where, args = ("AND status = ?", (stream, status.value, limit)) if status else ("", (stream, limit))
        rows = self.conn.execute(self._q(f"SELECT {_BATCH_COLUMNS} FROM batches WHERE stream = ? {where} ORDER BY {self._order} DESC LIMIT ?"), args).fetchall()
        return [_batch(r) for r in rows]

    def events(self, batch_id: str) -> list[Event]:
        """The batch's events in arrival order: the same rows every time it is read."""
        rows = self.conn.execute(
            self._q("SELECT key, value, headers, ts, topic, kpartition, koffset FROM events WHERE batch = ? ORDER BY seq"), (batch_id,)
        ).fetchall()
        return [Event(k, v, tuple((str(a), b) for a, b in json.loads(h)) if h else (), ts, t, p, o) for k, v, h, ts, t, p, o in rows]

    def old_batches(self, stream: str, created_before: float, limit: int = 200) -> list[str]:
        """Done batches cut before ``created_before``: what ``prune`` may delete."""
        rows = self.conn.execute(
            self._q(f"SELECT id FROM batches WHERE stream = ? AND status = 'done' AND created < ? ORDER BY {self._order} LIMIT ?"), (stream, created_before, limit)
        ).fetchall()
        return [str(r[0]) for r in rows]

    def prune(self, batch_ids: Iterable[str]) -> int:
        """Delete these done batches and their events; returns events deleted (a batch not done is kept)."""
        ids = [(i, i) for i in batch_ids]
        if not ids:
            return 0
        for attempt in self._attempts():
            with attempt as c:
                deleted = self._many(c, "DELETE FROM events WHERE batch = ? AND EXISTS (SELECT 1 FROM batches WHERE id = ? AND status = 'done')", ids)
                self._many(c, "DELETE FROM batches WHERE id = ? AND status = 'done'", [(i,) for i, _ in ids])
        return deleted

    # -- listings ---------------------------------------------------------------
    def streams(self) -> list[str]:
        """Every stream with an event or a batch."""
        rows = self.conn.execute("SELECT DISTINCT stream FROM events UNION SELECT DISTINCT stream FROM batches ORDER BY 1").fetchall()
        return [str(r[0]) for r in rows]

    def rejected(self, stream: str, limit: int = 5) -> tuple[int, list[Rejected]]:
        """How many stored events of the stream will never run, with the latest of them and their reasons."""
        n = self.conn.execute(self._q("SELECT count(*) FROM events WHERE stream = ? AND error IS NOT NULL"), (stream,)).fetchone()[0]
        rows = self.conn.execute(
            self._q("SELECT seq, dedupe, error FROM events WHERE stream = ? AND error IS NOT NULL ORDER BY seq DESC LIMIT ?"), (stream, limit)
        ).fetchall()
        return int(n), [Rejected(int(r[0]), str(r[1]), str(r[2])) for r in rows]

    def counts(self, stream: str) -> dict[str, int]:
        """Events stored, batched and rejected; batches open, done and failed."""
        r = self.conn.execute(self._q("SELECT count(*), count(batch), count(error) FROM events WHERE stream = ?"), (stream,)).fetchone()
        out = {"events": int(r[0]), "batched": int(r[1]), "rejected": int(r[2])}
        by = dict(self.conn.execute(self._q("SELECT status, count(*) FROM batches WHERE stream = ? GROUP BY status"), (stream,)).fetchall())
        out.update({f"batches_{s.value}": int(by.get(s.value, 0)) for s in BatchStatus})
        return out


def private_file(path: Path) -> None:
    """Create ``path`` (and its folder) readable by its owner only, if it does not exist yet.

    SQLite gives its ``-wal`` and ``-shm`` files the database file's mode, so
    creating the file first covers all three.
    """
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    try:
        os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
    except FileExistsError:
        pass


def _row(stream: str, e: NewEvent) -> tuple[Any, ...]:
    headers = json.dumps([[k, v] for k, v in e.headers]) if e.headers else None
    return (stream, e.dedupe, e.key, e.value, headers, e.timestamp, e.topic, e.partition, e.offset, e.partition_key, e.error)
