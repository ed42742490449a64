"""Test types as scripts: the ``test_type`` line that declares one, and ``data_test <type> <args>`` that uses one.

A header says ``-- test_type rows_between min:int max:int``; a step says
``-- data_test rows_between 100 5000``. Parsing only records what is written:
which types exist and what they declare is known across files, so the plan
(``lineage_defs.plan.test_types``) binds each use to its type.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from lineage_defs.errors import AnnotationError, Location
from lineage_defs.parse.line import _Builder, _Line
from lineage_defs.parse.model import PARAM_TYPES, DataTest, Language, Severity, TestArg, TestKind, TestParam, TestTypeDecl
from lineage_defs.parse.tokens import _IDENT, Token

BUILT_IN = ("unique", "not_null", "accepted_values", "relationships", "row_count")
# Names a parameter cannot take: the use's own option, and the partition parameters every test may read.
PARTITION_PARAMS = ("partition", "partition_start", "partition_end")
RESERVED_PARAMS = ("severity", *PARTITION_PARAMS)
# The annotations a test type script may carry besides its `test_type` line.
ALLOWED_WITH = ("test_type", "dialect")


def test_type_line(ln: _Line, args: list[Token]) -> None:
    """``test_type <name> <param>[:<type>]...``."""
    if "test_type" in ln.b.seen:
        ln.error(ln.tokens[0], f"'test_type' given twice (first on line {ln.b.seen['test_type']})", "one script declares one test type: keep one line")
        return
    ln.b.seen["test_type"] = ln.cl.line
    if ln.b.language not in (Language.DUCKDB, Language.PYTHON):
        ln.error(ln.tokens[0], "a test type is a DuckDB .sql script or a Python .py script", "rename the file to .sql (a SELECT of the failing rows) or .py (a check() returning the failing count)")
        return
    if not args or args[0].key is not None or not _IDENT.match(args[0].text):
        ln.error(args[0] if args else None, "'test_type' needs a name", "write e.g. test_type rows_between min:int max:int")
        return
    name_tok = args[0]
    if name_tok.text in BUILT_IN:
        ln.error(name_tok, f"'{name_tok.text}' is a built-in data_test", "give the test type another name")
        return
    params: list[TestParam] = []
    for t in args[1:]:
        p = _param(ln, t)
        if p is None:
            return
        if any(q.name == p.name for q in params):
            ln.error(t, f"parameter '{p.name}' declared twice", "give each parameter its own name")
            return
        params.append(p)
    ln.b.values["test_type"] = TestTypeDecl(name_tok.text, tuple(params), ln.loc(name_tok.start, len(name_tok.text)))


def _param(ln: _Line, t: Token) -> TestParam | None:
    name, colon, typ = t.text.partition(":")
    if t.key is not None or not _IDENT.match(name):
        ln.error(t, f"bad parameter '{t.text}'", f"write <name> or <name>:<type>, the type one of {'|'.join(PARAM_TYPES)}, e.g. min:int")
        return None
    if name in RESERVED_PARAMS:
        ln.error(Token(name, t.start), f"'{name}' cannot name a parameter", f"{'severity= is the use’s own option' if name == 'severity' else '$' + name + ' is the partition parameter'}: choose another name")
        return None
    if colon and typ not in PARAM_TYPES:
        from lineage_defs.errors import did_you_mean

        guess = did_you_mean(typ, PARAM_TYPES)
        ln.error(Token(typ or ":", t.start + len(name) + 1), f"unknown parameter type '{typ}'", f"did you mean '{guess}'?" if guess else f"use one of {'|'.join(PARAM_TYPES)} (no type: text)")
        return None
    return TestParam(name, typ if colon else "text")


def type_use(ln: _Line, kind_tok: Token, rest: list[Token], sev_opts: Mapping[str, Callable[[Token], object | None]]) -> None:
    """``data_test <type> <arg>... [<param>=<arg>]... [severity=]``: arguments kept as written, bound by the plan."""
    if kind_tok.key is not None or not _IDENT.match(kind_tok.text):
        ln.error(kind_tok, f"unknown data_test '{kind_tok.text}'", "use unique, not_null, accepted_values, relationships, row_count, a test type's name or a .sql script path")
        return
    args: list[TestArg] = []
    severity = "error"
    named = False
    for t in rest:
        if t.unterminated:
            ln.error(t, "unterminated quote", 'close the value with "')
            return
        if t.key == "severity":
            sev = sev_opts["severity"](t)
            if sev is None:
                return
            severity = str(sev)
            continue
        if t.key is not None:
            named = True
            args.append(TestArg(t.value, t.key, ln.loc(t.start, len(t.text))))
        elif named:
            ln.error(t, "a positional argument after a named one", f"write the positional arguments first, or name this one too: <param>={t.text}")
            return
        else:
            args.append(TestArg(t.value, None, ln.loc(t.start, len(t.text))))
    ln.b.add("tests", DataTest(TestKind.TYPE, type_name=kind_tok.text, args=tuple(args), severity=Severity(severity), at=ln.loc(kind_tok.start, len(kind_tok.text))))


def not_an_asset(b: _Builder) -> None:
    """A test type script declares only its test type: any asset annotation is an error at its line."""
    if "test_type" not in b.values:
        return
    for item in b.lists.get("annotation_words", ()):
        word, at = item if isinstance(item, tuple) else ("", None)
        if word and word not in ALLOWED_WITH:
            b.errors.append(AnnotationError(
                f"'{word}' in a test_type script: a test type is not an asset",
                at if isinstance(at, Location) else None,
                "remove this line (a test type only declares 'test_type'), or move the step into its own script",
            ))


class BadArgument(ValueError):
    """An argument that does not convert to its parameter's declared type; ``fix`` says what to write."""

    def __init__(self, message: str, fix: str) -> None:
        super().__init__(message)
        self.fix = fix


def convert(typ: str, text: str) -> object:
    """An argument's value as its declared type: what the test's SQL gets as a bound parameter.

    >>> convert("int", "-12"), convert("float", "2.5"), convert("bool", "true"), convert("date", "2025-01-31")
    (-12, 2.5, True, datetime.date(2025, 1, 31))
    >>> convert("text", "x'; DROP TABLE t; --")
    "x'; DROP TABLE t; --"
    """
    import datetime as dt
    import math
    import re

    if typ == "int":
        if re.fullmatch(r"[+-]?[0-9]+", text):
            return int(text)
        raise BadArgument(f"'{text}' is not an int", "write a whole number, e.g. 100")
    if typ == "float":
        try:
            value = float(text)
        except ValueError:
            value = math.nan
        if re.fullmatch(r"[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?", text) and math.isfinite(value):
            return value
        raise BadArgument(f"'{text}' is not a float", "write a number, e.g. 0.5 or 1e6")
    if typ == "bool":
        if text.lower() in ("true", "false"):
            return text.lower() == "true"
        raise BadArgument(f"'{text}' is not a bool", "write true or false")
    if typ == "date":
        try:
            if len(text) == 10:
                return dt.date.fromisoformat(text)
        except ValueError:
            pass
        raise BadArgument(f"'{text}' is not a date", "write YYYY-MM-DD, e.g. 2025-01-31")
    return text
