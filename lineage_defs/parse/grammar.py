"""The annotation grammar (SPEC section 2): comment lines → a frozen ``Header``.

Strict: an unknown keyword, option or value, or a malformed line, is an
``AnnotationError`` with ``file:line:col``, the quoted line, a caret and a fix.
``parse_header`` collects every error of a file instead of stopping at the first.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Callable, Mapping
from dataclasses import replace

from lineage_defs.errors import AnnotationError, Location, did_you_mean
from lineage_defs.uris import Kind, kind_of
from lineage_defs.parse.header import leading_comments
from lineage_defs.parse.hooks import HANDLERS as HOOK_HANDLERS
from lineage_defs.parse.line import _Builder, _Line
from lineage_defs.parse.tokens import (
    _IDENT,
    _NAME,
    ALIASES,
    KEYWORDS,
    PARTITION_KINDS,
    _CLOSED,
    Token,
    _unquote,
    _value_at,
    is_annotation,
)
from lineage_defs.parse.model import (
    COLUMN_KINDS,
    Cascade,
    ColumnDecl,
    ColumnSource,
    DataTest,
    Freshness,
    Header,
    Language,
    Materialize,
    PartitionKind,
    Partitioning,
    Retry,
    Schedule,
    Severity,
    TestKind,
    Upstream,
)
from lineage_defs.parse.test_type import not_an_asset, test_type_line, type_use
from lineage_defs.triggers.source import BadValue, Check, Source
from lineage_defs.triggers import sources




# ---------------------------------------------------------------------------
# one handler per keyword


def _pipeline(ln: _Line, args: list[Token]) -> None:
    if args:
        ln.error(args[0], "'pipeline' takes no arguments", "the pipeline is the script's folder; remove the rest")
    ln.b.values["pipeline"] = True


def _macros(ln: _Line, args: list[Token]) -> None:
    if args:
        ln.error(args[0], "'macros' takes no arguments", "remove the rest of the line")
    if ln.b.language is not Language.DUCKDB:
        ln.error(Token("macros", 0), "'macros' is for DuckDB SQL scripts", "move the macros into a .sql file")
    ln.b.values["macros"] = True


def _on(ln: _Line, args: list[Token]) -> None:
    kinds = ("schedule", *_keywords())
    if not args:
        ln.error(None, f"'on' needs an asset URI, {', '.join(repr(k) for k in kinds[:-1])} or {kinds[-1]!r}", "write e.g. on ducklake://main/orders")
        return
    head, rest = args[0], args[1:]
    if head.text == "schedule":
        o = ln.options(rest, {"cron": ln.text, "tz": ln.tz}, what="on schedule")
        if o is None:
            return
        cron = o.get("cron")
        if not cron:
            ln.error(None, "'on schedule' needs cron=", 'write on schedule cron="0 6 * * *"')
            return
        if not _valid_cron(str(cron)):
            tok = next(t for t in rest if t.key == "cron")
            ln.error(_value_at(tok), f"bad cron expression '{cron}'", 'write five fields, e.g. cron="0 6 * * *"')
            return
        ln.b.add("schedules", Schedule(str(cron), o.get("tz"), ln.loc()))  # type: ignore[arg-type]
    elif head.text in sources.BY_KEYWORD:
        trigger = _source_line(ln, sources.BY_KEYWORD[head.text], rest)
        if trigger is not None:
            ln.b.add("events", trigger)
    else:
        if head.key is not None or "://" not in head.text:
            guess = did_you_mean(head.text, kinds)
            if guess:
                ln.error(head, f"unknown trigger '{head.text}'", f"did you mean '{guess}'?")
                return
        uri = ln.uri(head)
        o = ln.options(rest, {"debounce": ln.duration}, what="on <uri>")
        if uri and o is not None:
            ln.b.add("upstreams", Upstream(uri, o.get("debounce"), ln.loc(head.start, len(head.text))))  # type: ignore[arg-type]


def _keywords() -> tuple[str, ...]:
    """The trigger sources' keywords, in the order messages list them (the table's)."""
    return tuple(s.keyword for s in sources.SOURCES)


def _source_line(ln: _Line, source: Source, rest: list[Token]) -> object | None:
    """An ``on <source> …`` line → its record, checked against the source's row (``triggers.sources``);
    None once an error is reported. Every source takes partition_from=, a pull source max_batch= too."""
    checks: dict[str, Callable[[Token], object | None]] = {o.name: _check(ln, o.check) for o in source.options}
    checks["partition_from"] = ln.partition_from
    if source.pull:
        checks["max_batch"] = ln.integer
    o = ln.options(rest, checks, what=f"on {source.keyword}")
    if o is None:
        return None
    for opt in source.options:
        if opt.required and opt.name not in o:
            if opt.missing:
                ln.error(None, opt.missing[0].format(**o), opt.missing[1].format(**o))
            else:
                ln.error(None, f"'on {source.keyword}' needs {opt.name}=", f"write on {source.keyword} {opt.name}={opt.example}")
            return None
    values = {opt.name: o.get(opt.name, opt.default) for opt in source.options}
    values["partition_from"] = o.get("partition_from")
    if source.pull:
        values["max_batch"] = o.get("max_batch")
    return source.record(**values, at=ln.loc())


def _check(ln: _Line, steps: tuple[str | Check, ...]) -> Callable[[Token], object | None]:
    """An option's checks as one: the line's shared ones by name, a source's own reported at the value."""

    def check(t: Token) -> object | None:
        value: object = t.value
        for step in steps:
            if isinstance(step, str):
                value = getattr(ln, step)(t)
            else:
                try:
                    value = step(t.value)
                except BadValue as e:
                    ln.error(_value_at(t), e.message, e.fix)
                    return None
            if value is None:
                return None
        return value

    return check


