"""The one loop every pull-based source runs on a sensor tick (Kafka, SQS, …). No Dagster.

A source is a ``Reader``: it connects (``connect``, told where the store
already is), reads a bounded chunk (``read``), is acknowledged for that chunk
(``ack``) and says how far behind it is (``lag``). ``drain`` owns the order
that makes a source exactly-once with the store: read a chunk, store it (one
committed transaction, ``EventStore.add_messages``), and only then ``ack`` it.
A crash between the store and the ack makes the source deliver the chunk
again; the store's ``UNIQUE(stream, dedupe)`` ignores it, so nothing is lost
and nothing is stored twice. A message a reader cannot use becomes a stored
event with an ``error`` (rejected, with its reason), never an exception: one
bad message never stalls the rest.

Failures to reach the source are ``SourceUnavailable`` (the message names the
source and the fix); the sensor puts them, and the lag, in its skip reason.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from lineage_defs.events.store import EventStore, NewEvent


MAX_PER_TICK = 200_000  # events one tick may read (the time budget usually ends it first)


class SourceUnavailable(RuntimeError):
    """The source cannot be reached or read; the message says which and how to fix it."""


class NotConfigured(SourceUnavailable):
    """The step's connection has no settings: the sensor skips with the variable to set (nothing to warn about)."""


@dataclass(frozen=True)
class Chunk:
    """What one ``read`` returned: events to store, what ``ack`` needs, and whether the source is drained."""

    events: Sequence[NewEvent]
    receipt: Any = None  # the reader's own: Kafka offsets, SQS receipt handles, …
    caught_up: bool = False  # nothing more is waiting right now: the tick ends after this chunk


class Reader(Protocol):
    """A pull-based source as ``drain`` uses it."""

    chunk: int  # events per read (and per store transaction, and per acknowledgement)

    def connect(self, positions: Mapping[int, int]) -> None:
        """Reach the source; ``positions`` is the store's next offset per partition (sources with offsets use it)."""

    def read(self, limit: int) -> Chunk:
        """At most ``limit`` events, waiting briefly for the first; raises ``SourceUnavailable``."""

    def ack(self, chunk: Chunk) -> None:
        """Acknowledge a chunk the store holds (committed). A failure only means the source delivers it again."""

    def lag(self) -> int | None:
        """Events the source still holds for this step, when it can say (None: unknown)."""

    def close(self) -> None: ...


@dataclass(frozen=True)
class Pull:
    """What a pull source's ``connect`` (``Source.connect``) gives its sensor: how a tick gets its reader
    (raises ``NotConfigured`` naming the variable to set), and the detail of the sensor's description."""

    reader: Callable[[], Reader]
    detail: str


@dataclass
class DrainResult:
    consumed: int = 0
    stored: int = 0  # new to the store (the rest were already there: redeliveries)
    rejected: int = 0  # stored with an error (no usable partition value, …)
    lag: int | None = None  # what the source still held at the end of the drain

    def note(self, source: str) -> str:
        """For the sensor's skip reason: what this tick read and what is left."""
        behind = "" if self.lag is None else f", {self.lag} left"
        return f"{source}: read {self.consumed} ({self.stored} new, {self.rejected} rejected){behind}; "


def drain(store: EventStore, stream: str, reader: Reader, *, max_messages: int, budget_seconds: float) -> DrainResult:
    """Move what the source holds into the store, chunk by chunk, within the budget; ack each chunk after its store."""
    out = DrainResult()
    try:
        reader.connect(store.positions(stream))
        began = time.monotonic()
        while out.consumed < max_messages and time.monotonic() - began < budget_seconds:
            got = reader.read(min(reader.chunk, max_messages - out.consumed))
            if got.events:
                out.consumed += len(got.events)
                out.rejected += sum(e.error is not None for e in got.events)
                out.stored += store.add_messages(stream, got.events)  # committed to disk before the ack
            if got.events or got.receipt is not None:
                # (a chunk without events may still move the source: a PostgreSQL slot past transactions with no change of ours)
                reader.ack(got)
            if got.caught_up or not got.events:
                break
        out.lag = reader.lag()
    finally:
        reader.close()
    return out
