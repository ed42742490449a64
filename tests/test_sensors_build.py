"""Triggers → Dagster definitions: names, default status, conditions, and a Kafka sensor with no brokers."""

from __future__ import annotations

from pathlib import Path

import pytest
from dagster import AssetKey, DefaultScheduleStatus, DefaultSensorStatus, DagsterInstance, build_sensor_context

from conftest import with_example_parse
from lineage_defs import LineageSettings, build_definitions
from lineage_defs.errors import ProjectErrors, SpecError
from lineage_defs.project import load_project

STEPS = {
    "p/src.sql": "-- pipeline\n-- partitioned daily start=2025-01-01\n-- materialize duckdb://warehouse/src\nSELECT 1 AS x\n",
    "p/ref.sql": "-- pipeline\n-- materialize duckdb://warehouse/ref\nSELECT 1 AS x\n",
    "p/any.sql": (
        "-- pipeline\n-- partitioned daily start=2025-01-01\n-- mute duckdb://warehouse/ref\n-- debounce 5m\n"
        "-- materialize duckdb://warehouse/any_t\nSELECT s.x FROM warehouse.src s, warehouse.ref r\n"
    ),
    "p/manual.sql": "-- pipeline\n-- trigger manual\n-- on schedule cron=\"0 6 * * *\" tz=Europe/Berlin\n-- on schedule cron=\"@hourly\"\n-- materialize duckdb://warehouse/manual_t\nSELECT x FROM warehouse.src\n",
    "p/stream.sql": "-- pipeline\n-- on kafka topic=a.b connection=events\n-- on webhook\n-- materialize duckdb://warehouse/stream_t append\nSELECT value FROM _events\n",
}


def write(root: Path, steps: dict[str, str]) -> Path:
    for rel, text in steps.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


def test_definitions_carry_sensors_schedules_and_conditions(tmp_path: Path) -> None:
    defs = build_definitions(write(tmp_path / "pipes", STEPS), settings=LineageSettings(state_dir=str(tmp_path / "state")))
    sensors = {s.name: s for s in defs.sensors}
    assert set(sensors) == {"lineage_cascade", "p__stream__kafka_a_b", "p__stream__webhook_p__stream"}
    assert all(s.default_status == DefaultSensorStatus.RUNNING for s in sensors.values())
    schedules = {s.name: s for s in defs.schedules}
    assert set(schedules) == {"p__manual__schedule", "p__manual__schedule_2"}
    assert schedules["p__manual__schedule"].execution_timezone == "Europe/Berlin"
    assert all(s.default_status == DefaultScheduleStatus.RUNNING for s in schedules.values())
    graph = defs.resolve_asset_graph()
    label = lambda k: (c.get_label() if (c := graph.get(AssetKey(["duckdb", "warehouse", k])).automation_condition) else None)  # noqa: E731
    assert label("any_t") == "lineage: trigger any"
    assert label("manual_t") is None and label("src") is None and label("stream_t") is None
    # the muted read is no dependency, so it can never trigger
    assert AssetKey(["duckdb", "warehouse", "ref"]) not in graph.get(AssetKey(["duckdb", "warehouse", "any_t"])).parent_keys
    assert "debounce_300s" in str(graph.get(AssetKey(["duckdb", "warehouse", "any_t"])).automation_condition.get_snapshot())


def test_a_kafka_sensor_without_brokers_skips_and_says_how_to_fix(tmp_path: Path) -> None:
    defs = build_definitions(write(tmp_path / "pipes", STEPS), settings=LineageSettings(state_dir=str(tmp_path / "state")))
    sensor = next(s for s in defs.sensors if s.name == "p__stream__kafka_a_b")
    with DagsterInstance.ephemeral() as instance:
        result = sensor.evaluate_tick(build_sensor_context(instance=instance, repository_def=defs.get_repository_def()))
    assert not result.run_requests
    assert "LINEAGE_KAFKA_BOOTSTRAP_EVENTS" in (result.skip_message or "")


