"""Fuzz the grammar: mutated valid headers give AnnotationErrors, never exceptions.

Seeds are the golden header fixtures and the broken-scripts corpus; mutations
delete/insert/replace characters, swap tokens, duplicate lines, inject quotes,
unicode, '=' and '://', and truncate. ``load_project`` on a folder of mutated
scripts must collect problems, never raise.
"""

from __future__ import annotations

from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lineage_defs.errors import AnnotationError, LineageDefsError
from lineage_defs.parse import language_of, parse_header

FIXTURES = Path(__file__).parent / "fixtures"
SEEDS = sorted(
    [p for p in (FIXTURES / "headers").iterdir() if p.suffix != ".json"]
    + [p for p in (FIXTURES / "invalid" / "pipelines").rglob("*") if p.is_file()],
    key=str,
)
SEED_TEXTS = [(p.name, p.read_bytes().decode("utf-8")) for p in SEEDS]

INJECT = [
    '"', '"', "=", "://", "=\"", '\\"', "'", ",", ".", "->", "<-", "$", "{partition}", "%", "#", "--", "//",
    "\t", " ", "\n", "\r\n", "\ufeff", "é", "日本", "\u200b", "\u2028", "\x0c", "٣", "🙂", "\x00",
    "pipeline", "materialize", "on", "data_test", "test", "column", "append", "unique_key", "history", "manual",
    "key=", "tz=", "cron=", "debounce=", "ducklake://", "s3:///", "dbt://w/s/", "datatable://",
]

_pos = st.integers(min_value=0, max_value=100_000)
_ops = st.one_of(
    st.tuples(st.just("delete"), _pos, st.integers(1, 12)),
    st.tuples(st.just("insert"), _pos, st.sampled_from(INJECT)),
    st.tuples(st.just("insert_text"), _pos, st.text(max_size=6)),
    st.tuples(st.just("replace"), _pos, st.sampled_from(INJECT)),
    st.tuples(st.just("swap_tokens"), _pos, _pos),
    st.tuples(st.just("duplicate_line"), _pos, _pos),
    st.tuples(st.just("truncate"), _pos, st.just(0)),
)


def mutate(text: str, ops: list[tuple[str, int, object]]) -> str:
    for op, a, b in ops:
        n = len(text) + 1
        if op == "delete":
            i = a % n
            text = text[:i] + text[i + int(b) :]  # type: ignore[call-overload]
        elif op in ("insert", "insert_text"):
            i = a % n
            text = text[:i] + str(b) + text[i:]
        elif op == "replace" and text:
            i = a % len(text)
            text = text[:i] + str(b) + text[i + 1 :]
        elif op == "swap_tokens":
            toks = text.split(" ")
            i, j = a % len(toks), int(b) % len(toks)  # type: ignore[call-overload]
            toks[i], toks[j] = toks[j], toks[i]
            text = " ".join(toks)
        elif op == "duplicate_line":
            lines = text.split("\n")
            i, j = a % len(lines), int(b) % (len(lines) + 1)  # type: ignore[call-overload]
            lines.insert(j, lines[i])
            text = "\n".join(lines)
        elif op == "truncate":
            text = text[: a % n]
    return text


mutated = st.tuples(st.sampled_from(SEED_TEXTS), st.lists(_ops, min_size=1, max_size=6)).map(
    lambda t: (t[0][0], mutate(t[0][1], t[1]))
)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=mutated, language=st.sampled_from([None, "duckdb", "postgres", "python", "bash"]))
def test_parse_header_only_returns_annotation_errors(case: tuple[str, str], language: str | None) -> None:
    name, text = case
    lang = language or language_of(name) or "duckdb"
    header, errors = parse_header(f"p/{name}", text, lang)
    n_lines = max(len(text.splitlines()), 1)
    assert header.body_line >= 1
    for e in errors:
        assert isinstance(e, AnnotationError)
        assert 1 <= e.line <= n_lines and e.col >= 1, e.render()
        assert e.render().startswith(f"p/{name}:{e.line}:{e.col}: ")


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(cases=st.lists(mutated, min_size=1, max_size=4))
def test_load_project_collects_and_never_raises(cases: list[tuple[str, str]], tmp_path_factory: object) -> None:
    from lineage_defs.project import load_project

    root = tmp_path_factory.mktemp("pipelines")  # type: ignore[attr-defined]
    for i, (name, text) in enumerate(cases):
        folder = root / ("shop" if i % 2 else "grammar")
        folder.mkdir(exist_ok=True)
        (folder / f"m{i}_{name}").write_text(text, encoding="utf-8", errors="surrogatepass")
    project = load_project(root)
    for e in (*project.errors, *project.warnings):
        assert isinstance(e, LineageDefsError)
        e.render()
