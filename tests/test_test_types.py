"""Test types as scripts (issue 27): a `test_type` script registers a reusable, parameterised data test;
`data_test <type> <args>` binds typed arguments and becomes an asset check. Run for real on DuckDB
through Dagster (as tests/test_run_steps.py runs the built-in tests), from the pipelines folder and
from LINEAGE_LIBRARY_DIRS; `lineage-defs check` locates every misuse."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import dagster as dg
import pytest

from lineage_defs import LineageSettings, build_definitions
from lineage_defs.project import load_project
from lineage_defs.run.substrates import Session

ROWS_BETWEEN = """
    -- test_type rows_between min:int max:int
    -- Fails when the slice's row count is outside [min, max].
    SELECT count(*) AS n, $min AS min, $max AS max FROM this HAVING count(*) < $min OR count(*) > $max
"""


def write(root: Path, rel: str, text: str) -> None:
    p = root / rel
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(textwrap.dedent(text).lstrip())


def step(uri: str, rows: int, *tests: str, comment: str = "--") -> str:
    lines = [f"{comment} pipeline", f"{comment} materialize {uri}", *(f"{comment} data_test {t}" for t in tests)]
    return "\n".join(lines) + f"\nSELECT range AS id, 'r' || range AS label FROM range({rows})\n"


@pytest.fixture
def instance() -> Any:
    with dg.instance_for_test() as inst:
        yield inst


def run(settings: LineageSettings, instance: Any) -> dg.ExecuteInProcessResult:
    defs = build_definitions(settings=settings)
    return dg.materialize(defs.assets, instance=instance, resources=defs.resources, raise_on_error=False)


def evaluations(r: dg.ExecuteInProcessResult) -> dict[tuple[str, str], Any]:
    """(table, check name) → the check's evaluation."""
    return {
        (e.event_specific_data.asset_key.path[-1], e.event_specific_data.check_name): e.event_specific_data
        for e in r.all_events
        if e.event_type_value == "ASSET_CHECK_EVALUATION"
    }


def query(settings: LineageSettings, sql: str) -> list[tuple[Any, ...]]:
    with Session(settings) as s:
        return s.conn.execute(sql).fetchall()


def test_rows_between_on_two_steps_passes_and_fails_where_it_should(tmp_path: Path, instance: Any) -> None:
    root, state = tmp_path / "p", tmp_path / "s"
    write(root, "shop/checks/rows_between.sql", ROWS_BETWEEN)
    write(root, "shop/small.sql", step("ducklake://main/small", 3, "rows_between 1 5", "rows_between 10 20 severity=warn"))
    write(root, "shop/big.sql", step("ducklake://main/big", 12, "rows_between min=10 max=20"))
    settings = LineageSettings(state_dir=str(state), pipelines_dir=str(root))
    project = load_project(root, settings)
    assert project.errors == ()
    assert [s.path for s in project.scripts] == ["shop/big.sql", "shop/small.sql"]  # the test type is not a step

    r = run(settings, instance)
    assert r.success  # the failing check is a warn check: the data is kept
    got = {k: v.passed for k, v in evaluations(r).items()}
    assert got == {("small", "rows_between_1_5"): True, ("small", "rows_between_10_20"): False, ("big", "rows_between_min_10_max_20"): True}
    failed = evaluations(r)[("small", "rows_between_10_20")]
    assert failed.metadata["samples"].value == [{"n": 3, "min": 10, "max": 20}]  # the arguments arrived as ints
    assert failed.severity == dg.AssetCheckSeverity.WARN
    assert query(settings, "SELECT count(*) FROM lake.main.small") == [(3,)]
    specs = {c.name: c for a in build_definitions(settings=settings).assets or [] if hasattr(a, "check_specs") for c in a.check_specs}  # type: ignore[union-attr]
    assert specs["rows_between_min_10_max_20"].blocking and not specs["rows_between_10_20"].blocking
    assert "rows_between(min='10', max='20')" in (specs["rows_between_min_10_max_20"].description or "")

    # the big step grows past its max: its (blocking) check fails and rolls the write back
    write(root, "shop/big.sql", step("ducklake://main/big", 25, "rows_between min=10 max=20"))
    r = run(settings, instance)
    assert not r.success
    got = {k: v.passed for k, v in evaluations(r).items()}
    assert got[("big", "rows_between_min_10_max_20")] is False and got[("small", "rows_between_1_5")] is True
    assert evaluations(r)[("big", "rows_between_min_10_max_20")].metadata["samples"].value == [{"n": 25, "min": 10, "max": 20}]
    assert query(settings, "SELECT count(*) FROM lake.main.big") == [(12,)]  # rolled back


