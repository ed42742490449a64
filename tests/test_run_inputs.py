"""A partition whose input is not there yet names the upstream asset and partition to build first."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

import dagster as dg
from dagster._core.storage.tags import ASSET_PARTITION_RANGE_END_TAG, ASSET_PARTITION_RANGE_START_TAG

from lineage_defs import LineageSettings, build_definitions
from lineage_defs.project import load_project
from lineage_defs.run.context import PartitionWindow
from lineage_defs.run.ranges import run_windows
from lineage_defs.run.substrates import Session


def write(root: Path, rel: str, text: str) -> None:
    p = root / rel
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(textwrap.dedent(text).lstrip())


def steps(root: Path) -> dict[str, Any]:
    project = load_project(root)
    assert not project.errors, [e.render() for e in project.errors]
    return {s.path: s for s in project.steps}


DROP = """
    # pipeline
    # partitioned daily start=2025-01-01
    # materialize manual s3:///raw/orders/{partition}.csv
    printf 'id\\n1\\n' > "$LINEAGE_OUTPUT_PATH"
"""
ORDERS = """
    -- pipeline
    -- partitioned daily start=2025-01-01
    -- materialize ducklake://main/orders
    SELECT id FROM read_csv('s3:///raw/orders/{partition}.csv')
"""


def test_missing_upstream_object_names_the_partition_to_build(tmp_path: Path) -> None:
    root, state = tmp_path / "p", tmp_path / "s"
    write(root, "shop/drop.sh", DROP)
    write(root, "shop/orders.sql", ORDERS)
    (state / "objects" / "raw" / "orders").mkdir(parents=True)
    (state / "objects" / "raw" / "orders" / "2025-01-01.csv").write_text("id\n1\n2\n")
    defs = build_definitions(root, settings=LineageSettings(state_dir=str(state)))
    orders = dg.AssetKey(["ducklake", "main", "orders"])
    with dg.instance_for_test() as instance:
        for last, materialized in (("2025-01-02", "the others are materialized"), ("2025-01-01", None)):
            first = "2025-01-02" if materialized is None else "2025-01-01"
            tags = {ASSET_PARTITION_RANGE_START_TAG: first, ASSET_PARTITION_RANGE_END_TAG: max(first, last)}
            r = dg.materialize(defs.assets, instance=instance, resources=defs.resources, selection=[orders], tags=tags, raise_on_error=False)
            assert not r.success
            error = str(next(e for e in r.all_events if e.event_type_value == "STEP_FAILURE").event_specific_data.error)
            assert "2025-01-02" in error
            assert "input not there yet: s3:///raw/orders/{partition}.csv partition 2025-01-02 (no object at " in error
            assert "materialize s3:///raw/orders/{partition}.csv partition 2025-01-02 first, then re-run this partition" in error
            assert "fix the statement" not in error
            assert (materialized or "none was materialized") in error
        assert instance.get_materialized_partitions(orders) == {"2025-01-01"}


def test_missing_upstream_table_and_empty_upstream_partition(tmp_path: Path) -> None:
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
        SELECT day, n FROM lake.main.a WHERE _partition = $partition
    """)
    settings = LineageSettings(state_dir=str(state), pipelines_dir=str(root))
    s = steps(root)
    day1, day2 = PartitionWindow("2025-01-01"), PartitionWindow("2025-01-02")
    (r,) = run_windows(settings, s["x/b.sql"], [day1])
    assert "input not there yet: ducklake://main/a (the table does not exist)" in str(r.error)
    assert "materialize ducklake://main/a first" in str(r.error) and "x/b.sql:4:1" in str(r.error)
    assert [x.error for x in run_windows(settings, s["x/a.sql"], [day1])] == [None]
    ok, empty = run_windows(settings, s["x/b.sql"], [day1, day2])
    assert ok.error is None and ok.write is not None and ok.write.warnings == []
    assert empty.error is None and empty.rows == 0  # an empty partition may be real: written, with a warning
    assert empty.write is not None and empty.write.warnings == [
        "wrote an empty partition: upstream ducklake://main/a partition 2025-01-02 (no rows of this partition) — "
        "materialize ducklake://main/a partition 2025-01-02 first, then re-run this one"
    ]
    with Session(settings) as session:
        assert session.conn.execute("SELECT _partition, count(*) FROM lake.main.b GROUP BY 1").fetchall() == [("2025-01-01", 1)]


def test_a_data_test_on_a_table_not_built_yet_names_it(tmp_path: Path) -> None:
    """`relationships` to an upstream that was never materialized: build it first, not "fix the test"."""
    root, state = tmp_path / "p", tmp_path / "s"
    write(root, "x/customers.sql", """
        -- pipeline
        -- materialize ducklake://main/customers
        SELECT 1 AS customer_id
    """)
    write(root, "x/orders.sql", """
        -- pipeline
        -- partitioned daily start=2025-01-01
        -- materialize ducklake://main/orders
        -- data_test relationships customer_id -> ducklake://main/customers.customer_id
        SELECT 1 AS id, 1 AS customer_id
    """)
    settings = LineageSettings(state_dir=str(state), pipelines_dir=str(root))
    s = steps(root)
    (r,) = run_windows(settings, s["x/orders.sql"], [PartitionWindow("2025-01-01")])
    message = str(r.error)
    assert "input not there yet: ducklake://main/customers (the table does not exist)" in message, message
    assert "materialize ducklake://main/customers first, then re-run this partition" in message
    assert "engine said: data test 'relationships_customer_id' could not run" in message
    assert "fix the test or the column it names" not in message
    assert [x.error for x in run_windows(settings, s["x/customers.sql"], [None])] == [None]
    (again,) = run_windows(settings, s["x/orders.sql"], [PartitionWindow("2025-01-01")])
    assert again.error is None and again.rows == 1


