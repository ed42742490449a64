"""Strict JSON for payloads from outside (webhook bodies, Kafka values read with ``json:``). Pure.

What ``json.loads`` lets through and we do not: bytes that are not UTF-8
(it guesses UTF-16 and UTF-32), a byte-order mark, ``NaN`` / ``Infinity``
(not JSON), and nesting deeper than ``MAX_DEPTH`` — which, past about a
thousand levels, makes ``json.loads`` raise ``RecursionError`` instead of a
``ValueError``. Every refusal is a ``PayloadError`` saying why.
"""

from __future__ import annotations

import json
from typing import Any

MAX_DEPTH = 64  # SPEC section 6: the receiver refuses JSON nested deeper


class PayloadError(ValueError):
    """Not strict JSON, or nested too deep; the message says which."""


def _no_constant(name: str) -> Any:
    raise PayloadError(f"{name} is not JSON (numbers must be finite)")


def depth(doc: Any, limit: int) -> int:
    """How deep ``doc`` nests (a scalar is 0, ``[]`` is 1), counting no further than ``limit + 1``. Iterative."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(doc, 0)]
    while stack:
        node, d = stack.pop()
        if isinstance(node, (list, dict)):
            d += 1
            if d > deepest:
                deepest = d
                if deepest > limit:
                    return deepest
            stack.extend((child, d) for child in (node.values() if isinstance(node, dict) else node))
    return deepest


def parse_json(data: bytes | str, max_depth: int = MAX_DEPTH) -> Any:
    """``data`` as a JSON document, strictly; PayloadError otherwise.

    >>> parse_json(b'{"a": [1, 2.5]}')
    {'a': [1, 2.5]}
    >>> parse_json(b'[NaN]')
    Traceback (most recent call last):
    ...
    lineage_defs.events.payload.PayloadError: NaN is not JSON (numbers must be finite)
    """
    if isinstance(data, bytes):
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as e:
            raise PayloadError(f"not UTF-8 (byte {e.start}: {data[e.start:e.start + 1]!r})") from None
    else:
        text = data
    if text.startswith("\ufeff"):
        raise PayloadError("starts with a byte-order mark (send UTF-8 without one)")
    try:
        doc = json.loads(text, parse_constant=_no_constant)
    except RecursionError:
        raise PayloadError(f"the JSON is nested deeper than {max_depth} levels") from None
    except PayloadError:
        raise
    except ValueError as e:
        raise PayloadError(f"not JSON ({e})") from None
    # depth ≤ the number of opening brackets: most documents need no walk
    if text.count("[") + text.count("{") > max_depth and depth(doc, max_depth) > max_depth:
        raise PayloadError(f"the JSON is nested deeper than {max_depth} levels")
    return doc
