"""Managed writes when things go wrong or get tricky, on real engines.

Idempotence under any order of partition writes (hypothesis), duplicate keys,
a failing audit, hostile partition keys, schema drift, scd2 options, and a
writer SIGKILLed in the middle of its transaction.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import SUBSTRATES, WriteTarget
from lineage_defs.errors import RunError
from lineage_defs.settings import LineageSettings
from lineage_defs.run.substrates import Session
from lineage_defs.run.write import WriteRequest, write

V1 = "SELECT * FROM (VALUES (1, 'a', 10), (2, 'b', 20)) AS v(id, name, amount)"
T1, T2 = datetime(2024, 1, 1), datetime(2024, 1, 2)


# -- idempotence ------------------------------------------------------------------------
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(st.sampled_from(["2024-01-01", "2024-01-02", "2024-01-03"]), st.integers(0, 3)), min_size=1, max_size=8))
def test_partition_writes_in_any_order_leave_the_last_write_of_each(write_target: Any, writes: list[tuple[str, int]]) -> None:
    t = write_target("ducklake", "prop")
    last: dict[str, int] = {}
    for partition, n in writes:
        # n rows whose values identify the write; n=0 writes an empty partition
        t.write("partition_replace", f"SELECT range AS i, {n} AS n FROM range({n})", partition=partition)
        last[partition] = n
    expected = sorted((i, n, p) for p, n in last.items() for i in range(n))
    assert t.rows() == expected


PARTS = ["2024-01-01", "2024-01-02", "2024-01-03", "2024-01-04"]
# a write: (partitions it replaces, rows per partition); one partition = a single write, more = a set-based batch
WRITES = st.tuples(st.lists(st.sampled_from(PARTS), min_size=1, max_size=4, unique=True), st.integers(0, 3))


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(WRITES, min_size=1, max_size=8), st.sampled_from(["ducklake", "postgres", "parquet"]))
def test_batches_and_single_writes_in_any_order_leave_the_last_write_of_each(write_target: Any, writes: list[tuple[list[str], int]], substrate: str) -> None:
    t = write_target(substrate, "batchprop")
    last: dict[str, int] = {}
    for k, (partitions, n) in enumerate(writes):
        if len(partitions) == 1:
            t.write("partition_replace", f"SELECT range AS i, {n} AS n FROM range({n})", partition=partitions[0])
        else:
            # the batch's rows carry their partition; a partition of the batch with no rows is emptied
            rows = " UNION ALL ".join(f"SELECT range AS i, {n} AS n, '{p}' AS _partition FROM range({n if j % 2 == 0 else 0})" for j, p in enumerate(partitions))
            t.write("partition_replace", rows, partitions=tuple(partitions))
        for j, p in enumerate(partitions):
            last[p] = n if len(partitions) == 1 or j % 2 == 0 else 0
    expected = sorted((i, n, p) for p, n in last.items() for i in range(n))
    assert t.rows() == expected


@pytest.mark.parametrize("substrate", ("ducklake", "duckdb", "postgres"))
def test_unstaged_slices_are_read_once_by_the_write(write_target: Any, substrate: str) -> None:
    """No staging copy: the write's INSERT runs the bound SELECT and counts its rows; a failing SELECT writes nothing."""
    t = write_target(substrate)
    query = "(SELECT range AS i, $tag AS tag FROM range($n))"
    for partition, tag, n, known in (("p1", "a", 3, None), ("p2", "b", 2, (("i", "BIGINT"), ("tag", "VARCHAR"))), ("p1", "c", 1, None)):
        r = write(t.session, WriteRequest(t.uri, "partition_replace", query, partition=partition, slice_params={"tag": tag, "n": n}, slice_columns=known))
        assert r.rows == n
        assert all("'a'" not in sql and "'c'" not in sql for sql in r.sql)  # the values stayed bound
    before = [(0, "b", "p2"), (0, "c", "p1"), (1, "b", "p2")]
    assert t.rows() == before
    with pytest.raises(RunError, match="statement failed: Conversion Error"):
        write(t.session, WriteRequest(t.uri, "partition_replace", "(SELECT CAST($tag AS INTEGER) AS i, $tag AS tag)", partition="p3", slice_params={"tag": "x"}))
    assert t.rows() == before


