"""The cascade's gate, evaluated by Dagster itself: a step never starts while an input it reads was never materialized.

``dagster.evaluate_automation_conditions`` runs the project's own conditions
against a real (ephemeral) instance, tick after tick with the cursor carried
over, and upstream updates are recorded the way Dagster records any
materialization. The waiting step's evaluation names the input it waits for.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

from dagster import AssetKey, AssetMaterialization, DagsterInstance, evaluate_automation_conditions

from conftest import with_example_parse
from lineage_defs import LineageSettings, build_definitions
from triggers_support import write_steps

STEPS = {
    "g/orders.sql": "-- pipeline\n-- partitioned daily start=2025-01-01\n-- materialize duckdb://warehouse/orders\nSELECT $partition AS p\n",
    "g/dims.sql": "-- pipeline\n-- materialize duckdb://warehouse/dims\nSELECT 1 AS d\n",
    # like the example's customer_ltv: unpartitioned, reading a daily table and a dimension
    "g/ltv.sql": "-- pipeline\n-- materialize duckdb://warehouse/ltv\nSELECT o.p, d.d FROM warehouse.orders o, warehouse.dims d\n",
    "g/daily.sql": (
        "-- pipeline\n-- partitioned daily start=2025-01-01\n-- materialize duckdb://warehouse/daily_t\n"
        "SELECT o.p, d.d FROM warehouse.orders o, warehouse.dims d WHERE o.p = $partition\n"
    ),
    "g/monthly.sql": "-- pipeline\n-- partitioned monthly start=2025-01-01\n-- materialize duckdb://warehouse/monthly_t\nSELECT count(*) AS n FROM warehouse.daily_t\n",
    # a relationships test reads a table the body does not: the gate waits for it too
    "g/checked.sql": (
        "-- pipeline\n-- materialize duckdb://warehouse/checked\n-- data_test relationships d -> duckdb://warehouse/refs.d\n"
        "SELECT d FROM warehouse.dims\n"
    ),
    "g/refs.sql": "-- pipeline\n-- trigger manual\n-- materialize duckdb://warehouse/refs\nSELECT 1 AS d\n",
}
NOW = dt.datetime(2025, 3, 10, 12, tzinfo=dt.timezone.utc)


def key(name: str) -> AssetKey:
    return AssetKey(["duckdb", "warehouse", name])


def update(instance: DagsterInstance, name: str, partition: str | None = None) -> None:
    instance.report_runless_asset_event(AssetMaterialization(asset_key=key(name), partition=partition))


def gate_of(result: Any, name: str) -> dict[str, bool]:
    """The ``inputs_materialized`` part of the step's evaluation: each input → whether it let the step through."""
    (evaluation,) = [r for r in result.results if r.key == key(name)]
    stack = [evaluation]
    while stack:
        node = stack.pop()
        if node.condition.get_label() == "inputs_materialized":
            return {child.condition.key.path[-1]: not child.true_subset.is_empty for child in node.child_results}
        stack.extend(node.child_results)
    raise AssertionError(f"no inputs_materialized in the evaluation of {name}")


def requested(result: Any, name: str) -> list[str | None]:
    subset = result.get_requested_partitions(key(name)) if result.get_num_requested(key(name)) else set()
    return sorted(subset, key=str)


class Ticks:
    """Evaluate the project's conditions tick after tick, as the cascade sensor does."""

    def __init__(self, defs: Any, instance: DagsterInstance) -> None:
        self.defs, self.instance, self.cursor, self.now = defs, instance, None, NOW

    def __call__(self) -> Any:
        self.now += dt.timedelta(seconds=15)
        result = evaluate_automation_conditions(self.defs, self.instance, cursor=self.cursor, evaluation_time=self.now)
        self.cursor = result.cursor
        return result


def test_a_step_waits_until_every_input_it_reads_was_materialized(tmp_path: Path) -> None:
    defs = build_definitions(write_steps(tmp_path / "pipes", STEPS), settings=LineageSettings(state_dir=str(tmp_path / "state")))
    with DagsterInstance.ephemeral() as instance:
        tick = Ticks(defs, instance)
        tick()  # the first evaluation only sets the cursor
        update(instance, "dims")
        result = tick()
        # dims updated, but no day of orders exists: neither reader of both starts
        assert requested(result, "ltv") == [] and requested(result, "daily_t") == []
        assert gate_of(result, "ltv") == {"orders": False, "dims": True}  # it says what it waits for
        assert requested(result, "checked") == []  # its relationships test reads refs, never built
        assert gate_of(result, "checked") == {"dims": True, "refs": False}

        update(instance, "orders", "2025-01-02")
        result = tick()
        assert requested(result, "ltv") == [None]  # one day of orders is enough for a whole-table reader
        assert requested(result, "daily_t") == ["2025-01-02"]  # the day that exists, no other
        assert requested(result, "monthly_t") == []  # no day of daily_t yet
        assert gate_of(result, "monthly_t") == {"daily_t": False}

        update(instance, "daily_t", "2025-01-02")
        result = tick()
        assert requested(result, "monthly_t") == ["2025-01-01"]  # the month of the day that landed

        update(instance, "refs")
        assert requested(tick(), "checked") == [None]


def test_the_example_waits_for_orders_before_customer_ltv(tmp_path: Path) -> None:
    """The issue's case: dim_customers built, orders never — customer_ltv (its `on dim_customers` has no debounce) waits."""
    example = Path(__file__).resolve().parents[1] / "examples" / "pipelines"
    defs = build_definitions(example, settings=LineageSettings(state_dir=str(with_example_parse(tmp_path / "state"))))
    ltv = AssetKey(["duckdb", "warehouse", "customer_ltv"])
    with DagsterInstance.ephemeral() as instance:
        tick = Ticks(defs, instance)
        tick()
        instance.report_runless_asset_event(AssetMaterialization(asset_key=AssetKey(["ducklake", "main", "dim_customers"])))
        result = tick()
        assert result.get_num_requested(ltv) == 0
        (evaluation,) = [r for r in result.results if r.key == ltv]
        gate = next(n for n in _walk(evaluation) if n.condition.get_label() == "inputs_materialized")
        assert {c.condition.key.path[-1]: not c.true_subset.is_empty for c in gate.child_results} == {"dim_customers": True, "orders": False}


def _walk(node: Any) -> list[Any]:
    out, stack = [], [node]
    while stack:
        n = stack.pop()
        out.append(n)
        stack.extend(n.child_results)
    return out
