"""The plan's frozen data ↔ JSON-able values, driven by the classes' type hints.

For the caches in the state dir: data only (no pickle), so a file someone else
wrote there can at worst be wrong, never run code. A dataclass or NamedTuple is
a list of its field values in order; tuples come back as tuples, so decoded
data compares and hashes like the original. Errors are whitelisted by class.

>>> from lineage_defs.plan.spec import ColumnEdge
>>> from lineage_defs.plan.spec import EdgeKind
>>> encode(ColumnEdge("a://x/t.c", "a://x/u.c", EdgeKind.COPY), ColumnEdge)
['a://x/t.c', 'a://x/u.c', 'copy']
>>> decode(_, ColumnEdge) == ColumnEdge("a://x/t.c", "a://x/u.c", EdgeKind.COPY)
True
"""

from __future__ import annotations

import dataclasses
import enum
import types
import typing
from collections.abc import Callable
from typing import Any

from lineage_defs import errors as _errors

Fn = Callable[[Any], Any]
_ERRORS: dict[str, type[_errors.LineageDefsError]] = {
    c.__name__: c for c in (_errors.LineageDefsError, _errors.AnnotationError, _errors.SpecError, _errors.RunError)
}
_encoders: dict[Any, Fn] = {}
_decoders: dict[Any, Fn] = {}


class CodecError(ValueError):
    """A value that does not fit its type: the cache entry is unusable."""


def encode(value: Any, tp: Any) -> Any:
    return _encoder(tp)(value)


def decode(data: Any, tp: Any) -> Any:
    try:
        return _decoder(tp)(data)
    except (TypeError, ValueError, KeyError, IndexError) as e:
        raise CodecError(f"cannot decode {tp}: {e}") from e


def _same(v: Any) -> Any:
    return v


def _hints(cls: type) -> list[tuple[str, Any]]:
    hints = typing.get_type_hints(cls)
    names = [f.name for f in dataclasses.fields(cls)] if dataclasses.is_dataclass(cls) else list(getattr(cls, "_fields"))
    return [(n, hints[n]) for n in names]


def _is_record(tp: Any) -> bool:
    return isinstance(tp, type) and (dataclasses.is_dataclass(tp) or (issubclass(tp, tuple) and hasattr(tp, "_fields")))


def _is_union(tp: Any) -> bool:
    return typing.get_origin(tp) in (typing.Union, types.UnionType)


def _optional(tp: Any) -> Any | None:
    """X for ``X | None`` (X itself may be a union of records), else None."""
    if _is_union(tp):
        args = tuple(a for a in typing.get_args(tp) if a is not type(None))
        if len(args) < len(typing.get_args(tp)):
            return args[0] if len(args) == 1 else typing.Union[args]  # noqa: UP007 (a runtime union of types)
    return None


def _members(tp: Any) -> dict[str, Any]:
    """A union of record types (``Kafka | Webhook``) → its members by class name (the tag written)."""
    args = typing.get_args(tp)
    if not all(_is_record(a) for a in args):
        raise TypeError(f"unions other than X | None and unions of records are not encodable: {tp}")
    return {a.__name__: a for a in args}


# JSON gives exactly these types (a bool is no int here): decoded by a type check alone.
_EXACT = (str, int, bool)


def _scalar(tp: Any) -> Fn | None:
    if tp in (str, int, bool, type(None)):
        def check(v: Any) -> Any:
            if type(v) is not tp:  # JSON gives exactly these types (a bool is no int here)
                raise TypeError(f"expected {tp.__name__}, got {type(v).__name__}")
            return v
        return check
    if tp is float:
        def to_float(v: Any) -> float:
            if isinstance(v, bool) or not isinstance(v, (int, float)):
                raise TypeError(f"expected a number, got {type(v).__name__}")
            return float(v)
        return to_float
    return None


