"""Exactly once on the instance a new Dagster user starts with: a fresh DAGSTER_HOME, no dagster.yaml.

Dagster's defaults there: the default run launcher, no run monitoring, no run retries — nothing in
Dagster fails a run whose worker died. The real `dagster-daemon` (its own process group), a real
broker (Tansu), Kafka messages into an ``append`` target; the daemon's whole process group is
SIGKILLed while a batch's run executes (its rows committed, its step still running), then
restarted. The event sensor finds the run's worker gone, fails the run itself and asks for the
batch again; the target's ledger makes that run's write a no-op: every message exactly once.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from lineage_defs.dagster_storage import process_alive
from services import Daemon, Tansu, wait_for
from triggers_support import finished, runs, table_rows, write_steps

pytestmark = pytest.mark.daemon

TOPIC = "plain.events"
ROWS = "duckdb://warehouse/plain_rows"
SENSOR = "plain__plain_rows__kafka_plain_events"

# Writes its batch, then — while the file `slow` exists in the state dir — keeps executing: the
# test kills the daemon's group meanwhile. (A Python step, so a real process sleeps mid-run.)
STEP = f"""# pipeline
# on kafka topic={TOPIC} max_batch=100
# materialize {ROWS} append
import json
import os
import time
from pathlib import Path

import pandas as pd

from lineage_defs import runtime

state = Path(os.environ["LINEAGE_STATE_DIR"])
runtime.write(pd.DataFrame({{"n": [json.loads(e["value"])["n"] for e in runtime.events()]}}))
if (state / "slow").exists():
    (state / ("written-" + os.environ["LINEAGE_BATCH"])).write_text("")
    time.sleep(900)
"""


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    tmp = tmp_path_factory.mktemp("plain-instance")
    broker = Tansu(tmp)
    broker.start()
    broker.create_topic(TOPIC, partitions=2)
    pipelines = write_steps(tmp / "pipelines", {"plain/plain_rows.py": STEP})
    state = tmp / "state"
    state.mkdir()
    daemon = Daemon(tmp, pipelines, state, {"LINEAGE_KAFKA_BOOTSTRAP": broker.bootstrap, "LINEAGE_BATCH_BACKOFF": "5"}, dagster_yaml=False)
    try:
        yield {"tmp": tmp, "broker": broker, "daemon": daemon, "state": state}
    finally:
        daemon.stop()
        broker.stop()


def _worker_pid(instance: Any, run_id: str) -> int | None:
    from dagster import DagsterEventType

    for entry in instance.all_logs(run_id, of_type=DagsterEventType.ENGINE_EVENT):
        if (entry.message or "").startswith("Started process for run (pid: "):
            return int(entry.message.split("(pid: ")[1].split(")")[0])
    return None


def test_a_batch_run_killed_with_the_daemon_group_on_a_plain_instance_is_run_again_exactly_once(world: dict[str, Any]) -> None:
    from dagster import DagsterEventType, DagsterRunStatus

    broker, daemon, state = world["broker"], world["daemon"], world["state"]
    home: Path = daemon.home
    logs = lambda: daemon.log_tail() + "\n--- broker ---\n" + broker.log_tail(1500)  # noqa: E731
    instance = daemon.instance()
    assert not (home / "dagster.yaml").exists()
    assert not instance.run_monitoring_enabled and not instance.run_retries_enabled
    assert type(instance.run_launcher).__name__ == "DefaultRunLauncher"

    began = time.monotonic()
    (state / "slow").write_text("")
    first, more = 150, 50  # two batches in flight at the crash; what arrives mid-run, one more after it
    broker.produce(TOPIC, [{"n": i} for i in range(first)], key=lambda v: str(v["n"]))
    daemon.start()

    def executing() -> Any:
        """A batch's run in the middle of executing: STARTED, its step started and its rows committed (the step
        says so in a file: the table itself is behind the lock the executing run holds) — once every run of the
        sensor in progress has its worker process recorded. (The first messages make two batches, launched in one
        tick; one still STARTING with no worker yet would be judged dead only after Dagster's
        start_timeout_seconds, 180 s — a case tests/test_triggers_dead_runs.py covers — and on a loaded
        machine the crash caught one so every few runs.)"""
        found = None
        for r in runs(instance, **{"dagster/sensor_name": SENSOR}):
            if r.is_finished:
                continue
            if _worker_pid(instance, r.run_id) is None:
                return None
            if (
                found is None
                and r.status == DagsterRunStatus.STARTED
                and (state / f"written-{r.tags['lineage/batch']}").exists()
                and instance.get_records_for_run(r.run_id, of_type=DagsterEventType.STEP_START).records
            ):
                found = r
        return found

    victim = wait_for("a batch's run executing with its rows committed", executing, 400, logs)
    broker.produce(TOPIC, [{"n": i} for i in range(first, first + more)], key=lambda v: str(v["n"]))  # arrive mid-run
    worker = _worker_pid(instance, victim.run_id)
    assert worker is not None
    killed = daemon.crash()  # os.killpg(SIGKILL): daemon, code server, run workers, all at once
    assert worker in killed, "the run worker was part of the group the crash took down"
    assert not process_alive(worker, time.time())
    assert instance.get_run_by_id(victim.run_id).status == DagsterRunStatus.STARTED, "the crash left the run STARTED"
    stuck = {r.run_id: r.status for r in runs(instance, **{"dagster/sensor_name": SENSOR}) if not r.is_finished}
    killed_at = time.monotonic()

    (state / "slow").unlink()  # runs started from now on end (the step's own business, not the recovery's)
    daemon.start()  # the same daemon again, no other human action, still no dagster.yaml
    n = first + more
    wait_for(f"{n} rows", lambda: len(table_rows(state, ROWS)) >= n, 600, logs)
    wait_for("every run of the step finished", lambda: finished(instance), 300, logs)
    recovered = time.monotonic() - killed_at
    ns = [r[0] for r in table_rows(state, ROWS, "n")]
    assert len(ns) == n and sorted(ns) == list(range(n)), "every message exactly once (row count == messages, distinct ids)"

    dead = instance.get_run_by_id(victim.run_id)
    assert dead.status == DagsterRunStatus.FAILURE, "the sensor failed the run whose worker died"
    (failure,) = instance.get_records_for_run(victim.run_id, of_type=DagsterEventType.RUN_FAILURE).records
    batch = victim.tags["lineage/batch"]
    message = failure.event_log_entry.message or ""
    assert f"pid {worker}" in message and f"runs batch {batch} again" in message, message
    for run_id in stuck:  # every run the crash left in progress was failed, none hangs
        assert instance.get_run_by_id(run_id).status == DagsterRunStatus.FAILURE, (run_id, stuck)
    again = [r for r in runs(instance, **{"lineage/batch": batch}) if r.run_id != victim.run_id]
    assert [(r.tags["lineage/attempt"], r.status) for r in again] == [("2", DagsterRunStatus.SUCCESS)], "the sensor's second request ran it"
    (mat,) = instance.get_records_for_run(again[0].run_id, of_type=DagsterEventType.ASSET_MATERIALIZATION).records
    assert mat.event_log_entry.asset_materialization.metadata["lineage/batch_already_written"].value is True, "the ledger made it a no-op"
    print(f"\nkill → all {n} rows and runs settled: {recovered:.1f} s; whole test {time.monotonic() - began:.1f} s; runs left in progress by the crash: {stuck}")
