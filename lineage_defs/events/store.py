"""The durable store between a trigger and its runs: SQLite in WAL mode under the state dir.

Three kinds of process share it — the webhook receiver (writes events), the
sensors in the Dagster code server (write Kafka events, cut batches) and the
runs (read their batch) — so it is a store built for several processes:
SQLite in WAL mode (readers never block the writer, one writer at a time,
``busy_timeout`` for the rest), ``synchronous=FULL`` so a commit is on disk
before anyone is told so.

The exactly-once chain (SPEC section 6):

1. an event is stored once: ``UNIQUE(stream, dedupe)`` where ``dedupe`` is
   ``<partition>:<offset>`` for a Kafka message (a message consumed again
   after a crash is ignored) or the ``Idempotency-Key`` of a webhook post;
2. events are cut into batches in one transaction: each event belongs to at
   most one batch, and a batch never changes (re-execution reads the same
   rows);
3. a batch id is the run key of its run, and the managed write records the
   id in the target in the same transaction as the data (``run.write``).

No Dagster import: the receiver and the run layer use this module too.
"""

from __future__ import annotations

import json
import os
import sqlite3
import time
import uuid
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

# A batch's run carries its id (and stream) as tags: the run reads that batch, and
# the batch id is the run key, so Dagster never launches a batch twice.
BATCH_TAG = "lineage/batch"
STREAM_TAG = "lineage/stream"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (k TEXT PRIMARY KEY, v TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS events (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    stream TEXT NOT NULL,
    dedupe TEXT NOT NULL,
    key BLOB,
    value BLOB,
    headers TEXT,
    ts INTEGER,
    topic TEXT,
    kpartition INTEGER,
    koffset INTEGER,
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
    next_offset INTEGER NOT NULL,
    PRIMARY KEY (stream, kpartition)
);
CREATE TABLE IF NOT EXISTS batches (
    id TEXT PRIMARY KEY,
    stream TEXT NOT NULL,
    partition_key TEXT,
    n INTEGER NOT NULL,
    created REAL NOT NULL,
    requested INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS batches_open ON batches (stream) WHERE requested = 0;
"""


@dataclass(frozen=True)
class Event:
    """One stored event as a run sees it (SPEC section 6's columns)."""

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


def _text(b: bytes | None) -> str | None:
    return None if b is None else b.decode("utf-8", errors="replace")


class EventStore:
    """One connection to the store. Not thread-safe: one per thread.

    >>> s = EventStore(tmp / "events.sqlite")                     # doctest: +SKIP
    >>> s.add("webhook:orders", [NewEvent("k1", b'{"a": 1}')])    # doctest: +SKIP
    [(1, False)]
    """

    def __init__(self, path: str | os.PathLike[str], *, durable: bool = True, timeout: float = 60.0) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
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
            row = self.conn.execute("SELECT v FROM meta WHERE k = 'store_id'").fetchone()
            if row is None:
                # Batch ids carry the store's id: a store deleted and made anew never
                # hands out an id a target's ledger already holds.
                self.store_id = uuid.uuid4().hex[:12]
                self.conn.execute("INSERT INTO meta VALUES ('store_id', ?)", (self.store_id,))
            else:
                self.store_id = str(row[0])

    def close(self) -> None:
        self.conn.close()

    def __enter__(self) -> EventStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
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
        with self.transaction() as c:
            for stream, e in items:
                row = c.execute(
                    "INSERT INTO events (stream, dedupe, key, value, headers, ts, topic, kpartition, koffset, partition_key, error) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (stream, dedupe) DO NOTHING RETURNING seq",
                    _row(stream, e),
                ).fetchone()
                if row is not None:
                    out.append((int(row[0]), False))
                else:
                    first = c.execute("SELECT seq FROM events WHERE stream = ? AND dedupe = ?", (stream, e.dedupe)).fetchone()
                    out.append((int(first[0]), True))
        return out

    def add_messages(self, stream: str, events: Sequence[NewEvent]) -> int:
        """Store Kafka messages (``INSERT OR IGNORE``) and advance the stream's positions; returns how many were new."""
        if not events:
            return 0
        nxt: dict[int, int] = {}
        for e in events:
            if e.partition is not None and e.offset is not None:
                nxt[e.partition] = max(nxt.get(e.partition, -1), e.offset + 1)
        with self.transaction() as c:
            before = c.total_changes
            c.executemany(
                "INSERT OR IGNORE INTO events (stream, dedupe, key, value, headers, ts, topic, kpartition, koffset, partition_key, error) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (_row(stream, e) for e in events),
            )
            added = c.total_changes - before
            c.executemany(
                "INSERT INTO positions VALUES (?, ?, ?) ON CONFLICT (stream, kpartition) "
                "DO UPDATE SET next_offset = max(next_offset, excluded.next_offset)",
                [(stream, p, o) for p, o in nxt.items()],
            )
        return added

    def positions(self, stream: str) -> dict[int, int]:
        """The next offset to read per Kafka partition, as far as the store has events."""
        rows = self.conn.execute("SELECT kpartition, next_offset FROM positions WHERE stream = ?", (stream,)).fetchall()
        return {int(p): int(o) for p, o in rows}

    # -- batches --------------------------------------------------------------
    def cut_batches(self, stream: str, max_batch: int, limit: int = 1_000_000) -> list[Batch]:
        """Group the stream's unbatched events into batches of at most ``max_batch``, per partition key, in one transaction."""
        if max_batch < 1:
            raise ValueError("max_batch must be at least 1")
        made: list[Batch] = []
        with self.transaction() as c:
            rows = c.execute(
                "SELECT seq, partition_key FROM events WHERE stream = ? AND batch IS NULL AND error IS NULL ORDER BY seq LIMIT ?",
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
                    c.execute("INSERT INTO batches (id, stream, partition_key, n, created) VALUES (?, ?, ?, ?, ?)", (bid, stream, pkey, len(chunk), now))
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
        """Batches not yet known to have a run, oldest first."""
        rows = self.conn.execute(
            "SELECT id, stream, partition_key, n FROM batches WHERE stream = ? AND requested = 0 ORDER BY rowid LIMIT ?",
            (stream, limit),
        ).fetchall()
        return [Batch(str(r[0]), str(r[1]), r[2], int(r[3])) for r in rows]

    def mark_requested(self, ids: Iterable[str]) -> None:
        ids = list(ids)
        if ids:
            with self.transaction() as c:
                c.executemany("UPDATE batches SET requested = 1 WHERE id = ?", [(i,) for i in ids])

    def batch(self, batch_id: str) -> Batch | None:
        r = self.conn.execute("SELECT id, stream, partition_key, n FROM batches WHERE id = ?", (batch_id,)).fetchone()
        return Batch(str(r[0]), str(r[1]), r[2], int(r[3])) if r else None

    def events(self, batch_id: str) -> list[Event]:
        """The batch's events in arrival order: the same rows every time it is read."""
        rows = self.conn.execute(
            "SELECT key, value, headers, ts, topic, kpartition, koffset FROM events WHERE batch = ? ORDER BY seq", (batch_id,)
        ).fetchall()
        return [Event(r[0], r[1], tuple((str(k), v) for k, v in json.loads(r[2])) if r[2] else (), r[3], r[4], r[5], r[6]) for r in rows]

    def old_batches(self, stream: str, created_before: float, limit: int = 200) -> list[str]:
        """Batches with a run, cut before ``created_before``: candidates for ``prune``."""
        rows = self.conn.execute(
            "SELECT id FROM batches WHERE stream = ? AND requested = 1 AND created < ? ORDER BY rowid LIMIT ?", (stream, created_before, limit)
        ).fetchall()
        return [str(r[0]) for r in rows]

    def prune(self, batch_ids: Iterable[str]) -> int:
        """Delete these batches and their events (the caller knows their runs succeeded); returns events deleted."""
        ids = [(i,) for i in batch_ids]
        if not ids:
            return 0
        with self.transaction() as c:
            before = c.total_changes
            c.executemany("DELETE FROM events WHERE batch = ?", ids)
            deleted = c.total_changes - before
            c.executemany("DELETE FROM batches WHERE id = ?", ids)
        return deleted

    def rejected(self, stream: str, limit: int = 5) -> tuple[int, list[str]]:
        """How many stored events of the stream cannot run (bad partition value), with sample reasons."""
        n = self.conn.execute("SELECT count(*) FROM events WHERE stream = ? AND error IS NOT NULL", (stream,)).fetchone()[0]
        rows = self.conn.execute("SELECT error FROM events WHERE stream = ? AND error IS NOT NULL ORDER BY seq DESC LIMIT ?", (stream, limit)).fetchall()
        return int(n), [str(r[0]) for r in rows]

    def counts(self, stream: str) -> dict[str, int]:
        r = self.conn.execute(
            "SELECT count(*), count(batch), count(error) FROM events WHERE stream = ?", (stream,)
        ).fetchone()
        return {"events": int(r[0]), "batched": int(r[1]), "rejected": int(r[2])}


def _row(stream: str, e: NewEvent) -> tuple[Any, ...]:
    headers = json.dumps([[k, v] for k, v in e.headers]) if e.headers else None
    return (stream, e.dedupe, e.key, e.value, headers, e.timestamp, e.topic, e.partition, e.offset, e.partition_key, e.error)
