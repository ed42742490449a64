"""The plan's frozen data ↔ JSON-able values, driven by the classes' type hints.

For the caches in the state dir: data only (no pickle), so a file someone else
wrote there can at worst be wrong, never run code. A dataclass or NamedTuple is
a list of its field values in order; tuples come back as tuples, so decoded
data compares and hashes like the original. Errors are whitelisted by class.

>>> from lineage_defs.plan.spec import ColumnEdge
>>> from lineage_defs.plan.spec import EdgeKind
>>> encode(ColumnEdge("a://x/t.c", "a://x/u.c", EdgeKind.COPY), ColumnEdge)
['a://x/t.c', 'a://x/u.c', 'copy', []]
>>> decode(_, ColumnEdge) == ColumnEdge("a://x/t.c", "a://x/u.c", EdgeKind.COPY)
True
"""

from __future__ import annotations

import dataclasses
import enum
import sys
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
        fn = _record_encoder(tp)
    elif tp in (str, int, float, bool, type(None)):
        fn = _same
    else:
        raise TypeError(f"no encoding for {tp}")
    _encoders[tp] = fn
    return fn


def _record_encoder(tp: type) -> Fn:
    """A record's encoder, generated for its fields: plain values are taken as they are, the rest through their encoder."""
    env: dict[str, Any] = {}
    items = []
    for i, (name, t) in enumerate(_hints(tp)):
        inner = _optional(t)
        if t in _PLAIN or inner in _PLAIN:
            items.append(f"v.{name}")
        elif isinstance(t, type) and issubclass(t, enum.Enum):
            items.append(f"v.{name}.value")
        elif typing.get_origin(t) is tuple and typing.get_args(t)[1:] == (Ellipsis,) and typing.get_args(t)[0] in _PLAIN:
            items.append(f"list(v.{name})")
        else:
            env[f"e{i}"] = _encoder(t)
            items.append(f"e{i}(v.{name})")
    exec(f"def record(v):\n    return [{', '.join(items)}]", env)  # noqa: S102 - our own source, built from the class's type hints
    fn: Fn = env["record"]
    return fn


# Values JSON holds as they are (encoded unchanged).
_PLAIN = (str, int, float, bool, type(None))


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
            def exact_items(v: Any, t: type = args[0], only: frozenset[type] = frozenset((args[0],))) -> tuple[Any, ...]:
                if not only.issuperset(map(type, _list(v))):  # exact types: a bool is no int
                    raise TypeError(f"expected a list of {t.__name__}")
                return tuple(v)

            fn = exact_items
        elif len(args) == 2 and args[1] is Ellipsis:
            item = _decoder(args[0])
            fn = lambda v: tuple(map(item, _list(v)))  # noqa: E731
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
        fn = _record_decoder(tp)
    else:
        scalar = _scalar(tp)
        if scalar is None:
            raise TypeError(f"no decoding for {tp}")
        fn = scalar
    _decoders[tp] = fn
    return fn


