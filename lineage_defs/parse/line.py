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

    def hook_name(self, t: Token) -> str | None:
        """A webhook name: ``[a-z0-9_]+``, so that it is its own URL path and maps one-to-one to its variables."""
        if not t.value or _HOOK_NAME.fullmatch(t.value):
            return self.text(t)
        fixed = re.sub(r"[^a-z0-9_]", "_", t.value.lower()) or "payments"
        self.error(_value_at(t), f"bad webhook name '{t.value}'", f"use lower-case letters, digits and _ only, e.g. name={fixed} (its credentials: LINEAGE_WEBHOOK_TOKEN_{fixed.upper()})")
        return None

    def mailbox(self, t: Token) -> str | None:
        """A mailbox: the local part of the address mail is sent to (``[a-z0-9][a-z0-9._-]*``, at most 64)."""
        if _MAILBOX.fullmatch(t.value) and len(t.value) <= 64:
            return t.value
        local = t.value.split("@", 1)[0].lower()
        fixed = re.sub(r"[^a-z0-9._-]", "_", local).lstrip("._-")[:64] or "inbox"
        self.error(_value_at(t), f"bad mailbox '{t.value}'", f"write the address's part before @ in lower-case letters, digits, ., - and _ (e.g. name={fixed})")
        return None

    def sqs_queue(self, t: Token) -> str | None:
        """A queue name (``[A-Za-z0-9_-]{1,80}``, ``.fifo`` allowed) or its http(s) URL."""
        v = t.value
        if re.fullmatch(r"https?://[^\s/]+/\S+", v) or _SQS_NAME.fullmatch(v):
            return v
        fixed = re.sub(r"[^A-Za-z0-9_-]", "_", v.rsplit("/", 1)[-1])[:80] or "orders"
        self.error(_value_at(t), f"bad SQS queue '{v}'", f"write a queue name of letters, digits, - and _ (e.g. queue={fixed}) or the queue's https:// URL")
        return None

    def mqtt_topic(self, t: Token) -> str | None:
        """An MQTT topic filter: ``+`` only as a whole level, ``#`` only as the whole last level (MQTT 3.1.1/5 §4.7)."""
        v = t.value
        levels = v.split("/")
        if v and all(lv in ("+", "#") or not ("+" in lv or "#" in lv) for lv in levels) and "#" not in levels[:-1]:
            return v
        fixed = "/".join("+" if "+" in lv else ("#" if "#" in lv else lv) for lv in levels)
        fixed = fixed.split("#", 1)[0] + "#" if "#" in fixed else fixed
        self.error(_value_at(t), f"bad MQTT topic filter '{v}'", f"'+' stands for one whole level and '#' only for the whole last one, e.g. topic={fixed or 'shop/orders'}")
        return None

    def nats_subject(self, t: Token) -> str | None:
        """A NATS subject: tokens split by ``.``, ``*`` only as a whole token, ``>`` only as the whole last one."""
        v = t.value
        tokens = v.split(".")
        if all(tk and (tk in ("*", ">") or not ("*" in tk or ">" in tk)) for tk in tokens) and ">" not in tokens[:-1]:
            return v
        fixed = ".".join("*" if "*" in tk else (">" if ">" in tk else tk) for tk in tokens if tk)
        fixed = fixed.split(">", 1)[0] + ">" if ">" in fixed else fixed
        self.error(_value_at(t), f"bad NATS subject '{v}'", f"write tokens split by '.', '*' for one whole token and '>' only for the whole last one, e.g. subject={fixed or 'orders.created'}")
        return None

    def nats_stream(self, t: Token) -> str | None:
        """A JetStream stream name (no '.', '*', '>', '/' or spaces: letters, digits, - and _)."""
        if _NATS_STREAM.fullmatch(t.value):
            return t.value
        fixed = re.sub(r"[^A-Za-z0-9_-]", "_", t.value) or "ORDERS"
        self.error(_value_at(t), f"bad JetStream stream name '{t.value}'", f"use letters, digits, - and _ only, e.g. stream={fixed}")
        return None

    def pg_table(self, t: Token) -> str | None:
        """``<schema>.<table>``: plain lower-case identifiers (what PostgreSQL folds an unquoted name to)."""
        if _PG_TABLE.fullmatch(t.value):
            return t.value
        name = t.value.rsplit(".", 1)[-1].lower()
        fixed = re.sub(r"[^a-z0-9_]", "_", name) or "orders"
        self.error(_value_at(t), f"bad table '{t.value}'", f"write <schema>.<table> in lower case, e.g. table=public.{fixed}")
        return None

    def change_events(self, t: Token) -> tuple[str, ...] | None:
        """``insert,update,delete`` or a part of it."""
        given = [e for e in t.value.split(",")]
        bad = [e for e in given if e not in ("insert", "update", "delete")]
        if not bad and given and len(set(given)) == len(given):
            return tuple(e for e in ("insert", "update", "delete") if e in given)
        guess = did_you_mean(bad[0], ("insert", "update", "delete")) if bad else None
        self.error(_value_at(t), f"bad events '{t.value}'", f"did you mean '{guess}'?" if guess else "write a comma list of insert, update, delete, e.g. events=insert,update")
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


_HOOK_NAME = re.compile(r"[a-z0-9_]+")
_MAILBOX = re.compile(r"[a-z0-9][a-z0-9._-]*")
_SQS_NAME = re.compile(r"[A-Za-z0-9_-]{1,80}(\.fifo)?")
_CONNECTION = re.compile(r"[A-Za-z0-9_]+")
_NATS_STREAM = re.compile(r"[A-Za-z0-9_-]{1,255}")
_PG_TABLE = re.compile(r"[a-z_][a-z0-9_]*\.[a-z_][a-z0-9_]*")


def _options_fix(allowed: Mapping[str, object], flags: tuple[str, ...], what: str) -> str:
    names = [f"{k}=" for k in allowed] + list(flags)
    return f"{what + ' takes ' if what else 'allowed: '}{', '.join(names)}" if names else f"{what or 'this annotation'} takes no arguments"
