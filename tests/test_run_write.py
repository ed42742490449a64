"""Every write strategy on every substrate it applies to, on real engines.

Each test asserts exact contents after a first run, a re-run of the same
slice (identical; append excepted), another partition or slice, and a changed
slice. Targets: DuckLake, a DuckDB file, PostgreSQL (DuckDB's postgres
extension), Parquet objects on local storage and on an S3 server (moto).
"""

from __future__ import annotations

from collections import Counter
from datetime import datetime
from typing import Any

import pytest

from conftest import SUBSTRATES

TABLES = ("ducklake", "duckdb", "postgres")
OBJECTS = ("parquet", "s3_parquet")
V1 = "SELECT * FROM (VALUES (1, 'a', 10), (2, 'b', 20)) AS v(id, name, amount)"
V2 = "SELECT * FROM (VALUES (2, 'B', 21), (3, 'c', 30)) AS v(id, name, amount)"
V3 = "SELECT * FROM (VALUES (5, 'z', 50)) AS v(id, name, amount)"
SCHEMA = [("id", "INTEGER"), ("name", "VARCHAR"), ("amount", "INTEGER")]
P1, P2 = "2024-01-01", "2024-01-02"
T1, T2, T3 = datetime(2024, 1, 1), datetime(2024, 1, 2), datetime(2024, 1, 3)


def bag(rows: list[tuple[Any, ...]]) -> Counter[tuple[Any, ...]]:
    return Counter(rows)


@pytest.mark.parametrize("substrate", SUBSTRATES)
def test_replace(write_target: Any, substrate: str) -> None:
    t = write_target(substrate)
    first = t.write("replace", V1)
    assert first.rows == 2 and first.schema == SCHEMA and first.schema_change is None
    assert t.rows() == [(1, "a", 10), (2, "b", 20)]
    again = t.write("replace", V1)
    assert t.rows() == [(1, "a", 10), (2, "b", 20)] and again.schema_change is None and not again.warnings
    t.write("replace", V2)
    assert t.rows() == [(2, "B", 21), (3, "c", 30)]
    if substrate == "ducklake":
        assert first.snapshot_id is not None and again.snapshot_id is not None and again.snapshot_id > first.snapshot_id
    else:
        assert first.snapshot_id is None
    assert any(s.startswith(("CREATE TABLE", "CREATE TEMP TABLE")) for s in first.sql)
    assert "COMMIT" in first.sql


@pytest.mark.parametrize("substrate", SUBSTRATES)
def test_partition_replace(write_target: Any, substrate: str) -> None:
    t = write_target(substrate)
    first = t.write("partition_replace", V1, partition=P1)
    p1 = [(1, "a", 10, P1), (2, "b", 20, P1)]
    assert t.rows() == p1
    assert first.schema == [*SCHEMA, ("_partition", "VARCHAR")]
    t.write("partition_replace", V1, partition=P1)
    assert t.rows() == p1
    t.write("partition_replace", V2, partition=P2)
    p2 = [(2, "B", 21, P2), (3, "c", 30, P2)]
    assert bag(t.rows()) == bag(p1 + p2)
    changed = t.write("partition_replace", V3, partition=P1)
    assert bag(t.rows()) == bag([(5, "z", 50, P1), *p2])
    assert changed.rows == 1
    assert all(P1 not in s for s in changed.sql), "the partition key is bound, never in SQL text"


@pytest.mark.parametrize("substrate", OBJECTS)
def test_partition_replace_one_object_per_partition(write_target: Any, substrate: str) -> None:
    t = write_target(substrate, per_partition=True)
    t.write("partition_replace", V1, partition=P1)
    assert t.rows(P1) == [(1, "a", 10, P1), (2, "b", 20, P1)]
    t.write("partition_replace", V1, partition=P1)
    assert t.rows(P1) == [(1, "a", 10, P1), (2, "b", 20, P1)]
    t.write("partition_replace", V2, partition=P2)
    t.write("partition_replace", V3, partition=P1)
    assert t.rows(P1) == [(5, "z", 50, P1)]
    assert t.rows(P2) == [(2, "B", 21, P2), (3, "c", 30, P2)]


@pytest.mark.parametrize("substrate", SUBSTRATES)
def test_merge(write_target: Any, substrate: str) -> None:
    t = write_target(substrate)
    t.write("merge", V1, key=("id",))
    assert t.rows() == [(1, "a", 10), (2, "b", 20)]
    t.write("merge", V1, key=("id",))
    assert t.rows() == [(1, "a", 10), (2, "b", 20)]
    t.write("merge", V2, key=("id",))
    assert t.rows() == [(1, "a", 10), (2, "B", 21), (3, "c", 30)]
    t.write("merge", "SELECT 1 AS id, 'A' AS name, 11 AS amount", key=("id",))
    assert t.rows() == [(1, "A", 11), (2, "B", 21), (3, "c", 30)]