def _valid_cron(cron: str) -> bool:
    if cron.startswith("@"):
        return cron in ("@hourly", "@daily", "@weekly", "@monthly", "@yearly", "@midnight", "@annually")
    fields = cron.split()
    return len(fields) == 5 and all(re.fullmatch(r"[\d*/,\-A-Za-z?LW#]+", f) for f in fields)


def _mute(ln: _Line, args: list[Token]) -> None:
    if len(args) == 1 and args[0].text == "all":
        ln.b.values["mute_all"] = True
        return
    if len(args) > 1:
        ln.error(args[1], "'mute' takes one URI", "write one mute line per asset")
        if args[0].text == "all":
            return
    uri = ln.uri(args[0] if args else None)
    if uri:
        ln.b.add("mutes", uri)


def _singleton(ln: _Line, name: str) -> bool:
    if name in ln.b.seen:
        ln.error(Token(ln.tokens[0].text, ln.tokens[0].start), f"'{name}' given twice (first on line {ln.b.seen[name]})", "keep one")
        return False
    ln.b.seen[name] = ln.cl.line
    return True


def _trigger(ln: _Line, args: list[Token]) -> None:
    if not _singleton(ln, "trigger"):
        return
    if len(args) != 1:
        ln.error(args[1] if args else None, "'trigger' takes one of any|all|manual", "write e.g. trigger all")
        return
    v = ln.choice(tuple(Cascade))(args[0])
    if v:
        ln.b.values["trigger"] = Cascade(v)


def _debounce(ln: _Line, args: list[Token]) -> None:
    if not _singleton(ln, "debounce"):
        return
    if len(args) != 1:
        ln.error(args[1] if args else None, "'debounce' takes one duration", "write e.g. debounce 5m")
        return
    d = ln.duration(args[0])
    if d is not None:
        ln.b.values["debounce"] = d