def test_event_sensor_ticks_share_one_instance_per_process(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A code server's tick context carries only an instance reference; Dagster's ``context.instance``
    opens a new instance from it on every tick (on SQLite, with a schema check that loads every
    migration). Our ticks open it once per process, and skip the same way."""
    from dagster import SensorEvaluationContext

    defs = build_definitions(write(tmp_path / "pipes", STEPS), settings=LineageSettings(state_dir=str(tmp_path / "state")))
    sensor = next(s for s in defs.sensors if s.name == "p__stream__webhook_p__stream")
    opened: list[object] = []
    from_ref = DagsterInstance.from_ref
    monkeypatch.setattr(DagsterInstance, "from_ref", staticmethod(lambda ref: opened.append(ref) or from_ref(ref)))
    home = tmp_path / "home"
    home.mkdir()
    with DagsterInstance.from_config(str(home)) as instance:
        ref = instance.get_ref()

        def tick() -> SensorEvaluationContext:
            return SensorEvaluationContext(instance_ref=ref, last_tick_completion_time=None, last_run_key=None, cursor=None,
                                           repository_name=None, repository_def=defs.get_repository_def())  # fmt: skip

        skips = [sensor.evaluate_tick(tick()).skip_message for _ in range(3)]
        assert len(opened) == 1, opened
        assert skips[0] == skips[2] and "no new batch (0 events stored" in (skips[0] or ""), skips
        with tick() as dagsters:  # what Dagster's own property does: a new instance per tick
            assert dagsters.instance is not None and len(opened) == 2


def test_two_steps_claiming_one_hook_is_a_check_error(tmp_path: Path) -> None:
    steps = {
        "p/a.sql": "-- pipeline\n-- on webhook name=h\n-- materialize duckdb://warehouse/a\nSELECT 1 AS x\n",
        "p/b.sql": "-- pipeline\n-- on webhook name=h\n-- materialize duckdb://warehouse/b\nSELECT 1 AS x\n",
    }
    root = write(tmp_path / "pipes", steps)
    (error,) = [e for e in load_project(root).errors]  # what `lineage-defs check` reports, located
    assert isinstance(error, SpecError) and error.headline() == "p/b.sql:2:4: webhook 'h' is declared twice (also by p/a.sql) — give one of them another name= (each hook feeds one step)"
    with pytest.raises(ProjectErrors, match="webhook 'h' is declared twice"):  # and the code location refuses to load with it
        build_definitions(root, settings=LineageSettings(state_dir=str(tmp_path / "state")))


def test_hook_names_are_unique_after_mapping_and_bad_ones_are_located(tmp_path: Path) -> None:
    """`pay-eu`, `pay_eu` and `pay.eu` once all took LINEAGE_WEBHOOK_TOKEN_PAY_EU: now only `pay_eu` is a name,
    and default names (the step's, lower-cased) that meet are a located error too."""
    steps = {
        "p/Pay.sql": "-- pipeline\n-- on webhook\n-- materialize duckdb://warehouse/a\nSELECT 1 AS x\n",
        "p/pay.sql": "-- pipeline\n-- on webhook\n-- materialize duckdb://warehouse/b\nSELECT 1 AS x\n",
        "p/c.sql": "-- pipeline\n-- on webhook name=pay-eu\n-- materialize duckdb://warehouse/c\nSELECT 1 AS x\n",
        "p/d.sql": "-- pipeline\n-- on webhook name=pay_eu\n-- materialize duckdb://warehouse/d\nSELECT 1 AS x\n",
    }
    errors = sorted(e.headline() for e in load_project(write(tmp_path / "pipes", steps)).errors)
    assert errors == [
        "p/c.sql:2:20: bad webhook name 'pay-eu' — use lower-case letters, digits and _ only, e.g. name=pay_eu (its credentials: LINEAGE_WEBHOOK_TOKEN_PAY_EU)",
        "p/pay.sql:2:4: webhook 'p__pay' is declared twice (also by p/Pay.sql) — give one of them another name= (each hook feeds one step)",
    ]


def test_the_example_defines_its_sensors_and_schedules(tmp_path: Path) -> None:
    example = Path(__file__).resolve().parents[1] / "examples" / "pipelines"
    defs = build_definitions(example, settings=LineageSettings(state_dir=str(with_example_parse(tmp_path / "state"))))
    assert sorted(s.name for s in defs.sensors) == [
        "lineage_cascade",
        "lineage_hooks_on_failure",  # shop/payments.py's on_failure hook (no step has on_success/on_recovery)
        "shop__order_changes__postgres_public_orders",
        "shop__order_events__kafka_shop_order_events",
        "shop__payments__webhook_payments",
        "shop__supplier_invoices__email_invoices",
    ]
    assert sorted(s.name for s in defs.schedules) == ["analytics__kpi_snapshots__schedule", "shop__raw_orders__schedule"]


def test_a_schedule_tick_waits_for_inputs_never_materialized(tmp_path: Path) -> None:
    """Like the cascade, a schedule never starts a step whose input was never materialized: it skips,
    naming the input; once the input exists the tick asks for its run."""
    import datetime as dt

    from dagster import AssetMaterialization, build_schedule_context, instance_for_test

    defs = build_definitions(write(tmp_path / "pipes", STEPS), settings=LineageSettings(state_dir=str(tmp_path / "state")))
    schedule = next(s for s in defs.schedules if s.name == "p__manual__schedule_2")
    tick = dt.datetime(2025, 3, 2, 6, 0, tzinfo=dt.timezone.utc)
    with instance_for_test() as instance:  # a schedule context needs an instance with a ref
        first = schedule.evaluate_tick(build_schedule_context(instance=instance, scheduled_execution_time=tick))
        assert not first.run_requests
        assert "input(s) duckdb/warehouse/src were never materialized" in (first.skip_message or ""), first.skip_message
        instance.report_runless_asset_event(AssetMaterialization(AssetKey(["duckdb", "warehouse", "src"]), partition="2025-03-01"))
        second = schedule.evaluate_tick(build_schedule_context(instance=instance, scheduled_execution_time=tick))
        assert [r.run_key for r in second.run_requests or []] == [tick.isoformat()]
