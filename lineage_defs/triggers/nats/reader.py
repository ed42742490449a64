"""A NATS JetStream subject as a ``pull.Reader`` (nats-py). No Dagster.

Each step has its own durable pull consumer on the stream (``consumer_name``,
from the step and the subject), created on first use with a filter on the
subject, explicit acks and ``deliver_policy=all``: a new step reads what the
stream holds for its subject, then everything after. A tick pulls batches,
``pull.drain`` stores each, and only then does ``ack`` acknowledge its
messages (and flush). A message fetched but not acknowledged (a crash
between the store and the acks) is delivered again after the consumer's
``ack_wait``; the store ignores it by its stream sequence, which is the same
on every delivery.

nats-py is asyncio; the reader runs it on an event loop of its own, one
``run_until_complete`` per call, so the sensor (a thread of Dagster's) stays
synchronous.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from lineage_defs.events.store import NewEvent
from lineage_defs.triggers.keys import PartitionOf
from lineage_defs.triggers.pull import Chunk, SourceUnavailable

MAX_ACK_PENDING = 20_000  # JetStream's default of 1000 would cap what one tick can hold unacknowledged


@dataclass(frozen=True)
class NatsSource:
    """One subject of one stream as a step's sensor reads it."""

    url: str  # nats://host:port[,nats://…]
    stream: str
    subject: str
    consumer: str  # the durable consumer's name: fixed per step and subject
    partition_of: PartitionOf | None = None
    chunk: int = 1000  # messages per fetch (and per store transaction, and per round of acks)
    wait_seconds: float = 1.0  # how long a fetch waits for its first message: an empty one ends the tick
    ack_wait_seconds: float = 30.0  # a fetched message unacknowledged this long is delivered again


def consumer_name(step_name: str, subject: str) -> str:
    """The step's durable consumer: readable, unique per (step, subject), a valid JetStream name."""
    return f"lineage_{re.sub(r'[^A-Za-z0-9_-]', '_', step_name)[:60]}_{hashlib.sha256(subject.encode()).hexdigest()[:10]}"


def _hosts(url: str) -> list[str]:
    servers = [u.strip() for u in url.split(",") if u.strip()]
    for u in servers:
        parts = urlsplit(u)
        if parts.scheme != "nats" or not parts.hostname:
            raise SourceUnavailable(f"bad NATS URL {u!r}: write nats://host:port (e.g. nats://127.0.0.1:4222; several comma-separated)")
    return servers


