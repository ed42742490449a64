"""A batch run whose worker died, on an instance without run monitoring (a fresh DAGSTER_HOME): which runs the
event sensors may fail themselves (``dagster_storage.unwatched``), when a run provably has no worker
(``dead_worker``), and ``outcome.reap`` failing it so its batch runs again — a live or slow run never; where
nothing could notice a dead worker (another launcher, no run monitoring), the skip reason names the setting.

Runs here are written into a test instance by hand, with the events a code server's run worker writes
("Started process for run (pid: N)."), for a real process this test starts and kills.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from typing import Any

import dagster as dg
import pytest
from dagster._core.events import EngineEventData
from dagster._core.storage.tags import GRPC_INFO_TAG

from lineage_defs.dagster_storage import dead_worker, unwatched
from lineage_defs.events.store import BATCH_TAG
from lineage_defs.triggers.outcome import Next, Policy, batch_runs, reap, verdict

LOCAL = json.dumps({"host": "localhost", "port": 4266})
MONITORED = {
    "run_launcher": {"module": "lineage_defs.dagster_storage", "class": "MonitoredRunLauncher"},
    "run_monitoring": {"enabled": True},
}


@pytest.fixture
def plain() -> Iterator[dg.DagsterInstance]:
    """Dagster's defaults, as with no dagster.yaml: DefaultRunLauncher, run monitoring and retries off."""
    with dg.instance_for_test() as instance:
        assert not instance.run_monitoring_enabled and not instance.run_retries_enabled
        yield instance


@pytest.fixture
def worker() -> Iterator[subprocess.Popen[bytes]]:
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    try:
        yield proc
    finally:
        proc.kill()
        proc.wait()


def _run(instance: dg.DagsterInstance, status: dg.DagsterRunStatus, batch: str, grpc: str | None = LOCAL) -> dg.DagsterRun:
    """A run of ``batch`` that a launcher took to ``status``: RUN_STARTING written (its launch time), then RUN_START for STARTED."""
    tags = {BATCH_TAG: batch, **({GRPC_INFO_TAG: grpc} if grpc else {})}
    run = instance.add_run(dg.DagsterRun(job_name="__ASSET_JOB", run_id=str(uuid.uuid4()), status=dg.DagsterRunStatus.NOT_STARTED, tags=tags))
    kinds = [dg.DagsterEventType.RUN_STARTING] + ([dg.DagsterEventType.RUN_START] if status == dg.DagsterRunStatus.STARTED else [])
    for kind in kinds:
        instance.report_dagster_event(dg.DagsterEvent(event_type_value=kind.value, job_name=run.job_name), run_id=run.run_id)
    got = instance.get_run_by_id(run.run_id)
    assert got is not None and got.status == status
    return got


def _started_process(instance: dg.DagsterInstance, run: dg.DagsterRun, pid: int) -> None:
    instance.report_engine_event(f"Started process for run (pid: {pid}).", run, EngineEventData.in_process(pid))


def _status(instance: dg.DagsterInstance, run: dg.DagsterRun) -> str:
    got = instance.get_run_by_id(run.run_id)
    assert got is not None
    return got.status.value


def test_what_an_instance_leaves_unwatched() -> None:
    with dg.instance_for_test() as instance:
        assert unwatched(instance) == {"STARTED", "STARTING"}, "a plain instance notices no dead worker"
    with dg.instance_for_test(overrides=MONITORED) as instance:
        assert unwatched(instance) == set(), "the repository's dagster.yaml: run monitoring fails both"
    with dg.instance_for_test(overrides={"run_monitoring": {"enabled": True}}) as instance:
        assert unwatched(instance) == {"STARTED"}, "monitoring without a launcher that checks workers: only slow starts"
    other = {"run_launcher": {"module": "dagster._core.test_utils", "class": "MockedRunLauncher"}}
    with dg.instance_for_test(overrides=other) as instance:
        assert unwatched(instance) == set(), "another launcher's workers are not processes of a code server here"


def test_a_started_run_is_dead_only_once_its_recorded_worker_is(plain: dg.DagsterInstance, worker: subprocess.Popen[bytes]) -> None:
    run = _run(plain, dg.DagsterRunStatus.STARTED, "b-1")
    now = time.time()
    assert dead_worker(plain, run, now) is None, "no worker recorded: nothing to judge by"
    _started_process(plain, run, worker.pid)
    assert dead_worker(plain, run, now + 86400) is None, "a live worker, however long the run takes"
    elsewhere = _run(plain, dg.DagsterRunStatus.STARTED, "b-2", json.dumps({"host": "10.1.2.3", "port": 4266}))
    _started_process(plain, elsewhere, worker.pid + 100000)  # no such pid here
    assert dead_worker(plain, elsewhere, now) is None, "a worker on another host is never judged from here"
    worker.kill()
    worker.wait()
    why = dead_worker(plain, run, now)
    assert why is not None and f"pid {worker.pid}" in why and "died" in why
    plain.report_dagster_event(dg.DagsterEvent(event_type_value=dg.DagsterEventType.RUN_SUCCESS.value, job_name=run.job_name), run_id=run.run_id)
    assert dead_worker(plain, run, now) is None, "a run that finished before its worker exited is not dead (status read after)"


