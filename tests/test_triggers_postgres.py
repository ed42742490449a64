"""`on postgres table=…`: the annotation, its sensor, and table changes → store on the suite's PostgreSQL
(wal_level=logical), through a replication slot advanced only after the store.

The end-to-end test runs the real `dagster-daemon`: N inserts (and an update
and a delete) → exactly those changes in an `append` target, the daemon's
whole process group SIGKILLed while M more are written → exactly N + M + 2.
The drain-level tests drive ``pull.drain`` directly: a chunk stored but whose
slot was never advanced (a crash between the two) is peeked again and stores
nothing new; a table without a replica identity and a dropped slot are clear
errors.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import psycopg
import pytest
from dagster import DagsterInstance, DefaultSensorStatus, build_sensor_context

from lineage_defs import LineageSettings, build_definitions
from lineage_defs.events.store import EventStore
from lineage_defs.parse import parse_header
from lineage_defs.parse.model import Postgres
from lineage_defs.triggers.pull import SourceUnavailable, drain
from lineage_defs.triggers.postgres.reader import PgReader, PgSource
from services import Daemon, wait_for
from triggers_support import finished, runs, stored, table_rows, write_steps


def _errors(line: str) -> list[str]:
    _, errors = parse_header("x.sql", f"-- {line}\nSELECT 1\n", "duckdb")
    return [e.headline() for e in errors]


def test_on_postgres_parses_table_connection_and_events() -> None:
    header, errors = parse_header("x.sql", "-- on postgres table=public.orders connection=crm events=delete,insert\nSELECT 1\n", "duckdb")
    assert not errors
    (t,) = header.events
    assert t == Postgres("public.orders", "crm", ("insert", "delete"), None, None, t.at)
    header, errors = parse_header("x.sql", "-- on postgres table=shop.orders\nSELECT 1\n", "duckdb")
    assert not errors and header.events[0].events == ("insert", "update", "delete") and header.events[0].connection == "default"


@pytest.mark.parametrize(
    "line, headline",
    [
        ("on postgres", "x.sql:1:15: 'on postgres' needs table= — write on postgres table=public.orders"),
        ("on postgres table=orders", "x.sql:1:22: bad table 'orders' — write <schema>.<table> in lower case, e.g. table=public.orders"),
        ("on postgres table=public.Orders", "x.sql:1:22: bad table 'public.Orders' — write <schema>.<table> in lower case, e.g. table=public.orders"),
        ("on postgres table=a.b events=insert,updat", "x.sql:1:33: bad events 'insert,updat' — did you mean 'update'?"),
        ("on postgres table=a.b events=truncate", "x.sql:1:33: bad events 'truncate' — write a comma list of insert, update, delete, e.g. events=insert,update"),
        ("on postgres tabel=a.b", "x.sql:1:16: unknown option 'tabel' — did you mean 'table'?"),
        ("on postgre table=a.b", "x.sql:1:7: unknown trigger 'postgre' — did you mean 'postgres'?"),
    ],
)
def test_bad_postgres_annotations_are_located_with_a_fix(line: str, headline: str) -> None:
    assert _errors(line) == [headline]


def test_the_postgres_sensor_is_running_names_its_table_and_says_what_to_set(tmp_path: Path) -> None:
    pipes = write_steps(tmp_path / "pipes", {"p/c.sql": "-- pipeline\n-- on postgres table=public.orders\n-- materialize duckdb://warehouse/c append\nSELECT value FROM _events\n"})
    defs = build_definitions(pipes, settings=LineageSettings(state_dir=str(tmp_path / "state")))
    sensor = next(s for s in defs.sensors if s.name == "p__c__postgres_public_orders")
    assert sensor.default_status == DefaultSensorStatus.RUNNING
    assert "on postgres table=public.orders" in (sensor.description or "") and "slot and publication lineage_p__c_public_orders" in (sensor.description or "")
    with DagsterInstance.ephemeral() as instance:
        result = sensor.evaluate_tick(build_sensor_context(instance=instance, repository_def=defs.get_repository_def()))
    assert not result.run_requests
    assert "no PostgreSQL for connection 'default': set LINEAGE_PG_DSN" in (result.skip_message or "")


def test_two_tables_of_one_step_get_two_slots_within_postgres_name_limit() -> None:
    from lineage_defs.triggers.postgres.reader import slot_name

    assert slot_name("shop__orders", "public.a") != slot_name("shop__orders", "public.b")
    long = [slot_name("p__" + "x" * 80, t) for t in ("public.a", "public.b")]
    assert all(len(n) == 63 for n in long) and long[0] != long[1]


def _conn(dsn: str) -> Any:
    return psycopg.connect(dsn, autocommit=True)


def _drop(dsn: str, name: str) -> None:
    with _conn(dsn) as c:
        c.execute("SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = %s", (name,))
        c.execute(f"DROP PUBLICATION IF EXISTS {name}")


def test_changes_are_stored_once_even_when_the_slot_was_not_advanced(pg_dsn: str, tmp_path: Path) -> None:
    name = "lineage_test_redelivery"
    with _conn(pg_dsn) as c:
        c.execute("CREATE TABLE public.cdc_a (id int PRIMARY KEY, note text, doc jsonb)")
    source = PgSource(pg_dsn, "public.cdc_a", name)
    try:
        with EventStore(tmp_path / "events.sqlite") as store:
            assert drain(store, "s", PgReader(source), max_messages=1000, budget_seconds=10).consumed == 0  # creates the slot
            with _conn(pg_dsn) as c:
                with c.transaction():
                    for i in range(30):
                        c.execute("INSERT INTO public.cdc_a VALUES (%s, %s, %s)", (i, f"n{i}", json.dumps({"n": i})))
                c.execute("UPDATE public.cdc_a SET note = 'changed' WHERE id = 3")
                c.execute("DELETE FROM public.cdc_a WHERE id = 4")
            # a crash after the store, before the slot's advance: the changes are peeked again
            crashed = PgReader(source)
            crashed.connect(store.positions("s"))
            chunk = crashed.read(1000)
            crashed.close()
            assert len(chunk.events) == 32 and store.add_messages("s", chunk.events) == 32
            got = drain(store, "s", PgReader(source), max_messages=1000, budget_seconds=10)
            assert (got.consumed, got.stored) == (32, 0), "peeked again, deduplicated by <commit LSN>:<ordinal>"
            assert drain(store, "s", PgReader(source), max_messages=1000, budget_seconds=10).consumed == 0, "advanced this time"
            (batch,) = store.cut_batches("s", 100)
            values = [json.loads(e.value) for e in store.events(batch.id)]
            assert values[0] == {"op": "insert", "table": "public.cdc_a", "new": {"id": 0, "note": "n0", "doc": {"n": 0}}, "old_key": None, "xid": values[0]["xid"]}
            assert [(v["op"], v["new"], v["old_key"]) for v in values[30:]] == [
                ("update", {"id": 3, "note": "changed", "doc": {"n": 3}}, {"id": 3}),
                ("delete", None, {"id": 4}),
            ]

            # the slot dropped behind the sensor's back: a clear error, not a silent fresh start
            with _conn(pg_dsn) as c:
                c.execute("SELECT pg_drop_replication_slot(%s)", (name,))
            with pytest.raises(SourceUnavailable, match=f"replication slot {name} was dropped; the changes since the last stored one .* are lost"):
                drain(store, "s", PgReader(source), max_messages=1000, budget_seconds=10)
    finally:
        _drop(pg_dsn, name)


def test_a_table_without_replica_identity_is_a_clear_error(pg_dsn: str, tmp_path: Path) -> None:
    with _conn(pg_dsn) as c:
        c.execute("CREATE TABLE public.cdc_nokey (a int, b text)")
    with EventStore(tmp_path / "events.sqlite") as store:
        with pytest.raises(SourceUnavailable, match=r"public.cdc_nokey has no replica identity.*REPLICA IDENTITY FULL, or write events=insert"):
            drain(store, "s", PgReader(PgSource(pg_dsn, "public.cdc_nokey", "lineage_test_nokey")), max_messages=10, budget_seconds=5)
        with pytest.raises(SourceUnavailable, match="PostgreSQL table public.cdc_missing does not exist"):
            drain(store, "s", PgReader(PgSource(pg_dsn, "public.cdc_missing", "lineage_test_missing")), max_messages=10, budget_seconds=5)
        # inserts only need no identity
        try:
            assert drain(store, "s", PgReader(PgSource(pg_dsn, "public.cdc_nokey", "lineage_test_nokey", ("insert",))), max_messages=10, budget_seconds=5).consumed == 0
        finally:
            _drop(pg_dsn, "lineage_test_nokey")


def test_a_change_without_a_usable_partition_value_is_rejected_and_stalls_nothing(pg_dsn: str, tmp_path: Path) -> None:
    from dagster import DynamicPartitionsDefinition

    from lineage_defs.triggers.keys import partition_function

    name = "lineage_test_rejected"
    with _conn(pg_dsn) as c:
        c.execute("CREATE TABLE public.cdc_regions (id int PRIMARY KEY, region text)")
    of = partition_function("json:$.new.region", DynamicPartitionsDefinition(name="regions"))
    source = PgSource(pg_dsn, "public.cdc_regions", name, ("insert",), of)
    try:
        with EventStore(tmp_path / "events.sqlite") as store:
            drain(store, "s", PgReader(source), max_messages=10, budget_seconds=5)
            with _conn(pg_dsn) as c:
                for i, region in enumerate(["eu", "us", "abc\n", None, "eu"]):
                    c.execute("INSERT INTO public.cdc_regions VALUES (%s, %s)", (i, region))
            got = drain(store, "s", PgReader(source), max_messages=100, budget_seconds=10)
            assert (got.consumed, got.stored, got.rejected) == (5, 5, 2)
            count, rejected = store.rejected("s", limit=5)
            assert count == 2 and all(r.reason.startswith("partition_from=json:$.new.region: ") for r in rejected), rejected
            assert sorted(b.partition_key for b in store.cut_batches("s", 100)) == ["eu", "us"], "the good changes are batched"
    finally:
        _drop(pg_dsn, name)


ROWS = "duckdb://warehouse/pg_rows"
STEP = f"""-- pipeline
-- on postgres table=public.cdc_orders max_batch=70
-- materialize {ROWS} append
SELECT json_extract_string(value, '$.op') AS op, CAST(json_extract_string(value, '$.new.id') AS BIGINT) AS id,
       CAST(json_extract_string(value, '$.old_key.id') AS BIGINT) AS old_id
