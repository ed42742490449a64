"""``partition_from=`` → the raw partition value of one event, and the safety rule for it. Pure.

The value then becomes a partition key of the step's PartitionsDefinition in
the build layer (``lineage_defs.triggers.keys``). Whatever the source, a value
is refused unless it is a short run of safe characters: a partition key ends
up in object paths, run tags and (bound, never spliced) SQL parameters, and a
hostile one (``../x``, quotes, control characters) must go nowhere.
"""

from __future__ import annotations

import datetime as dt
import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from lineage_defs.events.payload import PayloadError, parse_json

MAX_LEN = 128
_SAFE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:@+=-]*")  # whole string: fullmatch, never `$` (it matches before a final newline)
_PATH_PART = re.compile(r"\.([A-Za-z_][A-Za-z0-9_]*)|\[(\d+)\]|\[\"([^\"]*)\"\]|\['([^']*)'\]")


class PartitionValueError(ValueError):
    """The event carries no usable partition value; the message says why and what was seen."""


def json_path(doc: Any, path: str) -> Any:
    """``$.a.b[0]`` / ``$["a b"]`` into a parsed JSON document; KeyError when absent.

    >>> json_path({"a": {"b": [5, 6]}}, "$.a.b[1]")
    6
    """
    if not path.startswith("$"):
        raise PartitionValueError(f"JSON path {path!r} must start with '$'")
    pos, cur = 1, doc
    while pos < len(path):
        m = _PATH_PART.match(path, pos)
        if m is None:
            raise PartitionValueError(f"cannot read JSON path {path!r} at {path[pos:]!r}")
        name, index = m.group(1) or m.group(3) or m.group(4), m.group(2)
        if index is not None:
            if not isinstance(cur, list) or int(index) >= len(cur):
                raise KeyError(path)
            cur = cur[int(index)]
        else:
            if not isinstance(cur, dict) or name not in cur:
                raise KeyError(path)
            cur = cur[name]
        pos = m.end()
    return cur


def raw_value(
    source: str,
    *,
    value: bytes | None,
    key: bytes | None = None,
    headers: Sequence[tuple[str, str | None]] | Mapping[str, str] = (),
    timestamp_ms: int | None = None,
) -> str:
    """The partition value an event gives under ``partition_from=<source>``.

    ``timestamp`` gives an ISO 8601 UTC timestamp, which the build layer maps
    to the time partition holding it.

    >>> raw_value("json:$.day", value=b'{"day": "2025-01-02"}')
    '2025-01-02'
    >>> raw_value("timestamp", value=None, timestamp_ms=0)
    '1970-01-01T00:00:00+00:00'
    """
    if source == "timestamp":
        if timestamp_ms is None or timestamp_ms < 0:
            raise PartitionValueError("the event has no timestamp")
        return dt.datetime.fromtimestamp(timestamp_ms / 1000, dt.timezone.utc).isoformat()
    if source == "key":
        if key is None:
            raise PartitionValueError("the event has no key")
        return _decode(key, "key")
    if source.startswith("header:"):
        name = source[len("header:"):].lower()
        pairs = headers.items() if isinstance(headers, Mapping) else headers
        for k, v in pairs:
            if k.lower() == name and v is not None:
                return v
        raise PartitionValueError(f"the event has no header {source[len('header:'):]!r}")
    if source.startswith("json:"):
        if value is None:
            raise PartitionValueError("the event has no value to read JSON from")
        try:
            doc = parse_json(value)
        except PayloadError as e:
            raise PartitionValueError(f"the event's value is not usable JSON: {e}") from None
        try:
            found = json_path(doc, source[len("json:"):])
        except KeyError:
            raise PartitionValueError(f"the event's JSON has nothing at {source[len('json:'):]}") from None
        if isinstance(found, bool) or found is None or isinstance(found, (dict, list)):
            raise PartitionValueError(f"{source[len('json:'):]} is {json.dumps(found)[:40]}, not a string or number")
        return str(found)
    raise PartitionValueError(f"unknown partition_from {source!r}")


def _decode(b: bytes, what: str) -> str:
    try:
        return b.decode("utf-8")
    except UnicodeDecodeError:
        raise PartitionValueError(f"the event's {what} is not UTF-8 text") from None


def check_safe(value: str) -> str:
    """``value`` if it may be a partition key; PartitionValueError naming the problem otherwise.

    >>> check_safe("eu-west")
    'eu-west'
    """
    shown = json.dumps(value[:40])
    if not value:
        raise PartitionValueError("the partition value is empty")
    if len(value) > MAX_LEN:
        raise PartitionValueError(f"the partition value {shown}… is longer than {MAX_LEN} characters")
    if ".." in value or not _SAFE.fullmatch(value):
        raise PartitionValueError(
            f"the partition value {shown} holds characters a partition key may not have "
            "(allowed: letters, digits and _ . : @ + = -, starting with a letter or digit; no '..')"
        )
    return value


def parse_instant(value: str) -> dt.datetime | None:
    """An ISO 8601 date/datetime or epoch seconds/milliseconds as an aware UTC datetime; None if it is neither.

    >>> parse_instant("2025-01-02").isoformat()
    '2025-01-02T00:00:00+00:00'
    """
    text = value.strip()
    if re.fullmatch(r"\d{9,13}(\.\d+)?", text):
        n = float(text)
        return dt.datetime.fromtimestamp(n / 1000 if n > 1e11 else n, dt.timezone.utc)
    try:
        t = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return t if t.tzinfo else t.replace(tzinfo=dt.timezone.utc)
