"""Exactly once under real crashes, and a source no message can stall — the real `dagster-daemon`, a real broker (Tansu).

- The daemon's whole process group (daemon, code server, run workers, step
  processes) is SIGKILLed while the batches' runs execute — one with its rows
  committed, the others before — and restarted: run monitoring fails the dead
  runs (``MonitoredRunLauncher`` finds their workers gone), Dagster retries
  them, the ledger makes the committed one a no-op: exactly N rows, no human.
- A step that fails its first two attempts of a batch (the first before
  writing, the second after committing) writes it exactly once: a Dagster
  retry, then the sensor's own attempt after its backoff.
- A poison message (JSON nested 3,000 deep, NaN, a key with a newline) among
  good ones: every good one is written, each poison one is rejected with its
  reason, in the sensor's skip reason and in `lineage-defs events`.
- A batch whose runs always fail is given up after its attempts, loudly (skip
  reason, the last run's event log and tag), and `lineage-defs events replay`
  runs it once the cause is fixed.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from lineage_defs.dagster_storage import CLOCK_TAG, process_alive
from services import VENV_BIN, Daemon, Tansu, wait_for
from triggers_support import finished, runs, skip_reasons, table_rows, write_steps

pytestmark = pytest.mark.daemon

CRASH_ROWS, FLAKY_ROWS, POISON_ROWS, STUCK_ROWS = (f"duckdb://warehouse/{t}" for t in ("crash_rows", "flaky_rows", "poison_rows", "stuck_rows"))

STEPS = {
    # The first run of each batch marks the batch, writes, then keeps executing: the test
    # crashes the daemon's group while it does. Later runs of the batch (and first runs
    # after the crash) write and end.
    "e2e/crash_rows.py": f"""# pipeline
# on kafka topic=crash.events max_batch=100
# materialize {CRASH_ROWS} append
import json
import os
import time
from pathlib import Path

import pandas as pd

from lineage_defs import runtime

state = Path(os.environ["LINEAGE_STATE_DIR"])
marker = state / ("crash-ran-" + os.environ["LINEAGE_BATCH"])
first = not marker.exists()
marker.write_text("")
runtime.write(pd.DataFrame({{"n": [json.loads(e["value"])["n"] for e in runtime.events()]}}))
if first and not (state / "crashed").exists():
    (state / ("crash-written-" + os.environ["LINEAGE_BATCH"])).write_text("")
    time.sleep(900)  # still executing (and holding the embedded files' lock: the other batches' runs wait for it)
""",
    # Attempt 1 fails before writing, attempt 2 after its write committed, attempt 3 succeeds.
    "e2e/flaky_rows.py": f"""# pipeline
# on kafka topic=flaky.events
# materialize {FLAKY_ROWS} append
import json
import os
from pathlib import Path

import pandas as pd

from lineage_defs import runtime

count = Path(os.environ["LINEAGE_STATE_DIR"]) / ("flaky-attempts-" + os.environ["LINEAGE_BATCH"])
attempt = int(count.read_text() or 0) + 1 if count.exists() else 1
count.write_text(str(attempt))
if attempt == 1:
    raise RuntimeError("attempt 1 fails before writing")
runtime.write(pd.DataFrame({{"n": [json.loads(e["value"])["n"] for e in runtime.events()]}}))
if attempt == 2:
    raise RuntimeError("attempt 2 fails after its write committed")
""",
    "e2e/poison_rows.sql": f"""-- pipeline
-- partitioned dynamic key="$.region"
-- on kafka topic=poison.events
-- materialize {POISON_ROWS} append
SELECT json_extract_string(value, '$.region') AS region, CAST(json_extract_string(value, '$.n') AS BIGINT) AS n FROM _events
""",
    # Fails until the file `fixed` exists in the state dir.
    "e2e/stuck_rows.py": f"""# pipeline
# on kafka topic=stuck.events
# materialize {STUCK_ROWS} append
import json
import os
from pathlib import Path

import pandas as pd

from lineage_defs import runtime

if not (Path(os.environ["LINEAGE_STATE_DIR"]) / "fixed").exists():
    raise RuntimeError("the upstream API is down")