def _encoder(tp: Any) -> Fn:
    fn = _encoders.get(tp)
    if fn is not None:
        return fn
    inner = _optional(tp)
    if inner is not None:
        enc = _encoder(inner)
        fn = lambda v: None if v is None else enc(v)  # noqa: E731
    elif _is_union(tp):
        by_type = {m: _encoder(m) for m in _members(tp).values()}
        fn = lambda v: [type(v).__name__, by_type[type(v)](v)]  # noqa: E731
    elif isinstance(tp, type) and issubclass(tp, enum.Enum):
        fn = lambda v: v.value  # noqa: E731
    elif typing.get_origin(tp) is tuple:
        args = typing.get_args(tp)
        if len(args) == 2 and args[1] is Ellipsis:
            item = _encoder(args[0])
            fn = lambda v: [item(x) for x in v]  # noqa: E731
        else:
            items = [_encoder(a) for a in args]
            fn = lambda v: [e(x) for e, x in zip(items, v)]  # noqa: E731
    elif isinstance(tp, type) and issubclass(tp, _errors.LineageDefsError):
        loc = _encoder(_errors.Location | None)
        fn = lambda e: [type(e).__name__, e.message, loc(e.location), e.fix, e.severity]  # noqa: E731
    elif _is_record(tp):
        fields = [(n, _encoder(t)) for n, t in _hints(tp)]
        fn = lambda v: [e(getattr(v, n)) for n, e in fields]  # noqa: E731
    elif tp in (str, int, float, bool, type(None)):
        fn = _same
    else:
        raise TypeError(f"no encoding for {tp}")
    _encoders[tp] = fn
    return fn


def _decoder(tp: Any) -> Fn:
    fn = _decoders.get(tp)
    if fn is not None:
        return fn
    inner = _optional(tp)
    if inner in _EXACT:  # ``str | None``: one check, not two calls (a warm load decodes ~100,000 values)
        def exact_or_none(v: Any, t: Any = inner) -> Any:
            if v is not None and type(v) is not t:
                raise TypeError(f"expected {t.__name__} or null, got {type(v).__name__}")
            return v

        fn = exact_or_none
    elif inner is not None:
        dec = _decoder(inner)
        fn = lambda v: None if v is None else dec(v)  # noqa: E731
    elif _is_union(tp):
        decoders = {name: _decoder(m) for name, m in _members(tp).items()}

        def tagged(v: Any) -> Any:
            name, value = _list(v)
            if name not in decoders:
                raise ValueError(f"{name!r} is not one of {', '.join(decoders)}")
            return decoders[name](value)

        fn = tagged
    elif isinstance(tp, type) and issubclass(tp, enum.Enum):
        members = {m.value: m for m in tp}

        def member(v: Any) -> Any:
            if type(v) not in (str, int) or v not in members:
                raise ValueError(f"{v!r} is not a {tp.__name__}")
            return members[v]

        fn = member
    elif typing.get_origin(tp) is tuple:
        args = typing.get_args(tp)
        if len(args) == 2 and args[1] is Ellipsis and args[0] in _EXACT:
            def exact_items(v: Any, t: type = args[0]) -> tuple[Any, ...]:
                if not all(type(x) is t for x in _list(v)):
                    raise TypeError(f"expected a list of {t.__name__}")
                return tuple(v)

            fn = exact_items
        elif len(args) == 2 and args[1] is Ellipsis:
            item = _decoder(args[0])
            fn = lambda v: tuple([item(x) for x in _list(v)])  # noqa: E731
        else:
            items = [_decoder(a) for a in args]

            def fixed(v: Any) -> tuple[Any, ...]:
                if len(_list(v)) != len(items):
                    raise ValueError("wrong length")
                return tuple(d(x) for d, x in zip(items, v))

            fn = fixed
    elif isinstance(tp, type) and issubclass(tp, _errors.LineageDefsError):
        loc = _decoder(_errors.Location | None)

        def error(v: Any) -> Any:
            name, message, where, fix, severity = _list(v)
            cls = _ERRORS[name]
            if not issubclass(cls, tp):
                raise TypeError(f"{name} is not a {tp.__name__}")
            return cls(str(message), loc(where), None if fix is None else str(fix), str(severity))

        fn = error
    elif _is_record(tp):
        hints = _hints(tp)
        names = [n for n, _ in hints]
        fields = [_decoder(t) for _, t in hints]

        n = len(fields)
        # positional when the class takes its fields in order (a warm load decodes thousands of records)
        positional = not dataclasses.is_dataclass(tp) or not any(f.kw_only for f in dataclasses.fields(tp))

        def record(v: Any) -> Any:
            if type(v) is not list or len(v) != n:
                raise ValueError(f"{tp.__name__} needs a list of {n} values")
            if positional:
                return tp(*[d(x) for d, x in zip(fields, v)])
            return tp(**{name: d(x) for name, d, x in zip(names, fields, v)})

        fn = record
    else:
        scalar = _scalar(tp)
        if scalar is None:
            raise TypeError(f"no decoding for {tp}")
        fn = scalar
    _decoders[tp] = fn
    return fn


def _list(v: Any) -> list[Any]:
    if not isinstance(v, list):
        raise TypeError(f"expected a list, got {type(v).__name__}")
    return v
