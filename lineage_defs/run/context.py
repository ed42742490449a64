"""Partition window → bound parameters and environment. Pure functions."""

from __future__ import annotations

import datetime as dt
import re
from typing import NamedTuple

from lineage_defs.errors import RunError
from lineage_defs.uris import PARTITION_TOKEN


class PartitionWindow(NamedTuple):
    """One partition: its key and, for time partitions, [start, end).

    A named tuple, so a Python step may unpack it (SPEC section 4):

    >>> key, start, end = PartitionWindow("2024-01-02", dt.datetime(2024, 1, 2), dt.datetime(2024, 1, 3))
    >>> key, end - start
    ('2024-01-02', datetime.timedelta(days=1))
    """

    key: str
    start: dt.datetime | None = None
    end: dt.datetime | None = None


def bind_params(window: PartitionWindow | None) -> dict[str, str | None]:
    """SQL parameters ``$partition``, ``$partition_start``, ``$partition_end`` (ISO 8601, end exclusive).

    >>> bind_params(PartitionWindow("2024-01-02", dt.datetime(2024, 1, 2, tzinfo=dt.timezone.utc), dt.datetime(2024, 1, 3, tzinfo=dt.timezone.utc)))
    {'partition': '2024-01-02', 'partition_start': '2024-01-02T00:00:00+00:00', 'partition_end': '2024-01-03T00:00:00+00:00'}
    """
    if window is None:
        return {"partition": None, "partition_start": None, "partition_end": None}
    return {
        "partition": window.key,
        "partition_start": window.start.isoformat() if window.start else None,
        "partition_end": window.end.isoformat() if window.end else None,
    }


_UNSAFE_KEY = re.compile(r"^\.{1,2}$|[/\\\x00-\x1f]")


def resolve_token(text: str, window: PartitionWindow | None) -> str:
    """Replace ``{partition}`` in an object path; the key must be a safe path segment.

    Used for object keys only (never SQL text): a dynamic key like ``../x`` or
    one holding ``/`` would escape the object's folder, so it is refused.
    """
    if PARTITION_TOKEN not in text:
        return text
    if window is None:
        raise RunError(f"'{text}' needs a partition", fix="partition the step, or remove {partition} from the path")
    if not window.key or _UNSAFE_KEY.search(window.key):
        raise RunError(f"partition key {window.key!r} cannot be used in a path ('{text}')", fix="use partition keys that are one path segment: no '/', '\\', control characters, and not '.' or '..'")
    return text.replace(PARTITION_TOKEN, window.key)