def _partitioned(ln: _Line, args: list[Token]) -> None:
    if not _singleton(ln, "partitioned"):
        return
    if not args or args[0].key is not None:
        ln.error(args[0] if args else None, "'partitioned' needs daily|hourly|weekly|monthly|dynamic", "write e.g. partitioned daily start=2024-01-01")
        return
    chosen = ln.choice(PARTITION_KINDS)(args[0])
    if chosen is None:
        return
    kind = PartitionKind(chosen)
    if kind is PartitionKind.DYNAMIC:
        o = ln.options(args[1:], {"key": ln.text, "time_column": ln.column, "batch": ln.integer}, what="partitioned dynamic")
        if o is None:
            return
        for opt in ("time_column", "batch"):
            tok = next((t for t in args if t.key == opt), None)
            if tok is not None:
                ln.error(Token(tok.key or "", tok.start), f"'{opt}=' needs time partitions: dynamic partitions have no time window", f"drop {opt}=, or partition by time (daily|hourly|weekly|monthly)")
                return
        key = o.get("key")
        if not key or not str(key).startswith("$"):
            tok = next((t for t in args if t.key == "key"), None)
            ln.error(tok and _value_at(tok), "'partitioned dynamic' needs key=\"$.json.path\"", 'write partitioned dynamic key="$.region"')
            return
        ln.b.values["partitioned"] = Partitioning(PartitionKind.DYNAMIC, key=str(key), at=ln.loc())
        return

    def start(t: Token) -> str | None:
        try:
            dt.date.fromisoformat(t.value)
            if len(t.value) == 10:
                return t.value
        except ValueError:
            pass
        ln.error(_value_at(t), f"bad start date '{t.value}'", "write start=YYYY-MM-DD")
        return None

    def fmt(t: Token) -> str | None:
        try:
            sample = dt.datetime(2024, 3, 7, 5).strftime(t.value)
            if dt.datetime.strptime(sample, t.value) and "%" in t.value:
                return t.value
        except (ValueError, re.error):  # strptime compiles the format: `%d…%d` is a regex error
            pass
        ln.error(_value_at(t), f"bad partition key format '{t.value}'", "write a strftime format, e.g. format=%Y%m%d")
        return None

    def batch(t: Token) -> int | None:
        n = ln.integer(t)
        if n == 0:
            ln.error(_value_at(t), "batch=0 runs no partition", "write batch=<n> with n ≥ 1 partitions per batch, or drop it for the whole range")
            return None
        return n

    o = ln.options(args[1:], {"tz": ln.tz, "format": fmt, "start": start, "time_column": ln.column, "batch": batch}, what=f"partitioned {kind}")
    if o is None:
        return
    if "batch" in o and "time_column" not in o:
        tok = next(t for t in args if t.key == "batch")
        ln.error(Token(tok.text, tok.start), "'batch=' needs time_column=", "add time_column=<the rows' timestamp column> so a range can run set-based, or drop batch=")
        return
    ln.b.values["partitioned"] = Partitioning(
        kind, o.get("tz"), o.get("format"), o.get("start"), time_column=o.get("time_column"), batch=o.get("batch"), at=ln.loc()  # type: ignore[arg-type]
    )


def _materialize(ln: _Line, args: list[Token]) -> None:
    if not _singleton(ln, "materialize"):
        return
    mode = None
    if args and args[0].key is None and "://" not in args[0].text:
        if args[0].text in ("manual", "scd2"):
            mode, args = args[0].text, args[1:]
        else:
            guess = did_you_mean(args[0].text, ("manual", "scd2"))
            if guess:
                ln.error(args[0], f"unknown mode '{args[0].text}'", f"did you mean '{guess}'?")
                return
    if not args or args[0].key is not None:
        ln.error(args[0] if args else None, "'materialize' needs the asset URI it writes", "write e.g. materialize ducklake://main/orders")
        return
    uri_tok = args[0]
    uri = ln.uri(uri_tok)
    o = ln.options(
        args[1:],
        {
            "key": ln.columns,
            "track": ln.columns,
            "updated_at": ln.column,
            "deletes": ln.choice(("close", "ignore")),
            "on_schema_change": ln.choice(("warn", "ignore", "fail", "sync")),
        },
        flags=("append", "history"),
        what="materialize",
    )
    if uri is None or o is None:
        return
    history = bool(o.get("history")) or mode == "scd2"
    m = Materialize(
        uri,
        manual=mode == "manual",
        key=o.get("key", ()),  # type: ignore[arg-type]
        append=bool(o.get("append")),
        history=history,
        track=o.get("track", ()),  # type: ignore[arg-type]
        updated_at=o.get("updated_at"),  # type: ignore[arg-type]
        deletes=str(o.get("deletes", "close")),
        on_schema_change=str(o.get("on_schema_change", "warn")),
        at=ln.loc(uri_tok.start, len(uri_tok.text)),
    )
    for opt in ("track", "updated_at", "deletes"):
        if opt in o and not history:
            tok = next(t for t in args if t.key == opt)
            ln.error(tok, f"'{opt}=' only applies to history (scd2) targets", "add 'history' or write 'materialize scd2 <uri>'")
    if m.track and m.updated_at:
        tok = next(t for t in args if t.key == "updated_at")
        ln.error(tok, "'track=' and 'updated_at=' are two ways to detect changes", "keep one")
    if m.manual and (m.key or m.append or m.history):
        ln.error(args[0], "a manual target is written by the script itself", "drop key=/append/history, or drop 'manual' for a managed write")
    if kind_of(uri) == Kind.DBT:
        ln.error(uri_tok, "dbt models are built by dbt, not by scripts", "materialize a ducklake://, duckdb://, datatable:// or s3:// asset")
    ln.b.values["materialize"] = m


