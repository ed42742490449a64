"""Set-based range runs (``partitioned … time_column= [batch=]``) on real engines.

Partition keys derived from the time column are Dagster's own (hourly across
a DST switch, weekly, monthly, formats, time zones); a batch is one
transaction; data tests are judged per partition; rows outside the batch
window are refused; the result equals running the partitions one by one;
DuckLake, DuckDB, PostgreSQL and S3 objects (one object, or one per partition).
"""

from __future__ import annotations

import datetime as dt
import io
import textwrap
import zoneinfo
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import dagster as dg
import pytest
from dagster import PartitionKeyRange
from dagster._core.storage.tags import ASSET_PARTITION_RANGE_END_TAG, ASSET_PARTITION_RANGE_START_TAG

from lineage_defs import LineageSettings, build_definitions
from lineage_defs.assets.partitions import partitions_def
from lineage_defs.project import load_project
from lineage_defs.run.context import PartitionWindow
from lineage_defs.run.ranges import run_windows
from lineage_defs.run.substrates import Session

RAW = """CREATE OR REPLACE TABLE {table} AS
SELECT i AS id, CASE WHEN i = {null_at} THEN NULL ELSE 'v' || i END AS v,
       TIMESTAMP '2025-01-01' + INTERVAL (i * 8) HOUR AS ts
FROM range(15) t(i)"""  # 3 rows a day, 2025-01-01 .. 2025-01-05


def write(root: Path, rel: str, text: str) -> None:
    p = root / rel
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(textwrap.dedent(text).lstrip())


def step_of(root: Path, path: str) -> Any:
    project = load_project(root)
    assert not project.errors, [e.render() for e in project.errors]
    return next(s for s in project.steps if s.path == path)


def windows_for(step: Any, first: str, last: str) -> list[PartitionWindow | None]:
    pdef = partitions_def(step.partitioning, step.name)
    assert isinstance(pdef, dg.TimeWindowPartitionsDefinition)
    out: list[PartitionWindow | None] = []
    for k in pdef.get_partition_keys_in_range(PartitionKeyRange(first, last)):
        w = pdef.time_window_for_partition_key(k)
        out.append(PartitionWindow(k, w.start, w.end))
    return out


def query(settings: LineageSettings, sql: str) -> list[tuple[Any, ...]]:
    with Session(settings) as s:
        return s.conn.execute(sql).fetchall()


def materializations(result: dg.ExecuteInProcessResult) -> list[Any]:
    return [e.event_specific_data.materialization for e in result.all_events if e.event_type_value == "ASSET_MATERIALIZATION"]


RANGE = {ASSET_PARTITION_RANGE_START_TAG: "2025-01-01", ASSET_PARTITION_RANGE_END_TAG: "2025-01-05"}
BODY = "SELECT id, v, ts FROM lake.main.raw WHERE ts >= $partition_start::TIMESTAMP AND ts < $partition_end::TIMESTAMP"


