"""Golden lineage fixtures for lineage_defs.plan.sql, checked on a real DuckDB too.

Each ``tests/fixtures/lineage/<name>.sql`` has a ``<name>.json`` beside it with
the expected analysis. A fixture with ``"runs_on_duckdb": true`` is also run on
an in-memory DuckDB (``lake`` and ``warehouse`` attached, upstream tables
created from ``schemas``/``types``/``duckdb_tables``) and its real result
columns must equal ``output_columns``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import duckdb
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lineage_defs.plan.sql import SqlAnalysis, analyze_sql

FIXTURES = Path(__file__).parent / "fixtures" / "lineage"
CASES = sorted(p.stem for p in FIXTURES.glob("*.sql"))


def load(name: str) -> tuple[str, dict[str, Any]]:
    return (FIXTURES / f"{name}.sql").read_text(), json.loads((FIXTURES / f"{name}.json").read_text())


def analyze(sql: str, spec: dict[str, Any]) -> SqlAnalysis:
    return analyze_sql(
        sql,
        spec["dialect"],
        body_line=spec.get("body_line", 1),
        pg_connection=spec.get("pg_connection", "default"),
        schemas=spec["schemas"],
    )


def _edge_key(e: list[Any]) -> tuple[Any, ...]:
    return (e[0], e[1], e[2] is None, e[2] or "", e[3])


def test_there_are_enough_fixtures() -> None:
    assert len(CASES) >= 18
    assert all((FIXTURES / f"{n}.json").exists() for n in CASES)
    assert sum(1 for n in CASES if load(n)[1].get("runs_on_duckdb")) >= 10


@pytest.mark.parametrize("name", CASES)
def test_fixture(name: str) -> None:
    sql, spec = load(name)
    got = analyze(sql, spec)
    assert list(got.reads) == sorted(spec["reads"])
    assert list(got.writes) == sorted(spec["writes"])
    assert got.trailing_select is spec["trailing_select"]
    assert (list(got.output_columns) if got.output_columns is not None else None) == spec["output_columns"]
    edges = {(e.source_uri, e.source_column, e.target_column, e.kind) for e in got.edges}
    expected = {tuple(e) for e in spec["edges"]}
    assert sorted(edges - expected, key=_edge_key) == [], "unexpected edges"
    assert sorted(expected - edges, key=_edge_key) == [], "missing edges"
    assert list(got.edges) == sorted(got.edges, key=lambda e: _edge_key(list(e)))
    assert list(got.needs_schemas) == sorted(spec["needs_schemas"])
    assert len(got.problems) == len(spec["problems"]), got.problems
    for (line, col, text), problem in zip(spec["problems"], got.problems):
        assert (problem.line, problem.col) == (line, col), problem
        assert text in problem.message, problem
    if "statements" in spec:
        assert [[s.line, s.kind] for s in got.statements] == spec["statements"]
    if "scan_subtypes" in spec:  # the clause reading each scanned column (OpenLineage's INDIRECT subtypes)
        assert {f"{e.source_uri}.{e.source_column}": list(e.subtypes) for e in got.edges if e.kind == "scan"} == spec["scan_subtypes"]


def _relation(uri: str) -> tuple[str, str, str]:
    kind, rest = uri.split("://", 1)
    _, path = rest.split("/", 1)
    schema, _, table = path.rpartition(".")
    return {"ducklake": "lake", "duckdb": "warehouse"}[kind], schema or "main", table


@pytest.mark.parametrize("name", [n for n in CASES if load(n)[1].get("runs_on_duckdb")])
def test_fixture_runs_on_duckdb(name: str) -> None:
    sql, spec = load(name)
    tables: dict[str, dict[str, str]] = {uri: dict.fromkeys(cols, "INTEGER") for uri, cols in spec["schemas"].items()}
    for uri, types in spec.get("types", {}).items():
        tables[uri].update(types)
    tables.update(spec.get("duckdb_tables", {}))
    con = duckdb.connect()
    try:
        con.execute("ATTACH ':memory:' AS lake; ATTACH ':memory:' AS warehouse; USE warehouse")
        for uri, columns in tables.items():
            catalog, schema, table = _relation(uri)
            con.execute(f"CREATE SCHEMA IF NOT EXISTS {catalog}.{schema}")
            defs = ", ".join(f'"{c}" {t}' for c, t in columns.items())
            con.execute(f"CREATE TABLE {catalog}.{schema}.{table} ({defs})")
        con.execute(sql)
        assert con.description is not None
        assert [d[0] for d in con.description] == spec["output_columns"]
    finally:
        con.close()


def test_statement_lines_count_comments_and_blank_lines() -> None:
    body = (
        "-- leading note\n"
        "SET threads = 1;\n"
        "\n"
        "/* block\n"
        "   comment */\n"
        "CREATE TEMP TABLE s AS\n"
        "SELECT 1 AS a;  -- trailing; with a semicolon\n"
        "\n"
        "\n"
        "SELECT 'x;y' AS s, a\n"
        "FROM s;\n"
    )
    got = analyze_sql(body, "duckdb", body_line=10)
    assert [(s.line, s.kind) for s in got.statements] == [(11, "set"), (15, "create_temp"), (19, "query")]
    assert [s.sql for s in got.statements] == [
        "SET threads = 1",
        "CREATE TEMP TABLE s AS\nSELECT 1 AS a",
        "SELECT 'x;y' AS s, a\nFROM s",
    ]
    assert got.trailing_select and got.output_columns == ("s", "a")


def test_problem_lines_are_file_lines() -> None:
    body = "SELECT 1;\n\nSELECT a,\n  FROM WHERE;\n"
    got = analyze_sql(body, "duckdb", body_line=7)
    assert [s.kind for s in got.statements] == ["query", "invalid"]
    assert not got.trailing_select and got.output_columns is None
    (problem,) = got.problems
    assert problem.line == 10 and problem.col > 0


def test_ambiguity_points_at_the_column() -> None:
    body = "SELECT\n    o.id,\n    amount\nFROM lake.orders o JOIN lake.refunds r ON r.order_id = o.id"
    got = analyze_sql(body, "duckdb", body_line=4)
    (problem,) = got.problems
    assert (problem.line, problem.col) == (6, 5)
    assert got.needs_schemas == ("ducklake://main/orders", "ducklake://main/refunds")
    resolved = analyze_sql(body, "duckdb", schemas={"ducklake://main/refunds": ["order_id", "refunded_at"]})
    assert not resolved.problems and not resolved.needs_schemas
    assert ("ducklake://main/orders", "amount", "amount", "copy") in {tuple(e)[:4] for e in resolved.edges}


def test_unknown_substrate_string_is_not_an_asset() -> None:
    got = analyze_sql("ATTACH 'ducklake:meta.ducklake' AS x; ATTACH 'file.db' AS y; SELECT a FROM x.t JOIN y.u ON true", "duckdb")
    assert got.reads == () and not got.problems


def test_a_relation_written_then_read_is_a_write() -> None:
    got = analyze_sql("INSERT INTO lake.t SELECT * FROM lake.src; SELECT * FROM lake.t", "duckdb")
    assert got.reads == ("ducklake://main/src",) and got.writes == ("ducklake://main/t",)


SQL_WORDS = st.sampled_from(
    [
        "SELECT", "FROM", "WHERE", "JOIN", "LEFT JOIN", "ON", "USING", "(", ")", ",", ";", "*", "a", "b", "t.a",
        "lake.t", "warehouse.main.u", "crm.s.t", "WITH", "c AS", "AS", "UNION ALL", "GROUP BY", "ORDER BY",
        "LIMIT 1", "HAVING", "QUALIFY", "OVER", "PARTITION BY", "1", "=", "+", "CREATE", "TEMP", "TABLE",
        "VIEW", "INSERT INTO", "VALUES", "ATTACH", "'ducklake://main'", "'datatable://crm'", "DETACH", "USE",
        "read_parquet(", "'s3:///x/{partition}.parquet'", "[", "]", "EXCLUDE", "REPLACE", "COLUMNS(", "EXISTS",
        "IN", "NOT", "COPY", "TO", "MERGE", "DELETE", "UPDATE", "SET", "$partition", "--", "/*", "*/", "'",
        '"', "\n", "t.*", "x -> x", "CASE WHEN", "THEN", "END", "DISTINCT ON", "RECURSIVE", "LATERAL",
        "unnest(", "WINDOW w AS", "ON COMMIT DROP", "DROP TABLE",
    ]
)  # fmt: skip


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(SQL_WORDS, max_size=40).map(" ".join), st.sampled_from(["duckdb", "postgres"]))
def test_token_soup_never_raises(text: str, dialect: str) -> None:
    got = analyze_sql(text, dialect, body_line=3, schemas={"ducklake://main/t": ["a", "b"]})
    assert isinstance(got, SqlAnalysis)
    assert all(3 <= s.line <= 3 + text.count("\n") for s in got.statements)


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=300), st.sampled_from(["duckdb", "postgres"]))
def test_random_text_never_raises(text: str, dialect: str) -> None:
    assert isinstance(analyze_sql(text, dialect), SqlAnalysis)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(CASES), st.data())
def test_mutated_fixtures_never_raise(name: str, data: st.DataObject) -> None:
    sql, spec = load(name)
    for _ in range(data.draw(st.integers(1, 4))):
        i = data.draw(st.integers(0, len(sql)))
        j = data.draw(st.integers(i, min(len(sql), i + 30)))
        action = data.draw(st.sampled_from(["delete", "duplicate", "insert"]))
        if action == "delete":
            sql = sql[:i] + sql[j:]
        elif action == "duplicate":
            sql = sql[:j] + sql[i:j] + sql[j:]
        else:
            sql = sql[:i] + data.draw(SQL_WORDS) + sql[i:]
    assert isinstance(analyze(sql, spec), SqlAnalysis)


@pytest.mark.parametrize("schemas", [{}, {"ducklake://main/orders": ["subtotal", "amount"]}], ids=["schema unknown", "schema known"])
def test_a_projection_sees_only_the_aliases_before_it(schemas: dict[str, list[str]]) -> None:
    # `subtotal AS subtotal_cents` before `… AS subtotal`: DuckDB binds the source column (a later alias
    # cannot be referenced), so it is a copy; `subtotal_cents + 1` and `doubled + 1` use earlier aliases
    sql = (
        "SELECT subtotal AS subtotal_cents, subtotal / 100 AS subtotal, subtotal_cents + 1 AS plus, amount * 2 AS doubled, doubled + 1 AS again "
        "FROM lake.main.orders"
    )
    got = analyze_sql(sql, "duckdb", schemas=schemas)
    assert {(e.source_column, e.target_column, str(e.kind)) for e in got.edges} == {
        ("subtotal", "subtotal_cents", "copy"), ("subtotal", "subtotal", "mod"), ("subtotal", "plus", "mod"),
        ("amount", "doubled", "mod"), ("amount", "again", "mod"),
    }  # fmt: skip
    assert got.problems == ()
    con = duckdb.connect()  # and DuckDB agrees: the first column is the source's value
    try:
        con.execute("ATTACH ':memory:' AS lake; CREATE TABLE lake.main.orders AS SELECT 250 AS subtotal, 3 AS amount")
        assert con.execute(sql).fetchone() == (250, 2.5, 251, 6, 7)
    finally:
        con.close()