class NatsReader:
    """``pull.Reader`` over one durable consumer: pull, (store), ack."""

    def __init__(self, source: NatsSource) -> None:
        self.source = source
        self.chunk = source.chunk
        self.servers = _hosts(source.url)
        where = ", ".join(f"{urlsplit(u).hostname}:{urlsplit(u).port or 4222}" for u in self.servers)
        self.where = f"NATS stream {source.stream!r} (subject {source.subject!r}) at {where}"
        self.loop = asyncio.new_event_loop()
        self.nc: Any = None
        self.js: Any = None

    def _run(self, coro: Any) -> Any:
        return self.loop.run_until_complete(coro)

    def connect(self, positions: Mapping[int, int]) -> None:  # noqa: ARG002 - the durable consumer is the position
        try:
            self._run(self._connect())
        except SourceUnavailable:
            raise
        except Exception as e:  # noqa: BLE001 - whatever nats-py raises, the tick skips saying why
            raise self._unavailable(e) from e

    async def _connect(self) -> None:
        import nats
        from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy
        from nats.js.errors import NotFoundError

        s = self.source

        async def quiet(_e: Exception) -> None:  # nats-py logs a traceback per failed attempt otherwise; the skip reason says it once
            return None

        # max_reconnect_attempts=0 would try the first connection forever: 1 gives up after one more try
        self.nc = await nats.connect(servers=self.servers, connect_timeout=5, allow_reconnect=False, max_reconnect_attempts=1, reconnect_time_wait=0.5, error_cb=quiet)
        self.js = self.nc.jetstream(timeout=10)
        try:
            await self.js.stream_info(s.stream)
        except NotFoundError:
            raise SourceUnavailable(f"the {self.where} does not exist: create the stream (e.g. `nats stream add {s.stream} --subjects '{s.subject}'`), or fix stream= in the step") from None
        try:
            await self.js.consumer_info(s.stream, s.consumer)
        except NotFoundError:  # first use: the step's durable consumer, from the start of the stream
            await self.js.add_consumer(
                s.stream,
                ConsumerConfig(
                    durable_name=s.consumer,
                    filter_subject=s.subject,
                    ack_policy=AckPolicy.EXPLICIT,
                    ack_wait=s.ack_wait_seconds,
                    deliver_policy=DeliverPolicy.ALL,
                    max_ack_pending=MAX_ACK_PENDING,
                    max_deliver=-1,
                ),
            )

    def _unavailable(self, e: Exception) -> SourceUnavailable:
        from nats.errors import NoServersError
        from nats.js.errors import ServiceUnavailableError

        if isinstance(e, (NoServersError, OSError)):
            return SourceUnavailable(f"cannot reach the {self.where}: {type(e).__name__}: {str(e)[:200]}")
        if isinstance(e, ServiceUnavailableError) or "no responders" in str(e).lower():
            return SourceUnavailable(f"the {self.where}: JetStream is not enabled on the server: start nats-server with -js")
        return SourceUnavailable(f"the {self.where}: {type(e).__name__}: {str(e)[:300]}")

    def read(self, limit: int) -> Chunk:
        try:
            msgs = self._run(self._pull(limit))
        except SourceUnavailable:
            raise
        except Exception as e:  # noqa: BLE001 - the server went away mid-tick: what was stored stays, the tick says why
            raise self._unavailable(e) from e
        return Chunk([self._event(m) for m in msgs], msgs, caught_up=len(msgs) < limit)

    async def _pull(self, limit: int) -> list[Any]:
        """One pull request (``$JS.API.CONSUMER.MSG.NEXT``) for ``limit`` messages that expires after ``wait_seconds``;
        the messages come to an inbox of ours. nats-py's ``fetch`` does the same with a ``wait_for`` and two tasks per
        message, which made it 4x slower than the store; the request itself is JetStream's documented pull API."""
        s = self.source
        got: list[Any] = []
        done = asyncio.Event()

        async def on(msg: Any) -> None:
            status = (msg.headers or {}).get("Status") if not msg.data else None
            if status is not None:  # 408: the request expired (caught up); 404/409: nothing more for it
                if not status.startswith("100"):  # 100: an idle heartbeat
                    done.set()
                return
            got.append(msg)
            if len(got) >= limit:
                done.set()

        inbox = self.nc.new_inbox()
        sub = await self.nc.subscribe(inbox, cb=on, pending_msgs_limit=limit + 10)
        try:
            request = json.dumps({"batch": limit, "expires": int(s.wait_seconds * 1e9)}).encode()
            await self.nc.publish(f"$JS.API.CONSUMER.MSG.NEXT.{s.stream}.{s.consumer}", request, reply=inbox)
            try:
                await asyncio.wait_for(done.wait(), s.wait_seconds + 5)
            except asyncio.TimeoutError:
                pass  # no status came: what arrived is the chunk
        finally:
            await sub.unsubscribe()
        return got

    def _event(self, m: Any) -> NewEvent:
        """One message as an event: data is the value, NATS headers are headers, the stream's time is the timestamp,
        the stream sequence dedupes (the same on every delivery)."""
        s = self.source
        meta = m.metadata
        value = bytes(m.data)
        headers: list[tuple[str, str | None]] = [(str(k), str(v)) for k, v in (m.headers or {}).items()]
        ts = int(meta.timestamp.timestamp() * 1000) if meta.timestamp else None
        pkey, error = s.partition_of(None, value, headers, ts) if s.partition_of else (None, None)
        return NewEvent(str(meta.sequence.stream), value, None, headers, ts, m.subject, None, None, pkey, error)

    def ack(self, chunk: Chunk) -> None:
        async def ack_all() -> None:
            for m in chunk.receipt:
                await m.ack()  # a publish to the reply subject: written to the buffer, sent by the flush
            await self.nc.flush(timeout=10)

        try:
            self._run(ack_all())
        except Exception:  # noqa: BLE001 - stored already: JetStream delivers them again after ack_wait and the store ignores them
            pass

    def lag(self) -> int | None:
        """What the consumer has not been delivered yet (``num_pending``)."""
        try:
            info = self._run(self.js.consumer_info(self.source.stream, self.source.consumer))
            return int(info.num_pending)
        except Exception:  # noqa: BLE001 - the lag is a hint for the skip reason, never a reason to fail the tick
            return None

    def close(self) -> None:
        try:
            if self.nc is not None:
                self._run(self.nc.close())
        except Exception:  # noqa: BLE001 - closing never fails a tick: what was not acknowledged comes again
            pass
        finally:
            self.nc = None
            self.loop.close()
