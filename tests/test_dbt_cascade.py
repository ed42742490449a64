"""dbt tests in cascade runs, under the real `dagster-daemon`: a script materialized by hand makes
`lineage_cascade` run the dbt models reading it, and that run plans and records the models' dbt
tests as checks (and the tests on the source the script's table is), like a manual run does.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from typing import Any

import pytest
from dagster import AssetCheckKey, AssetKey, DagsterEventType, DagsterRunStatus

from dbt_projects import write_files
from services import IN_PROCESS, VENV_BIN, Daemon, wait_for
from triggers_support import evaluated_once, runs

pytestmark = [pytest.mark.daemon, pytest.mark.dbt]

FILES = {
    "casc/orders.sql": """
        -- pipeline
        -- trigger manual
        -- materialize ducklake://main/orders
        SELECT i AS order_id, i % 3 AS customer_id, i * 2.5 AS amount FROM range(6) t(i)
    """,
    "casc/dbt/dbt_project.yml": """
        name: casc_dbt
        version: "1.0"
        profile: casc_dbt
    """,
    "casc/dbt/models/sources.yml": """
        version: 2
        sources:
          - name: lake
            database: lake
            schema: main
            tables:
              - name: orders
                columns:
                  - name: order_id
                    data_tests: [not_null]
    """,
    "casc/dbt/models/stg_orders.sql": "select order_id, customer_id, amount from {{ source('lake', 'orders') }}\n",
    "casc/dbt/models/customer_totals.sql": "select customer_id, sum(amount) as total from {{ ref('stg_orders') }} group by 1\n",
    "casc/dbt/models/schema.yml": """
        version: 2
        models:
          - name: stg_orders
            columns:
              - name: order_id
                data_tests: [unique, not_null]
          - name: customer_totals
            columns:
              - name: customer_id
                data_tests: [unique]
    """,
}
ORDERS = AssetKey(["ducklake", "main", "orders"])
STG = AssetKey(["dbt", "warehouse", "main", "stg_orders"])
TOTALS = AssetKey(["dbt", "warehouse", "main", "customer_totals"])
CHECKS = {
    AssetCheckKey(STG, "unique_stg_orders_order_id"),
    AssetCheckKey(STG, "not_null_stg_orders_order_id"),
    AssetCheckKey(TOTALS, "unique_customer_totals_customer_id"),
}


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    tmp = tmp_path_factory.mktemp("dbt-cascade")
    pipelines = write_files(tmp / "pipelines", FILES)
    daemon = Daemon(tmp, pipelines, tmp / "state")
    instance = daemon.instance()  # the storage exists before the daemon opens it (no race creating its tables)
    daemon.start()
    try:
        # an update before the cascade's first tick is only its baseline (docs/annotations.md, Triggers)
        wait_for("the cascade sensor's first tick", lambda: evaluated_once(instance, "lineage_cascade"), 300, daemon.log_tail)
        yield {"tmp": tmp, "daemon": daemon, "instance": instance}
    finally:
        daemon.stop()


def test_cascade_run_of_dbt_models_evaluates_their_tests(world: dict[str, Any]) -> None:
    daemon, instance = world["daemon"], world["instance"]
    argv = [str(VENV_BIN / "dagster"), "asset", "materialize", "-m", "lineage_defs.definitions", "-a", "defs", "--select", ORDERS.to_user_string(), *IN_PROCESS]
    done = subprocess.run(argv, env=daemon.env, cwd=world["tmp"], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-4000:]

    def cascade_run() -> Any:
        found = [r for r in runs(instance) if r.asset_selection and STG in r.asset_selection and r.status == DagsterRunStatus.SUCCESS]
        return found[0] if found else None

    run = wait_for("the dbt models' cascade run", cascade_run, 400, daemon.log_tail)
    assert run.tags.get("dagster/sensor_name") == "lineage_cascade"
    assert {STG, TOTALS} <= set(run.asset_selection)
    # the run plans the models' tests as checks...
    assert run.asset_check_selection is None or CHECKS <= set(run.asset_check_selection)
    planned = {
        AssetCheckKey(e.dagster_event.event_specific_data.asset_key, e.dagster_event.event_specific_data.check_name)
        for e in instance.all_logs(run.run_id, of_type=DagsterEventType.ASSET_CHECK_EVALUATION_PLANNED)
    }
    assert CHECKS <= planned, planned
    # ... and records each one's result from dbt
    evaluated = {
        AssetCheckKey(d.asset_key, d.check_name): d.passed
        for d in (e.dagster_event.event_specific_data for e in instance.all_logs(run.run_id, of_type=DagsterEventType.ASSET_CHECK_EVALUATION))
    }
    assert {k: evaluated.get(k) for k in CHECKS} == dict.fromkeys(CHECKS, True), evaluated
    # the test on the source that the script's table is: a check of that asset, run by dbt when it is materialized
    (by_hand,) = [r for r in runs(instance) if r.asset_selection and ORDERS in r.asset_selection]
    on_source = [
        (d.check_name, d.passed)
        for d in (e.dagster_event.event_specific_data for e in instance.all_logs(by_hand.run_id, of_type=DagsterEventType.ASSET_CHECK_EVALUATION))
        if d.asset_key == ORDERS
    ]
    assert on_source == [("source_not_null_lake_orders_order_id", True)]
