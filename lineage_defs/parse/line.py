"""The context one annotation line is parsed in: its tokens, where they are,
and checkers that turn option values into data or report them with a caret."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from lineage_defs import uris
from lineage_defs.errors import AnnotationError, Location, did_you_mean
from lineage_defs.parse.header import CommentLine
from lineage_defs.parse.model import Language
from lineage_defs.parse.tokens import (
    _IDENT,
    _PARTITION_FROM,
    Token,
    _value_at,
    parse_duration,
    tokenize,
)

@dataclass
class _Builder:
    """Mutable accumulator for one header; frozen into ``Header`` at the end."""

    path: str
    language: Language
    errors: list[AnnotationError] = field(default_factory=list)
    values: dict[str, object] = field(default_factory=dict)
    lists: dict[str, list[object]] = field(default_factory=dict)
    seen: dict[str, int] = field(default_factory=dict)  # singleton keyword → line
    prose: list[str] = field(default_factory=list)
    alias_key: tuple[tuple[str, ...], Location] | None = None
    alias_append: Location | None = None

    def add(self, name: str, value: object) -> None:
        self.lists.setdefault(name, []).append(value)


class _Line:
    """One annotation line being parsed: tokens plus error helpers."""

    def __init__(self, b: _Builder, cl: CommentLine) -> None:
        self.b = b
        self.cl = cl
        self.tokens = tokenize(cl.content)

    def loc(self, start: int = 0, width: int = 1) -> Location:
        return Location(self.b.path, self.cl.line, self.cl.offset + start + 1, self.cl.raw, max(width, 1))

    def error(self, tok: Token | None, message: str, fix: str | None = None) -> None:
        if tok is None:  # point just past the end of the line
            loc = self.loc(len(self.cl.content), 1)
        else:
            loc = self.loc(tok.start, len(tok.text))
        self.b.errors.append(AnnotationError(message, loc, fix))

    def options(
        self,
        toks: list[Token],
        allowed: Mapping[str, Callable[[Token], object | None]],
        flags: tuple[str, ...] = (),
        what: str = "",
    ) -> dict[str, object] | None:
        """Parse k=v options and bare flags; every other token is an error."""
        out: dict[str, object] = {}
        ok = True
        for t in toks:
            if t.key is None:
                if t.text in flags:
                    out[t.text] = True
                    continue
                if t.unterminated:
                    self.error(t, "unterminated quote", 'close the value with "')
                else:
                    guess = did_you_mean(t.text, (*allowed, *flags))
                    fix = f"did you mean '{guess}'?" if guess else _options_fix(allowed, flags, what)
                    self.error(t, f"unexpected '{t.text}'{' in ' + what if what else ''}", fix)
                ok = False
                continue
            if t.key not in allowed:
                guess = did_you_mean(t.key, allowed)
                fix = f"did you mean '{guess}'?" if guess else _options_fix(allowed, flags, what)
                self.error(Token(t.key, t.start), f"unknown option '{t.key}'", fix)
                ok = False
                continue
            if t.key in out:
                self.error(t, f"option '{t.key}' given twice", "keep one")
                ok = False
                continue
            if t.unterminated:
                self.error(t, "unterminated quote", 'close the value with "')
                ok = False
                continue
            value = allowed[t.key](t)
            if value is None:
                ok = False
                continue
            out[t.key] = value
        return out if ok else None

    # value checkers: return the parsed value, or report and return None
    def duration(self, t: Token) -> float | None:
        v = parse_duration(t.value)
        if v is None:
            self.error(_value_at(t), f"bad duration '{t.value}'", "write seconds or 30s, 5m, 2h, 1d")
        return v

    def integer(self, t: Token) -> int | None:
        if re.fullmatch(r"[0-9]+", t.value):
            return int(t.value)
        self.error(_value_at(t), f"'{t.value}' is not a whole number", "write e.g. 100")
        return None

    def choice(self, choices: tuple[str, ...]) -> Callable[[Token], str | None]:
        def check(t: Token) -> str | None:
            if t.value in choices:
                return t.value
            guess = did_you_mean(t.value, choices)
            self.error(_value_at(t), f"bad value '{t.value}'", f"did you mean '{guess}'?" if guess else f"use one of {'|'.join(choices)}")
            return None

        return check

    def text(self, t: Token) -> str | None:
        if t.value:
            return t.value
        self.error(t, f"'{t.key}' needs a value", f'write {t.key}=<value>')
        return None

    def columns(self, t: Token) -> tuple[str, ...] | None:
        cols = tuple(c.strip() for c in t.value.split(","))
        if not t.value or any(not _IDENT.match(c) for c in cols):
            self.error(_value_at(t), f"bad column list '{t.value}'", f"write {t.key or 'key'}=col1,col2 (no spaces)")
            return None
        return cols

    def column(self, t: Token) -> str | None:
        if _IDENT.match(t.value):
            return t.value
        self.error(_value_at(t), f"bad column name '{t.value}'", f"write {t.key}=<one column>")
        return None

    def tz(self, t: Token) -> str | None:
        import zoneinfo

        try:
            zoneinfo.ZoneInfo(t.value)
            return t.value
        except (zoneinfo.ZoneInfoNotFoundError, ValueError, OSError):  # `tz=Europe` is a tzdata directory
            guess = did_you_mean(t.value, sorted(zoneinfo.available_timezones()))
            self.error(_value_at(t), f"unknown time zone '{t.value}'", f"did you mean '{guess}'?" if guess else "use an IANA name like Europe/Berlin")
            return None

    def uri(self, t: Token | None) -> str | None:
        if t is None:
            self.error(None, "missing asset URI", "write e.g. ducklake://main/orders")
            return None
        try:
            return uris.normalize(t.value)
        except uris.UriError as e:
            self.error(_value_at(t), e.message, e.fix)
            return None

    def connection(self, t: Token) -> str | None:
        """A connection name: the suffix of its environment variables (``LINEAGE_…_<CONNECTION>``)."""
        if _CONNECTION.fullmatch(t.value):
            return t.value
        fixed = re.sub(r"[^A-Za-z0-9_]", "_", t.value) or "main"
        self.error(_value_at(t), f"bad connection name '{t.value}'", f"use letters, digits and _ only, e.g. connection={fixed}")
        return None

    def partition_from(self, t: Token) -> str | None:
        if _PARTITION_FROM.match(t.value):
            return t.value
        self.error(_value_at(t), f"bad partition_from '{t.value}'", "use timestamp, key, header:<name> or json:$.path")
        return None


_CONNECTION = re.compile(r"[A-Za-z0-9_]+")


def _options_fix(allowed: Mapping[str, object], flags: tuple[str, ...], what: str) -> str:
    names = [f"{k}=" for k in allowed] + list(flags)
    return f"{what + ' takes ' if what else 'allowed: '}{', '.join(names)}" if names else f"{what or 'this annotation'} takes no arguments"