# -- merge keys ------------------------------------------------------------------------
@pytest.mark.parametrize("substrate", ("ducklake", "postgres", "parquet"))
def test_merge_duplicate_keys_fail_before_writing(write_target: Any, substrate: str) -> None:
    t = write_target(substrate)
    t.write("merge", V1, key=("id",))
    dupes = "SELECT range % 7 AS id, 'x' AS name, range::INTEGER AS amount FROM range(20)"
    with pytest.raises(RunError) as err:
        t.write("merge", dupes, key=("id",))
    msg = str(err.value)
    assert "7 keys" in msg and "20 rows" in msg
    assert msg.count("×") == 5, "names up to 5 sample keys"
    assert "(id=0) ×3" in msg
    assert t.rows() == [(1, "a", 10), (2, "b", 20)]


def test_merge_needs_a_key_that_exists(write_target: Any) -> None:
    t = write_target("ducklake")
    with pytest.raises(RunError, match="needs key="):
        t.write("merge", V1)
    with pytest.raises(RunError, match="did you mean 'id'"):
        t.write("merge", V1, key=("idd",))
    assert not t.exists()


# -- audit (write–audit–publish) ------------------------------------------------------------
class AuditFailed(Exception):
    pass


AUDITED = [(s, "partition_replace") for s in SUBSTRATES] + [
    (s, strategy) for s in ("ducklake", "postgres", "parquet") for strategy in ("replace", "scd2")
]


@pytest.mark.parametrize(("substrate", "strategy"), AUDITED)
def test_failing_audit_leaves_previous_contents(write_target: Any, substrate: str, strategy: str) -> None:
    t = write_target(substrate)
    options: dict[str, dict[str, Any]] = {
        "replace": {},
        "partition_replace": {"partition": "p1"},
        "scd2": {"key": ("id",), "valid_at": T1.isoformat()},
    }
    kw = options[strategy]
    t.write(strategy, V1, **kw)
    before = t.rows()
    seen: list[int] = []

    def audit(conn: Any) -> None:
        if not t.is_object:  # the audit sees the new contents inside the transaction
            seen.append(conn.execute(f"SELECT count(*) FROM {t.session.table_sql(t.uri)}").fetchone()[0])
        raise AuditFailed("3 rows violate not_null(name)")

    later = {**kw, "valid_at": T2.isoformat()} if strategy == "scd2" else kw
    with pytest.raises(AuditFailed):
        t.write(strategy, "SELECT 9 AS id, NULL::VARCHAR AS name, 90 AS amount", audit=audit, **later)
    assert t.rows() == before
    if not t.is_object:
        assert seen == [{"replace": 1, "partition_replace": 1, "scd2": 3}[strategy]]
    # and the connection is usable again
    t.write(strategy, V1, **kw)
    assert t.rows() == before


@pytest.mark.parametrize(
    ("substrate", "strategy"), [("ducklake", "partition_replace"), ("parquet", "partition_replace"), ("postgres", "scd2"), ("ducklake", "scd2")]
)
def test_failing_first_write_creates_nothing(write_target: Any, substrate: str, strategy: str) -> None:
    t = write_target(substrate)
    kw: dict[str, Any] = {"partition": "p1"} if strategy == "partition_replace" else {"key": ("id",), "valid_at": T1.isoformat()}

    def audit(conn: Any) -> None:
        raise AuditFailed("no")

    with pytest.raises(AuditFailed):
        t.write(strategy, V1, audit=audit, **kw)
    assert not t.exists()
    if not t.is_object:  # neither the table nor the scd2 view (PostgreSQL: created through postgres_execute)
        cat, schema, table = (p.strip('"') for p in t.session.table_sql(t.uri).split("."))
        names = t.session.conn.execute(
            "SELECT table_name FROM duckdb_tables() WHERE database_name = $1 AND table_name LIKE $2 "
            "UNION ALL SELECT view_name FROM duckdb_views() WHERE database_name = $1 AND view_name LIKE $2",
            [cat, table + "%"],
        ).fetchall()
        assert names == []
    t.write(strategy, V1, **kw)
    assert len(t.rows()) == 2


