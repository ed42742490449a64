"""The receiver's connections under abuse: uvicorn's httptools protocol with limits it lacks.

uvicorn accepts every connection and waits for a request head forever (its
keep-alive timeout starts only after a response), so idle or half-sent
connections pile up until the process runs out of file descriptors and
``/health`` gets empty replies. This protocol adds, per server:

- a **connection cap**: past ``max_connections`` a new connection evicts the
  oldest one that has not finished sending its request head (idle keep-alive
  or half-sent): a real client's request gets through while slowloris
  connections churn; when every connection is busy the new one is closed at
  once (no descriptor is held);
- a **header deadline**: a request head not complete ``header_timeout``
  seconds after the connection opened (or the previous response ended)
  closes the connection;
- a **header size cap** (bytes of request line and headers, and a count):
  ``431`` and close;
- a **requests-per-connection cap**: the response to the last one says
  ``Connection: close``.

Body deadlines (in all, and the longest pause) and the memory for bodies
read before their credential is known are the app's (``app``): only it knows
which hook a body is for.
"""

from __future__ import annotations

import asyncio
import functools
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Limits:
    """What the receiver allows a client (``LINEAGE_WEBHOOK_*`` variables, see ``serve``)."""

    max_connections: int = 1000
    header_timeout: float = 10.0  # seconds to send a request head, and the longest pause in a body (``app``)
    body_timeout: float = 30.0  # seconds to send a whole body
    keep_alive: float = 5.0  # seconds an idle keep-alive connection is kept
    max_requests_per_connection: int = 1000
    max_header_bytes: int = 16 * 1024
    max_headers: int = 100
    max_buffered_bytes: int = 16 * 1024 * 1024  # memory for bodies read before their HMAC is checked, at once; the rest go to temporary files


def guarded_protocol(limits: Limits) -> type[asyncio.Protocol]:
    """A protocol class (uvicorn's ``http=``) enforcing ``limits``."""

    class Guarded(_guarded_base()):  # type: ignore[misc]
        LIMITS = limits

    return Guarded


@functools.cache
def _guarded_base() -> type[asyncio.Protocol]:
    """uvicorn's httptools protocol with the limits (uvicorn is imported here, when the receiver starts)."""
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

    class _Guarded(HttpToolsProtocol):
        LIMITS = Limits()

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            # protocols of this server still sending a request head, oldest first (shared by the server's connections)
            waiting = getattr(self.server_state, "lineage_waiting", None)
            if waiting is None:
                waiting = OrderedDict()
                self.server_state.lineage_waiting = waiting  # type: ignore[attr-defined]
            self.waiting: OrderedDict[Any, None] = waiting
            self.head_timer: asyncio.TimerHandle | None = None
            self.head_bytes = 0
            self.head_count = 0
            self.served = 0

        # -- the cap ---------------------------------------------------------------
        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            if len(self.connections) > self.LIMITS.max_connections:
                victim = next((p for p in self.waiting if p is not self), None)
                if victim is None:
                    transport.abort()  # every connection is mid-request: this one is refused
                    return
                victim._drop()
            self._await_head()

        def connection_lost(self, exc: Exception | None) -> None:
            self._head_done()
            super().connection_lost(exc)

        def _drop(self) -> None:
            self._head_done()
            if not self.transport.is_closing():
                self.transport.abort()

        # -- the header deadline and size --------------------------------------------
        def _await_head(self) -> None:
            self.waiting[self] = None
            self.waiting.move_to_end(self)
            self.head_bytes = self.head_count = 0
            if self.head_timer is None:
                self.head_timer = self.loop.call_later(self.LIMITS.header_timeout, self._drop)

        def _head_done(self) -> None:
            self.waiting.pop(self, None)
            if self.head_timer is not None:
                self.head_timer.cancel()
                self.head_timer = None

        def on_message_begin(self) -> None:
            self.head_bytes = self.head_count = 0  # the limits are per request head (pipelined ones too)
            super().on_message_begin()

        def on_url(self, url: bytes) -> None:
            self._count(len(url), 0)
            super().on_url(url)

        def on_header(self, name: bytes, value: bytes) -> None:
            self._count(len(name) + len(value), 1)
            super().on_header(name, value)

        def _count(self, n: int, headers: int) -> None:
            self.head_bytes += n
            self.head_count += headers
            if self.head_bytes > self.LIMITS.max_header_bytes or self.head_count > self.LIMITS.max_headers:
                self._refuse_head()

        def _refuse_head(self) -> None:
            if not self.transport.is_closing():
                body = b"request head too large"
                self.transport.write(
                    b"HTTP/1.1 431 Request Header Fields Too Large\r\ncontent-type: text/plain\r\n"
                    b"content-length: %d\r\nconnection: close\r\n\r\n%s" % (len(body), body)
                )
                self.transport.close()
            self._head_done()
            raise _HeadRefused()

        def data_received(self, data: bytes) -> None:
            if not self.transport.is_closing():
                super().data_received(data)  # a refused head stops the parser: uvicorn reports it as an invalid request

        def send_400_response(self, msg: str) -> None:
            if not self.transport.is_closing():  # the 431 went out already
                super().send_400_response(msg)

        def on_headers_complete(self) -> None:
            self._head_done()
            super().on_headers_complete()
            self.served += 1
            if self.served >= self.LIMITS.max_requests_per_connection and self.cycle is not None:
                self.cycle.keep_alive = False

        def on_response_complete(self) -> None:
            super().on_response_complete()
            idle = self.cycle is None or self.cycle.response_complete  # else a pipelined request, its head complete, runs now
            if idle and not self.transport.is_closing():
                self._await_head()

    return _Guarded


class _HeadRefused(Exception):
    """Raised out of a parser callback to stop parsing a refused request head."""
