"""lineage_defs.dagster_storage: Dagster's SQLite event log files, written with one engine per shard and
one transaction per batch — the same rows as Dagster's own class, read back by Dagster's own class."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from collections import Counter
from pathlib import Path
from typing import Any

import dagster as dg
import pytest
from dagster._core.storage.event_log.sqlite.sqlite_event_log import SqliteEventLogStorage
from dagster._core.storage.partition_status_cache import get_and_update_asset_status_cache_value
from dagster._core.storage.tags import ASSET_PARTITION_RANGE_END_TAG, ASSET_PARTITION_RANGE_START_TAG

from sqlalchemy.event import listen, remove
from sqlalchemy.pool import Pool

from lineage_defs.dagster_storage import BatchedSqliteEventLogStorage

OURS = {"module": "lineage_defs.dagster_storage", "class": "BatchedSqliteEventLogStorage", "config": {}}
DAILY = dg.DailyPartitionsDefinition(start_date="2024-01-01")
FIRST, LAST = "2024-01-01", "2024-01-20"


@dg.multi_asset(
    specs=[dg.AssetSpec("daily", skippable=True)],
    check_specs=[dg.AssetCheckSpec("positive", asset="daily")],
    partitions_def=DAILY,
    backfill_policy=dg.BackfillPolicy.single_run(),
)
def daily(context) -> Any:  # type: ignore[no-untyped-def]
    """Reports each partition of its range, as a lineage_defs range run does."""
    for i, key in enumerate(context.partition_keys):
        context.add_asset_metadata({"dagster/row_count": i, "day": key}, asset_key=dg.AssetKey("daily"), partition_key=key)
    yield dg.MaterializeResult(asset_key="daily")
    yield dg.AssetCheckResult(check_name="positive", asset_key="daily", passed=True)


@dg.asset(partitions_def=DAILY)
def failing(context) -> None:  # type: ignore[no-untyped-def]
    raise RuntimeError(f"no input for {context.partition_key}")


def _range(instance: dg.DagsterInstance) -> dg.ExecuteInProcessResult:
    return dg.materialize([daily], instance=instance, tags={ASSET_PARTITION_RANGE_START_TAG: FIRST, ASSET_PARTITION_RANGE_END_TAG: LAST})


def _summary(instance: dg.DagsterInstance, run_id: str) -> dict[str, Any]:
    """What the UI and the automation daemon read: the run's events, the asset's partitions and records."""
    key = dg.AssetKey("daily")
    mats = instance.fetch_materializations(key, limit=1000).records
    planned = instance.event_log_storage.get_event_records(dg.EventRecordsFilter(dg.DagsterEventType.ASSET_MATERIALIZATION_PLANNED, asset_key=key))
    check = instance.event_log_storage.get_latest_asset_check_execution_by_key([dg.AssetCheckKey(key, "positive")])
    return {
        "event types": Counter(e.dagster_event_type for e in instance.all_logs(run_id) if e.is_dagster_event),
        "materialized": sorted(instance.get_materialized_partitions(key)),
        "records": sorted((r.partition_key, r.asset_materialization.metadata["dagster/row_count"].value) for r in mats if r.asset_materialization),
        "planned": sorted(r.partition_key or "" for r in planned),
        "latest": instance.get_latest_materialization_event(key).asset_materialization.partition,  # type: ignore[union-attr]
        "check": [c.status.value for c in check.values()],
        "tags": instance.get_event_tags_for_asset(key, filter_tags={"dagster/partition": "2024-01-05"}),
        # the asset's row (updated once per batch by ours, once per event by Dagster's)
        "row": (
            entry.last_materialization_record.storage_id,  # type: ignore[union-attr]
            entry.last_materialization.dagster_event.partition,  # type: ignore[union-attr]
            entry.last_run_id == run_id,
        )
        if (entry := instance.get_asset_records([key])[0].asset_entry)
        else None,
    }


def test_same_rows_as_dagsters_own_class_and_written_in_batches(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DAGSTER_EVENT_BATCH_SIZE", "1000")
    batches: list[int] = []
    original = BatchedSqliteEventLogStorage.store_event_batch
    monkeypatch.setattr(BatchedSqliteEventLogStorage, "store_event_batch", lambda self, events: (batches.append(len(events)), original(self, events))[1])

    connections = Counter[str]()

    def opened(dbapi_connection: Any, record: Any) -> None:
        connections.update(["n"])

    listen(Pool, "connect", opened)
    try:
        with dg.instance_for_test() as stock:
            assert type(stock.event_log_storage) is SqliteEventLogStorage
            connections.clear()
            run_id = _range(stock).run_id
            stock_connections = connections["n"]
            expected = _summary(stock, run_id)
        with dg.instance_for_test(overrides={"event_log_storage": OURS}) as ours:
            assert isinstance(ours.event_log_storage, BatchedSqliteEventLogStorage)
            connections.clear()
            run_id = _range(ours).run_id
            our_connections = connections["n"]
            got = _summary(ours, run_id)
    finally:
        remove(Pool, "connect", opened)
    assert got == expected
    # Dagster's class opens about three SQLite connections per asset event (41 here); ours two per batch
    assert stock_connections > 3 * 40 and our_connections < stock_connections / 2, (stock_connections, our_connections)
    assert len(expected["materialized"]) == 20 and expected["check"] == ["SUCCEEDED"]
    # the planned events (20 partitions and the check) and the 20 materializations each came as one batch
    assert sorted(batches) == [20, 21], batches


def test_files_read_back_by_dagsters_class(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """An instance can switch between the two classes: ours writes exactly Dagster's files."""
    monkeypatch.setenv("DAGSTER_EVENT_BATCH_SIZE", "1000")
    home = tmp_path / "home"
    home.mkdir()
    base = tmp_path / "events"
    with dg.instance_for_test(temp_dir=str(home), overrides={"event_log_storage": {**OURS, "config": {"base_dir": str(base)}}}) as ours:
        run_id = _range(ours).run_id
        written = _summary(ours, run_id)
        failed = dg.materialize([failing], instance=ours, partition_key="2024-01-03", raise_on_error=False)
        assert not failed.success
    with dg.instance_for_test(temp_dir=str(home), overrides={"event_log_storage": {"module": "dagster._core.storage.event_log", "class": "SqliteEventLogStorage", "config": {"base_dir": str(base)}}}) as stock:
        assert type(stock.event_log_storage) is SqliteEventLogStorage
        assert _summary(stock, run_id) == written
        # the failed run's partition is marked failed (from its planned event, read from our index rows)
        cache = get_and_update_asset_status_cache_value(stock, dg.AssetKey("failing"), DAILY)
        assert cache is not None
        assert list(cache.deserialize_failed_partition_subsets(DAILY).get_partition_keys()) == ["2024-01-03"]