def test_bad_requests_name_the_fix(write_target: Any) -> None:
    t = write_target("ducklake")
    t.stage(V1)
    s = t.session
    with pytest.raises(RunError, match="did you mean 'merge'"):
        write(s, WriteRequest(t.uri, "merg", "slice"))
    with pytest.raises(RunError, match="did you mean 'sync'"):
        write(s, WriteRequest(t.uri, "replace", "slice", on_schema_change="synk"))
    with pytest.raises(RunError, match="needs a partition key"):
        write(s, WriteRequest(t.uri, "partition_replace", "slice"))
    with pytest.raises(RunError, match="no valid_at"):
        write(s, WriteRequest(t.uri, "scd2", "slice", key=("id",)))
    with pytest.raises(RunError, match="Parquet objects"):
        write(s, WriteRequest("s3:///raw/orders.json", "replace", "slice"))
    with pytest.raises(RunError, match="Parquet objects"):
        write(s, WriteRequest("dbt://warehouse/main/orders", "replace", "slice"))
    with pytest.raises(RunError, match="still holds"):
        write(s, WriteRequest("s3:///raw/{partition}.parquet", "replace", "slice"))
    s.conn.execute("CREATE OR REPLACE TEMP TABLE slice AS SELECT 1 AS id, 'x' AS _partition")
    with pytest.raises(RunError, match="manages"):
        write(s, WriteRequest(t.uri, "partition_replace", "slice", partition="p"))
    assert not t.exists()


# -- hostile partition keys ----------------------------------------------------------------
HOSTILE = ["x'); DROP TABLE t; --", "O'Brien", 'a"b', "ü/../é"]


@pytest.mark.parametrize("substrate", ("ducklake", "duckdb", "postgres", "parquet", "s3_parquet"))
def test_partition_keys_are_bound_parameters(write_target: Any, substrate: str) -> None:
    t = write_target(substrate)
    # a table (or object) literally named t, which the injected statement would drop
    head, _, last = t.uri.rpartition("/")
    bystander = WriteTarget(t.session, substrate, f"{head}/t{'.parquet' if last.endswith('.parquet') else ''}")
    bystander.write("replace", "SELECT 1 AS keep")
    results = [t.write("partition_replace", "SELECT 1 AS id", partition=p) for p in HOSTILE]
    results.append(t.write("partition_replace", "SELECT 2 AS id", partition=HOSTILE[0]))
    assert t.rows() == sorted([(2, HOSTILE[0]), *((1, p) for p in HOSTILE[1:])])
    assert bystander.rows() == [(1,)]
    for r in results:
        for statement in r.sql:
            assert "DROP TABLE t" not in statement and "O'Brien" not in statement
    assert any("$partition" in s for s in results[-1].sql)


@pytest.mark.parametrize("substrate", ("parquet", "s3_parquet"))
def test_hostile_keys_cannot_name_per_partition_objects(write_target: Any, substrate: str) -> None:
    """uris.parse allows only [A-Za-z0-9_.-] in a path part, so such a key never reaches a file name."""
    t = write_target(substrate, per_partition=True)
    for p in HOSTILE:
        with pytest.raises(RunError, match="cannot write to"):
            t.write("partition_replace", "SELECT 1 AS id", partition=p)
    t.write("partition_replace", "SELECT 1 AS id", partition="2024-01-01")
    assert t.rows("2024-01-01") == [(1, "2024-01-01")]


# -- on_schema_change ------------------------------------------------------------------------
OLD = "SELECT * FROM (VALUES (1, 'a', 7, 10, 100)) AS v(id, name, old, amount, code)"
# -old INTEGER, ~amount INTEGER→BIGINT (a widening), ~code INTEGER→VARCHAR (not one), +extra VARCHAR
NEW = "SELECT 2 AS id, 'b' AS name, 20::BIGINT AS amount, 'c200' AS code, 'e' AS extra"
OLD_SCHEMA = [("id", "INTEGER"), ("name", "VARCHAR"), ("old", "INTEGER"), ("amount", "INTEGER"), ("code", "INTEGER")]
SCHEMA_SUBSTRATES = ("ducklake", "duckdb", "postgres", "parquet")


def _drift(t: Any, policy: str, strategy: str = "partition_replace") -> Any:
    t.write(strategy, OLD, partition="p1", key=("id",) if strategy == "merge" else ())
    # the incompatible column is left out except for sync, which converts it
    new = NEW if policy == "sync" else NEW.replace("'c200'", "'200'")
    return t.write(strategy, new, partition="p2", on_schema_change=policy, key=("id",) if strategy == "merge" else ())