def test_a_python_test_type_counts_failures_in_sql_and_python_steps(tmp_path: Path, instance: Any) -> None:
    root, state = tmp_path / "p", tmp_path / "s"
    write(root, "shop/checks/ids_below.py", """
        # test_type ids_below limit:int
        # Fails for each row whose id is not below the limit.
        def check(con, table, limit):
            assert type(limit) is int
            return con.execute(f"SELECT count(*) FROM {table} WHERE id >= ?", [limit]).fetchone()[0]
    """)
    write(root, "shop/sql_ids.sql", step("ducklake://main/sql_ids", 5, "ids_below 5", "ids_below limit=3 severity=warn"))
    write(root, "shop/py_ids.py", """
        # pipeline
        # materialize ducklake://main/py_ids
        # data_test ids_below 4
        import pandas as pd
        from lineage_defs import runtime
        runtime.write(pd.DataFrame({"id": [0, 1, 2, 3, 4, 5]}))
    """)
    settings = LineageSettings(state_dir=str(state), pipelines_dir=str(root))
    r = run(settings, instance)
    ev = evaluations(r)
    assert {k: v.passed for k, v in ev.items()} == {("sql_ids", "ids_below_5"): True, ("sql_ids", "ids_below_limit_3"): False, ("py_ids", "ids_below_4"): False}
    assert ev[("sql_ids", "ids_below_limit_3")].metadata["failing_rows"].value == 2  # ids 3 and 4
    assert ev[("py_ids", "ids_below_4")].metadata["failing_rows"].value == 2  # ids 4 and 5, counted in the step's own process
    assert not r.success  # the Python step's blocking check failed: its write was rolled back
    assert query(settings, "SELECT count(*) FROM lake.main.sql_ids") == [(5,)]
    assert query(settings, "SELECT count(*) FROM duckdb_tables() WHERE table_name = 'py_ids'") == [(0,)]


HOSTILE = "x'); DROP TABLE lake.main.t; --"


def test_library_dirs_share_test_types_and_arguments_are_bound_not_spliced(tmp_path: Path, instance: Any) -> None:
    root, state = tmp_path / "p", tmp_path / "s"
    lib_a, lib_b = tmp_path / "acme_checks", tmp_path / "more_checks"
    write(lib_a, "labels/no_label.sql", """
        -- test_type no_label label
        -- Fails on rows carrying the label.
        SELECT * FROM _slice WHERE label = $label
    """)
    write(lib_a, "__init__.py", "# a package's own module: no test type, none of ours\n")
    write(lib_b, "rows_between.sql", ROWS_BETWEEN)
    hostile = HOSTILE.replace('"', '\\"')
    write(root, "x/t.sql", f"""
        -- pipeline
        -- materialize ducklake://main/t
        -- data_test no_label "{hostile}" severity=warn
        -- data_test no_label r1 severity=warn
        -- data_test rows_between 1 10
        SELECT * FROM (VALUES (1, 'r1'), (2, '{HOSTILE.replace("'", "''")}'), (3, 'ok')) v(id, label)
    """)
    settings = LineageSettings.from_env({
        "LINEAGE_STATE_DIR": str(state), "LINEAGE_PIPELINES_DIR": str(root), "LINEAGE_LIBRARY_DIRS": f"{lib_a}{os.pathsep}{lib_b}",
    })
    assert settings.library_dirs == (str(lib_a), str(lib_b))
    r = run(settings, instance)
    assert r.success
    ev = evaluations(r)
    hostile_check = next(v for (t, name), v in ev.items() if name.startswith("no_label_x_drop_table"))
    # the value reached DuckDB verbatim as a parameter: it matched exactly the one row holding it …
    assert not hostile_check.passed and hostile_check.metadata["failing_rows"].value == 1
    assert hostile_check.metadata["samples"].value == [{"id": 2, "label": HOSTILE}]
    # … and the SQL that ran holds the parameter, not the text
    assert "$label" in hostile_check.metadata["sql"].value and "DROP" not in hostile_check.metadata["sql"].value
    assert not ev[("t", "no_label_r1")].passed and ev[("t", "rows_between_1_10")].passed
    assert query(settings, "SELECT count(*) FROM lake.main.t") == [(3,)]  # the table is still there

    # without the library folders the types are unknown: located errors, not a silent pass
    project = load_project(root, LineageSettings(state_dir=str(state), pipelines_dir=str(root)))
    assert [(e.path, e.line, e.col, e.message) for e in project.errors] == [
        ("x/t.sql", 3, 14, "unknown data_test 'no_label'"),
        ("x/t.sql", 4, 14, "unknown data_test 'no_label'"),
        ("x/t.sql", 5, 14, "unknown data_test 'rows_between'"),
    ]


