"""A second dbt project's tests on ``source('shop', 'orders')``, where that source is the first project's
``orders`` model, are checks of ``orders`` — also a ``relationships`` test that reads one of the second
project's models too (two upstreams, no ``attached_node``: the order of dbt's ``depends_on`` decides
nothing) — and a build evaluates them there.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from dagster import AssetCheckKey, AssetKey, DagsterInstance

from dbt_projects import write_files
from lineage_defs import LineageSettings, build_definitions
from lineage_defs.dbt.manifest import checked_node

pytestmark = [pytest.mark.dbt]

ORDERS = AssetKey(["dbt", "warehouse", "main", "orders"])
FCT = AssetKey(["dbt", "warehouse", "main", "fct_location_daily_revenue"])
RELATIONSHIPS = "source_relationships_shop_orders_location_id__location_id__ref_fct_location_daily_revenue_"
FILES = {
    "shop/dbt/dbt_project.yml": 'name: shop_dbt\nversion: "1.0"\nprofile: shop_dbt\n',
    "shop/dbt/seeds/raw_orders.csv": "id,location_id,subtotal,ordered_at\n1,1,100,2025-01-01\n2,2,250,2025-01-02\n3,1,50,2025-01-02\n",
    "shop/dbt/models/orders.sql": "select id as order_id, location_id, subtotal, cast(ordered_at as date) as ordered_at from {{ ref('raw_orders') }}\n",
    "analytics/dbt/dbt_project.yml": 'name: analytics_dbt\nversion: "1.0"\nprofile: analytics_dbt\n',
    "analytics/dbt/models/sources.yml": """
        version: 2
        sources:
          - name: shop
            database: warehouse
            schema: main
            tables:
              - name: orders
                columns:
                  - name: order_id
                    data_tests: [not_null]
                  - name: location_id
                    data_tests:
                      - relationships: {to: "ref('fct_location_daily_revenue')", field: location_id}
    """,
    "analytics/dbt/models/fct_location_daily_revenue.sql": """
        select location_id, ordered_at, sum(subtotal) as revenue from {{ source('shop', 'orders') }} group by all
    """,
}


def test_whichever_order_dbt_lists_a_tests_nodes_in_the_source_is_what_it_checks() -> None:
    sources = {"source.a.shop.orders": {"source_name": "shop", "name": "orders"}}
    models = {"model.a.fct_location_daily_revenue": {"name": "fct_location_daily_revenue"}}
    test = {"test_metadata": {"kwargs": {"model": "{{ get_where_subquery(source('shop', 'orders')) }}", "to": "ref('fct_location_daily_revenue')"}}}
    for order in (["model.a.fct_location_daily_revenue", "source.a.shop.orders"], ["source.a.shop.orders", "model.a.fct_location_daily_revenue"]):
        assert checked_node({**test, "depends_on": {"nodes": order}}, sources, models) == "source.a.shop.orders"
    singular = {"depends_on": {"nodes": ["model.a.fct_location_daily_revenue", "source.a.shop.orders"]}}
    assert checked_node(singular, sources, models) is None  # checks no node alone: no check (as dagster-dbt)


def test_a_source_test_of_another_projects_model_is_a_check_of_that_model(tmp_path: Path) -> None:
    pipelines = write_files(tmp_path / "pipelines", FILES)
    defs = build_definitions(pipelines, settings=LineageSettings(state_dir=str(tmp_path / "state")))
    graph = defs.resolve_asset_graph()
    on_orders = {AssetCheckKey(ORDERS, "source_not_null_shop_orders_order_id"), AssetCheckKey(ORDERS, RELATIONSHIPS)}
    assert set(graph.asset_check_keys) == on_orders  # none of them a check of the second project's model
    everything = [k for k in graph.get_all_asset_keys() if graph.get(k).is_executable]
    job = defs.resolve_implicit_job_def_def_for_assets(everything)
    assert job is not None
    result = job.execute_in_process(instance=DagsterInstance.ephemeral(), asset_selection=everything, raise_on_error=False)
    assert result.success
    evaluated = {
        AssetCheckKey(e.event_specific_data.asset_key, e.event_specific_data.check_name): e.event_specific_data.passed
        for e in result.all_events
        if e.event_type_value == "ASSET_CHECK_EVALUATION"
    }
    assert evaluated == dict.fromkeys(on_orders, True)
