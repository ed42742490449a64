"""The annotation grammar (SPEC section 2): golden headers and focused unit tests.

Each ``tests/fixtures/headers/<name>.<ext>`` has a hand-written ``<name>.json``
beside it: the parsed ``Header`` as plain JSON (see ``header_to_json``).
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from lineage_defs.errors import AnnotationError, Location
from lineage_defs.parse import language_of, parse_duration, parse_header
from lineage_defs.parse.tokens import is_annotation, tokenize
from lineage_defs.parse.model import Header

HEADERS = Path(__file__).parent / "fixtures" / "headers"
SCRIPTS = sorted(p for p in HEADERS.iterdir() if p.suffix != ".json")


def _plain(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        out: dict[str, Any] = {}
        for f in dataclasses.fields(value):
            v = getattr(value, f.name)
            if isinstance(v, Location):
                out["line"] = v.line  # the rest of a Location is for error carets
            elif f.name == "at" and v is None:
                out["line"] = None
            else:
                out[f.name] = _plain(v)
        return out
    if isinstance(value, (tuple, list)):
        return [_plain(v) for v in value]
    return value


def header_to_json(header: Header) -> dict[str, Any]:
    """A Header as plain dicts/lists; top-level fields left at their default are omitted.

    Nested objects (materialize, tests, …) are rendered whole; a ``Location``
    becomes just its ``line``.
    """
    default = Header(path=header.path, language=header.language)
    out: dict[str, Any] = {}
    for f in dataclasses.fields(Header):
        v = getattr(header, f.name)
        if f.name == "events" and v:  # each trigger kind is a type: tag it
            out[f.name] = [{type(e).__name__.lower(): _plain(e)} for e in v]
        elif f.name in ("path", "language") or v != getattr(default, f.name):
            out[f.name] = _plain(v)
    return out


def _script_name(path: Path) -> str:
    return path.name


def _parse(name: str, text: str, language: str | None = None) -> tuple[Header, list[AnnotationError]]:
    return parse_header(name, text, language or language_of(name) or "duckdb")


# ---------------------------------------------------------------------------
# golden headers


def test_fixture_corpus_is_complete() -> None:
    assert len(SCRIPTS) >= 25
    for script in SCRIPTS:
        json_path = script.parent / (script.name.split(".", 1)[0] + ".json")
        assert json_path.exists(), f"{script.name} has no expected JSON"
    exts = {s.name.split(".", 1)[1] for s in SCRIPTS}
    assert {"sql", "pg.sql", "py", "sh"} <= exts


@pytest.mark.parametrize("script", SCRIPTS, ids=_script_name)
def test_golden_header(script: Path) -> None:
    expected = json.loads((script.parent / (script.name.split(".", 1)[0] + ".json")).read_text())
    # bytes: CRLF fixtures stay byte-exact; utf-8 (not -sig) keeps the BOM for the parser to handle
    text = script.read_bytes().decode("utf-8")
    header, errors = parse_header(script.name, text, language_of(script.name) or "duckdb")
    assert [e.render() for e in errors] == []
    assert header_to_json(header) == expected


def test_golden_fixtures_cover_every_annotation() -> None:
    words: set[str] = set()
    for script in SCRIPTS:
        header, _ = parse_header(script.name, script.read_text(encoding="utf-8"), language_of(script.name) or "duckdb")
        for line in script.read_text(encoding="utf-8").splitlines()[: header.body_line - 1]:
            content = line.lstrip("\ufeff \t-#/")
            if content and is_annotation(content):
                words.add(content.split()[0])
    keywords = {
        "pipeline", "on", "mute", "trigger", "debounce", "partitioned", "materialize", "data_test", "column",
        "macros", "use", "freshness", "retry", "tag", "owner", "pool", "dialect", "test", "unique_key", "append",
    }
    assert keywords <= words, keywords - words


# ---------------------------------------------------------------------------
# tokenizer


def test_tokenize_words_options_and_quotes() -> None:
    toks = tokenize('materialize ducklake://main/x key=a,b cron="0 6 * * *" "two words" tz=')
    assert [(t.text, t.start, t.key, t.value) for t in toks] == [
        ("materialize", 0, None, "materialize"),
        ("ducklake://main/x", 12, None, "ducklake://main/x"),
        ("key=a,b", 30, "key", "a,b"),
        ('cron="0 6 * * *"', 38, "cron", "0 6 * * *"),
        ('"two words"', 55, None, "two words"),
        ("tz=", 67, "tz", ""),
    ]
    assert not any(t.unterminated for t in toks)


def test_tokenize_escaped_quotes() -> None:
    (tok,) = tokenize(r'name="say \"hi\""')
    assert tok.value == 'say "hi"'
    assert not tok.unterminated
    (tok,) = tokenize(r'name="\"lead"')  # a value that starts with an (escaped) quote is still closed
    assert tok.value == '"lead' and not tok.unterminated


@pytest.mark.parametrize("content", ['cron="0 6 * * *', '"open ended', 'x="', 'x="a\\"'])
def test_tokenize_unterminated_quote_is_one_token_to_end_of_line(content: str) -> None:
    toks = tokenize(content)
    assert len(toks) == 1
    assert toks[0].unterminated
    assert toks[0].end == len(content)


# ---------------------------------------------------------------------------
# durations


@pytest.mark.parametrize(
    "text, seconds",
    [("0", 0), ("90", 90), ("30s", 30), ("5m", 300), ("2h", 7200), ("1d", 86400), ("1.5h", 5400)],
)
def test_parse_duration_units(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "5x", "2w", "-1", "1 h", "m", "5M", "1h30m", "10 minutes", "٣"])
def test_parse_duration_rejects(text: str) -> None:
    assert parse_duration(text) is None


# ---------------------------------------------------------------------------
# prose or annotation?


@pytest.mark.parametrize(
    "content",
    [
        "pipeline",
        "materialize ducklake://main/x",
        "on the other hand",  # a leading keyword wins, even in prose: reported, never dropped
        "partitoned daily",  # close typo of a keyword
        "materialise ducklake://main/x",
        "output ducklake://main/x",  # lowercase word + an asset URI
        "refresh every=5m",  # lowercase word + k=v
        "materialize=ducklake://main/x",  # keyword glued to '='
        "pipeline:",  # keyword glued to ':'
        "test unique id",
        "unique_key id",
        "append",
    ],
)
def test_is_annotation(content: str) -> None:
    assert is_annotation(content)


@pytest.mark.parametrize(
    "content",
    [
        "",
        "Daily revenue per store.",
        "Pipeline of orders",  # capitalised: prose
        "This pipeline computes x",
        "picked up by the next run.",
        "See https://example.com/docs",  # not an asset URI kind
        "TODO: fix the join",
        "note: see below",
        "key=value things",  # first word is not a keyword
        "tset unique id",  # too far from 'test' for the fuzzy match: prose
    ],
)
def test_is_prose(content: str) -> None:
    assert not is_annotation(content)


# ---------------------------------------------------------------------------
# header block


def test_block_ends_at_first_code_line() -> None:
    header, errors = _parse("x.sql", "-- pipeline\nSELECT 1\n-- materialize ducklake://main/x\n-- partitoned daily\n")
    assert errors == []
    assert header.is_step and header.materialize is None and header.body_line == 2


def test_python_docstring_is_code() -> None:
    header, errors = _parse("x.py", '"""Doc."""\n# pipeline\n')
    assert (header.is_step, header.body_line, errors) == (False, 1, [])


def test_sql_hash_comment_is_code() -> None:
    header, _ = _parse("x.sql", "# pipeline\n-- pipeline\n")
    assert not header.is_step and header.body_line == 1


def test_empty_comment_lines_separate_description_paragraphs() -> None:
    header, _ = _parse("x.sql", "-- One.\n--\n-- Two.\n-- pipeline\nSELECT 1")
    assert header.description == "One.\n\nTwo."


# ---------------------------------------------------------------------------
# errors: where, what, fix; rendered with the quoted line and a caret


def test_error_rendering_with_caret() -> None:
    text = "-- Orders.\n-- pipeline\n-- materialize ducklake://main/orders keys=id\nSELECT 1"
    _, errors = parse_header("pipelines/shop/orders.sql", text, "duckdb")
    (err,) = errors
    assert (err.path, err.line, err.col) == ("pipelines/shop/orders.sql", 3, 39)
    assert err.fix == "did you mean 'key'?"
    assert err.render() == (
        "pipelines/shop/orders.sql:3:39: unknown option 'keys' — did you mean 'key'?\n"
        "    -- materialize ducklake://main/orders keys=id\n"
        "    " + " " * 38 + "^^^^"
    )


def test_error_at_end_of_line_points_past_it() -> None:
    (err,) = _parse("x.sql", "-- pipeline\n-- freshness\nSELECT 1")[1]
    assert (err.line, err.col) == (2, 13)
    assert err.render().splitlines()[-1] == "    " + " " * 12 + "^"


def test_errors_are_sorted_and_all_collected() -> None:
    text = "-- pipeline\n-- unique_key id\n-- trigger sometimes\n-- debounce 5x\n-- tag a b\nSELECT 1"
    _, errors = _parse("x.sql", text)
    assert [(e.line, e.col) for e in errors] == [(2, 15), (3, 12), (4, 13), (5, 10)]


def _one(line: str, language: str = "duckdb") -> AnnotationError:
    name = {"duckdb": "x.sql", "python": "x.py", "bash": "x.sh"}[language]
    marker = "--" if language == "duckdb" else "#"
    _, errors = parse_header(name, f"{marker} {line}\nSELECT 1\n", language)
    assert len(errors) == 1, [e.render() for e in errors]
    return errors[0]


@pytest.mark.parametrize(
    "line, col, headline",
    [
        # value carets point at the value itself, inside quotes
        ('on ducklake://main/x debounce="5x"', 35, "bad duration '5x' — write seconds or 30s, 5m, 2h, 1d"),
        ("partitioned daily tz=Europe/Berln", 25, "unknown time zone 'Europe/Berln' — did you mean 'Europe/Berlin'?"),
        ('partitioned daily tz="Mars/Base"', 26, "unknown time zone 'Mars/Base' — use an IANA name like Europe/Berlin"),
        ("partitioned daily format=Y", 29, "bad partition key format 'Y' — write a strftime format, e.g. format=%Y%m%d"),
        ("on kafka topic=o max_batch=many", 31, "'many' is not a whole number — write e.g. 100"),
        ("on kafka", 12, "'on kafka' needs topic= — write on kafka topic=orders"),
        ("on webhook name=", 15, "'name' needs a value — write name=<value>"),
        # hook names are their own URL path and map one-to-one to LINEAGE_WEBHOOK_*_<NAME>
        ("on webhook name=pay-eu", 20, "bad webhook name 'pay-eu' — use lower-case letters, digits and _ only, e.g. name=pay_eu (its credentials: LINEAGE_WEBHOOK_TOKEN_PAY_EU)"),
        ("on webhook name=pay.eu", 20, "bad webhook name 'pay.eu' — use lower-case letters, digits and _ only, e.g. name=pay_eu (its credentials: LINEAGE_WEBHOOK_TOKEN_PAY_EU)"),
        ("on webhook name=a/b", 20, "bad webhook name 'a/b' — use lower-case letters, digits and _ only, e.g. name=a_b (its credentials: LINEAGE_WEBHOOK_TOKEN_A_B)"),
        ("on webhook name=Pay_EU", 20, "bad webhook name 'Pay_EU' — use lower-case letters, digits and _ only, e.g. name=pay_eu (its credentials: LINEAGE_WEBHOOK_TOKEN_PAY_EU)"),
        ("retry 3 backoff=quadratic", 20, "bad value 'quadratic' — use one of exponential"),
        ("mute all of_them", 13, "'mute' takes one URI — write one mute line per asset"),
        ("mute", 8, "missing asset URI — write e.g. ducklake://main/orders"),
        ("pipeline extra", 13, "'pipeline' takes no arguments — the pipeline is the script's folder; remove the rest"),
        ("pipeline=x", 4, "malformed 'pipeline=x' — write 'pipeline x'"),
        ("materialize: ducklake://main/x", 4, "unknown annotation 'materialize:' — did you mean 'materialize'?"),
        ("tags finance", 4, "unknown annotation 'tags' — did you mean 'tag'?"),
        ("tag a@b", 8, "bad tag 'a@b' — write tag finance"),
        ("owner x=y", 10, "bad owner 'x=y' — write owner data@shop.com or owner team:analytics"),
        ("pool", 8, "'pool' takes one value — write pool warehouse"),
        ("data_test", 13, "'data_test' needs a test — write unique|not_null|accepted_values|relationships|row_count or a script path"),
        ("data_test unique a b", 23, "'data_test unique' takes one column name — write data_test unique order_id"),
        ("data_test row_count", 14, "'data_test row_count' needs min= or max= — write data_test row_count min=1"),
        ("data_test accepted_values status = a,,b", 41, "empty value in accepted_values — remove the extra comma, or quote an empty string as \"\""),
        ('data_test accepted_values status = "a" b', 39, 'malformed value list — separate values with commas and quote values with spaces: a,"b c"'),
        ("data_test relationships id -> ducklake://main/c", 34, "'ducklake://main/c' is not <asset-uri>.<column> — write e.g. ducklake://main/customers.customer_id"),
        ("data_test relationships id ->", 33, "'data_test relationships' needs <column> -> <asset-uri>.<column> — write data_test relationships customer_id -> ducklake://main/customers.customer_id"),
        ("column total", 16, "'column' needs <output> <- <asset-uri>.<column>[, ...] [copy|mod] — write column total <- ducklake://main/orders.amount"),
        ("column total <- ducklake://main/o.amount cpy", 45, "unknown kind 'cpy' — did you mean 'copy'?"),
        ("column total <- ducklake://main/o.amount derived", 45, "unknown kind 'derived' — write copy (the value passes through unchanged) or mod (computed from the source; the default)"),
        ("column total <- ducklake://main/o.amount scan", 45, "a 'scan' edge cannot be declared: scans (filters, join keys, group by) are inferred from SQL — write copy (the value passes through unchanged) or mod (computed from the source; the default)"),
        ("column total <- ducklake://main/o.amount kind=copy", 45, "'column' takes no options ('kind=') — write the kind as the last word: column total <- <asset-uri>.<column> copy"),
        ("column total <- copy", 20, "'column' needs <output> <- <asset-uri>.<column>[, ...] [copy|mod] — write column total <- ducklake://main/orders.amount"),
        ("column total <- orders.amount", 20, "'orders.amount' is not <asset-uri>.<column> — write e.g. ducklake://main/customers.customer_id"),
        ("column total <- ducklake://main/o.amount copy mod", 45, "'copy' is not <asset-uri>.<column> — write e.g. ducklake://main/customers.customer_id"),
        ("column total <- ducklake://main/o.amount, dukdb://warehouse/t.x", 46, "unknown URI kind 'dukdb' — did you mean 'duckdb://warehouse/t'?"),
        ("materialize ducklake://main/x history key=id updated_at=a,b", 60, "bad column name 'a,b' — write updated_at=<one column>"),
        ("materialize ducklake://main/x history key=id track=a updated_at=b", 57, "'track=' and 'updated_at=' are two ways to detect changes — keep one"),
        ("materialize ducklake://main/x key=\"a b\"", 39, "bad column list 'a b' — write key=col1,col2 (no spaces)"),
        ("materialize ducklake://main/x deletes=close", 34, "'deletes=' only applies to history (scd2) targets — add 'history' or write 'materialize scd2 <uri>'"),
        ("materialize", 15, "'materialize' needs the asset URI it writes — write e.g. materialize ducklake://main/orders"),
        ("on ducklake://main/x debounce=5m debounce=3m", 37, "option 'debounce' given twice — keep one"),
        ("use", 7, "'use' takes the path of a macros .sql script — write use macros/money.sql"),
        ("freshness warn=1h", 14, "'freshness' needs a duration — write freshness 1d warn=12h"),
        ("retry", 9, "'retry' needs a count and an optional delay — write retry 3 30s backoff=exponential"),
        ("trigger", 11, "'trigger' takes one of any|all|manual — write e.g. trigger all"),
        ("partitioned", 15, "'partitioned' needs daily|hourly|weekly|monthly|dynamic — write e.g. partitioned daily start=2024-01-01"),
        ("dialect mysql", 12, "bad value 'mysql' — use one of postgres|duckdb"),
        ("append now", 11, "a lone 'append' takes no arguments — write 'append' on its own, or the append option of materialize"),
        ('data_test accepted_values status = a,"b c', 41, 'unterminated quote — close the value with "'),
        ('materialize "ducklake://main/x', 16, 'unterminated quote — close the value with "'),
    ],
)
def test_error_location_and_message(line: str, col: int, headline: str) -> None:
    err = _one(line)
    assert (err.line, err.col) == (1, col)
    assert err.headline() == f"x.sql:1:{col}: {headline}"
    rendered = err.render().splitlines()
    assert rendered[1] == f"    -- {line}"
    assert rendered[2].startswith("    " + " " * (col - 1) + "^")


def test_unterminated_quote_is_one_error_not_many() -> None:
    err = _one('on schedule cron="0 6 * * *')
    assert err.headline() == 'x.sql:1:21: unterminated quote — close the value with "'
    assert err.render().splitlines()[2] == "    " + " " * 20 + "^" * 10


def test_tz_that_names_a_tzdata_directory_is_an_error_not_a_crash() -> None:
    err = _one("on schedule cron=@daily tz=Europe")
    assert err.message == "unknown time zone 'Europe'"


def test_format_with_a_repeated_directive_is_an_error_not_a_crash() -> None:
    err = _one("partitioned daily format=%d%d")
    assert err.message == "bad partition key format '%d%d'"


def test_bash_managed_write_and_manual_python() -> None:
    err = _one("materialize ducklake://main/x", "bash")
    assert err.headline() == "x.sh:1:15: a Bash step writes its own output — write 'materialize manual ducklake://main/x'"
    err = _one("macros", "python")
    assert (err.col, err.message) == (3, "'macros' is for DuckDB SQL scripts")
    err = _one("dialect postgres", "bash")
    assert (err.col, err.message) == (3, "'dialect' is for SQL scripts")


def test_alias_unique_key_disagrees_with_key() -> None:
    _, errors = _parse("x.sql", "-- materialize ducklake://main/x key=a\n-- unique_key b\nSELECT 1")
    assert [e.headline() for e in errors] == ["x.sql:2:15: 'unique_key' disagrees with materialize key= — keep one of them"]


def test_history_with_unique_key_alias_has_a_key() -> None:
    header, errors = _parse("x.sql", "-- materialize scd2 ducklake://main/x\n-- unique_key id\nSELECT 1")
    assert errors == []
    assert header.materialize is not None and header.materialize.key == ("id",) and header.materialize.history


def test_bom_is_not_code() -> None:
    header, errors = _parse("x.sql", "\ufeff-- pipeline\n-- materialize ducklake://main/x\nSELECT 1")
    assert errors == [] and header.is_step and header.body_line == 3


def test_error_on_non_step_script_is_still_reported() -> None:
    _, errors = _parse("x.sql", "-- materialize ducklake://main/x keys=a\nSELECT 1")
    assert [e.message for e in errors] == ["unknown option 'keys'"]


def test_partition_only_segment_uri() -> None:  # uris.parse used to raise StopIteration here
    header, errors = _parse("x.sql", "-- pipeline\n-- materialize manual s3:///exports/{partition}\nSELECT 1")
    assert errors == []
    assert header.materialize is not None and header.materialize.uri == "s3:///exports/{partition}"


def test_repeated_check_names_and_column_sources_are_errors() -> None:
    text = (
        "-- pipeline\n-- materialize ducklake://main/x\n"
        "-- data_test row_count min=1\n-- data_test row_count max=4\n"
        "-- column a <- ducklake://main/y.a\n-- column a <- ducklake://main/y.b\n-- column a <- ducklake:///y.a copy\nSELECT 1\n"
    )
    header, errors = parse_header("x.sql", text, "duckdb")
    assert [e.headline() for e in errors] == [
        "x.sql:4:14: a second data_test named 'row_count' (first on line 3) — each check needs its own name: merge the two lines, or test another column",
        "x.sql:7:16: ducklake://main/y.a is already a source of column 'a' (line 5) — give each source of a column once, with one kind: remove this one",
    ]
    # an output column may take several lines, one per source (line 6 is no error)
    assert [(c.output, [(s.uri, s.column) for s in c.sources]) for c in header.columns][:2] == [
        ("a", [("ducklake://main/y", "a")]), ("a", [("ducklake://main/y", "b")])
    ]


def test_column_kind_defaults_to_mod_and_each_source_is_located() -> None:
    text = (
        "# pipeline\n# materialize ducklake://main/x\n"
        "# column id <- ducklake://main/orders.id copy\n"
        "# column total <- ducklake://main/orders.amount,  ducklake://main/fx.rate\n"
        "# column total <- ducklake://main/orders.tax mod\nimport x\n"
    )
    header, errors = parse_header("p/x.py", text, "python")
    assert errors == []
    assert [(c.output, c.kind) for c in header.columns] == [("id", "copy"), ("total", "mod"), ("total", "mod")]
    located = [(s.uri, s.column, s.at.line, s.at.col, s.at.width) for c in header.columns for s in c.sources if s.at]
    assert located == [
        ("ducklake://main/orders", "id", 3, 16, 25),
        ("ducklake://main/orders", "amount", 4, 19, 29),
        ("ducklake://main/fx", "rate", 4, 51, 23),
        ("ducklake://main/orders", "tax", 5, 19, 26),
    ]
