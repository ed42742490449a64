"""Drain a Kafka topic into the event store (confluent-kafka). No Dagster.

The sensor calls ``drain`` on each tick. Partitions are assigned by hand
(``assign``, no group join: one sensor reads a stream, and a join costs
seconds on every tick); the group's committed offsets are still read and
written, so lag tools see the consumer. Where to start is the later of the
group's committed offset and the store's own position: the store is the
truth (a message stored but whose offset commit was lost is skipped by the
store's ``UNIQUE``), the group's offset covers a store made anew.

A ``pull.Reader``: ``pull.drain`` stores each chunk of messages (one committed
SQLite transaction), then commits their offsets to Kafka. A crash between
the two re-reads messages the store already holds, which it ignores: nothing
is lost, nothing is stored twice.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from lineage_defs.events.store import EventStore, NewEvent
from lineage_defs.triggers import pull
from lineage_defs.triggers.pull import Chunk, DrainResult, SourceUnavailable

log = logging.getLogger("lineage_defs")

PartitionOf = Callable[[bytes | None, bytes | None, list[tuple[str, str | None]], int | None], tuple[str | None, str | None]]  # as keys.PartitionOf


class KafkaUnavailable(SourceUnavailable):
    """The brokers or the topic cannot be reached; the message says which and how to fix it."""


@dataclass(frozen=True)
class KafkaSource:
    """One topic as a step's sensor reads it: where, as which group, how much per tick."""

    bootstrap: str  # host:port,…
    topic: str
    group: str
    partition_of: PartitionOf | None = None  # None: the step takes no partition from events
    max_messages: int = 200_000
    budget_seconds: float = 10.0
    chunk: int = 10_000  # messages per store transaction (and offset commit)
    config: dict[str, Any] = field(default_factory=dict)  # extra consumer settings


def consumer_config(bootstrap: str, group: str, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "auto.offset.reset": "earliest",
        # a short session: with a long one a broker keeps stale members around (Tansu: ~20 s joins)
        "session.timeout.ms": 6000,
        "socket.timeout.ms": 10000,
        "fetch.wait.max.ms": 100,
        **(extra or {}),
    }


def _headers(raw: Any) -> list[tuple[str, str | None]]:
    pairs = raw.items() if isinstance(raw, dict) else raw
    return [(str(k), v.decode("utf-8", errors="replace") if isinstance(v, bytes) else v) for k, v in pairs]


class KafkaReader:
    """A topic as a ``pull.Reader``: partitions assigned from the later of the group's and the store's position."""

    def __init__(self, source: KafkaSource) -> None:
        self.source = source
        self.chunk = source.chunk
        self.consumer: Any = None
        self.parts: list[int] = []
        self.next: dict[int, int] = {}  # next offset per partition, as far as read
        self.read_any = False
        self.began = time.monotonic()

    def connect(self, positions: Mapping[int, int]) -> None:
        from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, TopicPartition

        s = self.source
        self.consumer = Consumer(consumer_config(s.bootstrap, s.group, s.config))
        try:
            meta = self.consumer.list_topics(s.topic, timeout=10)
        except KafkaException as e:
            raise KafkaUnavailable(f"cannot reach Kafka at {s.bootstrap}: {e}") from e
        t = meta.topics.get(s.topic)
        if t is None or t.error is not None or not t.partitions:
            raise KafkaUnavailable(f"topic {s.topic!r} does not exist on {s.bootstrap} ({t.error if t is not None else 'not listed'})")
        self.parts = sorted(t.partitions)
        try:
            committed = {tp.partition: tp.offset for tp in self.consumer.committed([TopicPartition(s.topic, p) for p in self.parts], timeout=10)}
        except KafkaException as e:
            raise KafkaUnavailable(f"cannot read the committed offsets of group {s.group!r}: {e}") from e
        start = {p: max(committed.get(p, -1), positions.get(p, -1)) for p in self.parts}
        self.consumer.assign([TopicPartition(s.topic, p, o if o >= 0 else OFFSET_BEGINNING) for p, o in start.items()])
        self.next = {p: o for p, o in start.items() if o >= 0}
        self.began = time.monotonic()

    def read(self, limit: int) -> Chunk:
        from confluent_kafka import KafkaError

        s = self.source
        msgs: list[Any] = []
        # the first fetch after an assign may come back empty: wait up to 1.5 s for something
        while not msgs:
            msgs = self.consumer.consume(num_messages=limit, timeout=0.5)
            if not msgs and (self.read_any or time.monotonic() - self.began > 1.5):
                return Chunk((), caught_up=True)
        self.read_any = True
        events: list[NewEvent] = []
        for m in msgs:
            err = m.error()
            if err is not None:
                if err.code() == KafkaError._PARTITION_EOF:
                    continue
                raise KafkaUnavailable(f"reading {s.topic!r} failed: {err}")
            part, offset = int(m.partition() or 0), int(m.offset() or 0)
            raw_headers = m.headers()
            key, value, headers, ts = m.key(), m.value(), _headers(raw_headers) if raw_headers else [], m.timestamp()[1]
            pkey, error = s.partition_of(key, value, headers, ts) if s.partition_of else (None, None)
            events.append(NewEvent(f"{part}:{offset}", value, key, headers, ts if ts >= 0 else None, m.topic(), part, offset, pkey, error))
            if offset >= self.next.get(part, 0):
                self.next[part] = offset + 1
        # Fewer than asked within the wait: the topic's end is reached. Stop there, so a
        # steady trickle does not keep the tick (and its messages' runs) waiting for the budget.
        return Chunk(events, dict(self.next), caught_up=len(msgs) < limit)

    def ack(self, chunk: Chunk) -> None:
        from confluent_kafka import KafkaException, TopicPartition

        s = self.source
        try:
            self.consumer.commit(offsets=[TopicPartition(s.topic, p, o) for p, o in chunk.receipt.items()], asynchronous=False)
        except KafkaException as e:
            # the store holds the messages and its position: the next drain starts after them anyway
            log.warning(f"committing offsets of {s.topic!r} for group {s.group!r} failed ({e}); the event store keeps the position")

    def lag(self) -> int | None:
        """High watermarks (as of the last fetch, no round trip) minus what was read."""
        from confluent_kafka import TopicPartition

        total = 0
        for p in self.parts:
            _, high = self.consumer.get_watermark_offsets(TopicPartition(self.source.topic, p), cached=True)
            if high < 0:
                return None
            total += max(0, high - self.next.get(p, 0))
        return total

    def close(self) -> None:
        if self.consumer is not None:
            self.consumer.close()


def drain(store: EventStore, stream: str, source: KafkaSource) -> DrainResult:
    """Move what the topic holds beyond the stream's position into the store, within the budget."""
    return pull.drain(store, stream, KafkaReader(source), max_messages=source.max_messages, budget_seconds=source.budget_seconds)