runtime.write(pd.DataFrame({{"n": [json.loads(e["value"])["n"] for e in runtime.events()]}}))
""",
}
SENSORS = {name: f"e2e__{name}__kafka_{name.split('_')[0]}_events" for name in ("crash_rows", "flaky_rows", "poison_rows", "stuck_rows")}
# one Dagster retry per requested run, two requests per batch, 2 s of backoff: a failing batch is given up after 4 runs
POLICY = {"LINEAGE_BATCH_ATTEMPTS": "2", "LINEAGE_BATCH_RETRIES": "1", "LINEAGE_BATCH_BACKOFF": "2"}


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    tmp = tmp_path_factory.mktemp("exactly-once")
    broker = Tansu(tmp)
    broker.start()
    for topic in ("crash.events", "flaky.events", "poison.events", "stuck.events"):
        broker.create_topic(topic, partitions=2)
    pipelines = write_steps(tmp / "pipelines", STEPS)
    state = tmp / "state"
    env = {"LINEAGE_KAFKA_BOOTSTRAP": broker.bootstrap, **POLICY}
    daemon = Daemon(tmp, pipelines, state, env)
    instance = daemon.instance()
    daemon.start()
    try:
        yield {"tmp": tmp, "broker": broker, "daemon": daemon, "state": state, "pipelines": pipelines, "env": env, "instance": instance}
    finally:
        daemon.stop()
        broker.stop()


def _logs(world: dict[str, Any]) -> Any:
    return lambda: world["daemon"].log_tail() + "\n--- broker ---\n" + world["broker"].log_tail(1500)


def _events_cli(world: dict[str, Any], *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "LINEAGE_STATE_DIR": str(world["state"]), "LINEAGE_PIPELINES_DIR": str(world["pipelines"]), "DAGSTER_HOME": str(world["daemon"].home), **POLICY}
    return subprocess.run([str(VENV_BIN / "lineage-defs"), "events", *args], capture_output=True, text=True, env=env, timeout=120)


def _worker_pid(instance: Any, run_id: str) -> int | None:
    from dagster import DagsterEventType

    for entry in instance.all_logs(run_id, of_type=DagsterEventType.ENGINE_EVENT):
        if (entry.message or "").startswith("Started process for run (pid: "):
            return int(entry.message.split("(pid: ")[1].split(")")[0])
    return None


def test_a_crash_of_the_whole_daemon_group_mid_run_loses_and_duplicates_nothing(world: dict[str, Any]) -> None:
    from dagster import DagsterEventType, DagsterRunStatus

    broker, daemon, state = world["broker"], world["daemon"], world["state"]
    n = 300  # three batches of max_batch=100: one written when the crash comes, the others not
    broker.produce("crash.events", [{"n": i} for i in range(n)], key=lambda v: str(v["n"]))
    instance = world["instance"]
    sensor = SENSORS["crash_rows"]

    def executing() -> Any:
        """A run of the step in the middle of executing: STARTED, its step started, its rows committed (the
        step says so in a file: the table itself is behind the lock the executing run holds) — once every run
        of the step in progress has its worker process recorded. (The batches' runs are launched in one tick;
        one still STARTING with no worker yet would be failed only after run_monitoring.start_timeout_seconds,
        60 s here — tests/test_triggers_dead_runs.py covers that case — and on a loaded machine the crash
        caught one so.)"""
        found = None
        for r in runs(instance, **{"dagster/sensor_name": sensor}):
            if r.is_finished:
                continue
            if _worker_pid(instance, r.run_id) is None:
                return None
            if (
                found is None
                and r.status == DagsterRunStatus.STARTED
                and (state / f"crash-written-{r.tags['lineage/batch']}").exists()
                and instance.get_records_for_run(r.run_id, of_type=DagsterEventType.STEP_START).records
            ):
                found = r
        return found

    victim = wait_for("a run executing with its rows committed", executing, 300, _logs(world))
    worker = _worker_pid(instance, victim.run_id)
    assert worker is not None
    assert CLOCK_TAG in victim.tags, "the launch recorded the clock its worker is judged by"
    killed = daemon.crash()
    assert worker in killed, "the run worker was part of the group the crash took down"
    assert not process_alive(worker, time.time()), "the worker is dead (at most a zombie nobody reaps)"
    assert instance.get_run_by_id(victim.run_id).status == DagsterRunStatus.STARTED, "the crash left the run STARTED"
    before = len(table_rows(state, CRASH_ROWS))
    assert 0 < before < n, "some batches were written when the crash came, not all"

    (state / "crashed").write_text("")  # (for the step: runs started from now on do not linger)
    daemon.start()  # no other human action
    wait_for(f"{n} rows", lambda: len(table_rows(state, CRASH_ROWS)) >= n, 360, _logs(world))
    wait_for("the step's runs to settle", lambda: all(r.is_finished for r in runs(instance, **{"dagster/sensor_name": sensor})), 240, _logs(world))
    assert sorted(r[0] for r in table_rows(state, CRASH_ROWS, "n")) == list(range(n)), "every message exactly once"

    dead = instance.get_run_by_id(victim.run_id)
    assert dead.status == DagsterRunStatus.FAILURE, "run monitoring failed the run whose worker died"
    failure = instance.get_records_for_run(victim.run_id, of_type=DagsterEventType.RUN_FAILURE).records
    assert failure and f"pid {worker}" in (failure[-1].event_log_entry.message or "")
    batch = victim.tags["lineage/batch"]
    retried = [r for r in runs(instance, **{"lineage/batch": batch}) if r.run_id != victim.run_id]
    assert [r.status for r in retried] == [DagsterRunStatus.SUCCESS], "one retry of the batch, which succeeded"
    # the sensor settles a batch done on its first tick after the batch's run succeeded
    settled = f"{n} events stored, {n} batched, 0 rejected; batches: 0 open"
    listing = wait_for("every batch settled done", lambda: (lambda out: out if settled in out.stdout else None)(
        _events_cli(world, "--stream", "kafka:e2e__crash_rows:crash.events", "--limit", "20")), 120, _logs(world))
    assert listing.returncode == 0, listing.stderr
    assert settled in listing.stdout and " 0 failed" in listing.stdout


def test_a_step_failing_its_first_two_attempts_writes_its_batch_once(world: dict[str, Any]) -> None:
    from dagster import DagsterEventType, DagsterRunStatus

    broker, daemon, state = world["broker"], world["daemon"], world["state"]
    if not daemon.alive():
        daemon.start()
    broker.produce("flaky.events", [{"n": i} for i in range(40)])
    instance = world["instance"]
    wait_for("the flaky batch written", lambda: len(table_rows(state, FLAKY_ROWS)) >= 40, 300, _logs(world))
    sensor_runs = lambda: runs(instance, **{"dagster/sensor_name": SENSORS["flaky_rows"]})  # noqa: E731
    wait_for("a successful run of the batch", lambda: any(r.status == DagsterRunStatus.SUCCESS for r in sensor_runs()), 300, _logs(world))
    assert sorted(r[0] for r in table_rows(state, FLAKY_ROWS, "n")) == list(range(40))
    (batch,) = {r.tags["lineage/batch"] for r in sensor_runs()}
    all_runs = sorted(runs(instance, **{"lineage/batch": batch}), key=lambda r: int(r.tags.get("dagster/retry_number", 0)) + 10 * int(r.tags["lineage/attempt"]))
    assert [(r.tags["lineage/attempt"], r.status) for r in all_runs] == [
        ("1", DagsterRunStatus.FAILURE),  # the sensor's request: fails before writing
        ("1", DagsterRunStatus.FAILURE),  # Dagster's retry of it (same tags): writes, then fails
        ("2", DagsterRunStatus.SUCCESS),  # the sensor's second request, after its backoff
    ]
    assert all_runs[1].tags.get("dagster/parent_run_id") == all_runs[0].run_id
    (mat,) = instance.get_records_for_run(all_runs[2].run_id, of_type=DagsterEventType.ASSET_MATERIALIZATION).records
    assert mat.event_log_entry.asset_materialization.metadata["lineage/batch_already_written"].value is True


def test_a_poison_message_is_rejected_with_its_reason_and_stalls_nothing(world: dict[str, Any]) -> None:
    broker, daemon, state = world["broker"], world["daemon"], world["state"]
    if not daemon.alive():
        daemon.start()
    from confluent_kafka import Producer

    good = [{"region": ["eu", "us"][i % 2], "n": i} for i in range(30)]
    poison = [
        b'{"region": ' + b"[" * 3000 + b"]" * 3000 + b', "n": -1}',  # made every tick raise RecursionError
        b'{"region": "eu", "n": NaN}',
        json.dumps({"region": "abc\n", "n": -2}).encode(),
        b"\xff\xfe not utf-8",
    ]
    p = Producer({"bootstrap.servers": broker.bootstrap})
    values = [json.dumps(v).encode() for v in good[:15]] + poison + [json.dumps(v).encode() for v in good[15:]]
    for v in values:
        p.produce("poison.events", value=v, partition=0)
    assert p.flush(60) == 0
    instance = world["instance"]
    wait_for("every good message written", lambda: len(table_rows(state, POISON_ROWS)) >= len(good), 300, _logs(world))
    assert sorted((r[0], r[1]) for r in table_rows(state, POISON_ROWS, "region, n")) == sorted((v["region"], v["n"]) for v in good)

    def told() -> Any:
        return next((r for r in skip_reasons(instance, SENSORS["poison_rows"], 20) if "rejected" in r), None)

    reason = wait_for("a skip reason naming the rejected messages", told, 120, _logs(world))
    assert "4 events rejected and will not run" in reason and "lineage-defs events" in reason
    listing = _events_cli(world, "--stream", "kafka:e2e__poison_rows:poison.events")
    assert listing.returncode == 0, listing.stderr
    out = listing.stdout
    assert "34 events stored, 30 batched, 4 rejected" in out
    assert "0:15: partition_from=json:$.region: the event's value is not usable JSON: the JSON is nested deeper than 64 levels" in out
    assert "0:16: partition_from=json:$.region: the event's value is not usable JSON: NaN is not JSON" in out
    assert '0:17: partition_from=json:$.region: the partition value "abc\\n" holds characters' in out
    assert "0:18: partition_from=json:$.region: the event's value is not usable JSON: not UTF-8" in out


def test_a_batch_that_keeps_failing_is_given_up_loudly_and_replayed_by_one_command(world: dict[str, Any]) -> None:
    from dagster import DagsterEventType, DagsterRunStatus

    broker, daemon, state = world["broker"], world["daemon"], world["state"]
    if not daemon.alive():
        daemon.start()
    broker.produce("stuck.events", [{"n": i} for i in range(5)])
    instance = world["instance"]
    sensor = SENSORS["stuck_rows"]

    def gave_up() -> Any:
        return next((r for r in skip_reasons(instance, sensor, 20) if "FAILED after every attempt" in r), None)

    reason = wait_for("the sensor giving up on the batch", gave_up, 400, _logs(world))
    stuck = runs(instance, **{"dagster/sensor_name": sensor})
    (batch,) = {r.tags["lineage/batch"] for r in stuck}
    all_runs = runs(instance, **{"lineage/batch": batch})
    assert len(all_runs) == 4 and all(r.status == DagsterRunStatus.FAILURE for r in all_runs), "2 requests × (1 run + 1 retry)"
    assert f"lineage-defs events replay {batch}" in reason
    last = [r for r in all_runs if r.tags.get("lineage/gave_up") == "true"]
    assert len(last) == 1, "the last run is marked"
    notes = [e.message for e in instance.all_logs(last[0].run_id, of_type=DagsterEventType.ENGINE_EVENT) if "gave up" in (e.message or "")]
    assert notes and f"lineage-defs events replay {batch}" in notes[0]
    assert table_rows(state, STUCK_ROWS) == []
    listing = _events_cli(world, "--stream", "kafka:e2e__stuck_rows:stuck.events")
    assert f"{batch}  5 events" in listing.stdout and "FAILED" in listing.stdout

    (state / "fixed").write_text("")  # the cause is fixed; one command runs the batch again
    replayed = _events_cli(world, "replay", batch)
    assert replayed.returncode == 0 and "open again" in replayed.stdout, replayed.stdout + replayed.stderr
    wait_for("the replayed batch written", lambda: len(table_rows(state, STUCK_ROWS)) == 5, 300, _logs(world))
    wait_for("all runs finished", lambda: finished(instance), 120, _logs(world))
    assert sorted(r[0] for r in table_rows(state, STUCK_ROWS, "n")) == list(range(5))
    replay_runs = [r for r in runs(instance, **{"lineage/batch": batch}) if r.tags.get("lineage/replay") == "1"]
    assert [r.status for r in replay_runs] == [DagsterRunStatus.SUCCESS]