def _check(root: Path, state: Path, library_dirs: str = "") -> tuple[int, str]:
    script = Path(sys.executable).with_name("lineage-defs")
    env = {**os.environ, "LINEAGE_STATE_DIR": str(state), "LINEAGE_LIBRARY_DIRS": library_dirs}
    env.pop("LINEAGE_PIPELINES_DIR", None)
    proc = subprocess.run([str(script), "check", str(root), "--no-cache"], capture_output=True, text=True, env=env, timeout=120)
    return proc.returncode, proc.stderr


def test_check_locates_every_misuse_of_a_test_type(tmp_path: Path) -> None:
    root, lib = tmp_path / "p", tmp_path / "lib"
    write(root, "shop/checks/rows_between.sql", ROWS_BETWEEN)
    write(root, "shop/bad.sql", step(
        "ducklake://main/bad", 3,
        "rows_betwen 1 5",  # unknown: did you mean
        "rows_between 1",  # too few
        "rows_between 1 2 3",  # too many
        "rows_between 1 many",  # does not convert to int
        "rows_between 1 mx=3",  # no such parameter
        "rows_between max=3 1",  # positional after named
        "checks/rows_between.sql",  # a test type named as a custom test script
    ))
    write(root, "shop/checks/no_check.py", "# test_type no_check n:int\ndef chek(con, table, n):\n    return 0\n")
    write(root, "shop/checks/asset_too.sql", """
        -- test_type asset_too
        -- materialize ducklake://main/asset_too
        SELECT * FROM _slice
    """)
    write(root, "shop/checks/undeclared.sql", """
        -- test_type undeclared lo:float
        SELECT * FROM _slice
        WHERE id < $lo OR id > $hi
    """)
    write(lib, "rows_between.sql", ROWS_BETWEEN)  # the same name as the project's own
    rc, err = _check(root, tmp_path / "s", str(lib))
    assert rc == 1
    headlines = [line for line in err.splitlines() if ": " in line and line.split(":", 1)[0].endswith((".sql", ".py"))]
    assert sorted(headlines) == sorted([
        f"{lib}/rows_between.sql:1:14: test type 'rows_between' is declared twice (first at shop/checks/rows_between.sql:1) — rename one of them "
        "(a test type's name is unique across the pipelines folder and LINEAGE_LIBRARY_DIRS), or drop one folder from LINEAGE_LIBRARY_DIRS",
        "shop/bad.sql:3:14: unknown data_test 'rows_betwen' — did you mean 'rows_between'?",
        "shop/bad.sql:4:14: 'rows_between' takes 2 arguments (min:int max:int), got 1: max missing — write data_test rows_between <min> <max>",
        "shop/bad.sql:5:31: 'rows_between' takes 2 arguments (min:int max:int), got 3 — write data_test rows_between <min> <max>",
        "shop/bad.sql:6:29: 'many' is not an int (parameter max:int of 'rows_between') — write a whole number, e.g. 100",
        "shop/bad.sql:7:29: 'rows_between' has no parameter 'mx' — did you mean 'max='?",
        "shop/bad.sql:8:33: a positional argument after a named one — write the positional arguments first, or name this one too: <param>=1",
        "shop/checks/asset_too.sql:2:4: 'materialize' in a test_type script: a test type is not an asset — "
        "remove this line (a test type only declares 'test_type'), or move the step into its own script",
        "shop/bad.sql:9:14: 'checks/rows_between.sql' is a test type: it is used by its name — write data_test rows_between <min> <max>",
        "shop/checks/no_check.py:1:13: test type 'no_check' defines no check() — define def check(con, table, **args) -> int returning the failing count (0: passes)",
        "shop/checks/undeclared.sql:3:24: $hi is not a parameter of test type 'undeclared' — declare it on the test_type line (hi:<type>), or use one of $lo",
    ])
    assert "    -- data_test rows_between 1 2 3\n                                  ^" in err  # the caret under the extra argument