# -- through Dagster -------------------------------------------------------------------------
def test_range_runs_set_based_and_reports_each_partition(tmp_path: Path) -> None:
    root, state = tmp_path / "p", tmp_path / "s"
    settings = LineageSettings(state_dir=str(state), pipelines_dir=str(root))
    query(settings, RAW.format(table="lake.main.raw", null_at=7))  # 2025-01-03 has a NULL v
    header = "-- pipeline\n-- data_test not_null v severity=warn\n-- data_test unique id\n-- data_test row_count min=3\n-- data_test checks/no_four.sql severity=warn\n"
    write(root, "x/checks/no_four.sql", "SELECT * FROM _slice WHERE id = 4 AND $partition = '2025-01-02'")  # custom tests see their partition
    write(root, "x/batched.sql", header + "-- partitioned daily start=2025-01-01 time_column=ts batch=2\n-- materialize ducklake://main/batched\n" + BODY)
    write(root, "x/one_by_one.sql", header + "-- partitioned daily start=2025-01-01\n-- materialize ducklake://main/one_by_one\n" + BODY)
    defs = build_definitions(root, settings=LineageSettings(state_dir=str(state)))
    with dg.instance_for_test() as instance:
        r = dg.materialize(defs.assets, instance=instance, resources=defs.resources, tags=RANGE, raise_on_error=False)
        assert r.success
        mats = {(m.asset_key.path[-1], m.partition): m.metadata for m in materializations(r)}
        days = [f"2025-01-0{d}" for d in range(1, 6)]
        for name in ("batched", "one_by_one"):
            assert sorted(p for n, p in mats if n == name) == days
            assert all(mats[(name, d)]["dagster/row_count"].value == 3 for d in days)
            assert sorted(instance.get_materialized_partitions(dg.AssetKey(["ducklake", "main", name]))) == days
        # one transaction per batch: partitions of a batch share the DuckLake snapshot
        snap = [mats[("batched", d)]["lineage/ducklake_snapshot_id"].value for d in days]
        assert snap[0] == snap[1] != snap[2] == snap[3] != snap[4]
        assert len(set(mats[("one_by_one", d)]["lineage/ducklake_snapshot_id"].value for d in days)) == 5
        # checks judged per partition: the warn check failed on the 3rd only
        checks = {(e.event_specific_data.asset_key.path[-1], e.event_specific_data.check_name): e.event_specific_data for e in r.all_events if e.event_type_value == "ASSET_CHECK_EVALUATION"}
        for name in ("batched", "one_by_one"):
            nn = checks[(name, "not_null_v")]
            assert not nn.passed and nn.metadata["failed_partitions"].value == ["2025-01-03"] and nn.metadata["failing_rows"].value == 1
            assert checks[(name, "unique_id")].passed and checks[(name, "row_count")].passed
            assert checks[(name, "no_four")].metadata["failed_partitions"].value == ["2025-01-02"]
    same = "SELECT id, v, ts, _partition FROM lake.main.{} ORDER BY id"
    assert query(settings, same.format("batched")) == query(settings, same.format("one_by_one"))
    assert query(settings, "SELECT count(*) FROM lake.main.batched WHERE _partition <> strftime(ts, '%Y-%m-%d')") == [(0,)]


def test_a_failing_batch_rolls_back_whole_and_the_others_commit(tmp_path: Path) -> None:
    root, state = tmp_path / "p", tmp_path / "s"
    settings = LineageSettings(state_dir=str(state), pipelines_dir=str(root))
    query(settings, RAW.format(table="lake.main.raw", null_at=7))
    write(root, "x/b.sql", "-- pipeline\n-- data_test not_null v\n-- partitioned daily start=2025-01-01 time_column=ts batch=2\n-- materialize ducklake://main/b\n" + BODY)
    defs = build_definitions(root, settings=LineageSettings(state_dir=str(state)))
    with dg.instance_for_test() as instance:
        r = dg.materialize(defs.assets, instance=instance, resources=defs.resources, tags=RANGE, raise_on_error=False)
        assert not r.success
        assert sorted(instance.get_materialized_partitions(dg.AssetKey(["ducklake", "main", "b"]))) == ["2025-01-01", "2025-01-02", "2025-01-05"]
        error = str(next(e for e in r.all_events if e.event_type_value == "STEP_FAILURE").event_specific_data.error)
        assert "2 of 5 partitions failed: 2025-01-03, 2025-01-04" in error and "the others are materialized" in error
        assert "not_null_v [2025-01-03]: 1 failing" in error
        check = next(e.event_specific_data for e in r.all_events if e.event_type_value == "ASSET_CHECK_EVALUATION")
        assert not check.passed and check.metadata["failed_partitions"].value == ["2025-01-03"]
    assert query(settings, "SELECT _partition, count(*) FROM lake.main.b GROUP BY 1 ORDER BY 1") == [("2025-01-01", 3), ("2025-01-02", 3), ("2025-01-05", 3)]


