"""For the OpenLineage tests: a local HTTP receiver, endpoints that fail, and received JSON parsed back into the client's classes.

The client ships a serializer (``Serde``) but no deserializer: ``parse_run_event``
structures a received event into ``event_v2.RunEvent`` and each facet into the
class its ``_schemaURL`` names, so a test reads events through the client's
own types (and a field we send that the spec does not define is lost, and
would show in the round trip).
"""

from __future__ import annotations

import enum
import http.server
import importlib
import json
import pkgutil
import socket
import threading
import types
import typing
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import attr
from openlineage.client import event_v2

import openlineage.client.generated as generated


class Receiver:
    """``POST /api/v1/lineage`` on 127.0.0.1, bodies kept in order."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []
        received = self.events

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (http.server's name)
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                received.append(json.loads(body))
                self.send_response(200)
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@contextmanager
def receiver() -> Iterator[Receiver]:
    r = Receiver()
    try:
        yield r
    finally:
        r.close()


def dead_url() -> str:
    """A port nothing listens on (connections are refused)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}"


@contextmanager
def blackhole() -> Iterator[str]:
    """An endpoint that accepts connections and never answers."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(64)
    try:
        yield f"http://127.0.0.1:{s.getsockname()[1]}"
    finally:
        s.close()


def _facet_classes() -> dict[str, type]:
    out: dict[str, type] = {}
    for m in pkgutil.iter_modules(generated.__path__):
        module = importlib.import_module(f"{generated.__name__}.{m.name}")
        for name, obj in vars(module).items():
            if isinstance(obj, type) and attr.has(obj) and name.endswith("Facet"):
                out[name] = obj
    return out


FACETS = _facet_classes()


def _structure(tp: Any, value: Any) -> Any:
    if value is None:
        return None
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        return _structure(next(a for a in typing.get_args(tp) if a is not type(None)), value)
    if origin is list:
        (item,) = typing.get_args(tp)
        return [_structure(item, v) for v in value]
    if origin is dict:
        _, declared = typing.get_args(tp)
        return {k: _structure(_facet_type(declared, v), v) for k, v in value.items()}
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return tp(value)
    if isinstance(tp, type) and attr.has(tp):
        return from_dict(tp, value)
    return value


def _facet_type(declared: Any, value: Any) -> Any:
    if isinstance(value, dict) and "_schemaURL" in value:
        return FACETS.get(value["_schemaURL"].rsplit("/", 1)[-1], declared)
    return declared


def from_dict(cls: type, data: dict[str, Any]) -> Any:
    hints = typing.get_type_hints(cls)
    kwargs = {}
    for a in attr.fields(cls):
        if a.name in data and a.init:
            kwargs[a.alias or a.name.lstrip("_")] = _structure(hints[a.name], data[a.name])
    return cls(**kwargs)


def parse_run_event(data: dict[str, Any]) -> event_v2.RunEvent:
    return typing.cast(event_v2.RunEvent, from_dict(event_v2.RunEvent, data))