def _data_test(ln: _Line, args: list[Token]) -> None:
    if not args:
        ln.error(None, "'data_test' needs a test", "write unique|not_null|accepted_values|relationships|row_count or a script path")
        return
    kind_tok, rest = args[0], args[1:]
    kind = kind_tok.text
    sev_opts = {"severity": ln.choice(tuple(Severity))}
    if kind in ("unique", "not_null"):
        cols = [t for t in rest if t.key is None]
        if len(cols) != 1 or not _IDENT.match(cols[0].text):
            ln.error(cols[1] if len(cols) > 1 else (cols[0] if cols else None), f"'data_test {kind}' takes one column name", f"write data_test {kind} order_id")
            return
        o = ln.options([t for t in rest if t.key is not None], sev_opts, what=f"data_test {kind}")
        if o is not None:
            ln.b.add("tests", DataTest(TestKind(kind), column=cols[0].text, severity=Severity(str(o.get("severity", "error"))), at=ln.loc(kind_tok.start, len(kind_tok.text))))
    elif kind == "accepted_values":
        _accepted_values(ln, kind_tok)
    elif kind == "relationships":
        _relationships(ln, kind_tok, rest, sev_opts)
    elif kind == "row_count":
        o = ln.options(rest, {"min": ln.integer, "max": ln.integer, **sev_opts}, what="data_test row_count")
        if o is None:
            return
        if "min" not in o and "max" not in o:
            ln.error(kind_tok, "'data_test row_count' needs min= or max=", "write data_test row_count min=1")
            return
        if "min" in o and "max" in o and o["min"] > o["max"]:  # type: ignore[operator]
            ln.error(kind_tok, "row_count min= is above max=", "swap them")
            return
        ln.b.add("tests", DataTest(TestKind.ROW_COUNT, min=o.get("min"), max=o.get("max"), severity=Severity(str(o.get("severity", "error"))), at=ln.loc(kind_tok.start, len(kind_tok.text))))  # type: ignore[arg-type]
    elif kind.endswith(".sql") and kind_tok.key is None:
        o = ln.options(rest, sev_opts, what="a custom data_test")
        if o is not None:
            ln.b.add("tests", DataTest(TestKind.CUSTOM, script=kind, severity=Severity(str(o.get("severity", "error"))), at=ln.loc(kind_tok.start, len(kind_tok.text))))
    else:  # a test type's name: bound to its `test_type` script by the plan (unknown names are reported there)
        type_use(ln, kind_tok, rest, sev_opts)


def _accepted_values(ln: _Line, kind_tok: Token) -> None:
    content = ln.cl.content
    m = re.match(r"\s*([A-Za-z_]\w*)\s*=\s*(.*)$", content[kind_tok.end:])
    if not m:
        ln.error(Token(content[kind_tok.end:].strip() or kind_tok.text, kind_tok.end + 1), "'data_test accepted_values' needs <column> = <values>", 'write data_test accepted_values status = placed,shipped,"on hold"')
        return
    col, rest = m.group(1), m.group(2)
    rest_start = kind_tok.end + m.start(2)
    severity = "error"
    sev = re.search(r"\s+severity=(\S+)\s*$", rest)
    if sev:
        if sev.group(1) not in ("warn", "error"):
            ln.error(Token(sev.group(1), rest_start + sev.start(1)), f"bad value '{sev.group(1)}'", "use one of warn|error")
            return
        severity, rest = sev.group(1), rest[: sev.start()]
    values = []
    pos = 0
    for vm in re.finditer(r'\s*("(?:[^"\\]|\\.)*"|[^,"]*)\s*(,|$)', rest):
        if vm.start() != pos or (vm.group(0) == "" and pos < len(rest)):
            break
        raw = vm.group(1).strip()
        if not raw:
            ln.error(Token(rest[vm.start():] or ",", rest_start + vm.start()), "empty value in accepted_values", 'remove the extra comma, or quote an empty string as ""')
            return
        values.append(_unquote(raw))
        pos = vm.end()
        if vm.group(2) == "":
            break
    if pos < len(rest) and rest[pos:].lstrip().startswith('"') and not _CLOSED.match(rest[pos:].lstrip()):
        q = len(rest) - len(rest[pos:].lstrip())
        ln.error(Token(rest[q:], rest_start + q), "unterminated quote", 'close the value with "')
        return
    if pos < len(rest):
        ln.error(Token(rest[pos:], rest_start + pos), "malformed value list", 'separate values with commas and quote values with spaces: a,"b c"')
        return
    ln.b.add("tests", DataTest(TestKind.ACCEPTED_VALUES, column=col, values=tuple(values), severity=Severity(severity), at=ln.loc(kind_tok.start, len(kind_tok.text))))