# -- the run layer -------------------------------------------------------------------------------
def test_a_cancelled_range_run_stops_in_the_partition_it_was_running(tmp_path: Path) -> None:
    """A cancellation's SIGINT during a partition's query ends a range run there (DuckDB reports it as
    `RuntimeError('Query interrupted')`, the interrupt as its cause): the later partitions do not run,
    and the ones committed before are reported materialized."""
    import os
    import signal
    import threading
    import time

    root, state = tmp_path / "p", tmp_path / "s"
    write(root, "x/slow.sql", """
        -- pipeline
        -- partitioned daily start=2025-01-01
        -- materialize ducklake://main/slow
        -- data_test not_null n
        SELECT count(*) AS n FROM range(40000000000) t(i)
        WHERE $partition_start::DATE <> DATE '2025-01-01' AND i % 7 = 3
    """)  # the first day's filter is false (no scan at all); the second day counts for minutes
    defs = build_definitions(root, settings=LineageSettings(state_dir=str(state)))
    key = dg.AssetKey(["ducklake", "main", "slow"])

    class Stray(BaseException):
        """A SIGINT outside Dagster's own handler (which turns it into its interrupt) must not stop pytest."""

    def stray(*_: Any) -> None:
        raise Stray()

    previous = signal.signal(signal.SIGINT, stray)
    timer = threading.Timer(4, os.kill, (os.getpid(), signal.SIGINT))  # as Dagster's termination thread does
    try:
        with dg.instance_for_test() as instance:
            t0 = time.monotonic()
            timer.start()
            tags = {ASSET_PARTITION_RANGE_START_TAG: "2025-01-01", ASSET_PARTITION_RANGE_END_TAG: "2025-01-03"}
            r = dg.materialize(defs.assets, instance=instance, resources=defs.resources, tags=tags, raise_on_error=False)
            took = time.monotonic() - t0
            assert not r.success
            assert took < 60  # stopped in the second day's query, not after it
            assert [m.partition for m in materializations(r)] == ["2025-01-01"]
            assert instance.get_materialized_partitions(key) == {"2025-01-01"}
            checks = [e.event_specific_data for e in r.all_events if e.event_type_value == "ASSET_CHECK_EVALUATION"]
            assert [(c.check_name, c.passed) for c in checks] == [("not_null_n", True)]  # the first day's, judged before the cancel
    finally:
        timer.cancel()
        signal.signal(signal.SIGINT, previous)
    assert query(LineageSettings(state_dir=str(state)), "SELECT n FROM lake.main.slow") == [(0,)]  # the first day only


def _losing_handler(got: list[int]) -> tuple[Any, Any]:
    """Stands for Dagster's handler when its interrupt is lost: raised in a garbage-collection callback
    (Python prints "Exception ignored in …" and goes on), so it never reaches the step. Like Dagster's,
    it answers SIGTERM too. Returns the handlers it replaced."""
    import signal

    def lose(signum: int, _frame: Any) -> None:
        got.append(signum)

    return signal.signal(signal.SIGINT, lose), signal.signal(signal.SIGTERM, lose)


def _restore(previous: tuple[Any, Any]) -> None:
    import signal

    signal.signal(signal.SIGINT, previous[0])
    signal.signal(signal.SIGTERM, previous[1])


def _run_cancelled_with_a_lost_interrupt(settings: LineageSettings, step: Any, signum: int) -> float:
    """Run ``step``; 2 s in, a cancel's signal whose interrupt is lost. It must stop as cancelled: how long it took."""
    import os
    import threading
    import time

    got: list[int] = []
    previous = _losing_handler(got)
    timer = threading.Timer(2, os.kill, (os.getpid(), signum))
    try:
        t0 = time.monotonic()
        timer.start()
        with pytest.raises(KeyboardInterrupt):
            list(run_windows(settings, step, [None]))
        took = time.monotonic() - t0
    finally:
        timer.cancel()
        _restore(previous)
    assert got == [signum]  # the handler in place still got the signal
    return took