WRITER = textwrap.dedent(
    """
    import sys, dagster as dg
    from dagster._core.storage.tags import ASSET_PARTITION_RANGE_START_TAG as S, ASSET_PARTITION_RANGE_END_TAG as E
    name = sys.argv[1]
    @dg.multi_asset(specs=[dg.AssetSpec(name, skippable=True)], partitions_def=dg.DailyPartitionsDefinition(start_date="2024-01-01"),
                    backfill_policy=dg.BackfillPolicy.single_run())
    def step(context):
        for key in context.partition_keys:
            context.add_asset_metadata({"n": 1}, asset_key=dg.AssetKey(name), partition_key=key)
        yield dg.MaterializeResult(asset_key=name)
    instance = dg.DagsterInstance.get()
    for _ in range(3):
        assert dg.materialize([step], instance=instance, tags={S: "2024-01-01", E: "2024-03-01"}).success
    """
)


def test_concurrent_processes_lose_nothing(tmp_path: Path) -> None:
    """Two run processes writing batches into the same index shard at once (SQLite's lock, busy timeout)."""
    home = tmp_path / "home"
    home.mkdir()
    (home / "dagster.yaml").write_text(
        "event_log_storage:\n  module: lineage_defs.dagster_storage\n  class: BatchedSqliteEventLogStorage\n"
        f"  config:\n    base_dir: {home / 'storage'}\ntelemetry:\n  enabled: false\n"
    )
    env = {**os.environ, "DAGSTER_HOME": str(home), "DAGSTER_EVENT_BATCH_SIZE": "1000"}
    # the instance exists before its runs do (as `dagster dev` creates it); two processes creating the
    # index shard at the same moment race in Dagster's own schema stamping, whichever class writes
    instance = dg.DagsterInstance.from_config(str(home))
    procs = [subprocess.Popen([sys.executable, "-c", WRITER, name], env=env, stderr=subprocess.PIPE, text=True) for name in ("a", "b")]
    for p in procs:
        _, err = p.communicate(timeout=300)
        assert p.returncode == 0, err[-3000:]
    assert isinstance(instance.event_log_storage, BatchedSqliteEventLogStorage)
    for name in ("a", "b"):
        records = instance.fetch_materializations(dg.AssetKey(name), limit=1000).records
        assert len(records) == 3 * 61, (name, len(records))
        assert len(instance.get_materialized_partitions(dg.AssetKey(name))) == 61