def _split_column_ref(ln: _Line, tok: Token) -> tuple[str, str] | None:
    """``<uri>.<col>`` → (uri, col); the column is after the last '.' of the last path part."""
    text = tok.value.rstrip(",")
    head, dot, col = text.rpartition(".")
    if not dot or "/" in col or not _IDENT.match(col) or "://" not in head:
        ln.error(tok, f"'{text}' is not <asset-uri>.<column>", "write e.g. ducklake://main/customers.customer_id")
        return None
    uri = ln.uri(Token(head, tok.start, None, head))
    return (uri, col) if uri else None


def _off_shape(toks: list[Token], arrow: str, many: bool = False) -> Token | None:
    """The first token that breaks ``<column> <arrow> <ref>`` (None: the line ends too early)."""
    if not toks or not _IDENT.match(toks[0].text):
        return toks[0] if toks else None
    if len(toks) < 2 or toks[1].text != arrow:
        return toks[1] if len(toks) > 1 else None
    return toks[3] if len(toks) > 3 and not many else None


def _relationships(ln: _Line, kind_tok: Token, rest: list[Token], sev_opts: Mapping[str, Callable[[Token], object | None]]) -> None:
    words = [t for t in rest if t.key is None]
    if len(words) != 3 or words[1].text != "->" or not _IDENT.match(words[0].text):
        ln.error(_off_shape(words, "->"), "'data_test relationships' needs <column> -> <asset-uri>.<column>", "write data_test relationships customer_id -> ducklake://main/customers.customer_id")
        return
    ref = _split_column_ref(ln, words[2])
    o = ln.options([t for t in rest if t.key is not None], sev_opts, what="data_test relationships")
    if ref and o is not None:
        ln.b.add("tests", DataTest(TestKind.RELATIONSHIPS, column=words[0].text, ref_uri=ref[0], ref_column=ref[1], severity=Severity(str(o.get("severity", "error"))), at=ln.loc(words[2].start, len(words[2].text))))


def _column(ln: _Line, args: list[Token]) -> None:
    """``column <out> <- <uri>.<col>[, <uri>.<col>…] [copy|mod]``: declared lineage of one output column.

    The kind is a last bare word (default ``mod``); an output may take several lines (``_column_repeats``).
    """
    shape = "'column' needs <output> <- <asset-uri>.<column>[, ...] [copy|mod]"
    example = "write column total <- ducklake://main/orders.amount"
    if len(args) < 3 or args[1].text != "<-" or not _IDENT.match(args[0].text):
        ln.error(_off_shape(args, "<-", many=True), shape, example)
        return
    words, kind = args[2:], COLUMN_KINDS[0]
    keyed = next((t for t in words if t.key is not None), None)
    if keyed is not None:
        ln.error(keyed, f"'column' takes no options ('{keyed.key}=')", f"write the kind as the last word: column {args[0].text} <- <asset-uri>.<column> copy")
        return
    last = words[-1]
    if re.fullmatch(r"[A-Za-z_]+", last.text):  # a bare last word is the kind (a source has '://' and '.')
        if last.text not in COLUMN_KINDS:
            kinds = "write copy (the value passes through unchanged) or mod (computed from the source; the default)"
            if last.text == "scan":
                ln.error(last, "a 'scan' edge cannot be declared: scans (filters, join keys, group by) are inferred from SQL", kinds)
            else:
                guess = did_you_mean(last.text, COLUMN_KINDS)
                ln.error(last, f"unknown kind '{last.text}'", f"did you mean '{guess}'?" if guess else kinds)
            return
        kind, words = last.text, words[:-1]
        if not words:
            ln.error(last, shape, example)
            return
    sources = []
    for t in words:
        for piece in _split_commas(t):
            ref = _split_column_ref(ln, piece)
            if ref is None:
                return
            sources.append(ColumnSource(*ref, at=ln.loc(piece.start, len(piece.text.rstrip(",")))))
    if not sources:
        ln.error(None, shape, example)
        return
    ln.b.add("columns", ColumnDecl(args[0].text, tuple(sources), ln.loc(args[0].start, len(args[0].text)), kind))


