"""An MQTT topic filter as a ``pull.Reader`` (paho-mqtt 2.x, MQTT 5). No Dagster.

Each step has its own persistent session on the broker: a fixed client id
(``client_id``, from the step and the filter), ``clean_start=False`` and a
session that never expires, subscribed at QoS 1. While no tick runs the
broker queues what is published for the session (up to its
``max_queued_messages``, which must be raised: mosquitto's default of 1000
drops the rest silently). A tick connects, takes what the broker sends,
``pull.drain`` stores each chunk, and only then does ``ack`` send the
PUBACKs (paho's ``manual_ack``), in the order the messages came. A crash
between the store and the PUBACKs makes the broker send the chunk again on
the next connection.

MQTT has no message id of its own (packet ids are reused), so the store
deduplicates on what the publisher gives: a top-level ``"event_id"`` (string
or integer) of a JSON-object payload, else the MQTT 5 user property
``event_id``, else a SHA-256 of the topic and the payload — which also merges
two truly identical messages on the same topic into one event.
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

SESSION_NEVER_EXPIRES = 0xFFFFFFFF  # MQTT 5: the broker keeps the session (and its queue) until told otherwise
RECEIVE_MAXIMUM = 1000  # unacknowledged messages the broker may send before our PUBACKs (mosquitto caps it with max_inflight_messages)


@dataclass(frozen=True)
class MqttSource:
    """One topic filter as a step's sensor reads it."""

    url: str  # mqtt://host[:port]
    topic: str  # the filter
    client_id: str  # fixed per step and filter: the broker keeps this session's subscription and queue
    partition_of: PartitionOf | None = None
    chunk: int = RECEIVE_MAXIMUM  # messages per store transaction (and per round of PUBACKs)
    first_wait: float = 1.0  # seconds to wait for the first message of a tick
    lull: float = 0.25  # a pause this long with nothing new: the broker sent all it holds


def client_id(step_name: str, topic: str) -> str:
    """The step's session on the broker: readable, and unique per (step, filter)."""
    return f"lineage_defs-{step_name[:60]}-{hashlib.sha256(topic.encode()).hexdigest()[:10]}"


def dedupe_id(topic: str, payload: bytes, properties: Any) -> str:
    """The publisher's ``event_id`` (payload field, then user property), else a hash of topic and payload."""
    if payload[:1] == b"{" and b'"event_id"' in payload:
        try:
            given = json.loads(payload).get("event_id")
        except (ValueError, AttributeError, RecursionError):  # not JSON, not an object, nested absurdly deep: hashed instead
            given = None
        if isinstance(given, (str, int)) and not isinstance(given, bool) and str(given):
            return f"id:{given}"
    for k, v in getattr(properties, "UserProperty", None) or ():
        if k == "event_id" and v:
            return f"id:{v}"
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
        from paho.mqtt.packettypes import PacketTypes
        from paho.mqtt.properties import Properties
        from paho.mqtt.subscribeoptions import SubscribeOptions

        c = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=self.source.client_id, protocol=mqtt.MQTTv5, manual_ack=True)
        c.on_connect = lambda _c, _u, _f, rc, _p: setattr(self, "connected", rc)
        c.on_subscribe = lambda _c, _u, _mid, rcs, _p: setattr(self, "subscribed", rcs)
        c.on_message = lambda _c, _u, m: self.got.append(m)
        c.on_disconnect = lambda *_a: setattr(self, "lost", True)
        props = Properties(PacketTypes.CONNECT)
        props.SessionExpiryInterval = SESSION_NEVER_EXPIRES
        props.ReceiveMaximum = RECEIVE_MAXIMUM
        self.client = c
        try:
            c.connect(self.host, self.port, keepalive=60, clean_start=False, properties=props)
        except OSError as e:
            raise SourceUnavailable(f"cannot reach the {self.where}: {e}") from e
        self._wait(lambda: self.connected is not None, "the broker's CONNACK")
        if self.connected.is_failure:
            raise SourceUnavailable(f"the {self.where} refused the connection: {self.connected}")
        # idempotent: the subscription lives in the session; retained messages only when it is new
        _, mid = c.subscribe(self.source.topic, options=SubscribeOptions(qos=1, retainHandling=SubscribeOptions.RETAIN_SEND_IF_NEW_SUB))
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
        """One message as an event: payload is the value, MQTT 5 user properties are headers, received time is the timestamp."""
        s = self.source
        value = bytes(m.payload)
        props = getattr(m, "properties", None)
        headers: list[tuple[str, str | None]] = [(str(k), str(v)) for k, v in (getattr(props, "UserProperty", None) or ())]
        ts = int(time.time() * 1000)  # MQTT carries no publish time
        pkey, error = s.partition_of(None, value, headers, ts) if s.partition_of else (None, None)
        return NewEvent(dedupe_id(m.topic, value, props), value, None, headers, ts, m.topic, None, None, pkey, error)

    def ack(self, chunk: Chunk) -> None:
        # PUBACKs in the order the messages came (MQTT 5 §4.6); written at once (no network thread)
        for m in chunk.receipt:
            self.client.ack(m.mid, m.qos)

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
                sock.sendall(b"\xe0\x00")  # DISCONNECT, reason 0: normal (the session is kept: it never expires)
                sock.shutdown(socket.SHUT_WR)
                while sock.recv(65536):
                    pass
        except OSError:  # closing never fails a tick: what was not acknowledged comes again
            pass
        finally:
            if sock is not None:
                sock.close()