@pytest.mark.parametrize("substrate", SCHEMA_SUBSTRATES)
@pytest.mark.parametrize("policy", ["warn", "ignore"])
def test_schema_change_warn_and_ignore_write_common_columns(write_target: Any, substrate: str, policy: str) -> None:
    t = write_target(substrate)
    r = _drift(t, policy)
    assert t.columns() == [*OLD_SCHEMA, ("_partition", "VARCHAR")]
    assert t.rows() == [(1, "a", 7, 10, 100, "p1"), (2, "b", None, 20, 200, "p2")]
    assert r.schema_change is not None
    assert r.schema_change.added == (("extra", "VARCHAR"),)
    assert r.schema_change.removed == (("old", "INTEGER"),)
    assert r.schema_change.changed == (("amount", "INTEGER", "BIGINT"), ("code", "INTEGER", "VARCHAR"))
    if policy == "warn":
        assert len(r.warnings) == 1 and "+extra VARCHAR" in r.warnings[0] and "-old INTEGER" in r.warnings[0]
    else:
        assert r.warnings == []


FAILING = [(s, "partition_replace") for s in SCHEMA_SUBSTRATES] + [
    (s, strategy) for s in ("ducklake", "postgres") for strategy in ("merge", "replace")
]


@pytest.mark.parametrize(("substrate", "strategy"), FAILING)
def test_schema_change_fail_aborts_before_writing(write_target: Any, substrate: str, strategy: str) -> None:
    t = write_target(substrate)
    with pytest.raises(RunError) as err:
        _drift(t, "fail", strategy)
    assert "+extra VARCHAR" in str(err.value) and "-old INTEGER" in str(err.value) and "~code INTEGER→VARCHAR" in str(err.value)
    assert len(t.rows()) == 1
    assert [c for c in t.columns() if c[0] != "_partition"] == OLD_SCHEMA


@pytest.mark.parametrize("substrate", SCHEMA_SUBSTRATES)
def test_schema_change_sync_alters_the_target(write_target: Any, substrate: str) -> None:
    t = write_target(substrate)
    r = _drift(t, "sync")
    cols = dict(t.columns())
    assert "old" not in cols
    assert (cols["amount"], cols["code"], cols["extra"]) == ("BIGINT", "VARCHAR", "VARCHAR")
    assert r.schema == t.columns()
    assert t.rows(columns="id, name, amount, code, extra, _partition") == [
        (1, "a", 10, "100", None, "p1"),
        (2, "b", 20, "c200", "e", "p2"),
    ]


@pytest.mark.parametrize("substrate", ("ducklake", "postgres"))
def test_schema_change_replace_takes_the_new_schema(write_target: Any, substrate: str) -> None:
    t = write_target(substrate)
    t.write("replace", OLD)
    r = t.write("replace", NEW)
    assert t.columns() == [("id", "INTEGER"), ("name", "VARCHAR"), ("amount", "BIGINT"), ("code", "VARCHAR"), ("extra", "VARCHAR")]
    assert t.rows() == [(2, "b", 20, "c200", "e")]
    assert r.schema_change and len(r.warnings) == 1


# -- scd2 options ------------------------------------------------------------------------------
SCD2_SUBSTRATES = ("ducklake", "postgres", "duckdb", "parquet")


def _snapshot(rows: list[tuple[int, str, int, str]]) -> str:
    values = ", ".join(f"({i}, '{n}', {a}, TIMESTAMP '{u}')" for i, n, a, u in rows)
    return f"SELECT * FROM (VALUES {values}) AS v(id, name, amount, updated_at)"


@pytest.mark.parametrize("substrate", SCD2_SUBSTRATES)
def test_scd2_track_columns(write_target: Any, substrate: str) -> None:
    t = write_target(substrate)
    kw = {"key": ("id",), "track": ("amount",)}
    t.write("scd2", _snapshot([(1, "a", 10, "2024-01-01"), (2, "b", 20, "2024-01-01")]), valid_at=T1.isoformat(), **kw)
    # name changes (untracked): no version; amount of 2 changes: new version
    later = _snapshot([(1, "A", 10, "2024-01-02"), (2, "b", 21, "2024-01-02")])
    for _ in range(2):
        t.write("scd2", later, valid_at=T2.isoformat(), **kw)
        assert t.rows(columns="id, name, amount, valid_from, valid_to, is_current") == [
            (1, "a", 10, T1, None, True),
            (2, "b", 20, T1, T2, False),
            (2, "b", 21, T2, None, True),
        ]