def test_a_test_type_declaration_is_checked_where_it_is_written(tmp_path: Path) -> None:
    from lineage_defs.parse import parse_header

    def errors(text: str, language: str = "duckdb", path: str = "x/t.sql") -> list[str]:
        return [f"{e.path}:{e.line}:{e.col}: {e.message}" for e in parse_header(path, text, language)[1]]

    assert errors("-- test_type between lo:integer\nSELECT 1") == ["x/t.sql:1:25: unknown parameter type 'integer'"]
    assert errors("-- test_type unique\nSELECT 1") == ["x/t.sql:1:14: 'unique' is a built-in data_test"]
    assert errors("-- test_type t severity:text\nSELECT 1") == ["x/t.sql:1:16: 'severity' cannot name a parameter"]
    assert errors("-- test_type t a a:int\nSELECT 1") == ["x/t.sql:1:18: parameter 'a' declared twice"]
    assert errors("# test_type t\necho", "bash", "x/t.sh") == ["x/t.sh:1:3: a test type is a DuckDB .sql script or a Python .py script"]
    h, errs = parse_header("x/t.py", "# test_type share_below column share:float on:bool since:date\ndef check(con, table, **a):\n    return 0\n", "python")
    assert errs == [] and h.test_type is not None and not h.is_step
    assert [(p.name, p.type) for p in h.test_type.params] == [("column", "text"), ("share", "float"), ("on", "bool"), ("since", "date")]


def test_a_set_based_batch_judges_each_partition_by_the_test_type(tmp_path: Path, instance: Any) -> None:
    from dagster._core.storage.tags import ASSET_PARTITION_RANGE_END_TAG, ASSET_PARTITION_RANGE_START_TAG

    root, state = tmp_path / "p", tmp_path / "s"
    settings = LineageSettings(state_dir=str(state), pipelines_dir=str(root))
    # 2025-01-01 gets 3 rows, 2025-01-02 and 2025-01-03 get 2 each
    query(settings, "CREATE TABLE lake.main.raw AS SELECT i AS id, TIMESTAMP '2025-01-01' + INTERVAL (i % 3) DAY + INTERVAL (i) MINUTE AS ts FROM range(7) t(i)")
    write(root, "x/checks/rows_between.sql", ROWS_BETWEEN)
    write(root, "x/batched.sql", """
        -- pipeline
        -- partitioned daily start=2025-01-01 time_column=ts batch=3
        -- materialize ducklake://main/batched
        -- data_test rows_between 3 3 severity=warn
        SELECT id, ts FROM lake.main.raw WHERE ts >= $partition_start::TIMESTAMP AND ts < $partition_end::TIMESTAMP
    """)
    defs = build_definitions(settings=settings)
    tags = {ASSET_PARTITION_RANGE_START_TAG: "2025-01-01", ASSET_PARTITION_RANGE_END_TAG: "2025-01-03"}
    r = dg.materialize(defs.assets, instance=instance, resources=defs.resources, tags=tags, raise_on_error=False)
    assert r.success
    check = evaluations(r)[("batched", "rows_between_3_3")]
    assert not check.passed and check.metadata["failed_partitions"].value == ["2025-01-02", "2025-01-03"]
    snaps = {m.partition: m.metadata["lineage/ducklake_snapshot_id"].value for m in (e.event_specific_data.materialization for e in r.all_events if e.event_type_value == "ASSET_MATERIALIZATION")}
    assert len(set(snaps.values())) == 1  # one set-based batch wrote all three partitions