def test_engines_are_bounded(tmp_path: Path) -> None:
    """A long-lived webserver reads many runs' shards: at most ENGINES engines are kept, and evicted shards still read."""
    storage = BatchedSqliteEventLogStorage(str(tmp_path))
    storage.ENGINES = 4
    for i in range(10):
        with storage.run_connection(f"run-{i}") as conn:
            conn.exec_driver_sql("SELECT 1")
    assert len(storage._engines) == 4
    assert list(storage._engines) == ["run-6", "run-7", "run-8", "run-9"]
    assert storage.get_logs_for_run("run-0") == []  # evicted: a new engine, the same file
    assert list(storage._engines)[-1] == "run-0"
    storage.dispose()


def test_base_dir_defaults_to_dagster_home_storage(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path))
    storage = BatchedSqliteEventLogStorage.from_config_value(None, {})
    assert Path(storage._base_dir) == tmp_path / "storage"
    assert (tmp_path / "storage" / "index.db").exists()
    monkeypatch.delenv("DAGSTER_HOME")
    with pytest.raises(ValueError, match=r"no base_dir in dagster.yaml and DAGSTER_HOME is not set — set `base_dir:`"):
        BatchedSqliteEventLogStorage.from_config_value(None, {})


def test_the_shipped_instance_and_the_readme_quote_the_same_figures() -> None:
    """dagster_home/dagster.yaml's comment quotes the benchmark's figures: docs/configuration.md's, not others."""
    import re

    root = Path(__file__).resolve().parents[1]
    comment = " ".join(line.lstrip("# ") for line in (root / "dagster_home" / "dagster.yaml").read_text().splitlines() if line.startswith("#"))
    readme = " ".join((root / "docs" / "configuration.md").read_text().split())
    figures = re.findall(r"\d+(?:\.\d+)?(?:–\d+(?:\.\d+)?)? s\b", comment)
    assert figures, comment
    for figure in figures:
        assert f"{figure} on them" in readme or f"one {figure}" in readme, (figure, "not in docs/configuration.md")


def test_the_monitored_launcher_finds_a_dead_run_worker() -> None:
    """Run monitoring asks the launcher whether a STARTED run's worker lives: a killed one (a zombie
    included) is FAILED, a live one RUNNING, one it cannot see (another host, no pid yet) RUNNING."""
    import json
    import time

    from dagster._core.events import EngineEventData
    from dagster._core.launcher import WorkerStatus
    from dagster._core.storage.tags import GRPC_INFO_TAG

    from lineage_defs.dagster_storage import MonitoredRunLauncher, process_alive

    @dg.asset
    def one() -> int:
        return 1

    overrides = {"run_launcher": {"module": "lineage_defs.dagster_storage", "class": "MonitoredRunLauncher"}}
    with dg.instance_for_test(overrides=overrides) as instance:
        assert isinstance(instance.run_launcher, MonitoredRunLauncher) and instance.run_launcher.supports_check_run_worker_health
        run = instance.get_run_by_id(dg.materialize([one], instance=instance).run_id)
        assert run is not None
        check = instance.run_launcher.check_run_worker_health
        assert check(run).status == WorkerStatus.RUNNING  # launched in-process here: no code server, not checked
        instance.add_run_tags(run.run_id, {GRPC_INFO_TAG: json.dumps({"host": "localhost", "port": 4266})})
        run = instance.get_run_by_id(run.run_id)
        assert check(run).status == WorkerStatus.RUNNING  # no worker recorded yet

        worker = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
        try:
            instance.report_engine_event(f"Started process for run (pid: {worker.pid}).", run, EngineEventData.in_process(worker.pid))
            assert check(run).status == WorkerStatus.RUNNING
            worker.kill()
            time.sleep(0.3)
            assert not process_alive(worker.pid, time.time())  # a zombie until reaped: dead all the same
            result = check(run)
            assert result.status == WorkerStatus.FAILED and f"pid {worker.pid}" in (result.msg or "")
        finally:
            worker.kill()
            worker.wait()
        assert not process_alive(os.getpid(), time.time() - 3600), "a pid that started after the worker did is another process"
        instance.add_run_tags(run.run_id, {GRPC_INFO_TAG: json.dumps({"host": "10.1.2.3", "port": 4266})})
        assert check(instance.get_run_by_id(run.run_id)).status == WorkerStatus.RUNNING  # another host's worker: never failed from here


