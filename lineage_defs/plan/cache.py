"""Per-file analysis (reads, writes, column lineage), keyed by content hash, kept in the state dir.

Every Dagster run process loads the code location again, so analysis is paid
per run; this cache makes a warm load skip sqlglot entirely. One JSON file for
the whole folder (one read at load), replaced atomically (``0600``) when it
changes. It holds each script's parsed header and its analysis (``files``:
keyed by the file's content hash, the header also by the parser's source) —
runs split the script file itself — and it is data only: entries are
decoded by type (``codec``), never unpickled, and an entry (or a whole file)
that does not decode, whatever it holds, deep nesting included, is a miss:
the load starts cold instead of failing.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any, TypeVar

from lineage_defs.plan.codec import CodecError, decode, encode

# Bump when the parser or the analysis changes what it produces.
CACHE_VERSION = "plan-v5"
T = TypeVar("T")


def content_hash(*parts: str) -> str:
    h = hashlib.sha256()
    for p in parts:
        h.update(p.encode())
        h.update(b"\0")
    return h.hexdigest()[:32]


class PlanCache:
    def __init__(self, directory: Path | None) -> None:
        self.path = directory / f"{CACHE_VERSION}.json" if directory else None
        self.raw: dict[str, Any] = {}  # key → encoded entry, as read
        self.values: dict[str, Any] = {}  # key → decoded or new entry
        self.types: dict[str, Any] = {}
        self.used: set[str] = set()
        self.dirty = False
        if self.path and self.path.exists():
            try:
                data = json.loads(self.path.read_bytes())
                if isinstance(data, dict) and data.get("version") == CACHE_VERSION and isinstance(data.get("entries"), dict):
                    self.raw = data["entries"]
            except (OSError, ValueError, RecursionError):  # a corrupt or foreign cache is just a cold start
                pass

    def get(self, key: str, tp: type[T]) -> T | None:
        """The entry stored under ``key`` as a ``tp``, or None (missing, or not a ``tp``)."""
        if key in self.values:
            value = self.values[key]
        elif key in self.raw:
            try:
                value = decode(self.raw[key], tp)
            except (CodecError, RecursionError):
                return None
            self.values[key] = value
        else:
            return None
        if not isinstance(value, tp):
            return None
        self.types[key] = tp
        self.used.add(key)
        return value

    def put(self, key: str, value: Any) -> None:
        self.raw.pop(key, None)  # an entry that did not decode is replaced
        self.values[key] = value
        self.types[key] = type(value)
        self.used.add(key)
        self.dirty = True

    def save(self) -> None:
        """Write the entries used by this load (drops stale ones); never fails the load."""
        if not self.path:
            return
        if not self.dirty and self.used == set(self.raw):
            return
        keep = {k: self.raw[k] if k in self.raw else encode(self.values[k], self.types[k]) for k in self.used}
        write_json(self.path, {"version": CACHE_VERSION, "entries": keep})


def write_json(path: Path, value: Any, header: Any = None) -> None:
    """``value`` as compact JSON in ``path``, replaced atomically (``0600``); never raises (a cache not written is a cold start).

    ``header``: a JSON line before it, which a reader can check without parsing the rest.
    """
    import orjson  # written only when something changed: ~6x faster than json.dumps on the caches' megabytes

    try:
        data = orjson.dumps(value) if header is None else orjson.dumps(header) + b"\n" + orjson.dumps(value)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.stem}-")
    except (OSError, TypeError):
        return
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except OSError:
        Path(tmp).unlink(missing_ok=True)
