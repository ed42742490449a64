"""The cascade and schedules under the real `dagster-daemon`, with nothing switched on by hand.

One daemon for the module. A root materialized by hand (the `dagster asset
materialize` CLI) makes its `trigger any` consumer run; `trigger all` waits
for every input's partition and builds that partition; `debounce` turns a
burst of upstream updates into one run after the quiet window; an
`on schedule` step's tick builds the partition the tick closed.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from typing import Any

import pytest
from dagster import AssetKey, AssetMaterialization, DagsterRunStatus

from services import IN_PROCESS, VENV_BIN, Daemon, wait_for
from triggers_support import evaluated_once, runs, ticks_since, write_steps

pytestmark = pytest.mark.daemon

STEPS = {
    "casc/root.sql": "-- pipeline\n-- trigger manual\n-- materialize duckdb://warehouse/root\nSELECT 1 AS x\n",
    "casc/child.sql": "-- pipeline\n-- materialize duckdb://warehouse/child\nSELECT x FROM warehouse.root\n",
    "casc/burst_src.sql": "-- pipeline\n-- materialize duckdb://warehouse/burst_src\nSELECT 1 AS y\n",
    "casc/burst_sink.sql": "-- pipeline\n-- debounce 8s\n-- materialize duckdb://warehouse/burst_sink\nSELECT y FROM warehouse.burst_src\n",
    "casc/left.sql": "-- pipeline\n-- partitioned daily start=2025-01-01\n-- materialize duckdb://warehouse/left_side\nSELECT $partition AS p\n",
    "casc/right.sql": "-- pipeline\n-- partitioned daily start=2025-01-01\n-- materialize duckdb://warehouse/right_side\nSELECT $partition AS p\n",
    "casc/both.sql": (
        "-- pipeline\n-- partitioned daily start=2025-01-01\n-- trigger all\n-- materialize duckdb://warehouse/both_sides\n"
        "SELECT l.p FROM warehouse.left_side l JOIN warehouse.right_side r USING (p) WHERE l.p = $partition\n"
    ),
    # the customer_ltv: unpartitioned, reading a dimension and a daily table
    "casc/days.sql": "-- pipeline\n-- partitioned daily start=2025-01-01\n-- trigger manual\n-- materialize duckdb://warehouse/days\nSELECT $partition AS p\n",
    "casc/dim.sql": "-- pipeline\n-- trigger manual\n-- materialize duckdb://warehouse/dim\nSELECT 1 AS d\n",
    "casc/ltv.sql": "-- pipeline\n-- materialize duckdb://warehouse/ltv\nSELECT count(*) AS n FROM warehouse.days, warehouse.dim\n",
    "casc/ticker.sql": (
        '-- pipeline\n-- partitioned daily start=2025-01-01\n-- on schedule cron="* * * * *"\n-- trigger manual\n'
        "-- materialize duckdb://warehouse/ticker\nSELECT $partition AS p\n"
    ),
}


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    tmp = tmp_path_factory.mktemp("cascade-e2e")
    pipelines = write_steps(tmp / "pipelines", STEPS)
    daemon = Daemon(tmp, pipelines, tmp / "state")
    daemon.start()
    try:
        instance = daemon.instance()
        # an update before the cascade's first tick is only its baseline (docs/annotations.md, Triggers)
        wait_for("the cascade sensor's first tick", lambda: evaluated_once(instance, "lineage_cascade"), 300, daemon.log_tail)
        yield {"tmp": tmp, "daemon": daemon, "instance": instance, "pipelines": pipelines, "state": tmp / "state"}
    finally:
        daemon.stop()


EVALUATIONS = 2  # "a few cascade evaluations": ticks that started after an update and finished (one already saw it)


def quiet_evaluations(world: dict[str, Any], since: float) -> None:
    """Wait until the cascade finished EVALUATIONS ticks that started after ``since``: whatever they would
    request about what happened before, they did (instead of sleeping for a guess of how long that takes)."""
    instance, daemon = world["instance"], world["daemon"]
    wait_for(f"{EVALUATIONS} cascade evaluations", lambda: ticks_since(instance, "lineage_cascade", since) >= EVALUATIONS, 150, daemon.log_tail)


def materialize_by_hand(world: dict[str, Any], key: str, partition: str | None = None) -> None:
    """`dagster asset materialize`, as a person would run it (no sensor, no tags)."""
    argv = [str(VENV_BIN / "dagster"), "asset", "materialize", "-m", "lineage_defs.definitions", "-a", "defs", "--select", key, *IN_PROCESS]
    if partition:
        argv += ["--partition", partition]
    r = subprocess.run(argv, env=world["daemon"].env, cwd=world["tmp"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-4000:]


def asset_runs(instance: Any, key: str) -> list[Any]:
    ak = AssetKey(key.split("/"))
    return [r for r in runs(instance) if r.asset_selection and ak in r.asset_selection]


def report(instance: Any, key: str, partition: str | None = None) -> None:
    """An upstream update as Dagster records it (no run needed for the cascade to see it)."""
    instance.report_runless_asset_event(AssetMaterialization(asset_key=AssetKey(key.split("/")), partition=partition))


def test_manual_root_materialized_by_hand_runs_its_consumer(world: dict[str, Any]) -> None:
    daemon, instance = world["daemon"], world["instance"]
    materialize_by_hand(world, "duckdb/warehouse/root")
    (by_hand,) = asset_runs(instance, "duckdb/warehouse/root")
    assert "dagster/sensor_name" not in by_hand.tags
    wait_for("the consumer's cascade run", lambda: [r for r in asset_runs(instance, "duckdb/warehouse/child") if r.status == DagsterRunStatus.SUCCESS], 150, daemon.log_tail)
    (run,) = asset_runs(instance, "duckdb/warehouse/child")
    assert run.tags["dagster/sensor_name"] == "lineage_cascade"
    assert not asset_runs(instance, "duckdb/warehouse/root")[1:], "the manual root is never run by the cascade"


def test_trigger_all_waits_for_every_input_of_the_partition(world: dict[str, Any]) -> None:
    daemon, instance = world["daemon"], world["instance"]
    report(instance, "duckdb/warehouse/left_side", "2025-01-02")
    quiet_evaluations(world, time.time())  # a few cascade evaluations with only one input in
    assert asset_runs(instance, "duckdb/warehouse/both_sides") == []
    # the real rows, so the run has something to join
    for side in ("left", "right"):
        materialize_by_hand(world, f"duckdb/warehouse/{side}_side", "2025-01-02")
    wait_for("the joined partition", lambda: [r for r in asset_runs(instance, "duckdb/warehouse/both_sides") if r.status == DagsterRunStatus.SUCCESS], 150, daemon.log_tail)
    (run,) = asset_runs(instance, "duckdb/warehouse/both_sides")
    assert run.tags["dagster/partition"] == "2025-01-02"


def test_a_step_never_starts_before_every_input_it_reads_was_materialized(world: dict[str, Any]) -> None:
    """One input built (no debounce), the other never: the step waits — no run, so no failed one — and starts
    once the other is in."""
    daemon, instance = world["daemon"], world["instance"]
    materialize_by_hand(world, "duckdb/warehouse/dim")
    quiet_evaluations(world, time.time())  # a few cascade evaluations with `days` never materialized
    assert asset_runs(instance, "duckdb/warehouse/ltv") == []
    materialize_by_hand(world, "duckdb/warehouse/days", "2025-01-02")
    wait_for("the reader's run", lambda: [r for r in asset_runs(instance, "duckdb/warehouse/ltv") if r.is_finished], 150, daemon.log_tail)
    (run,) = asset_runs(instance, "duckdb/warehouse/ltv")
    assert run.status == DagsterRunStatus.SUCCESS and run.tags["dagster/sensor_name"] == "lineage_cascade"


def test_debounce_coalesces_a_burst_into_one_run(world: dict[str, Any]) -> None:
    daemon, instance = world["daemon"], world["instance"]
    sink = "duckdb/warehouse/burst_sink"
    # burst_sink reads a table the reported updates never write: materialize it once for real, first.
    # That update is a burst of its own (the CLI can take longer than the quiet window to return on a
    # loaded machine): its one run comes after the quiet window; the burst below starts once it is done.
    materialize_by_hand(world, "duckdb/warehouse/burst_src")
    wait_for("the run after the update by hand", lambda: [r for r in asset_runs(instance, sink) if r.is_finished], 150, daemon.log_tail)
    before = {r.run_id for r in asset_runs(instance, sink)}
    for _ in range(5):  # then updates 2.5 s apart: every cascade tick in the burst sees a fresh one
        report(instance, "duckdb/warehouse/burst_src")
        time.sleep(2.5)
    last = instance.get_latest_materialization_event(AssetKey(["duckdb", "warehouse", "burst_src"])).timestamp  # the burst's end
    wait_for("the debounced run", lambda: [r for r in asset_runs(instance, sink) if r.is_finished and r.run_id not in before], 150, daemon.log_tail)
    quiet_evaluations(world, time.time())  # long enough for a second run to show up if the burst leaked one
    sink_runs = [r for r in asset_runs(instance, sink) if r.run_id not in before]
    assert len(before) == 1 and len(sink_runs) == 1, (before, [r.run_id for r in sink_runs])
    record = instance.get_run_record_by_id(sink_runs[0].run_id)
    assert record.create_timestamp.timestamp() >= last + 8, "the run waited for the quiet window"


def test_schedule_builds_the_partition_its_tick_closed(world: dict[str, Any]) -> None:
    daemon, instance = world["daemon"], world["instance"]
    wait_for("a scheduled run", lambda: [r for r in runs(instance, **{"dagster/schedule_name": "casc__ticker__schedule"}) if r.is_finished], 150, daemon.log_tail)
    run = runs(instance, **{"dagster/schedule_name": "casc__ticker__schedule"})[-1]
    assert run.status == DagsterRunStatus.SUCCESS
    import datetime as dt

    tick = dt.datetime.fromisoformat(run.tags["dagster/run_key"].split("@", 1)[1])  # <partition>@<tick>
    assert run.tags["dagster/partition"] == (tick.astimezone(dt.timezone.utc).date() - dt.timedelta(days=1)).isoformat()
