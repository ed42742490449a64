"""Drain a Kafka topic into the event store (confluent-kafka). No Dagster.

The sensor calls ``drain`` on each tick. Partitions are assigned by hand
(``assign``, no group join: one sensor reads a stream, and a join costs
seconds on every tick); the group's committed offsets are still read and
written, so lag tools see the consumer. Where to start is the later of the
group's committed offset and the store's own position: the store is the
truth (a message stored but whose offset commit was lost is skipped by the
store's ``UNIQUE``), the group's offset covers a store made anew.

Order per chunk of messages: store them (one committed SQLite transaction),
then commit their offsets to Kafka. A crash between the two re-reads
messages the store already holds, which it ignores: nothing is lost, nothing
is stored twice.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from lineage_defs.events.store import EventStore, NewEvent

log = logging.getLogger("lineage_defs")

# (key, value, headers, timestamp_ms) -> (partition key, error)
PartitionOf = Callable[[bytes | None, bytes | None, list[tuple[str, str | None]], int | None], tuple[str | None, str | None]]


class KafkaUnavailable(RuntimeError):
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


@dataclass
class DrainResult:
    consumed: int = 0
    stored: int = 0  # new to the store (the rest were already there)
    rejected: int = 0  # stored with an error: no usable partition value
    offsets: dict[int, int] = field(default_factory=dict)  # next offset per partition after the drain


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


def drain(store: EventStore, stream: str, source: KafkaSource) -> DrainResult:
    """Move what the topic holds beyond the stream's position into the store, within the budget."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, TopicPartition

    bootstrap, topic, group, partition_of = source.bootstrap, source.topic, source.group, source.partition_of
    max_messages, budget_seconds, chunk = source.max_messages, source.budget_seconds, source.chunk
    out = DrainResult()
    consumer = Consumer(consumer_config(bootstrap, group, source.config))
    try:
        try:
            meta = consumer.list_topics(topic, timeout=10)
        except KafkaException as e:
            raise KafkaUnavailable(f"cannot reach Kafka at {bootstrap}: {e}") from e
        t = meta.topics.get(topic)
        if t is None or t.error is not None or not t.partitions:
            raise KafkaUnavailable(f"topic {topic!r} does not exist on {bootstrap} ({t.error if t is not None else 'not listed'})")
        parts = sorted(t.partitions)
        try:
            committed = {tp.partition: tp.offset for tp in consumer.committed([TopicPartition(topic, p) for p in parts], timeout=10)}
        except KafkaException as e:
            raise KafkaUnavailable(f"cannot read the committed offsets of group {group!r}: {e}") from e
        stored = store.positions(stream)
        start = {p: max(committed.get(p, -1), stored.get(p, -1)) for p in parts}
        consumer.assign([TopicPartition(topic, p, o if o >= 0 else OFFSET_BEGINNING) for p, o in start.items()])
        began = time.monotonic()
        caught_up = False
        while not caught_up and out.consumed < max_messages and time.monotonic() - began < budget_seconds:
            asked = min(chunk, max_messages - out.consumed)
            msgs = consumer.consume(num_messages=asked, timeout=0.5)
            if not msgs:
                if out.consumed or time.monotonic() - began > 1.5:
                    break
                continue
            # Fewer than asked within the wait: the topic's end is reached. Stop there, so a
            # steady trickle does not keep the tick (and its messages' runs) waiting for the budget.
            caught_up = len(msgs) < asked
            events: list[NewEvent] = []
            for m in msgs:
                err = m.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        continue
                    raise KafkaUnavailable(f"reading {topic!r} failed: {err}")
                part, offset = int(m.partition() or 0), int(m.offset() or 0)
                raw_headers = m.headers()
                key, value, headers, ts = m.key(), m.value(), _headers(raw_headers) if raw_headers else [], m.timestamp()[1]
                pkey, error = partition_of(key, value, headers, ts) if partition_of else (None, None)
                out.rejected += error is not None
                events.append(
                    NewEvent(f"{part}:{offset}", value, key, headers, ts if ts >= 0 else None, m.topic(), part, offset, pkey, error)
                )
                if offset >= out.offsets.get(part, 0):
                    out.offsets[part] = offset + 1
            out.consumed += len(msgs)
            out.stored += store.add_messages(stream, events)  # committed to disk before the offsets move
            try:
                consumer.commit(offsets=[TopicPartition(topic, p, o) for p, o in out.offsets.items()], asynchronous=False)
            except KafkaException as e:
                # the store holds the messages and its position: the next drain starts after them anyway
                log.warning(f"committing offsets of {topic!r} for group {group!r} failed ({e}); the event store keeps the position")
    finally:
        consumer.close()
    return out
