"""Steps run through Dagster on real engines: SQL (DuckDB, PostgreSQL), Python and Bash via Pipes,
hostile partition keys, `{partition}` objects, macros, ATTACH by URI, range runs with a failing
partition, retries."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

import dagster as dg
import pytest
from dagster._core.storage.tags import ASSET_PARTITION_RANGE_END_TAG, ASSET_PARTITION_RANGE_START_TAG

from conftest import flaky_step
from lineage_defs import LineageSettings, build_definitions
from lineage_defs.run.substrates import Session


def write(root: Path, rel: str, text: str) -> None:
    p = root / rel
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(textwrap.dedent(text).lstrip())


def defs_for(root: Path, state: Path, **resource: Any) -> dg.Definitions:
    return build_definitions(
        root,
        settings=LineageSettings(state_dir=str(state), **resource),
    )


def run(defs: dg.Definitions, instance: dg.DagsterInstance, keys: list[list[str]] | None = None, **kw: Any) -> dg.ExecuteInProcessResult:
    selection = [dg.AssetKey(k) for k in keys] if keys else None
    return dg.materialize(defs.assets, instance=instance, resources=defs.resources, selection=selection, raise_on_error=False, **kw)


def query(state: Path, sql: str, **settings: Any) -> list[tuple[Any, ...]]:
    with Session(LineageSettings(state_dir=str(state), **settings)) as s:
        return s.conn.execute(sql).fetchall()


@pytest.fixture
def instance() -> Any:
    with dg.instance_for_test() as inst:
        yield inst


def materializations(result: dg.ExecuteInProcessResult) -> list[Any]:
    return [e.event_specific_data.materialization for e in result.all_events if e.event_type_value == "ASSET_MATERIALIZATION"]


def test_hostile_dynamic_partition_keys_arrive_verbatim(tmp_path: Path, instance: Any) -> None:
    root, state = tmp_path / "p", tmp_path / "s"
    write(root, "x/keys.sql", """
        -- pipeline
        -- partitioned dynamic key="$.k"
        -- materialize ducklake://main/keys
        SELECT '{partition}' AS via_token, $partition AS via_param, 'literal {partition} kept' AS s
    """)
    defs = defs_for(root, state)
    hostile = ["x'); DROP TABLE lake.main.keys; --", "O'Brien", "a\"b", "$partition", "{partition}"]
    instance.add_dynamic_partitions("x__keys", hostile)
    for key in hostile:
        r = run(defs, instance, partition_key=key)
        assert r.success, key
    rows = query(state, "SELECT via_token, via_param, s, _partition FROM lake.main.keys ORDER BY _partition")
    assert sorted(r[3] for r in rows) == sorted(hostile)
    for token, param, s, part in rows:
        assert token == param == part
        assert s == f"literal {part} kept"  # the literal's token is resolved as a bound value, not spliced


def test_partition_token_in_object_paths_and_macros(tmp_path: Path, instance: Any) -> None:
    root, state = tmp_path / "p", tmp_path / "s"
    objects = state / "objects" / "raw"
    objects.mkdir(parents=True)
    for day, n in (("2025-01-01", 3), ("2025-01-02", 5)):
        (objects / f"{day}.csv").write_text("id,cents\n" + "".join(f"{i},{i * 100}\n" for i in range(n)))
    write(root, "shop/macros/money.sql", """
        -- macros
        CREATE OR REPLACE MACRO eur(c) AS c / 100.0;
    """)
    write(root, "shop/orders.sql", """
        -- Orders from the raw drop.
        -- pipeline
        -- partitioned daily start=2025-01-01
        -- materialize duckdb://warehouse/orders
        SELECT id, eur(cents) AS amount FROM read_csv('s3:///raw/{partition}.csv')
    """)
    defs = defs_for(root, state)
    for day in ("2025-01-01", "2025-01-02", "2025-01-01"):
        assert run(defs, instance, partition_key=day).success
    rows = query(state, "SELECT _partition, count(*), sum(amount) FROM warehouse.main.orders GROUP BY 1 ORDER BY 1")
    assert rows == [("2025-01-01", 3, 3.0), ("2025-01-02", 5, 10.0)]
    # the macro library was injected as a TEMP macro: nothing persisted into the warehouse
    assert query(state, "SELECT count(*) FROM duckdb_functions() WHERE function_name = 'eur'") == [(0,)]


def test_range_run_reports_each_partition_and_isolates_a_failure(tmp_path: Path, instance: Any) -> None:
    root, state = tmp_path / "p", tmp_path / "s"
    write(root, "x/daily.sql", """
        -- pipeline
        -- partitioned daily start=2025-01-01
        -- materialize ducklake://main/daily
        SELECT $partition AS day, CASE WHEN $partition = '2025-01-03' THEN error('boom on the 3rd') ELSE 1 END AS ok
    """)
    defs = defs_for(root, state)
    r = run(defs, instance, tags={ASSET_PARTITION_RANGE_START_TAG: "2025-01-01", ASSET_PARTITION_RANGE_END_TAG: "2025-01-05"})
    assert not r.success
    done = sorted(m.partition for m in materializations(r))
    assert done == ["2025-01-01", "2025-01-02", "2025-01-04", "2025-01-05"]
    failure = next(e for e in r.all_events if e.event_type_value == "STEP_FAILURE")
    assert "2025-01-03" in failure.message or "2025-01-03" in str(failure.event_specific_data.error)
    assert "boom on the 3rd" in str(failure.event_specific_data.error)
    # the error names the script, the line and quotes the statement
    assert "x/daily.sql:4:1: statement failed" in str(failure.event_specific_data.error)
    assert "    SELECT $partition AS day" in str(failure.event_specific_data.error)
    # partition status as Dagster records it: four materialized, the third not
    key = dg.AssetKey(["ducklake", "main", "daily"])
    assert sorted(instance.get_materialized_partitions(key)) == done
    assert query(state, "SELECT day FROM lake.main.daily ORDER BY day") == [(d,) for d in done]
    for m in materializations(r):
        assert m.metadata["dagster/row_count"].value == 1
        assert m.metadata["lineage/partition"].value == m.partition
        assert "lineage/sql" in m.metadata and "lineage/ducklake_snapshot_id" in m.metadata


def test_range_run_keeps_each_partitions_metadata(tmp_path: Path, instance: Any) -> None:
    root, state = tmp_path / "p", tmp_path / "s"
    write(root, "x/daily.sql", """
        -- pipeline
        -- partitioned daily start=2025-01-01
        -- materialize ducklake://main/daily
        SELECT * FROM range(CAST(right($partition, 2) AS INTEGER)) t(i)
    """)
    r = run(defs_for(root, state), instance, tags={ASSET_PARTITION_RANGE_START_TAG: "2025-01-01", ASSET_PARTITION_RANGE_END_TAG: "2025-01-04"})
    assert r.success
    got = {m.partition: (m.metadata["dagster/row_count"].value, m.metadata["lineage/partition"].value) for m in materializations(r)}
    assert got == {f"2025-01-0{d}": (d, f"2025-01-0{d}") for d in range(1, 5)}
    assert query(state, "SELECT _partition, count(*) FROM lake.main.daily GROUP BY 1 ORDER BY 1") == [(f"2025-01-0{d}", d) for d in range(1, 5)]


def test_range_run_feeds_downstream_steps_of_the_same_run(tmp_path: Path, instance: Any) -> None:
    root, state = tmp_path / "p", tmp_path / "s"
    write(root, "x/a.sql", """
        -- pipeline
        -- partitioned daily start=2025-01-01
        -- materialize ducklake://main/a
        SELECT $partition AS day, 1 AS n
    """)
    write(root, "x/b.sql", """
        -- pipeline
        -- partitioned daily start=2025-01-01
        -- materialize ducklake://main/b
        SELECT day, n + 1 AS n FROM lake.main.a WHERE day = $partition
    """)
    r = run(defs_for(root, state), instance, tags={ASSET_PARTITION_RANGE_START_TAG: "2025-01-01", ASSET_PARTITION_RANGE_END_TAG: "2025-01-03"})
    assert r.success
    assert not [e for e in r.all_events if e.event_type_value == "STEP_SKIPPED"]
    got = sorted((tuple(m.asset_key.path), m.partition) for m in materializations(r))
    assert got == sorted((("ducklake", "main", t), f"2025-01-0{d}") for t in "ab" for d in (1, 2, 3))
    assert query(state, "SELECT day, n FROM lake.main.b ORDER BY day") == [(f"2025-01-0{d}", 2) for d in (1, 2, 3)]


def test_python_and_bash_steps_through_pipes(tmp_path: Path, instance: Any) -> None:
    root, state = tmp_path / "p", tmp_path / "s"
    write(root, "shop/drop.sh", """
        #!/usr/bin/env bash
        # Raw file for the day.
        # pipeline
        # partitioned daily start=2025-01-01
        # materialize manual s3:///raw/{partition}.csv
        set -euo pipefail
        echo "bash sees $PARTITION from $PARTITION_START"
        printf 'id,day\\n1,%s\\n2,%s\\n' "$PARTITION" "$PARTITION" > "$LINEAGE_OUTPUT_PATH"
    """)
    write(root, "shop/load.py", """
        # Load the day's file.
        # pipeline
        # partitioned daily start=2025-01-01
        # materialize ducklake://main/loaded key=id
        # data_test unique id
        # column id <- s3:///raw/{partition}.csv.id
        from lineage_defs import runtime

        p = runtime.partition()
        key, start, end = runtime.partition()  # unpacks as well (SPEC section 4)
        assert (key, start, end) == (p.key, p.start, p.end) and key == "2025-01-02"
        con = runtime.connect()
        df = con.execute("SELECT id, day, ? AS start FROM read_csv(?)", [p.start.isoformat(), runtime.path("s3:///raw/{partition}.csv")]).df()
        runtime.report(note="hello from python")
        runtime.log("python step wrote its slice")
        runtime.write(df)
    """)
    defs = defs_for(root, state)
    r = run(defs, instance, partition_key="2025-01-02")
    assert r.success
    mats = {tuple(m.asset_key.path): m for m in materializations(r)}
    loaded = mats[("ducklake", "main", "loaded")]
    assert loaded.metadata["dagster/row_count"].value == 2
    assert loaded.metadata["note"].value == "hello from python"
    columns = loaded.metadata["dagster/column_schema"].schema.columns
    assert [c.name for c in columns][:2] == ["id", "day"]
    managed = next(c for c in columns if c.name == "_partition")
    assert managed.description and "partition key" in managed.description  # described in the UI's Columns table
    assert "dagster/column_lineage" in loaded.metadata
    checks = [e for e in r.all_events if e.event_type_value == "ASSET_CHECK_EVALUATION"]
    assert [c.event_specific_data.passed for c in checks] == [True]
    # the steps ran inside Dagster Pipes: their output lines are log events of the run
    logs = [e.user_message for e in instance.all_logs(r.run_id)]
    assert any("bash sees 2025-01-02 from 2025-01-02T00:00:00+00:00" in m for m in logs)
    assert not any("did not receive any messages" in m for m in logs)
    assert any("python step wrote its slice" in m for m in logs)
    raw = mats[("s3", "_default", "raw", "PARTITION-raw.csv")]
    assert raw.metadata["dagster/row_count"].value == 2  # observed after the manual write
    rows = query(state, "SELECT id, day, start FROM lake.main.loaded ORDER BY id")
    assert [(a, str(b)[:10]) for a, b, _ in rows] == [(1, "2025-01-02"), (2, "2025-01-02")]
    assert rows[0][2].startswith("2025-01-02T00:00:00")


def test_blocking_check_rolls_back_and_warn_check_keeps(tmp_path: Path, instance: Any) -> None:
    root, state = tmp_path / "p", tmp_path / "s"
    write(root, "x/t.sql", """
        -- pipeline
        -- materialize ducklake://main/t
        -- data_test not_null v
        -- data_test row_count max=1 severity=warn
        SELECT * FROM (VALUES (1, 'a'), (2, 'b')) v(id, v)
    """)
    defs = defs_for(root, state)
    r = run(defs, instance)
    assert r.success  # a failed warn check keeps the data and the run
    evals = {(e.event_specific_data.check_name, e.event_specific_data.passed) for e in r.all_events if e.event_type_value == "ASSET_CHECK_EVALUATION"}
    assert evals == {("not_null_v", True), ("row_count", False)}
    (root / "x/t.sql").write_text((root / "x/t.sql").read_text().replace("(2, 'b')", "(2, NULL), (3, 'c')"))
    r = run(defs_for(root, state), instance)
    assert not r.success
    failed = [e for e in r.all_events if e.event_type_value == "ASSET_CHECK_EVALUATION" and not e.event_specific_data.passed]
    assert {e.event_specific_data.check_name for e in failed} == {"not_null_v", "row_count"}
    assert query(state, "SELECT id, v FROM lake.main.t ORDER BY id") == [(1, "a"), (2, "b")]  # rolled back


def test_retry_annotation_retries(tmp_path: Path, instance: Any) -> None:
    root, state = tmp_path / "p", tmp_path / "s"
    marker = tmp_path / "attempts"
    write(root, "x/flaky.py", flaky_step(marker, "ducklake://main/flaky", retries=2))
    defs = defs_for(root, state)
    r = dg.materialize(defs.assets, instance=instance, resources=defs.resources, raise_on_error=False)
    assert marker.read_text() == "2"
    assert r.success
    assert query(state, "SELECT attempt FROM lake.main.flaky") == [(2,)]


def test_postgres_steps_and_attach_by_uri(tmp_path: Path, instance: Any, pg_dsn: str) -> None:
    import psycopg

    with psycopg.connect(pg_dsn, autocommit=True) as c:
        c.execute("DROP TABLE IF EXISTS customers")
        c.execute("CREATE TABLE customers (id int primary key, name text, day date)")
        c.execute("INSERT INTO customers VALUES (1, 'Ann', '2025-01-02'), (2, 'O''Brien', '2025-01-02'), (3, 'Cy', '2025-01-03')")
    root, state = tmp_path / "p", tmp_path / "s"
    write(root, "crm/daily_customers.pg.sql", """
        -- Customers of a day, on the server.
        -- pipeline
        -- partitioned daily start=2025-01-01
        -- materialize datatable://crm/daily_customers
        SELECT id, name, 'x%' AS pct FROM customers WHERE day = CAST(%(partition)s AS date) OR day = $partition::date
    """.replace("CAST(%(partition)s AS date) OR day = ", ""))
    write(root, "crm/names.sql", """
        -- Names from PostgreSQL into the lake.
        -- pipeline
        -- materialize ducklake://main/names
        ATTACH 'datatable://crm' AS crm;
        SELECT id, upper(name) AS name FROM crm.public.daily_customers
    """)
    defs = defs_for(root, state, postgres_dsn=pg_dsn)
    assert run(defs, instance, [["datatable", "crm", "daily_customers"]], partition_key="2025-01-02").success
    with psycopg.connect(pg_dsn) as c:
        assert c.execute("SELECT id, name, pct, _partition FROM daily_customers ORDER BY id").fetchall() == [(1, "Ann", "x%", "2025-01-02"), (2, "O'Brien", "x%", "2025-01-02")]
    assert run(defs, instance, [["ducklake", "main", "names"]]).success
    assert query(state, "SELECT id, name FROM lake.main.names ORDER BY id") == [(1, "ANN"), (2, "O'BRIEN")]


def test_postgres_step_with_an_empty_first_result_keeps_the_result_types(tmp_path: Path, instance: Any, pg_dsn: str) -> None:
    import psycopg

    with psycopg.connect(pg_dsn, autocommit=True) as c:
        c.execute("DROP TABLE IF EXISTS payments")
        c.execute("CREATE TABLE payments (id bigint, amount numeric(12,2), paid_at timestamptz, ok boolean, day date, tags text[], meta jsonb)")
    root, state = tmp_path / "p", tmp_path / "s"
    write(root, "crm/daily_payments.pg.sql", """
        -- pipeline
        -- partitioned daily start=2025-01-01
        -- materialize datatable://crm/daily_payments on_schema_change=fail
        SELECT id, amount, paid_at, ok, tags, meta FROM payments WHERE day = $partition::date
    """)
    defs = defs_for(root, state, postgres_dsn=pg_dsn)
    assert run(defs, instance, partition_key="2025-01-01").success  # nothing paid that day: an empty first result
    with psycopg.connect(pg_dsn, autocommit=True) as c:
        types = dict(c.execute("SELECT column_name, data_type FROM information_schema.columns WHERE table_name = 'daily_payments'").fetchall())
        assert types == {"id": "bigint", "amount": "numeric", "paid_at": "timestamp with time zone", "ok": "boolean",
                         "tags": "ARRAY", "meta": "character varying", "_partition": "character varying"}
        c.execute("""INSERT INTO payments VALUES (1, 12.50, '2025-01-02 10:00+00', true, '2025-01-02', '{a,b}', '{"k": 1}')""")
    # the next day has rows: same schema, so on_schema_change=fail lets it through
    assert run(defs, instance, partition_key="2025-01-02").success
    with psycopg.connect(pg_dsn) as c:
        row = c.execute("SELECT id, amount, ok, tags, meta FROM daily_payments").fetchone()
    assert row is not None and row[0] == 1 and str(row[1]) == "12.50" and row[2] is True and row[3] == ["a", "b"] and '"k": 1' in row[4]


def test_observation_failures_are_logged_on_the_run(tmp_path: Path, instance: Any) -> None:
    root, state = tmp_path / "p", tmp_path / "s"
    write(root, "x/broken.sh", """
        # pipeline
        # materialize manual s3:///out/broken.parquet
        echo "not parquet" > "$LINEAGE_OUTPUT_PATH"
    """)
    result = run(defs_for(root, state), instance)
    assert result.success
    logs = [e.user_message for e in instance.all_logs(result.run_id) if e.dagster_event is None]
    assert any("no row count or schema for s3:///out/broken.parquet" in m for m in logs), logs


def test_consumer_columns_checked_against_captured_schema(tmp_path: Path, instance: Any) -> None:
    from lineage_defs.project import load_project
    from lineage_defs.plan.schemas import captured_schemas, column_warnings

    root, state = tmp_path / "p", tmp_path / "s"
    settings = LineageSettings(state_dir=str(state))
    write(root, "x/up.sql", """
        -- pipeline
        -- materialize ducklake://main/up
        SELECT 1 AS id, 'a' AS name
    """)
    write(root, "x/down.sql", """
        -- pipeline
        -- materialize ducklake://main/down
        SELECT id,
               nam AS name
        FROM lake.main.up
    """)
    assert run(defs_for(root, state), instance, [["ducklake", "main", "up"]]).success
    assert captured_schemas(settings) == captured_schemas(settings) == {"ducklake://main/up": ["id", "name"]}  # second read from the index
    assert (state / "cache" / "schemas-index.json").exists()
    warnings = column_warnings(load_project(root), captured_schemas(settings))
    assert [w.headline() for w in warnings] == [
        "x/down.sql:4:8: warning: ducklake://main/up has no column 'nam' in its last materialization — did you mean 'name'?"
    ]
    write(root, "x/up.sql", """
        -- pipeline
        -- materialize ducklake://main/up on_schema_change=sync
        SELECT 1 AS id, 'a' AS nam
    """)
    assert run(defs_for(root, state), instance, [["ducklake", "main", "up"]]).success
    assert captured_schemas(settings) == {"ducklake://main/up": ["id", "nam"]}  # the index follows new captures
    assert column_warnings(load_project(root), captured_schemas(settings)) == []


def test_steps_on_s3_objects(tmp_path: Path, instance: Any, s3_server: Any) -> None:
    import io

    import pyarrow.parquet as pq

    root, state = tmp_path / "p", tmp_path / "s"
    write(root, "x/drop.sh", """
        # pipeline
        # partitioned daily start=2025-01-01
        # materialize manual s3:///in/{partition}.csv
        printf 'id,v\\n1,%s\\n' "$PARTITION" > "$LINEAGE_OUTPUT_PATH"
    """)
    write(root, "x/day.sql", """
        -- pipeline
        -- partitioned daily start=2025-01-01
        -- materialize s3:///out/days.parquet
        SELECT id, v FROM read_csv('s3:///in/{partition}.csv', header = true, columns = {'id': 'INTEGER', 'v': 'VARCHAR'})
    """)
    defs = defs_for(root, state, **s3_server.settings())
    for day in ("2025-01-01", "2025-01-02", "2025-01-01"):
        assert run(defs, instance, partition_key=day).success
    client = s3_server.client()
    keys = sorted(o["Key"] for o in client.list_objects_v2(Bucket=s3_server.bucket, Prefix="in/")["Contents"])
    assert keys == ["in/2025-01-01.csv", "in/2025-01-02.csv"]  # the bash step's local file was uploaded
    body = client.get_object(Bucket=s3_server.bucket, Key="out/days.parquet")["Body"].read()
    rows = sorted(pq.read_table(io.BytesIO(body)).to_pylist(), key=lambda r: r["_partition"])
    assert rows == [{"id": 1, "v": "2025-01-01", "_partition": "2025-01-01"}, {"id": 1, "v": "2025-01-02", "_partition": "2025-01-02"}]
    assert not (state / "objects").exists() or not any((state / "objects").rglob("*.parquet"))


def test_steps_off_the_embedded_files_do_not_wait_for_their_lock(tmp_path: Path, pg_dsn: str) -> None:
    """A step on PostgreSQL alone runs while another process holds the embedded files' lock."""
    import threading

    from lineage_defs.project import load_project
    from lineage_defs.run.ranges import run_windows
    from lineage_defs.run.substrates import StateLock

    root, state = tmp_path / "p", tmp_path / "s"
    write(root, "crm/tiny.sql", """
        -- pipeline
        -- materialize datatable://crm/tiny_from_duckdb
        SELECT 42 AS answer
    """)
    write(root, "crm/local.sql", """
        -- pipeline
        -- materialize duckdb://warehouse/local
        SELECT 1 AS one
    """)
    project = load_project(root)
    steps = {s.path: s for s in project.steps}
    settings = LineageSettings(state_dir=str(state), pipelines_dir=str(root), postgres_dsn=pg_dsn)
    results: dict[str, Any] = {}

    def run_step(path: str) -> None:
        results[path] = list(run_windows(settings, steps[path], [None]))[0]

    with StateLock(settings):  # as if a long run held the DuckDB files
        pg_thread = threading.Thread(target=run_step, args=("crm/tiny.sql",), daemon=True)
        local_thread = threading.Thread(target=run_step, args=("crm/local.sql",), daemon=True)
        pg_thread.start()
        local_thread.start()
        pg_thread.join(timeout=60)
        local_thread.join(timeout=2)
        assert not pg_thread.is_alive() and results["crm/tiny.sql"].error is None
        assert local_thread.is_alive()  # the warehouse step waits for the lock ...
    local_thread.join(timeout=60)
    assert results["crm/local.sql"].error is None  # ... and runs once it is released
    import psycopg

    with psycopg.connect(pg_dsn) as c:
        assert c.execute("SELECT answer FROM tiny_from_duckdb").fetchall() == [(42,)]