def test_a_worker_that_lives_is_not_failed_when_the_wall_clock_is_stepped(monkeypatch: pytest.MonkeyPatch) -> None:
    """A VM's wall clock set right after a pause moves the kernel's boot time (wall clock minus time
    since boot) by the step: read through it, a live worker looks younger than its own start event.
    Read through the clock its launch recorded (``CLOCK_TAG``) it is alive; a pid taken by a younger
    process is still told apart, and a clock of another boot is not used."""
    import json
    import time

    from dagster._core.events import EngineEventData
    from dagster._core.launcher import WorkerStatus
    from dagster._core.storage.tags import GRPC_INFO_TAG

    from lineage_defs import dagster_storage
    from lineage_defs.dagster_storage import CLOCK_TAG, launch_clock, process_alive

    @dg.asset
    def one() -> int:
        return 1

    overrides = {"run_launcher": {"module": "lineage_defs.dagster_storage", "class": "MonitoredRunLauncher"}}
    with dg.instance_for_test(overrides=overrides) as instance:
        run_id = dg.materialize([one], instance=instance).run_id
        clock = launch_clock()
        assert clock is not None
        instance.add_run_tags(run_id, {GRPC_INFO_TAG: json.dumps({"host": "localhost", "port": 4266})})
        worker = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
        try:
            time.sleep(0.2)
            run = instance.get_run_by_id(run_id)
            assert run is not None
            instance.report_engine_event(f"Started process for run (pid: {worker.pid}).", run, EngineEventData.in_process(worker.pid))
            check = instance.run_launcher.check_run_worker_health
            assert check(run).status == WorkerStatus.RUNNING
            stepped = dagster_storage._boot_time() + 60  # the wall clock set 60 s forward since
            monkeypatch.setattr(dagster_storage, "_boot_time", lambda: stepped)
            without = check(run)  # an older run, launched without the tag: judged by the boot time now
            assert without.status == WorkerStatus.FAILED and "reused" in (without.msg or ""), without
            instance.add_run_tags(run_id, {CLOCK_TAG: clock})
            run = instance.get_run_by_id(run_id)
            assert run is not None
            assert check(run).status == WorkerStatus.RUNNING, "judged by its launch's clock, the live worker lives"
            offset = float(clock.split()[1])
            assert not process_alive(worker.pid, time.time() - 3600, offset), "a process younger than the start event is another one"
            other_boot = f"00000000-0000-0000-0000-000000000000 {offset}"
            instance.add_run_tags(run_id, {CLOCK_TAG: other_boot})
            assert check(instance.get_run_by_id(run_id)).status == WorkerStatus.FAILED, "another boot's clock: the boot time now"
            worker.kill()
            worker.wait()
            instance.add_run_tags(run_id, {CLOCK_TAG: clock})
            dead = check(instance.get_run_by_id(run_id))
            assert dead.status == WorkerStatus.FAILED and "died (killed or crashed)" in (dead.msg or ""), dead
        finally:
            worker.kill()
            worker.wait()
