"""An MQTT topic filter as a ``pull.Reader`` (paho-mqtt 2.x, MQTT 3.1.1). No Dagster.

Each step has its own persistent session on the broker: a fixed client id
(``client_id``, from the step and the filter) and ``clean_session=False``,
subscribed at QoS 1 (MQTT 3.1.1 rather than 5: paho decodes an MQTT 5
properties block for every message, which took a third of a drain's time). While no tick runs the
broker queues what is published for the session (up to its
``max_queued_messages``, which must be raised: mosquitto's default of 1000
drops the rest silently). A tick connects, takes what the broker sends,
``pull.drain`` stores each chunk, and only then does ``ack`` send the
PUBACKs (paho's ``manual_ack``), in the order the messages came. A crash
between the store and the PUBACKs makes the broker send the chunk again on
the next connection.

MQTT has no message id of its own (packet ids are reused), so the store
deduplicates on what the publisher gives: a top-level ``"event_id"`` (string
or integer) of a JSON-object payload, else a SHA-256 of the topic and the
payload — which also merges two truly identical messages on the same topic
into one event.
"""

from __future__ import annotations

import hashlib
import json
import socket
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from lineage_defs.events.store import NewEvent
from lineage_defs.triggers.keys import PartitionOf
from lineage_defs.triggers.pull import Chunk, SourceUnavailable

CHUNK = 500  # half of the broker's window (mosquitto's max_inflight_messages 1000): it sends the next half while we store one


@dataclass(frozen=True)
class MqttSource:
    """One topic filter as a step's sensor reads it."""

    url: str  # mqtt://host[:port]
    topic: str  # the filter
    client_id: str  # fixed per step and filter: the broker keeps this session's subscription and queue
    partition_of: PartitionOf | None = None
    chunk: int = CHUNK  # messages per store transaction (and per round of PUBACKs)
    first_wait: float = 1.0  # seconds to wait for the first message of a tick
    lull: float = 0.25  # a pause this long with nothing new: the broker sent all it holds


def client_id(step_name: str, topic: str) -> str:
    """The step's session on the broker: readable, and unique per (step, filter)."""
    return f"lineage_defs-{step_name[:60]}-{hashlib.sha256(topic.encode()).hexdigest()[:10]}"


def dedupe_id(topic: str, payload: bytes) -> str:
    """The publisher's ``event_id`` (a payload field), else a hash of topic and payload."""
    if payload[:1] == b"{" and b'"event_id"' in payload:
        try:
            given = json.loads(payload).get("event_id")
        except (ValueError, AttributeError, RecursionError):  # not JSON, not an object, nested absurdly deep: hashed instead
            given = None
        if isinstance(given, (str, int)) and not isinstance(given, bool) and str(given):
            return f"id:{given}"
    return "sha256:" + hashlib.sha256(topic.encode() + b"\0" + payload).hexdigest()


def _address(url: str) -> tuple[str, int]:
    u = urlsplit(url)
    if u.scheme != "mqtt" or not u.hostname:
        raise SourceUnavailable(f"bad MQTT URL {url!r}: write mqtt://host:port (e.g. mqtt://127.0.0.1:1883)")
    try:
        return u.hostname, u.port or 1883
    except ValueError as e:
        raise SourceUnavailable(f"bad MQTT URL {url!r}: {e}") from e