@pytest.mark.parametrize("signame", ["SIGINT", "SIGTERM"])
def test_a_cancel_whose_interrupt_is_lost_still_stops_the_query(tmp_path: Path, signame: str) -> None:
    """The signal of a cancel (SIGINT; SIGTERM from Kubernetes or Celery) arrives during the step's query,
    and the interrupt it raises is lost: the step's own handler (run.cancel) interrupts the query, the
    step stops as cancelled, nothing is written."""
    import signal

    root, state = tmp_path / "p", tmp_path / "s"
    settings = LineageSettings(state_dir=str(state), pipelines_dir=str(root))
    write(root, "x/slow.sql", """
        -- pipeline
        -- materialize ducklake://main/slow
        SELECT count(*) AS n FROM range(3000000000) t(i) WHERE i % 7 = 3
    """)  # about 15 s of counting here, unless it is interrupted
    took = _run_cancelled_with_a_lost_interrupt(settings, step_of(root, "x/slow.sql"), getattr(signal, signame))
    assert took < 8, took  # stopped in the query, not after it
    assert query(settings, "SELECT count(*) FROM information_schema.tables WHERE table_name = 'slow'") == [(0,)]


def test_a_cancel_whose_interrupt_is_lost_still_stops_a_postgresql_query(tmp_path: Path, pg_dsn: str) -> None:
    """The same for a PostgreSQL step (``.pg.sql``): the server cancels its query."""
    import signal

    import psycopg

    root, state = tmp_path / "p", tmp_path / "s"
    settings = LineageSettings(state_dir=str(state), pipelines_dir=str(root), postgres_dsn=pg_dsn)
    write(root, "x/slow.pg.sql", """
        -- pipeline
        -- materialize datatable://crm/slow_pg_cancelled
        SELECT 1 AS n FROM pg_sleep(20)
    """)
    took = _run_cancelled_with_a_lost_interrupt(settings, step_of(root, "x/slow.pg.sql"), signal.SIGINT)
    assert took < 8, took  # not after the 20 s sleep
    with psycopg.connect(pg_dsn) as c:
        assert c.execute("SELECT to_regclass('slow_pg_cancelled')").fetchone() == (None,)


def test_a_cancel_lost_before_the_first_statement_stops_the_step(tmp_path: Path) -> None:
    """A SIGINT whose interrupt was lost while the step was starting (no query running to interrupt):
    the step's first statement does not start, and nothing is written."""
    import os
    import signal

    from lineage_defs.run import cancel

    root, state = tmp_path / "p", tmp_path / "s"
    settings = LineageSettings(state_dir=str(state), pipelines_dir=str(root))
    write(root, "x/quick.sql", "-- pipeline\n-- materialize ducklake://main/quick\nSELECT 1 AS n\n")
    got: list[int] = []
    previous = _losing_handler(got)
    try:
        with cancel.watching():  # the step's watch (assets.execute), entered when the step started
            os.kill(os.getpid(), signal.SIGINT)
            with pytest.raises(KeyboardInterrupt):
                list(run_windows(settings, step_of(root, "x/quick.sql"), [None]))
    finally:
        _restore(previous)
    assert got == [signal.SIGINT]
    assert not cancel.cancelled()  # forgotten once the step's work ended: nothing else of the process stops
    assert query(settings, "SELECT count(*) FROM information_schema.tables WHERE table_name = 'quick'") == [(0,)]
    assert list(run_windows(settings, step_of(root, "x/quick.sql"), [None]))[0].error is None  # a later step runs as usual
    assert query(settings, "SELECT n FROM lake.main.quick") == [(1,)]