def test_python_step_failures_reach_the_run(tmp_path: Path, instance: Any) -> None:
    root, state = tmp_path / "p", tmp_path / "s"
    script = """
        # pipeline
        # materialize ducklake://main/people
        # data_test not_null name
        import pandas as pd
        from lineage_defs import runtime
        runtime.write(pd.DataFrame({"id": [1, 2], "name": ["a", NAME]}))
    """
    write(root, "x/people.py", script.replace("NAME", '"b"'))
    assert run(defs_for(root, state), instance).success
    write(root, "x/people.py", script.replace("NAME", "None"))
    r = run(defs_for(root, state), instance)
    assert not r.success
    checks = [e.event_specific_data for e in r.all_events if e.event_type_value == "ASSET_CHECK_EVALUATION"]
    assert [(c.check_name, c.passed) for c in checks] == [("not_null_name", False)]
    assert query(state, "SELECT id, name FROM lake.main.people ORDER BY id") == [(1, "a"), (2, "b")]  # rolled back
    write(root, "x/people.py", script.replace('runtime.write(pd.DataFrame({"id": [1, 2], "name": ["a", NAME]}))', "raise ValueError('no upstream file for this day')"))
    r = run(defs_for(root, state), instance)
    failure = next(e for e in r.all_events if e.event_type_value == "STEP_FAILURE")
    error = str(failure.event_specific_data.error)
    assert "x/people.py:6:1: the step failed: ValueError: no upstream file for this day" in error
    assert "    raise ValueError('no upstream file for this day')" in error  # the line, quoted