def _column_repeats(b: _Builder, decls: list[ColumnDecl]) -> None:
    """An output column may take several lines, each source once (a second kind for it would contradict the first)."""
    first: dict[tuple[str, str, str], int] = {}
    for c in decls:
        for src in c.sources:
            key = (c.output, src.uri, src.column)
            if key in first and src.at is not None:
                b.errors.append(AnnotationError(
                    f"{src.uri}.{src.column} is already a source of column '{c.output}' (line {first[key]})",
                    src.at,
                    "give each source of a column once, with one kind: remove this one",
                ))
            elif src.at is not None:
                first[key] = src.at.line


def _split_commas(t: Token) -> list[Token]:
    out, pos = [], 0
    for part in t.text.split(","):
        if part:
            out.append(Token(part, t.start + pos, None, part))
        pos += len(part) + 1
    return out


def _use(ln: _Line, args: list[Token]) -> None:
    if len(args) != 1 or not args[0].value.endswith(".sql"):
        ln.error(args[0] if args else None, "'use' takes the path of a macros .sql script", "write use macros/money.sql")
        return
    ln.b.add("uses", args[0].value)


def _freshness(ln: _Line, args: list[Token]) -> None:
    if not _singleton(ln, "freshness"):
        return
    if not args or args[0].key is not None:
        ln.error(args[0] if args else None, "'freshness' needs a duration", "write freshness 1d warn=12h")
        return
    fail = ln.duration(args[0])
    o = ln.options(args[1:], {"warn": ln.duration}, what="freshness")
    if fail is None or o is None:
        return
    warn = o.get("warn")
    if warn is not None and warn >= fail:  # type: ignore[operator]
        ln.error(next(t for t in args if t.key == "warn"), "warn= must be shorter than the freshness limit", "warn earlier than you fail, e.g. freshness 1d warn=12h")
        return
    ln.b.values["freshness"] = Freshness(fail, warn)  # type: ignore[arg-type]


def _retry(ln: _Line, args: list[Token]) -> None:
    if not _singleton(ln, "retry"):
        return
    words = [t for t in args if t.key is None]
    if not words or len(words) > 2:
        ln.error(words[2] if len(words) > 2 else None, "'retry' needs a count and an optional delay", "write retry 3 30s backoff=exponential")
        return
    n = ln.integer(words[0])
    delay = ln.duration(words[1]) if len(words) == 2 else None
    o = ln.options([t for t in args if t.key is not None], {"backoff": ln.choice(("exponential",))}, what="retry")
    if n is None or (len(words) == 2 and delay is None) or o is None:
        return
    ln.b.values["retry"] = Retry(n, delay, o.get("backoff") == "exponential")


def _simple(name: str, pattern: re.Pattern[str], example: str, singleton: bool = False, field: str = "") -> Callable[[_Line, list[Token]], None]:
    field = field or name

    def handle(ln: _Line, args: list[Token]) -> None:
        if singleton and not _singleton(ln, name):
            return
        if len(args) != 1:
            ln.error(args[1] if len(args) > 1 else None, f"'{name}' takes one value", f"write {example}")
            return
        value = args[0].text if args[0].key is not None else args[0].value  # `a=b@x.com` is one word here
        if not pattern.match(value):
            ln.error(args[0], f"bad {name} '{value}'", f"write {example}")
            return
        if singleton:
            ln.b.values[field] = value
        else:
            ln.b.add(field, value)

    return handle


def _dialect(ln: _Line, args: list[Token]) -> None:
    if not _singleton(ln, "dialect"):
        return
    if len(args) != 1:
        ln.error(args[1] if args else None, "'dialect' takes postgres or duckdb", "write dialect postgres")
        return
    v = ln.choice(("postgres", "duckdb"))(args[0])
    if v and not ln.b.language.is_sql:
        ln.error(ln.tokens[0], "'dialect' is for SQL scripts", "remove it")
    elif v:
        ln.b.language = Language(v)


def _unique_key(ln: _Line, args: list[Token]) -> None:
    if len(args) != 1:
        ln.error(args[1] if args else None, "'unique_key' takes a column list", "write unique_key order_id (or key= on materialize)")
        return
    cols = ln.columns(args[0])
    if cols:
        ln.b.alias_key = (cols, ln.loc(args[0].start, len(args[0].text)))


def _append(ln: _Line, args: list[Token]) -> None:
    if args:
        ln.error(args[0], "a lone 'append' takes no arguments", "write 'append' on its own, or the append option of materialize")
        return
    ln.b.alias_append = ln.loc()