def test_a_starting_run_without_a_worker_is_dead_after_dagsters_start_timeout(plain: dg.DagsterInstance, worker: subprocess.Popen[bytes]) -> None:
    run = _run(plain, dg.DagsterRunStatus.STARTING, "b-3", grpc=None)  # the daemon died mid-launch: not even the launcher's tag
    launched = plain.get_run_stats(run.run_id).launch_time
    assert launched is not None
    assert plain.run_monitoring_start_timeout_seconds == 180
    assert dead_worker(plain, run, launched + 179) is None, "a launch may take a while"
    why = dead_worker(plain, run, launched + 181)
    assert why is not None and "STARTING" in why and "start_timeout_seconds" in why
    slow = _run(plain, dg.DagsterRunStatus.STARTING, "b-4")
    _started_process(plain, slow, worker.pid)
    assert dead_worker(plain, slow, launched + 3600) is None, "a worker that lives is starting slowly, not dead"


def test_reap_fails_the_dead_run_and_the_batch_asks_again(plain: dg.DagsterInstance, worker: subprocess.Popen[bytes]) -> None:
    dead_proc = subprocess.Popen([sys.executable, "-c", "pass"])
    dead_proc.wait()
    dead = _run(plain, dg.DagsterRunStatus.STARTED, "b-dead")
    _started_process(plain, dead, dead_proc.pid)
    alive = _run(plain, dg.DagsterRunStatus.STARTED, "b-alive")
    _started_process(plain, alive, worker.pid)
    policy = Policy(attempts=3, backoff=5.0, retries=2)
    runs = batch_runs(plain, ["b-dead", "b-alive"])
    assert verdict("b-dead", 0, runs["b-dead"], time.time(), policy).next is Next.RUNNING, "before: stuck as RUNNING"

    reaped = reap(plain, runs, time.time())
    assert [(b, r) for b, r, _ in reaped] == [("b-dead", dead.run_id)]
    assert (_status(plain, dead), _status(plain, alive)) == ("FAILURE", "STARTED")
    (failure,) = plain.get_records_for_run(dead.run_id, of_type=dg.DagsterEventType.RUN_FAILURE).records
    message = failure.event_log_entry.message or ""
    assert f"pid {dead_proc.pid}" in message and "runs batch b-dead again" in message and "run monitoring" in message

    runs = batch_runs(plain, ["b-dead", "b-alive"])
    later = time.time() + 6
    v = verdict("b-dead", 0, runs["b-dead"], later, policy)
    assert (v.next, v.attempt, v.run_key) == (Next.ASK, 2, "b-dead/0.2"), "the batch is asked for again, after the backoff"
    assert verdict("b-alive", 0, runs["b-alive"], later, policy).next is Next.RUNNING
    assert reap(plain, runs, time.time()) == [], "nothing more to fail"


def test_reap_leaves_runs_to_run_monitoring_where_the_instance_has_it(worker: Any) -> None:
    with dg.instance_for_test(overrides=MONITORED) as instance:
        gone = subprocess.Popen([sys.executable, "-c", "pass"])
        gone.wait()
        run = _run(instance, dg.DagsterRunStatus.STARTED, "b-m")
        _started_process(instance, run, gone.pid)
        assert reap(instance, batch_runs(instance, ["b-m"]), time.time()) == []
        assert _status(instance, run) == "STARTED", "run monitoring fails it (and Dagster retries it): not failed twice"


def test_an_instance_where_nothing_notices_a_dead_worker_is_named_with_the_setting() -> None:
    from lineage_defs.dagster_storage import blind_spot

    mocked = {"run_launcher": {"module": "dagster._core.test_utils", "class": "MockedRunLauncher"}}
    with dg.instance_for_test(overrides=mocked) as instance:
        text = blind_spot(instance)
        assert text and "run monitoring is off" in text and "`run_monitoring: {enabled: true}` and `run_retries: {enabled: true}`" in text
    with dg.instance_for_test(overrides={**mocked, "run_monitoring": {"enabled": True}}) as instance:
        text = blind_spot(instance)
        assert text and "dagster._core.test_utils.MockedRunLauncher" in text and "health check" in text
    with dg.instance_for_test() as instance:
        assert blind_spot(instance) is None, "the default launcher: the sensors judge its runs themselves"


def test_the_skip_reason_names_the_setting_while_a_batch_runs_where_nothing_would_fail_it(tmp_path: Any) -> None:
    """The sensor itself, ticked against an instance with another launcher and no run monitoring."""
    from lineage_defs import LineageSettings, build_definitions
    from lineage_defs.events.store import EventStore, NewEvent

    (tmp_path / "p" / "hooks").mkdir(parents=True)
    (tmp_path / "p" / "hooks" / "orders.sql").write_text(
        "-- pipeline\n-- on webhook name=orders\n-- materialize duckdb://warehouse/orders append\nSELECT value FROM _events\n"
    )
    settings = LineageSettings(state_dir=str(tmp_path / "s"), pipelines_dir=str(tmp_path / "p"))
    defs = build_definitions(tmp_path / "p", settings=settings)
    sensor = next(s for s in defs.sensors if s.name == "hooks__orders__webhook_orders")
    with EventStore(settings.events_store) as store:
        store.add("webhook:orders", [NewEvent("e-1", b"{}")])
    mocked = {"run_launcher": {"module": "dagster._core.test_utils", "class": "MockedRunLauncher"}}
    with dg.instance_for_test(overrides=mocked) as instance:
        tick = lambda: sensor.evaluate_tick(dg.build_sensor_context(instance=instance, repository_def=defs.get_repository_def()))  # noqa: E731
        (req,) = tick().run_requests
        assert "run monitoring" not in str(tick().skip_message), "no run yet: nothing to say"
        instance.create_run_for_job(job_def=defs.resolve_implicit_global_asset_job_def(), tags=dict(req.tags))
        message = tick().skip_message or ""
        assert "batches 1 running" in message and "run monitoring is off in this instance" in message
        assert "add `run_monitoring: {enabled: true}` and `run_retries: {enabled: true}` to $DAGSTER_HOME/dagster.yaml" in message
