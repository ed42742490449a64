"""dagster-duckdb interop: hand-written assets read our tables (a partition's rows) and write tables our scripts read.

Real runs on the embedded DuckLake: the example's own hand-written asset
(``examples/python_assets.py``) between its scripts, pyarrow and pandas,
partition keys that need quoting, a write that fails, the resource's
connection, and how a user's Definitions merge with ours.
"""

# No `from __future__ import annotations`: Dagster reads the assets' `context` annotations itself.
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import dagster as dg
import pandas as pd
import pyarrow as pa
import pytest

from conftest import with_example_parse
from lineage_defs import LineageDuckDBResource, LineageSettings, build_definitions, merge_definitions, uris
from lineage_defs.definitions import user_definitions
from lineage_defs.duckdb_io import IO_MANAGER_KEY, RESOURCE_KEY
from lineage_defs.duckdb_io.relations import table_uri_of, uri_of
from lineage_defs.errors import RunError
from lineage_defs.run.substrates import Session
from services import IN_PROCESS

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "pipelines"
HANDWRITTEN = ROOT / "examples" / "python_assets.py"
RAW = dg.AssetKey(list(uris.key_path("s3:///raw/orders/{partition}.csv")))


def _key(path: str) -> dg.AssetKey:
    return dg.AssetKey(path.split("/"))


def _run(defs: dg.Definitions, keys: list[dg.AssetKey], instance: dg.DagsterInstance, partition: str | None = None) -> dg.ExecuteInProcessResult:
    job = defs.resolve_implicit_job_def_def_for_assets(keys)
    assert job is not None
    return job.execute_in_process(instance=instance, asset_selection=keys, partition_key=partition, raise_on_error=False)


def test_example_handwritten_asset_reads_one_day_and_a_script_reads_its_table(tmp_path: Path) -> None:
    state = with_example_parse(tmp_path / "state")
    settings = LineageSettings(state_dir=str(state))
    defs = build_definitions(EXAMPLE, settings=settings, defs=user_definitions(str(HANDWRITTEN)))
    graph = defs.resolve_asset_graph()
    sizes, mix, orders = _key("ducklake/main/order_sizes"), _key("ducklake/main/order_size_mix"), _key("ducklake/main/orders")
    # one node: the hand-written asset is the table the script reads (no external stand-in beside it)
    assert graph.get(sizes).is_materializable and graph.get(mix).parent_keys == {sizes}
    assert graph.get(sizes).parent_keys == {orders}
    # the script cascades from it, day by day, as from a step
    assert graph.get(mix).automation_condition is not None
    assert isinstance(graph.get_partition_mapping(mix, sizes), dg.TimeWindowPartitionMapping)

    instance = dg.DagsterInstance.ephemeral()
    day = [RAW, _key("ducklake/main/customers"), orders]
    for d in ("2025-01-02", "2025-01-03"):
        assert _run(defs, day, instance, d).success

    result = _run(defs, [sizes, mix], instance, "2025-01-03")
    assert result.success
    with Session(settings) as s:
        got = s.conn.execute("SELECT size_band, orders, revenue_eur, _partition FROM lake.main.order_sizes ORDER BY 1").fetchall()
        # what the pandas asset must have computed from that day's rows only
        expected = s.conn.execute(
            """SELECT CASE WHEN amount_eur < 20 THEN 'under 20' WHEN amount_eur < 50 THEN '20-50'
                           WHEN amount_eur < 100 THEN '50-100' ELSE '100 and over' END AS band,
                      count(*), round(sum(amount_eur), 2), _partition
               FROM lake.main.orders WHERE status <> 'cancelled' AND _partition = '2025-01-03' GROUP BY ALL ORDER BY 1"""
        ).fetchall()
        mix_rows = s.conn.execute("SELECT size_band, orders, revenue_share FROM lake.main.order_size_mix ORDER BY 1").fetchall()
        both_days = s.conn.execute("SELECT count(DISTINCT _partition) FROM lake.main.orders").fetchone()
    assert both_days == (2,)  # the other day was there to be read, and was not
    assert [(b, n, round(r, 2), p) for b, n, r, p in got] == [(b, n, float(r), p) for b, n, r, p in expected] and len(got) >= 3
    assert [(b, n) for b, n, _ in mix_rows] == [(b, n) for b, n, _, _ in got]
    assert abs(sum(share for _, _, share in mix_rows) - 1) < 0.01

    event = instance.get_latest_materialization_event(sizes)
    assert event is not None and event.asset_materialization is not None
    meta = event.asset_materialization.metadata
    assert meta["dagster/table_name"].value == "lake.main.order_sizes"
    assert [c.name for c in meta["dagster/column_schema"].value.columns] == ["size_band", "orders", "revenue_eur", "_partition"]
    assert meta["dagster/partition_row_count"].value == len(got)
    # the script's column lineage starts at the hand-written asset's columns
    lineage = graph.get(mix).metadata["dagster/column_lineage"].deps_by_column
    assert {(d.asset_key, d.column_name) for d in lineage["orders"]} == {(sizes, "orders")}

    # the same day again replaces its rows; nothing is duplicated
    assert _run(defs, [sizes], instance, "2025-01-03").success
    with Session(settings) as s:
        assert s.conn.execute("SELECT count(*) FROM lake.main.order_sizes").fetchone() == (len(got),)