def _breaking(ln: _Line, args: list[Token]) -> None:
    """``breaking ok <column>[,<column>…]``: ``lineage-defs diff`` accepts breaking changes of these columns."""
    if len(args) < 2 or args[0].text != "ok":
        ln.error(args[0] if args else None, "'breaking' needs ok <column>", "write breaking ok amount_eur")
        return
    for t in args[1:]:
        for piece in _split_commas(t):
            if not _IDENT.match(piece.text):
                ln.error(piece, f"'{piece.text}' is not a column name", "write breaking ok amount_eur")
                return
            ln.b.add("breaking_ok", piece.text)


_HANDLERS: dict[str, Callable[[_Line, list[Token]], None]] = {
    "pipeline": _pipeline,
    "on": _on,
    "mute": _mute,
    "trigger": _trigger,
    "debounce": _debounce,
    "partitioned": _partitioned,
    "materialize": _materialize,
    "data_test": _data_test,
    "test": _data_test,
    "column": _column,
    "macros": _macros,
    "use": _use,
    "freshness": _freshness,
    "retry": _retry,
    "tag": _simple("tag", _NAME, "tag finance", field="tags"),
    "owner": _simple("owner", re.compile(r"^(team:[A-Za-z0-9_\-]+|[^@\s]+@[^@\s]+\.[^@\s]+)\Z"), "owner data@shop.com or owner team:analytics", field="owners"),
    "pool": _simple("pool", _NAME, "pool warehouse", singleton=True),
    "dialect": _dialect,
    "unique_key": _unique_key,
    "append": _append,
    "breaking": _breaking,
    **HOOK_HANDLERS,  # hook, on_failure, on_success, on_recovery (parse.hooks)
    "test_type": test_type_line,
}


def parse_header(path: str, text: str, language: Language | str) -> tuple[Header, list[AnnotationError]]:
    """Parse one script's header; returns the header and every error found.

    >>> h, errs = parse_header("p/x.sql", "-- pipeline\\n-- materialize ducklake://main/x\\nselect 1", "duckdb")
    >>> h.materialize.uri, errs
    ('ducklake://main/x', [])
    """
    language = Language(language)
    comments, body_line = leading_comments(text, language)
    b = _Builder(path, language)
    for cl in comments:
        if not is_annotation(cl.content):
            b.prose.append(cl.content)
            continue
        ln = _Line(b, cl)
        word = ln.tokens[0]
        open_quote = next((t for t in ln.tokens if t.unterminated), None)
        if open_quote is not None:  # the rest of the line is one broken token: one error, not many
            q = len(open_quote.key) + 1 if open_quote.key else 0
            ln.error(Token(open_quote.text[q:], open_quote.start + q), "unterminated quote", 'close the value with "')
            continue
        # "pipeline=x" style: a keyword glued to an option is malformed
        if word.key is not None and word.key in _HANDLERS:
            ln.error(word, f"malformed '{word.text}'", f"write '{word.key} {word.value}'")
            continue
        handler = _HANDLERS.get(word.text)
        if handler is None:
            guess = did_you_mean(word.text, (*KEYWORDS, *ALIASES))
            ln.error(word, f"unknown annotation '{word.text}'", f"did you mean '{guess}'?" if guess else "see the annotation reference in docs/annotations.md")
            continue
        handler(ln, ln.tokens[1:])
        b.add("annotation_words", (word.text, ln.loc(word.start, len(word.text))))
    header = _freeze(b, body_line)  # may add cross-line errors (history without key, …)
    return header, sorted(b.errors, key=lambda e: (e.line, e.col))


def _no_repeats(b: _Builder, named: list[tuple[str, Location | None]], message: str, fix: str) -> None:
    """An error for each name used a second time (check names and declared columns are per asset)."""
    first: dict[str, int] = {}
    for name, at in named:
        if at is None:
            continue
        if name in first:
            b.errors.append(AnnotationError(message.format(name) + f" (first on line {first[name]})", at, fix))
        else:
            first[name] = at.line


def option_at(at: Location | None, name: str) -> Location | None:
    """Where option ``name=`` is on an annotation's line (the whole line's start if absent)."""
    if at is None:
        return None
    col = at.text.find(f" {name}=")
    if col < 0:
        return at
    return replace(at, col=col + 2, width=len(name))


