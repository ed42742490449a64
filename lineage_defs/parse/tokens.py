"""Annotation lines as tokens: keywords, `k=v` options, quoted values, durations.

Pure helpers shared by the line context (``line.py``) and the keyword handlers
(``grammar.py``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from lineage_defs import uris
from lineage_defs.errors import did_you_mean

KEYWORDS = (
    "pipeline", "on", "mute", "trigger", "debounce", "partitioned", "materialize",
    "data_test", "column", "macros", "use", "freshness", "retry", "tag", "owner",
    "pool", "dialect", "breaking", "hook", "on_failure", "on_success", "on_recovery", "test_type",
)
ALIASES = {"test": "data_test", "unique_key": "unique_key", "append": "append"}
PARTITION_KINDS = ("daily", "hourly", "weekly", "monthly", "dynamic")
_DURATION = re.compile(r"^([0-9]+(?:\.[0-9]+)?)(s|m|h|d)?\Z")  # ASCII: \d also takes '٣'
_UNITS = {None: 1, "s": 1, "m": 60, "h": 3600, "d": 86400}
# A quote left open runs to the end of the line (one token, flagged) instead of
# splitting into words that each get their own confusing error.
_QUOTED = r'"(?:[^"\\]|\\.)*(?:"|\\?$)'
_TOKEN = re.compile(rf'(?P<opt>[A-Za-z_][\w-]*=(?:{_QUOTED}|[^\s"]*))|(?P<q>{_QUOTED})|(?P<w>\S+)')
_CLOSED = re.compile(r'"(?:[^"\\]|\\.)*"')
_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*\Z")
_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.\-]*\Z")
_EMAIL = re.compile(r"^[^@\s]+@[^@\s]+\.[^@\s]+\Z")
_URI_HINT = re.compile(r"\b(?:" + "|".join(uris.KINDS) + r")://")
_PARTITION_FROM = re.compile(r"^(timestamp|key|header:[^\s]+|json:\$[^\s]*)\Z")


@dataclass(frozen=True)
class Token:
    text: str  # as written (quotes included)
    start: int  # 0-based offset in the annotation content
    key: str | None = None  # for k=v options
    value: str = ""  # unquoted value (or the word itself)
    unterminated: bool = False  # a quote opened and never closed

    @property
    def end(self) -> int:
        return self.start + len(self.text)


def tokenize(content: str) -> list[Token]:
    out = []
    for m in _TOKEN.finditer(content):
        text = m.group(0)
        if m.lastgroup == "opt":
            k, _, v = text.partition("=")
            out.append(Token(text, m.start(), k, _unquote(v), _open_quote(v)))
        elif m.lastgroup == "q":
            out.append(Token(text, m.start(), None, _unquote(text), _open_quote(text)))
        else:
            out.append(Token(text, m.start(), None, text))
    return out


def _open_quote(v: str) -> bool:
    return v.startswith('"') and not _CLOSED.fullmatch(v)


def _value_at(t: Token) -> Token:
    """The value part of ``k=v`` / ``k="v"`` (or a bare word), positioned for a caret."""
    if t.key is None:
        raw, start = t.text, t.start
    else:
        raw, start = t.text[len(t.key) + 1 :], t.start + len(t.key) + 1
    if raw.startswith('"'):
        inner = raw[1:-1] if not t.unterminated else raw[1:]
        return Token(inner or raw, start + 1 if inner else start, t.key, t.value)
    return Token(raw, start, t.key, t.value)


def _unquote(v: str) -> str:
    if not _open_quote(v) and len(v) >= 2 and v[0] == '"' and v[-1] == '"':
        return re.sub(r"\\(.)", r"\1", v[1:-1])
    return v


def parse_duration(text: str) -> float | None:
    """Seconds for ``30``, ``30s``, ``5m``, ``2h``, ``1d``; None if malformed."""
    m = _DURATION.match(text)
    if not m:
        return None
    return float(m.group(1)) * _UNITS[m.group(2)]


def is_annotation(content: str) -> bool:
    """True when a comment line is (or tries to be) an annotation, not prose."""
    first = content.split(None, 1)[0] if content.strip() else ""
    if first == "breaking":  # `breaking ok <column>`; prose may begin with the word
        return content.split()[1:2] == ["ok"]
    if first in KEYWORDS or first in ALIASES:
        return True
    # `materialize=…`, `pipeline:` — a keyword glued to '=' or ':' must not vanish into prose
    glued = re.match(r"([a-z_]+)[=:]", first)
    if glued and (glued.group(1) in KEYWORDS or glued.group(1) in ALIASES):
        return True
    if not re.fullmatch(r"[a-z_]+", first):
        return False
    rest = content[len(first):]
    if len(first) >= 4 and did_you_mean(first, (*KEYWORDS, *ALIASES), cutoff=0.8):
        return True
    return bool(re.search(r"(^|\s)[a-z_]+=", rest) or _URI_HINT.search(rest))