class MqttReader:
    """``pull.Reader`` over one persistent session: connect, take what the broker sends, (store), PUBACK."""

    def __init__(self, source: MqttSource) -> None:
        self.source = source
        self.chunk = source.chunk
        self.host, self.port = _address(source.url)
        self.where = f"MQTT broker {self.host}:{self.port}, topic {source.topic!r}"
        self.client: Any = None
        self.got: list[Any] = []  # received, not yet handed out in a chunk
        self.connected: Any = None  # the CONNACK's reason code, once it came
        self.subscribed: Any = None  # the SUBACK's reason codes, once they came
        self.lost = False

    def connect(self, positions: Mapping[int, int]) -> None:  # noqa: ARG002 - the session on the broker is the position
        import paho.mqtt.client as mqtt

        c = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=self.source.client_id, clean_session=False, protocol=mqtt.MQTTv311, manual_ack=True)
        c.on_connect = lambda _c, _u, flags, rc, _p: setattr(self, "connected", (rc, flags.session_present))
        c.on_subscribe = lambda _c, _u, _mid, rcs, _p: setattr(self, "subscribed", rcs)
        c.on_message = lambda _c, _u, m: self.got.append(m)
        c.on_disconnect = lambda *_a: setattr(self, "lost", True)
        self.client = c
        try:
            c.connect(self.host, self.port, keepalive=60)
        except OSError as e:
            raise SourceUnavailable(f"cannot reach the {self.where}: {e}") from e
        self._wait(lambda: self.connected is not None, "the broker's CONNACK")
        rc, session_present = self.connected
        if rc.is_failure:
            raise SourceUnavailable(f"the {self.where} refused the connection: {rc}")
        if session_present:
            return  # the subscription lives in the session (subscribing again would resend retained messages)
        c.subscribe(self.source.topic, qos=1)
        self._wait(lambda: self.subscribed is not None, "the broker's SUBACK")
        if any(rc.is_failure for rc in self.subscribed):
            raise SourceUnavailable(f"the {self.where} refused the subscription: {', '.join(str(rc) for rc in self.subscribed)}")

    def _wait(self, done: Any, what: str, timeout: float = 10.0) -> None:
        deadline = time.monotonic() + timeout
        while not done():
            if self.lost or time.monotonic() > deadline:
                raise SourceUnavailable(f"the {self.where} closed the connection before {what}" if self.lost else f"no answer from the {self.where} ({what}) in {timeout:g} s")
            self.client.loop(timeout=0.05)

    def read(self, limit: int) -> Chunk:
        s = self.source
        began = last = time.monotonic()
        seen = len(self.got)
        while len(self.got) < limit and not self.lost:
            self.client.loop(timeout=0.02)
            while len(self.got) < limit and not self.lost:
                # paho's loop reads one packet per select(): take what the socket already holds without one each
                n = len(self.got)
                self.client.loop_read()
                if len(self.got) == n:
                    break
            now = time.monotonic()
            if len(self.got) > seen:
                seen, last = len(self.got), now
            elif now - last > (s.lull if self.got or now - began > s.first_wait else s.first_wait):
                break
        taken, self.got = self.got[:limit], self.got[limit:]
        if self.lost and not taken:
            raise SourceUnavailable(f"the {self.where} closed the connection")
        return Chunk([self._event(m) for m in taken], taken, caught_up=len(taken) < limit)

    def _event(self, m: Any) -> NewEvent:
        """One message as an event: the payload is the value, the time received its timestamp (MQTT carries none)."""
        s = self.source
        value = bytes(m.payload)
        ts = int(time.time() * 1000)
        pkey, error = s.partition_of(None, value, [], ts) if s.partition_of else (None, None)
        return NewEvent(dedupe_id(m.topic, value), value, None, (), ts, m.topic, None, None, pkey, error)

    def ack(self, chunk: Chunk) -> None:
        # PUBACKs in the order the messages came (MQTT 3.1.1 §4.6). paho writes each with a send() of its own
        # (a fifth of a drain's time); a QoS 1 PUBACK is 4 fixed bytes and paho keeps no state for it under
        # manual_ack, so the chunk's go out in one write — when nothing of paho's is half-written before them.
        c = self.client
        sock = c.socket()
        if sock is None or c.want_write():
            for m in chunk.receipt:
                c.ack(m.mid, m.qos)
            return
        try:
            sock.setblocking(True)
            sock.sendall(b"".join(b"\x40\x02" + m.mid.to_bytes(2, "big") for m in chunk.receipt if m.qos == 1))  # QoS 0 gets none
        except OSError:
            self.lost = True  # stored already: the broker sends them again, the store ignores them
        finally:
            sock.setblocking(False)

    def lag(self) -> int | None:
        return None  # MQTT does not say how much the broker still queues for a session

    def close(self) -> None:
        """Leave the session (it stays on the broker) without losing the PUBACKs just written.

        paho's ``disconnect`` closes the socket at once; if the broker had sent anything we did not read
        by then (the next messages, once our PUBACKs opened its window), Linux answers the close with
        a reset, and the broker drops what it had not read yet — our last PUBACKs, so it sends those
        messages again (harmless: deduplicated, but measured as 38 of 40 here). So: DISCONNECT, then a
        half-close (the PUBACKs and the DISCONNECT reach the broker before the end of the stream), then read
        until the broker closes its side. Anything it sent meanwhile was never acknowledged: it stays queued."""
        c, self.client = self.client, None
        if c is None:
            return
        sock = c.socket()
        try:
            for _ in range(100):  # the PUBACKs still in paho's buffer, if the socket was full
                if not c.want_write():
                    break
                c.loop_write()
            if sock is not None:
                sock.setblocking(True)
                sock.settimeout(2.0)
                sock.sendall(b"\xe0\x00")  # DISCONNECT (the session is kept: clean_session=False)
                sock.shutdown(socket.SHUT_WR)
                while sock.recv(65536):
                    pass
        except OSError:  # closing never fails a tick: what was not acknowledged comes again
            pass
        finally:
            if sock is not None:
                sock.close()