def test_a_cancel_whose_interrupt_is_lost_still_reaches_the_step_process() -> None:
    """A Python or Bash step's process gets the cancel's SIGINT from the step's own handler when the run
    worker's interrupt is lost (Dagster's Pipes client would have forwarded it); other children do not."""
    import os
    import signal
    import subprocess
    import sys
    import time

    from lineage_defs.run import cancel
    from lineage_defs.run.launch import interrupt_steps

    # (SIGINT as in a step process, whose parent handles it in Python: a SIGINT ignored in this test's
    # process — another test can leave it so — would be inherited through exec)
    sleep = "import signal, time; signal.signal(signal.SIGINT, signal.default_int_handler); print('ready', flush=True); time.sleep(30)"
    # (a step process is `python -m lineage_defs.run.launch`: this one only looks like one)
    step = subprocess.Popen([sys.executable, "-c", sleep, "-m", "lineage_defs.run.launch"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    other = subprocess.Popen([sys.executable, "-c", sleep], stdout=subprocess.PIPE, text=True)
    got: list[int] = []
    previous = _losing_handler(got)
    try:
        assert step.stdout is not None and other.stdout is not None
        assert step.stdout.readline() == other.stdout.readline() == "ready\n"  # both are running Python
        with cancel.watching(), cancel.on_cancel(interrupt_steps):
            os.kill(os.getpid(), signal.SIGINT)
            assert step.wait(timeout=10) != 0  # stopped by KeyboardInterrupt
        assert other.poll() is None
    finally:
        _restore(previous)
        for p in (step, other):
            p.kill()
            p.wait()
    assert got == [signal.SIGINT]


def test_a_step_left_unfinished_does_not_disarm_the_next_steps_watch() -> None:
    """Dagster may stop iterating a step's generator, whose ``watching()`` block then stays open until
    the generator is collected, and it puts its own handler back: the next step's watch still works."""
    import os
    import signal

    from lineage_defs.run import cancel

    def step() -> Iterator[None]:
        with cancel.watching():
            yield

    got: list[int] = []
    previous = _losing_handler(got)
    try:
        left = step()
        next(left)  # suspended in its watch, never resumed
        _losing_handler(got)  # as Dagster restores its handler after each next() of a step
        with cancel.watching():
            os.kill(os.getpid(), signal.SIGINT)
            assert cancel.cancelled()  # this watch's handler was in place
            left.close()  # the block left open ends now, during this one's work: it changes nothing
            assert cancel.cancelled()
            with pytest.raises(KeyboardInterrupt):
                cancel.raise_if_cancelled()
        assert not cancel.cancelled()
    finally:
        _restore(previous)
    assert got == [signal.SIGINT]


def test_rows_outside_the_batch_window_are_refused(tmp_path: Path) -> None:
    root, state = tmp_path / "p", tmp_path / "s"
    settings = LineageSettings(state_dir=str(state), pipelines_dir=str(root))
    query(settings, RAW.format(table="lake.main.raw", null_at=-1))
    write(root, "x/all.sql", """
        -- pipeline
        -- partitioned daily start=2025-01-01 time_column=ts
        -- materialize ducklake://main/everything
        SELECT id, ts FROM lake.main.raw
        UNION ALL SELECT 99, NULL
    """)
    step = step_of(root, "x/all.sql")
    results = list(run_windows(settings, step, windows_for(step, "2025-01-01", "2025-01-02")))
    assert [r.partition for r in results] == ["2025-01-01", "2025-01-02"]
    msg = str(results[0].error)
    assert results[0].error is results[1].error or str(results[1].error) == msg
    assert "9 rows with ts outside [2025-01-01 00:00:00, 2025-01-03 00:00:00) (from 2025-01-03 00:00:00 to 2025-01-05 16:00:00)" in msg
    assert "1 row with ts NULL" in msg and "x/all.sql:4:1" in msg and "$partition_start::TIMESTAMP" in msg
    assert query(settings, "SELECT count(*) FROM duckdb_tables() WHERE table_name = 'everything'") == [(0,)]


def test_time_column_must_be_a_time(tmp_path: Path) -> None:
    root, state = tmp_path / "p", tmp_path / "s"
    settings = LineageSettings(state_dir=str(state), pipelines_dir=str(root))
    write(root, "x/t.sql", """
        -- pipeline
        -- partitioned daily start=2025-01-01 time_column=day
        -- materialize duckdb://warehouse/t
        SELECT '2025-01-01' AS dya
    """)
    step = step_of(root, "x/t.sql")
    r = list(run_windows(settings, step, windows_for(step, "2025-01-01", "2025-01-01")))[0]
    assert "time_column 'day' is not a column of the SELECT (columns: dya) — did you mean 'dya'?" in str(r.error)
    write(root, "x/t.sql", (root / "x/t.sql").read_text().replace("AS dya", "AS day"))
    step = step_of(root, "x/t.sql")
    r = list(run_windows(settings, step, windows_for(step, "2025-01-01", "2025-01-01")))[0]
    assert "time_column 'day' is VARCHAR" in str(r.error) and "CAST(day AS TIMESTAMP)" in str(r.error)
    write(root, "x/t.sql", (root / "x/t.sql").read_text().replace("daily", "hourly").replace("'2025-01-01' AS day", "DATE '2025-01-01' AS day"))
    step = step_of(root, "x/t.sql")
    r = list(run_windows(settings, step, windows_for(step, "2025-01-01-00:00", "2025-01-01-03:00")))[0]
    assert "time_column 'day' is DATE" in str(r.error)


KINDS = [
    # (partitioned options, column type, range): keys must be exactly Dagster's
    ("hourly tz=Europe/Berlin format=%Y%m%d%H start=2025-03-29", "TIMESTAMPTZ", ("2025032922", "2025033004")),  # a 23-hour day
    ("daily tz=America/New_York start=2025-11-01", "TIMESTAMPTZ", ("2025-11-01", "2025-11-04")),
    ("daily format=%d.%m.%Y start=2025-01-01", "TIMESTAMP", ("30.01.2025", "02.02.2025")),
    ("weekly start=2025-01-01", "TIMESTAMP", ("2025-01-05", "2025-02-02")),
    ("monthly tz=Asia/Kathmandu start=2024-11-01", "TIMESTAMPTZ", ("2024-11-01", "2025-02-01")),
    ("monthly start=2024-11-01", "DATE", ("2024-11-01", "2025-02-01")),
]


@pytest.mark.parametrize(("options", "typ", "span"), KINDS, ids=[k[0].split()[0] + "-" + k[1] for k in KINDS])
def test_partition_keys_are_daggers_own(tmp_path: Path, options: str, typ: str, span: tuple[str, str]) -> None:
    root, state = tmp_path / "p", tmp_path / "s"
    settings = LineageSettings(state_dir=str(state), pipelines_dir=str(root))
    write(root, "x/k.sql", f"""
        -- pipeline
        -- partitioned {options} time_column=t batch=3
        -- materialize duckdb://warehouse/k
        SELECT CAST(t AS {typ}) AS t FROM (
            SELECT unnest(range(CAST($partition_start AS TIMESTAMPTZ), CAST($partition_end AS TIMESTAMPTZ), INTERVAL 7 MINUTE)) AS t
            UNION ALL SELECT CAST($partition_start AS TIMESTAMPTZ)
        ) WHERE CAST(t AS {typ}) >= CAST($partition_start AS {typ}) AND CAST(t AS {typ}) < CAST($partition_end AS {typ})
    """)
    step = step_of(root, "x/k.sql")
    wins = windows_for(step, *span)
    results = list(run_windows(settings, step, wins))
    assert [r.error for r in results] == [None] * len(wins)
    pdef = partitions_def(step.partitioning, step.name)
    assert isinstance(pdef, dg.TimeWindowPartitionsDefinition)
    tz = zoneinfo.ZoneInfo(step.partitioning.tz or "UTC")
    rows = query(settings, "SELECT t, _partition FROM warehouse.main.k")
    assert len(rows) > 3 * len(wins)
    for t, key in rows:
        if not isinstance(t, dt.datetime):  # a DATE: midnight in the partitions' zone
            t = dt.datetime.combine(t, dt.time())
        instant = t if t.tzinfo else t.replace(tzinfo=tz)  # a naive time is wall time in the partitions' zone
        assert key == pdef.get_partition_key_for_timestamp(instant.timestamp()), (t, key)
    counts = dict(query(settings, "SELECT _partition, count(*) FROM warehouse.main.k GROUP BY 1"))
    assert {r.partition: r.rows for r in results} == {w.key: counts.get(w.key, 0) for w in wins if w is not None}


def test_substrates_and_idempotent_reruns(tmp_path: Path, pg_dsn: str, s3_server: Any) -> None:
    import psycopg
    import pyarrow.parquet as pq

    root, state = tmp_path / "p", tmp_path / "s"
    settings = LineageSettings(state_dir=str(state), pipelines_dir=str(root), postgres_dsn=pg_dsn, **s3_server.settings())
    query(settings, RAW.format(table="warehouse.main.raw", null_at=-1))
    with psycopg.connect(pg_dsn, autocommit=True) as c:
        c.execute("DROP TABLE IF EXISTS pg_raw")
        c.execute("CREATE TABLE pg_raw AS SELECT i AS id, TIMESTAMP '2025-01-01' + i * INTERVAL '8 hours' AS ts FROM generate_series(0, 14) i")
    body = "SELECT id, ts FROM warehouse.main.raw WHERE ts >= $partition_start::TIMESTAMP AND ts < $partition_end::TIMESTAMP"
    targets = {
        "x/dl.sql": "ducklake://main/tc_dl",
        "x/wh.sql": "duckdb://warehouse/tc_wh",
        "x/pg.sql": "datatable://crm/tc_pg",
        "x/one.sql": "s3:///tc/all.parquet",
        "x/each.sql": "s3:///tc/each/{partition}.parquet",
    }
    for path, uri in targets.items():
        write(root, path, f"-- pipeline\n-- partitioned daily start=2025-01-01 time_column=ts batch=2\n-- materialize {uri}\n{body}\n")
    write(root, "x/server.pg.sql", """
        -- pipeline
        -- partitioned daily start=2025-01-01 time_column=ts
        -- materialize datatable://crm/tc_server
        SELECT id, ts FROM pg_raw WHERE ts >= CAST($partition_start AS timestamptz) AT TIME ZONE 'UTC' AND ts < CAST($partition_end AS timestamptz) AT TIME ZONE 'UTC'
    """)
    expected = [(i, f"2025-01-0{i // 3 + 1}") for i in range(15)]
    client = s3_server.client()
    for _ in range(2):  # a re-run replaces the same partitions
        for path in (*targets, "x/server.pg.sql"):
            step = step_of(root, path)
            results = list(run_windows(settings, step, windows_for(step, "2025-01-01", "2025-01-05")))
            assert [r.error for r in results] == [None] * 5, path
            assert [r.rows for r in results] == [3] * 5
        for path in ("x/dl.sql", "x/wh.sql"):
            table = {"x/dl.sql": "lake.main.tc_dl", "x/wh.sql": "warehouse.main.tc_wh"}[path]
            assert query(settings, f"SELECT id, _partition FROM {table} ORDER BY id") == expected
        with psycopg.connect(pg_dsn) as c:
            for table in ("tc_pg", "tc_server"):
                assert c.execute(f"SELECT id, _partition FROM {table} ORDER BY id").fetchall() == expected
        body_one = client.get_object(Bucket=s3_server.bucket, Key="tc/all.parquet")["Body"].read()
        assert sorted((r["id"], r["_partition"]) for r in pq.read_table(io.BytesIO(body_one)).to_pylist()) == expected
        for d in range(1, 6):
            obj = client.get_object(Bucket=s3_server.bucket, Key=f"tc/each/2025-01-0{d}.parquet")["Body"].read()
            assert sorted(r["id"] for r in pq.read_table(io.BytesIO(obj)).to_pylist()) == [i for i, p in expected if p == f"2025-01-0{d}"]