def _record_decoder(tp: type) -> Fn:
    """A record's decoder, generated for its fields (a warm load decodes ~50,000 records).

    Exact scalars (``str``, ``int``, ``bool``, and ``| None`` of them), enum
    members, tuples of exact scalars and an optional field's None are handled
    inline; a tuple of anything else maps its items' decoder; other fields call
    their own decoder. A NamedTuple is built with
    ``tuple.__new__`` (what its generated ``__new__`` does). A dataclass whose
    instances are exactly their fields (``_plain_fields``) gets them in its
    ``__dict__``, as unpickling does; any other through its ``__init__``
    (keywords when it has keyword-only fields).
    """
    hints = _hints(tp)
    n = len(hints)
    env: dict[str, Any] = {"tp": tp, "_new": tuple.__new__, "_bad": _bad, "_bad_items": _bad_items, "_not_member": _not_member, "_keys": (str, int)}
    lines = [
        "def record(v):",
        f"    if type(v) is not list or len(v) != {n}:",
        f"        raise ValueError('{tp.__name__} needs a list of {n} values')",
    ]
    if n:
        lines.append(f"    {', '.join(f'x{i}' for i in range(n))}{',' if n == 1 else ''} = v")
    args = []
    for i, (name, t) in enumerate(hints):
        inner = _optional(t)
        origin, targs = typing.get_origin(t), typing.get_args(t)
        if t in _EXACT:
            env[f"t{i}"] = t
            lines.append(f"    if type(x{i}) is not t{i}: _bad({name!r}, x{i}, t{i})")
            args.append(f"x{i}")
        elif inner in _EXACT:
            env[f"t{i}"] = inner
            lines.append(f"    if x{i} is not None and type(x{i}) is not t{i}: _bad({name!r}, x{i}, t{i})")
            args.append(f"x{i}")
        elif isinstance(t, type) and issubclass(t, enum.Enum):
            # inline: the member by value (a warm load decodes tens of thousands of edge kinds)
            env[f"m{i}"] = {m.value: m for m in t}
            lines.append(f"    y{i} = m{i}.get(x{i}) if type(x{i}) in _keys else None")
            lines.append(f"    if y{i} is None: _not_member({name!r}, x{i})")
            args.append(f"y{i}")
        elif origin is tuple and len(targs) == 2 and targs[1] is Ellipsis and targs[0] in _EXACT:
            env[f"o{i}"] = frozenset((targs[0],))
            lines.append(f"    if type(x{i}) is not list or not o{i}.issuperset(map(type, x{i})): _bad_items({name!r}, x{i})")
            args.append(f"tuple(x{i})")
        elif origin is tuple and len(targs) == 2 and targs[1] is Ellipsis:
            env[f"d{i}"] = _decoder(targs[0])
            lines.append(f"    if type(x{i}) is not list: _bad_items({name!r}, x{i})")
            args.append(f"tuple(map(d{i}, x{i}))")
        elif inner is not None:
            env[f"d{i}"] = _decoder(inner)
            args.append(f"(None if x{i} is None else d{i}(x{i}))")
        else:
            env[f"d{i}"] = _decoder(t)
            args.append(f"d{i}(x{i})")
    if dataclasses.is_dataclass(tp) and _plain_fields(tp):
        # every field is stored, so __init__ would only assign them, one frozen __setattr__ each
        lines.append("    o = _object_new(tp)")
        lines.append(f"    o.__dict__.update({{{', '.join(f'{name!r}: {a}' for (name, _), a in zip(hints, args))}}})")
        lines.append("    return o")
        env["_object_new"] = object.__new__
    elif dataclasses.is_dataclass(tp):
        kw = any(f.kw_only for f in dataclasses.fields(tp))
        call = ", ".join(f"{name}={a}" for (name, _), a in zip(hints, args)) if kw else ", ".join(args)
        lines.append(f"    return tp({call})")
    else:
        lines.append(f"    return _new(tp, ({', '.join(args)}{',' if n == 1 else ''}))")
    exec("\n".join(lines), env)  # noqa: S102 - our own source, built from the class's type hints
    fn: Fn = env["record"]
    return fn


def _plain_fields(tp: type) -> bool:
    """Whether a dataclass's instances are exactly their fields: ``@dataclass``'s own ``__init__``, no ``__post_init__``, a ``__dict__``."""
    init = vars(tp).get("__init__")
    module = sys.modules.get(tp.__module__)
    return (
        init is not None
        and getattr(getattr(init, "__code__", None), "co_filename", None) != getattr(module, "__file__", None)  # not hand-written
        and not hasattr(tp, "__post_init__")
        and "__slots__" not in vars(tp)
        and all(f.init for f in dataclasses.fields(tp))
    )


def _bad(field: str, v: Any, t: type) -> None:
    raise TypeError(f"{field}: expected {t.__name__}, got {type(v).__name__}")


def _bad_items(field: str, v: Any) -> None:
    raise TypeError(f"{field}: expected a list of values, got {type(v).__name__}")


def _not_member(field: str, v: Any) -> None:
    raise ValueError(f"{field}: {v!r} is not one of its values")


def _list(v: Any) -> list[Any]:
    if not isinstance(v, list):
        raise TypeError(f"expected a list, got {type(v).__name__}")
    return v