@pytest.mark.daemon
def test_the_example_under_dagster_asset_materialize(tmp_path: Path) -> None:
    """The same both ways as a user runs it: `dagster asset materialize -m lineage_defs.definitions`, the
    multiprocess executor (each step a process of its own), the hand-written asset merged by LINEAGE_DEFINITIONS."""
    home = tmp_path / "dagster_home"
    home.mkdir()
    (home / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    state = with_example_parse(tmp_path / "state")
    env = {**os.environ, "LINEAGE_PIPELINES_DIR": str(EXAMPLE), "LINEAGE_STATE_DIR": str(state),
           "LINEAGE_DEFINITIONS": str(HANDWRITTEN), "DAGSTER_HOME": str(home)}  # fmt: skip
    dagster = str(Path(sys.executable).parent / "dagster")

    def materialize(selection: str, day: str, *config: str) -> None:
        cmd = [dagster, "asset", "materialize", "-m", "lineage_defs.definitions", "--select", selection, "--partition", day, *config]
        done = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0 and "RUN_SUCCESS" in done.stderr, done.stderr[-4000:]

    # another day's orders first, its steps in the run's process (Dagster's in_process executor: no process
    # per step, which loads the code location again; what is checked is the second run's)
    materialize('+key:"ducklake/main/orders"', "2025-01-02", *IN_PROCESS)
    materialize('+key:"ducklake/main/order_size_mix"', "2025-01-03")  # orders of that day, then the pandas asset, then the script
    with Session(LineageSettings(state_dir=str(state))) as s:
        assert s.conn.execute("SELECT DISTINCT _partition FROM lake.main.orders ORDER BY 1").fetchall() == [("2025-01-02",), ("2025-01-03",)]
        sizes = s.conn.execute("SELECT size_band, orders, _partition FROM lake.main.order_sizes ORDER BY 1").fetchall()
        day_orders = s.conn.execute(
            "SELECT count(*) FROM lake.main.orders WHERE status <> 'cancelled' AND _partition = '2025-01-03'"
        ).fetchone()
        mix = s.conn.execute("SELECT size_band, orders FROM lake.main.order_size_mix ORDER BY 1").fetchall()
    assert sizes and {p for _, _, p in sizes} == {"2025-01-03"}
    assert (sum(n for _, n, _ in sizes),) == day_orders  # that day's rows, not both days'
    assert mix == [(b, n) for b, n, _ in sizes]  # the script read the hand-written asset's relation


@pytest.fixture
def pipelines(tmp_path: Path) -> Path:
    """One partitioned script with a partition key that needs quoting, one script reading a hand-written table."""
    folder = tmp_path / "pipelines" / "shop"
    folder.mkdir(parents=True)
    (folder / "events.sql").write_text(
        "-- pipeline\n-- partitioned dynamic key=\"$.region\"\n-- materialize ducklake://main/events\n"
        "SELECT i AS id, i * 1.5 AS amount, $partition AS region FROM range(CASE WHEN $partition = 'o''hare' THEN 3 ELSE 5 END) t(i)\n"
    )
    (folder / "totals.sql").write_text(
        "-- pipeline\n-- materialize ducklake://main/totals\nSELECT region, sum(amount) AS amount FROM lake.main.events_arrow GROUP BY region\n"
    )
    return tmp_path / "pipelines"


def _defs(pipelines: Path, state: Path, *assets: Any) -> dg.Definitions:
    return build_definitions(pipelines, settings=LineageSettings(state_dir=str(state)), defs=dg.Definitions(assets=list(assets)))


def test_arrow_both_ways_all_partitions_downstream_and_quoted_keys(pipelines: Path, tmp_path: Path) -> None:
    seen: dict[str, Any] = {}

    @dg.asset(key=["ducklake", "main", "events_arrow"], ins={"events": dg.AssetIn(key=["ducklake", "main", "events"])}, io_manager_key=IO_MANAGER_KEY)
    def events_arrow(events: pa.Table) -> pa.Table:
        """Unpartitioned below a partitioned table: every partition's rows."""
        seen["regions"] = sorted(set(events.column("region").to_pylist()))
        return events.select(["region", "amount"])

    @dg.asset(key=["ducklake", "main", "one_region"], partitions_def=dg.DynamicPartitionsDefinition(name="shop__events"),
              ins={"events": dg.AssetIn(key=["ducklake", "main", "events"])}, io_manager_key=IO_MANAGER_KEY)  # fmt: skip
    def one_region(context: dg.AssetExecutionContext, events: pd.DataFrame) -> pd.DataFrame:
        seen[context.partition_key] = sorted(events["region"].unique())
        return events[["id"]]

    state = tmp_path / "state"
    defs = _defs(pipelines, state, events_arrow, one_region)
    instance = dg.DagsterInstance.ephemeral()
    instance.add_dynamic_partitions("shop__events", ["o'hare", "berlin"])
    for region in ("o'hare", "berlin"):
        assert _run(defs, [_key("ducklake/main/events"), _key("ducklake/main/one_region")], instance, region).success
    assert seen["o'hare"] == ["o'hare"] and seen["berlin"] == ["berlin"]  # the key bound, never spliced

    assert _run(defs, [_key("ducklake/main/events_arrow"), _key("ducklake/main/totals")], instance).success
    assert seen["regions"] == ["berlin", "o'hare"]
    with Session(LineageSettings(state_dir=str(state))) as s:
        totals = s.conn.execute("SELECT region, amount FROM lake.main.totals ORDER BY 1").fetchall()
        regions = s.conn.execute("SELECT _partition, count(*) FROM lake.main.one_region GROUP BY 1 ORDER BY 1").fetchall()
    assert [(r, float(a)) for r, a in totals] == [("berlin", 15.0), ("o'hare", 4.5)]
    assert regions == [("berlin", 5), ("o'hare", 3)]


def test_a_failing_write_keeps_the_previous_rows(pipelines: Path, tmp_path: Path) -> None:
    bad = {"on": False}

    @dg.asset(key=["ducklake", "main", "daily"], partitions_def=dg.StaticPartitionsDefinition(["a", "b"]), io_manager_key=IO_MANAGER_KEY)
    def daily(context: dg.AssetExecutionContext) -> pd.DataFrame:
        if bad["on"]:  # a column of another type: the INSERT fails after the partition was deleted
            return pd.DataFrame({"n": ["not a number"]})
        return pd.DataFrame({"n": [1, 2] if context.partition_key == "a" else [3]})

    @dg.asset(key=["ducklake", "main", "renamed"], partitions_def=dg.StaticPartitionsDefinition(["a", "b"]), io_manager_key=IO_MANAGER_KEY)
    def renamed(context: dg.AssetExecutionContext) -> pd.DataFrame:
        return pd.DataFrame({"n" if not bad["on"] else "m": [1]})

    state = tmp_path / "state"
    defs = _defs(pipelines, state, daily, renamed)
    instance = dg.DagsterInstance.ephemeral()
    for p in ("a", "b"):
        assert _run(defs, [_key("ducklake/main/daily"), _key("ducklake/main/renamed")], instance, p).success
    bad["on"] = True
    failed = _run(defs, [_key("ducklake/main/daily")], instance, "a")
    assert not failed.success
    renamed_run = _run(defs, [_key("ducklake/main/renamed")], instance, "a")
    assert not renamed_run.success
    errors = [e.event_specific_data.error.to_string() for e in renamed_run.all_events if e.event_type_value == "STEP_FAILURE"]
    assert any("the output's columns ['m', '_partition'] are not the table's ['n', '_partition'] — return the table's columns, or drop lake.main.renamed" in m for m in errors)
    with Session(LineageSettings(state_dir=str(state))) as s:
        assert s.conn.execute("SELECT _partition, n FROM lake.main.daily ORDER BY 1, 2").fetchall() == [("a", 1), ("a", 2), ("b", 3)]


def test_the_resource_is_a_session_and_lets_go_however_the_block_ends(tmp_path: Path, pipelines: Path) -> None:
    state = tmp_path / "state"
    defs = _defs(pipelines, state)
    resource = defs.resources[RESOURCE_KEY]
    assert resource.database == str(state / "warehouse.duckdb")
    with resource.get_connection() as conn:
        conn.execute("CREATE TABLE lake.main.t AS SELECT 1 AS x")
        conn.execute("CREATE TABLE w AS SELECT 2 AS y")  # unqualified: the warehouse, as in a step
        assert {"lake", "warehouse"} <= {r[0] for r in conn.execute("SELECT database_name FROM duckdb_databases()").fetchall()}
    with pytest.raises(ZeroDivisionError), resource.get_connection() as conn:
        conn.execute("SELECT 1")
        raise ZeroDivisionError
    # the state lock and the files were let go: another session opens (in a thread, so a leak fails instead of hanging)
    got: list[Any] = []
    t = threading.Thread(target=lambda: got.append(_read(state)), daemon=True)
    t.start()
    t.join(60)
    assert got == [((1,), (2,))]


def test_an_output_yielded_inside_an_open_connection_is_an_error_not_a_hang(pipelines: Path, tmp_path: Path) -> None:
    @dg.asset(key=["ducklake", "main", "inside"], io_manager_key=IO_MANAGER_KEY)
    def inside(lineage_duckdb: LineageDuckDBResource):  # type: ignore[no-untyped-def]
        with lineage_duckdb.get_connection() as conn:
            yield dg.Output(conn.execute("SELECT 1 AS x").df())

    defs = _defs(pipelines, tmp_path / "state", inside)
    result = _run(defs, [_key("ducklake/main/inside")], dg.DagsterInstance.ephemeral())
    assert not result.success
    (error,) = [e.event_specific_data.error.to_string() for e in result.all_events if e.event_type_value == "STEP_FAILURE"]
    assert "a lineage_duckdb connection of this process is still open" in error and "before returning or yielding" in error


def _read(state: Path) -> tuple[Any, Any]:
    with Session(LineageSettings(state_dir=str(state))) as s:
        return s.conn.execute("SELECT x FROM lake.main.t").fetchone(), s.conn.execute("SELECT y FROM warehouse.main.w").fetchone()


def test_keys_and_metadata_name_relations() -> None:
    assert uri_of(["ducklake", "main", "orders"], {}) == "ducklake://main/orders"
    assert uri_of(["duckdb", "warehouse", "customer_ltv"], {}) == "duckdb://warehouse/customer_ltv"
    assert uri_of(["my_table"], {"lineage/uri": dg.MetadataValue.text("ducklake://main/x")}) == "ducklake://main/x"
    with pytest.raises(RunError) as e:
        uri_of(["my_table"], {})
    assert "asset 'my_table' does not name a table" in str(e.value) and "lineage/uri" in (e.value.fix or "")
    with pytest.raises(RunError) as e:
        uri_of(["x"], {"lineage/uri": "ducklake://main/a b"})
    assert "whitespace" in str(e.value)
    # a dbt model on the embedded default is a warehouse table; objects and other profiles are not the I/O manager's
    assert table_uri_of("dbt://warehouse/main/store_daily") == "duckdb://warehouse/store_daily"
    assert table_uri_of("dbt://warehouse/staging/stg") == "duckdb://warehouse/staging.stg"
    for uri, says in (("dbt://analytics/main/x", "dbt profile of its own"), ("s3:///raw/a.parquet", "an object, not a table")):
        with pytest.raises(RunError) as e:
            table_uri_of(uri)
        assert says in str(e.value)


def test_a_merged_asset_is_the_node_of_an_input_nobody_produces(pipelines: Path, tmp_path: Path) -> None:
    ours = build_definitions(pipelines, settings=LineageSettings(state_dir=str(tmp_path / "state")))
    external = _key("ducklake/main/events_arrow")
    assert not ours.resolve_asset_graph().get(external).is_materializable  # read by totals.sql, produced by none

    @dg.asset(key=external.path)
    def events_arrow() -> None: ...

    merged = merge_definitions(ours, dg.Definitions(assets=[events_arrow]))
    assert merged.resolve_asset_graph().get(external).is_materializable
    assert merged.resources.keys() == {"lineage", RESOURCE_KEY, IO_MANAGER_KEY}
    # no spec of ours stands in for it: plain Definitions.merge gives the same graph
    assert dg.Definitions.merge(ours, dg.Definitions(assets=[events_arrow])).resolve_asset_graph().get(external).is_materializable


def test_the_io_manager_imports_pandas_for_a_value_only(tmp_path: Path) -> None:
    """Every run of a step with a table output initialises the I/O manager; our steps write their tables and report
    no value, so a run that only does that must not pay for dagster-duckdb-pandas (pandas: ~0.3 s a process)."""
    code = (
        "import sys\n"
        "import dagster as dg\n"
        "from lineage_defs import LineageSettings\n"
        "from lineage_defs.location import resources\n"
        "with dg.build_resources(resources(LineageSettings(state_dir=sys.argv[1]))) as r:\n"
        "    io = r.lineage_io_manager\n"
        "    io.handle_output(None, None)  # what our steps report\n"
        "    before = 'dagster_duckdb_pandas' in sys.modules\n"
        "    names = [t.__name__ for h in io.handlers for t in h.supported_types]\n"
        "    print(before, 'dagster_duckdb_pandas' in sys.modules, names, io.default_load_type.__name__)\n"
    )
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path / "state")], capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.split()[:2] == ["False", "True"], out.stdout
    assert "DataFrame" in out.stdout and "Table" in out.stdout, out.stdout
