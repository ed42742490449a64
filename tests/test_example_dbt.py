"""The bundled example's dbt project, materialized through Dagster with the scripts around it:
one day of the shop's scripts, then the dbt staging model and mart, then the script reading the mart."""

from __future__ import annotations

from pathlib import Path

import pytest
from dagster import AssetKey, DagsterInstance

from conftest import with_example_parse
from lineage_defs import LineageSettings, build_definitions
from lineage_defs.run.substrates import Session

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "pipelines"
DAY = "2025-01-02"

pytestmark = pytest.mark.dbt


def _key(path: str) -> AssetKey:
    return AssetKey(path.split("/"))


def test_example_dbt_project_between_scripts(tmp_path: Path) -> None:
    state = with_example_parse(tmp_path / "state")
    defs = build_definitions(EXAMPLE, settings=LineageSettings(state_dir=str(state)))
    instance = DagsterInstance.ephemeral()

    day = [AssetKey(["s3", "_default", "raw", "orders", "PARTITION-orders.csv"]), _key("ducklake/main/customers"), _key("ducklake/main/orders")]
    job = defs.resolve_implicit_job_def_def_for_assets(day)
    assert job is not None
    assert job.execute_in_process(instance=instance, asset_selection=day, partition_key=DAY).success

    stg, mart, trend = _key("dbt/warehouse/main/stg_orders"), _key("dbt/warehouse/main/store_daily"), _key("ducklake/main/category_trend")
    rest = [_key("ducklake/main/products"), stg, mart, trend]
    job = defs.resolve_implicit_job_def_def_for_assets(rest)
    assert job is not None
    result = job.execute_in_process(instance=instance, asset_selection=rest)
    assert result.success

    checks = {(e.event_specific_data.check_name, e.event_specific_data.passed) for e in result.all_events if e.event_type_value == "ASSET_CHECK_EVALUATION"}
    assert {("unique_stg_orders_order_id", True), ("not_null_store_daily_order_date", True), ("not_null_category", True)} <= checks

    with Session(LineageSettings(state_dir=str(state))) as s:
        by_category = s.conn.execute("SELECT category, revenue_eur FROM lake.main.category_trend ORDER BY 1").fetchall()
        expected = s.conn.execute(
            "SELECT p.category, round(sum(o.amount_eur), 2) FROM lake.main.orders o JOIN lake.main.products p USING (product_id) "
            "WHERE o.status <> 'cancelled' GROUP BY 1 ORDER BY 1"
        ).fetchall()
    assert by_category == expected and len(by_category) == 4

    mart_meta = instance.get_latest_materialization_event(mart)
    assert mart_meta is not None and mart_meta.asset_materialization is not None
    lineage = mart_meta.asset_materialization.metadata["dagster/column_lineage"].value.deps_by_column
    assert [(d.asset_key, d.column_name) for d in lineage["category"]] == [(_key("ducklake/main/products"), "category")]
    assert [(d.asset_key, d.column_name) for d in lineage["revenue_eur"]] == [(stg, "amount_eur")]
    trend_meta = instance.get_latest_materialization_event(trend)
    assert trend_meta is not None and trend_meta.asset_materialization is not None
    deps = trend_meta.asset_materialization.metadata["dagster/column_lineage"].value.deps_by_column
    assert (mart, "revenue_eur") in {(d.asset_key, d.column_name) for d in deps["revenue_eur"]}