def test_write_errors_name_the_script_and_its_select(tmp_path: Path, instance: Any) -> None:
    root, state = tmp_path / "p", tmp_path / "s"
    write(root, "x/m.sql", """
        -- pipeline
        -- materialize ducklake://main/m key=id
        SELECT * FROM (VALUES (1, 'a'), (1, 'b')) v(id, name)
    """)
    r = run(defs_for(root, state), instance)
    assert not r.success
    error = str(next(e for e in r.all_events if e.event_type_value == "STEP_FAILURE").event_specific_data.error)
    assert "x/m.sql:3:1: " in error and "duplicate" in error.lower()
    assert "    SELECT * FROM (VALUES (1, 'a'), (1, 'b')) v(id, name)" in error


def test_an_untyped_empty_frame_is_written_with_a_warning(tmp_path: Path, instance: Any) -> None:
    """A run with nothing to write (an event step without events) writes an empty DataFrame: its object
    columns have no type, and the table it creates would guess INTEGER — the run says so."""
    root, state = tmp_path / "p", tmp_path / "s"
    write(root, "x/empty.py", """
        # pipeline
        # materialize ducklake://main/empty_t
        import pandas as pd
        from lineage_defs import runtime

        runtime.write(pd.DataFrame([], columns=["payment_id", "amount"]))
    """)
    r = run(defs_for(root, state), instance)
    assert r.success
    warnings = [e.user_message for e in instance.all_logs(r.run_id) if e.level == 30 and e.user_message]  # logging.WARNING
    assert any("x/empty.py: columns payment_id, amount have no type" in m and "give the DataFrame dtypes" in m for m in warnings), warnings