def failure_of(r: dg.ExecuteInProcessResult) -> str:
    return str(next(e for e in r.all_events if e.event_type_value == "STEP_FAILURE").event_specific_data.error)


def test_python_and_bash_steps_name_the_input_they_miss(tmp_path: Path) -> None:
    """The process fails on a table or object that is not built: the run says which input (and
    partition) to build first, as a SQL step does — not "fix the script"."""
    import warnings

    root, state = tmp_path / "p", tmp_path / "s"
    write(root, "x/orders.sql", """
        -- pipeline
        -- materialize ducklake://main/orders
        SELECT 1 AS order_id
    """)
    write(root, "x/ltv.py", """
        # pipeline
        # on ducklake://main/orders
        # materialize duckdb://warehouse/ltv
        from lineage_defs import runtime

        runtime.write(runtime.connect().sql("SELECT count(*) AS n FROM lake.main.orders").df())
    """)
    write(root, "x/export.sh", DROP.replace("raw/orders", "raw/export"))
    write(root, "x/copy.sh", """
        # pipeline
        # partitioned daily start=2025-01-01
        # on s3:///raw/export/{partition}.csv
        # materialize manual s3:///raw/copy/{partition}.csv
        set -euo pipefail
        cp "$(dirname "$LINEAGE_OUTPUT_PATH")/../export/$PARTITION.csv" "$LINEAGE_OUTPUT_PATH"
    """)
    defs = build_definitions(root, settings=LineageSettings(state_dir=str(state)))
    ltv, orders = dg.AssetKey(["duckdb", "warehouse", "ltv"]), dg.AssetKey(["ducklake", "main", "orders"])
    with dg.instance_for_test() as instance, warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        r = dg.materialize(defs.assets, instance=instance, resources=defs.resources, selection=[ltv], raise_on_error=False)
        assert not r.success
        error = failure_of(r)
        assert "x/ltv.py:6:1: input not there yet: ducklake://main/orders (the table does not exist)" in error, error
        assert "materialize ducklake://main/orders first, then re-run (the step said: CatalogException" in error, error
        assert "fix the script" not in error
        assert dg.materialize(defs.assets, instance=instance, resources=defs.resources, selection=[orders, ltv]).success

        copy = next(k for k in defs.resolve_asset_graph().get_all_asset_keys() if "copy" in k.path)
        r = dg.materialize(defs.assets, instance=instance, resources=defs.resources, selection=[copy], partition_key="2025-01-03", raise_on_error=False)
        error = failure_of(r)
        assert "input not there yet: s3:///raw/export/{partition}.csv partition 2025-01-03 (no object at " in error, error
        assert "materialize s3:///raw/export/{partition}.csv partition 2025-01-03 first, then re-run this partition" in error
    # Dagster's own Pipes handler reads a preview property on every run: nothing the user can act on
    assert not [w for w in caught if "expected_writer_count" in str(w.message)]


def test_data_tests_failing_on_an_empty_upstream_partition_name_it(tmp_path: Path) -> None:
    """A downstream-only backfill whose upstream days were never built: `row_count: 0 failing` is not
    the data's fault — each partition, and the range run, name the upstream and the days to build."""
    root, state = tmp_path / "p", tmp_path / "s"
    write(root, "x/orders.sql", """
        -- pipeline
        -- partitioned daily start=2025-01-01
        -- materialize ducklake://main/orders
        SELECT $partition AS day, 10 AS amount
    """)
    write(root, "x/revenue.sql", """
        -- pipeline
        -- partitioned daily start=2025-01-01
        -- materialize ducklake://main/revenue
        -- data_test row_count min=1
        SELECT day, sum(amount) AS revenue FROM lake.main.orders WHERE _partition = $partition GROUP BY day
    """)
    defs = build_definitions(root, settings=LineageSettings(state_dir=str(state)))
    orders, revenue = dg.AssetKey(["ducklake", "main", "orders"]), dg.AssetKey(["ducklake", "main", "revenue"])
    with dg.instance_for_test() as instance:
        assert dg.materialize(defs.assets, instance=instance, resources=defs.resources, selection=[orders], partition_key="2025-02-01").success
        tags = {ASSET_PARTITION_RANGE_START_TAG: "2025-02-01", ASSET_PARTITION_RANGE_END_TAG: "2025-02-03"}
        r = dg.materialize(defs.assets, instance=instance, resources=defs.resources, selection=[revenue], tags=tags, raise_on_error=False)
        assert not r.success
        error = failure_of(r)
        assert "2 of 3 partitions failed: 2025-02-02, 2025-02-03" in error, error
        assert "materialize ducklake://main/orders partitions 2025-02-02, 2025-02-03 first, then re-run these partitions" in error, error
        assert "input not there yet: ducklake://main/orders partition 2025-02-02 (no rows of this partition)" in error
        assert "row_count: 0 failing" in error  # what the test said, quoted
        assert "fix the data or the test" not in error
        logs = [e.user_message for e in instance.all_logs(r.run_id) if e.user_message]
        assert any("partition 2025-02-03 failed: " in m and "materialize ducklake://main/orders partition 2025-02-03 first" in m for m in logs), logs
        assert instance.get_materialized_partitions(revenue) == {"2025-02-01"}