def _time_column_fits(b: _Builder, part: Partitioning, mat: Materialize | None) -> None:
    """``time_column=`` makes range runs set-based: only managed partition-replace SQL steps can do that."""
    at = option_at(part.at, "time_column")
    if not b.language.is_sql:
        b.errors.append(AnnotationError("'time_column=' runs a range set-based, which only SQL steps do", at, "drop time_column= (Python and Bash steps run one partition per run)"))
    elif mat is None or mat.manual:
        b.errors.append(AnnotationError("'time_column=' needs a managed 'materialize': the runtime writes each batch", at, "write 'materialize <uri>' without manual, or drop time_column="))
    elif mat.key or mat.append:
        what = "merge (key=)" if mat.key else "append"
        b.errors.append(AnnotationError(
            f"'time_column=' batches replace whole partitions; a {what} target is written row by row",
            at,
            "drop time_column= to run partitions one by one, or drop key=/append for a partition replace",
        ))


def _freeze(b: _Builder, body_line: int) -> Header:
    v, ls = b.values, b.lists
    mat = v.get("materialize")
    if b.alias_key or b.alias_append:
        if not isinstance(mat, Materialize):
            at = (b.alias_key[1] if b.alias_key else b.alias_append)
            b.errors.append(AnnotationError("'unique_key'/'append' need a 'materialize' line", at, "add materialize <uri>, or drop this line"))
        else:
            if b.alias_key:
                if mat.key and mat.key != b.alias_key[0]:
                    b.errors.append(AnnotationError("'unique_key' disagrees with materialize key=", b.alias_key[1], "keep one of them"))
                mat = replace(mat, key=b.alias_key[0])
            if b.alias_append:
                mat = replace(mat, append=True)
    part = v.get("partitioned")
    if isinstance(mat, Materialize):
        if mat.history and not mat.key:
            b.errors.append(AnnotationError("a history (scd2) target needs key=", mat.at, "add key=<business key columns>"))
        if mat.history and part is not None:
            b.errors.append(AnnotationError("'history' cannot be combined with 'partitioned'", mat.at, "an scd2 table keeps all versions itself: drop 'partitioned', or drop history for a partitioned snapshot"))
        if b.language is Language.BASH and not mat.manual:
            b.errors.append(AnnotationError("a Bash step writes its own output", mat.at, f"write 'materialize manual {mat.uri}'"))
    if isinstance(part, Partitioning) and part.time_column:
        _time_column_fits(b, part, mat if isinstance(mat, Materialize) else None)
    tests = [t for t in ls.get("tests", ()) if isinstance(t, DataTest)]
    _no_repeats(b, [(t.name, t.at) for t in tests], "a second data_test named '{}'", "each check needs its own name: merge the two lines, or test another column")
    _column_repeats(b, [c for c in ls.get("columns", ()) if isinstance(c, ColumnDecl)])
    not_an_asset(b)
    prose = "\n".join(b.prose).strip()
    return Header(
        path=b.path,
        language=b.language,
        is_step=bool(v.get("pipeline")),
        description=prose,
        upstreams=tuple(ls.get("upstreams", ())),  # type: ignore[arg-type]
        schedules=tuple(ls.get("schedules", ())),  # type: ignore[arg-type]
        events=tuple(ls.get("events", ())),  # type: ignore[arg-type]
        mutes=tuple(ls.get("mutes", ())),  # type: ignore[arg-type]
        mute_all=bool(v.get("mute_all")),
        trigger=Cascade(str(v.get("trigger", Cascade.ANY))),
        debounce=v.get("debounce"),  # type: ignore[arg-type]
        partitioned=part,  # type: ignore[arg-type]
        materialize=mat,  # type: ignore[arg-type]
        tests=tuple(ls.get("tests", ())),  # type: ignore[arg-type]
        columns=tuple(ls.get("columns", ())),  # type: ignore[arg-type]
        is_macros=bool(v.get("macros")),
        uses=tuple(ls.get("uses", ())),  # type: ignore[arg-type]
        freshness=v.get("freshness"),  # type: ignore[arg-type]
        retry=v.get("retry"),  # type: ignore[arg-type]
        tags=tuple(ls.get("tags", ())),  # type: ignore[arg-type]
        owners=tuple(ls.get("owners", ())),  # type: ignore[arg-type]
        pool=v.get("pool"),  # type: ignore[arg-type]
        body_line=body_line,
        breaking_ok=tuple(ls.get("breaking_ok", ())),  # type: ignore[arg-type]
        is_hook="hook" in v,
        hooks=tuple(ls.get("hooks", ())),  # type: ignore[arg-type]
        hook_at=v.get("hook"),  # type: ignore[arg-type]
        test_type=v.get("test_type"),  # type: ignore[arg-type]
    )