@pytest.mark.parametrize("substrate", SCD2_SUBSTRATES)
def test_scd2_updated_at(write_target: Any, substrate: str) -> None:
    t = write_target(substrate)
    kw = {"key": ("id",), "updated_at": "updated_at"}
    t.write("scd2", _snapshot([(1, "a", 10, "2024-01-05"), (2, "b", 20, "2024-01-05")]), valid_at=T1.isoformat(), **kw)
    # 1: same updated_at but other values -> no version; 2: newer -> version; stale older one ignored
    later = _snapshot([(1, "z", 99, "2024-01-05"), (2, "b", 21, "2024-01-06")])
    for _ in range(2):
        t.write("scd2", later, valid_at=T2.isoformat(), **kw)
        assert t.rows(columns="id, name, amount, valid_to, is_current") == [
            (1, "a", 10, None, True),
            (2, "b", 20, T2, False),
            (2, "b", 21, None, True),
        ]
    t.write("scd2", _snapshot([(1, "y", 1, "2024-01-04"), (2, "b", 21, "2024-01-06")]), valid_at=T2.isoformat(), **kw)
    assert len(t.rows()) == 3


@pytest.mark.parametrize("substrate", SCD2_SUBSTRATES)
@pytest.mark.parametrize("deletes", ["close", "ignore"])
def test_scd2_deletes(write_target: Any, substrate: str, deletes: str) -> None:
    t = write_target(substrate)
    kw = {"key": ("id",), "deletes": deletes}
    t.write("scd2", V1, valid_at=T1.isoformat(), **kw)
    only_1 = "SELECT 1 AS id, 'a' AS name, 10 AS amount"
    for _ in range(2):
        t.write("scd2", only_1, valid_at=T2.isoformat(), **kw)
        gone = (2, "b", 20, T1, T2, False) if deletes == "close" else (2, "b", 20, T1, None, True)
        assert t.rows() == [(1, "a", 10, T1, None, True), gone]
    if substrate != "parquet":
        expected = [(1, "a", 10)] if deletes == "close" else [(1, "a", 10), (2, "b", 20)]
        assert t.rows(suffix="_current", columns="id, name, amount") == expected


@pytest.mark.parametrize("substrate", ("ducklake", "postgres", "duckdb"))
def test_scd2_current_view_survives_sync_and_other_aliases(write_target: Any, substrate: str) -> None:
    t = write_target(substrate, fresh=True)
    t.write("scd2", V1, key=("id",), valid_at=T1.isoformat())
    grown = "SELECT 1 AS id, 'a' AS name, 10 AS amount, 'new' AS note"
    r = t.write("scd2", grown, key=("id",), valid_at=T2.isoformat(), on_schema_change="sync")
    assert ("note", "VARCHAR") in r.schema
    assert t.rows(suffix="_current", columns="id, note, valid_from") == [(1, "new", T2)]
    if substrate in ("ducklake", "duckdb"):
        # The view is catalog-relative: it still works when the catalog is attached under another alias.
        import duckdb

        from lineage_defs.run.substrates import extension_directory

        attach = t.session.attach_sql(t.uri.rsplit("/", 1)[0], "elsewhere")
        table = t.uri.rsplit("/", 1)[1]
        t.session.close()
        with duckdb.connect(config={"extension_directory": extension_directory()}) as conn:
            conn.execute(attach)
            assert conn.execute(f'SELECT id, note FROM elsewhere.main."{table}_current"').fetchall() == [(1, "new")]


def test_scd2_valid_at_offsets_are_converted_to_utc(write_target: Any) -> None:
    t = write_target("ducklake")
    t.write("scd2", V1, key=("id",), valid_at="2024-01-01T02:00:00+02:00")
    assert {r[3] for r in t.rows()} == {datetime(2024, 1, 1, 0, 0)}