@pytest.mark.parametrize("substrate", ("ducklake", "postgres", "parquet"))
def test_partitioned_merge_upserts_across_partitions(write_target: Any, substrate: str) -> None:
    t = write_target(substrate)
    t.write("merge", V1, key=("id",), partition=P1)
    t.write("merge", V1, key=("id",), partition=P1)
    assert t.rows() == [(1, "a", 10, P1), (2, "b", 20, P1)]
    t.write("merge", V2, key=("id",), partition=P2)
    assert t.rows() == [(1, "a", 10, P1), (2, "B", 21, P2), (3, "c", 30, P2)]


@pytest.mark.parametrize("substrate", ("ducklake", "postgres", "duckdb"))
def test_merge_composite_and_null_keys(write_target: Any, substrate: str) -> None:
    t = write_target(substrate)
    v = "SELECT * FROM (VALUES (1, NULL, 'x'), (1, 'b', 'y')) AS v(k1, k2, val)"
    t.write("merge", v, key=("k1", "k2"))
    t.write("merge", v, key=("k1", "k2"))
    assert t.rows() == [(1, "b", "y"), (1, None, "x")]
    t.write("merge", "SELECT 1 AS k1, NULL::VARCHAR AS k2, 'z' AS val", key=("k1", "k2"))
    assert t.rows() == [(1, "b", "y"), (1, None, "z")]


@pytest.mark.parametrize("substrate", SUBSTRATES)
def test_append(write_target: Any, substrate: str) -> None:
    t = write_target(substrate)
    t.write("append", V1)
    assert t.rows() == [(1, "a", 10), (2, "b", 20)]
    t.write("append", V1)
    assert t.rows() == [(1, "a", 10), (1, "a", 10), (2, "b", 20), (2, "b", 20)]
    t.write("append", V3, partition=P2)  # an unpartitioned target gets no _partition column
    assert t.rows() == [(1, "a", 10), (1, "a", 10), (2, "b", 20), (2, "b", 20), (5, "z", 50)]


@pytest.mark.parametrize("substrate", SUBSTRATES)
def test_append_partitioned(write_target: Any, substrate: str) -> None:
    t = write_target(substrate)
    t.write("append", V1, partition=P1)
    t.write("append", V3, partition=P2)
    assert t.rows() == [(1, "a", 10, P1), (2, "b", 20, P1), (5, "z", 50, P2)]


@pytest.mark.parametrize("substrate", SUBSTRATES)
def test_scd2(write_target: Any, substrate: str) -> None:
    t = write_target(substrate)
    first = t.write("scd2", V1, key=("id",), valid_at=T1.isoformat())
    assert first.schema == [*SCHEMA, ("valid_from", "TIMESTAMP"), ("valid_to", "TIMESTAMP"), ("is_current", "BOOLEAN")]
    v1 = [(1, "a", 10, T1, None, True), (2, "b", 20, T1, None, True)]
    assert t.rows() == v1
    t.write("scd2", V1, key=("id",), valid_at=T1.isoformat())
    assert t.rows() == v1
    # id 1 changes, id 2 disappears, id 3 is new
    snapshot = "SELECT * FROM (VALUES (1, 'a', 11), (3, 'c', 30)) AS v(id, name, amount)"
    t.write("scd2", snapshot, key=("id",), valid_at=T2.isoformat())
    history = [
        (1, "a", 10, T1, T2, False),
        (1, "a", 11, T2, None, True),
        (2, "b", 20, T1, T2, False),
        (3, "c", 30, T2, None, True),
    ]
    assert bag(t.rows()) == bag(history)
    t.write("scd2", snapshot, key=("id",), valid_at=T2.isoformat())
    assert bag(t.rows()) == bag(history)
    # a key that comes back opens a new version
    t.write("scd2", V1, key=("id",), valid_at=T3.isoformat())
    assert bag(t.rows()) == bag(
        [
            (1, "a", 10, T1, T2, False),
            (1, "a", 11, T2, T3, False),
            (1, "a", 10, T3, None, True),
            (2, "b", 20, T1, T2, False),
            (2, "b", 20, T3, None, True),
            (3, "c", 30, T2, T3, False),
        ]
    )
    if substrate in TABLES:
        assert t.rows(suffix="_current") == [(1, "a", 10, T3, None, True), (2, "b", 20, T3, None, True)]
    else:
        assert not any("VIEW" in s for s in first.sql)