FROM _events
"""
STREAM = "postgres:e2e__pg_rows:public.cdc_orders"


@pytest.mark.daemon
def test_table_changes_land_once_across_a_daemon_crash(pg_dsn: str, tmp_path: Path) -> None:
    with _conn(pg_dsn) as c:
        c.execute("CREATE TABLE public.cdc_orders (id int PRIMARY KEY, amount int)")
    pipelines = write_steps(tmp_path / "pipelines", {"e2e/pg_rows.sql": STEP})
    state = tmp_path / "state"
    daemon = Daemon(tmp_path, pipelines, state, {"LINEAGE_PG_DSN": pg_dsn})
    logs = daemon.log_tail
    n, m = 150, 100
    daemon.start()
    try:
        # the first tick creates the publication and the slot: changes from then on are kept
        def slot() -> Any:
            with _conn(pg_dsn) as c:
                return c.execute("SELECT 1 FROM pg_replication_slots WHERE slot_name = 'lineage_e2e__pg_rows_public_cdc_orders'").fetchone()

        wait_for("the slot", slot, 120, logs)
        with _conn(pg_dsn) as c:
            for i in range(n):
                c.execute("INSERT INTO public.cdc_orders VALUES (%s, %s)", (i, i))
            c.execute("UPDATE public.cdc_orders SET amount = -1 WHERE id = 7")
            c.execute("DELETE FROM public.cdc_orders WHERE id = 8")
        wait_for("the first changes in the store", lambda: stored(state, STREAM) > 0, 120, logs)

        def write_rest() -> None:
            with _conn(pg_dsn) as c:
                for start in range(n, n + m, 20):
                    with c.transaction():
                        for i in range(start, start + 20):
                            c.execute("INSERT INTO public.cdc_orders VALUES (%s, %s)", (i, i))
                    time.sleep(0.3)

        writer = threading.Thread(target=write_rest)
        writer.start()
        time.sleep(0.5)
        assert daemon.crash(), "the daemon's whole process group was SIGKILLed"
        time.sleep(1)
        daemon.start()
        writer.join()
        total = n + m + 2
        wait_for(f"{total} rows", lambda: len(table_rows(state, ROWS)) >= total, 240, logs)
        instance = daemon.instance()
        wait_for("all runs finished", lambda: finished(instance), 120, logs)
        rows = table_rows(state, ROWS, "op, id, old_id")
        assert sorted(r[1] for r in rows if r[0] == "insert") == list(range(n + m)), "every insert exactly once"
        assert sorted(r for r in rows if r[0] != "insert") == [("delete", None, 8), ("update", 7, 7)]
        assert len(rows) == total
        assert len(runs(instance, **{"dagster/sensor_name": "e2e__pg_rows__postgres_public_cdc_orders"})) >= 2
    finally:
        daemon.stop()
        _drop(pg_dsn, "lineage_e2e__pg_rows_public_cdc_orders")