# -- crash safety --------------------------------------------------------------------------
CHILD = textwrap.dedent(
    """
    import sys, time
    from lineage_defs.settings import LineageSettings
    from lineage_defs.run.substrates import Session
    from lineage_defs.run.write import WriteRequest, write
    settings = LineageSettings(state_dir=sys.argv[1], postgres_dsn=sys.argv[3] or None)
    s = Session(settings)
    if sys.argv[4] == "batch":  # a set-based batch replacing p1 and p2 together
        s.conn.execute("CREATE TEMP TABLE slice AS SELECT range AS id, 'new' AS name, CASE WHEN range % 2 = 0 THEN 'p1' ELSE 'p2' END AS _partition FROM range(500000)")
        req = WriteRequest(sys.argv[2], "partition_replace", "slice", partitions=("p1", "p2"))
    else:
        s.conn.execute("CREATE TEMP TABLE slice AS SELECT range AS id, 'new' AS name FROM range(500000)")
        req = WriteRequest(sys.argv[2], "partition_replace", "slice", partition="p1")
    def audit(conn):
        print("IN-TRANSACTION", flush=True)
        time.sleep(60)
    write(s, req, audit)
    """
)


@pytest.mark.parametrize("mode", ("single", "batch"))
@pytest.mark.parametrize("substrate", ("ducklake", "postgres"))
def test_sigkill_mid_write_leaves_previous_contents(write_target: Any, state_dir: Path, substrate: str, mode: str) -> None:
    t = write_target(substrate, fresh=True)
    t.write("partition_replace", "SELECT range AS id, 'old' AS name FROM range(1000)", partition="p1")
    t.write("partition_replace", "SELECT range AS id, 'other' AS name FROM range(10)", partition="p2")
    dsn = t.session.settings.postgres_dsn or ""
    t.session.close()  # the child needs the state dir's lock
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(state_dir), t.uri, dsn, mode], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, text=True
    )
    try:
        assert child.stdout is not None
        line = child.stdout.readline()
        assert line.strip() == "IN-TRANSACTION", child.stderr.read() if child.stderr else ""
        os.kill(child.pid, signal.SIGKILL)
        child.wait(10)
    finally:
        if child.poll() is None:
            os.kill(child.pid, signal.SIGKILL)
            child.wait(10)
    assert child.returncode == -signal.SIGKILL
    with Session(LineageSettings(state_dir=str(state_dir), postgres_dsn=dsn or None)) as s:
        rows = s.conn.execute(f"SELECT name, _partition, count(*), sum(id) FROM {s.table_sql(t.uri)} GROUP BY ALL ORDER BY ALL").fetchall()
    assert rows == [("old", "p1", 1000, 499500), ("other", "p2", 10, 45)]


# -- two writers creating one new DuckLake table ------------------------------------------------
def test_two_writers_creating_one_new_ducklake_table_both_land(tmp_path: Path, pg_dsn: str) -> None:
    """Runs on two workers write their first rows into a new table of a shared DuckLake at once: the
    second COMMIT conflicts ("created by another transaction already") and the write is tried again
    against the table the first one created, so both slices land (append) and nothing is lost."""
    from scale_support import create_database

    lake = {"ducklake_catalog": f"postgres:{create_database(pg_dsn, 'lake_conflict')}", "ducklake_data_path": str(tmp_path / "data") + "/"}
    uri = "ducklake://main/new_events"
    first = Session(LineageSettings(state_dir=str(tmp_path / "a"), **lake))
    second = Session(LineageSettings(state_dir=str(tmp_path / "b"), **lake))
    raced: list[int] = []

    def other_worker_commits_first(_conn: Any) -> None:
        # between our CREATE and our COMMIT, another process creates the same table and commits
        if not raced:
            raced.append(1)
            second.conn.execute("CREATE TEMP TABLE slice AS SELECT 2 AS id, 'b' AS who")
            assert write(second, WriteRequest(uri, "append", "slice")).rows == 1

    try:
        first.conn.execute("CREATE TEMP TABLE slice AS SELECT 1 AS id, 'a' AS who")
        res = write(first, WriteRequest(uri, "append", "slice"), audit=other_worker_commits_first)
        assert raced and res.rows == 1
        got = first.conn.execute(f"SELECT id, who FROM {first.table_sql(uri)} ORDER BY id").fetchall()
        assert got == [(1, "a"), (2, "b")]
    finally:
        first.close()
        second.close()
