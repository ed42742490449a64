"""Kafka → runs → an append target, exactly once, under the real `dagster-daemon` and a real broker (Tansu).

One daemon and one broker for the module. The broker stores its log in S3
(the suite's moto server), so a broker restart keeps the topic, as a real
Kafka does. The contract (SPEC section 6): N messages, the daemon SIGKILLed
mid-stream and restarted, M more, a broker restart, a run retried after a
failure and a re-executed run → exactly N+M rows, each message once.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from services import Daemon, Tansu, wait_for
from triggers_support import finished, reexecute, runs, stored, table_rows

pytestmark = pytest.mark.daemon

TOPIC = "orders.events"
FLAKY = "payments.events"
ROWS = "duckdb://warehouse/kafka_rows"
FLAKY_ROWS = "duckdb://warehouse/flaky_rows"

STEP = f"""-- pipeline
-- on kafka topic={TOPIC} max_batch=120
-- materialize {ROWS} append
SELECT CAST(json_extract_string(value, '$.n') AS BIGINT) AS n, "partition" AS kafka_partition, "offset" AS kafka_offset
FROM _events
"""

# Writes its batch, then fails on the first attempt (after the commit): the
# retry must find the batch in the target's ledger and add nothing.
FLAKY_STEP = f"""# pipeline
# on kafka topic={FLAKY} max_batch=1000
# materialize {FLAKY_ROWS} append
# retry 2
import json
import os
from pathlib import Path

import pandas as pd

from lineage_defs import runtime

events = runtime.events()
runtime.write(pd.DataFrame({{"n": [json.loads(e["value"])["n"] for e in events]}}))
marker = Path(os.environ["LINEAGE_STATE_DIR"]) / ("failed-once-" + os.environ["LINEAGE_BATCH"])
if not marker.exists():
    marker.write_text("x")
    raise RuntimeError("failing once, after the write committed")
"""


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory, s3_server: Any) -> Iterator[dict[str, Any]]:
    tmp = tmp_path_factory.mktemp("kafka-e2e")
    bucket = f"tansu-{uuid.uuid4().hex[:8]}"
    s3_server.client().create_bucket(Bucket=bucket)
    s3_env = {
        "AWS_ACCESS_KEY_ID": "lineage-test-key", "AWS_SECRET_ACCESS_KEY": "lineage-test-secret",
        "AWS_DEFAULT_REGION": "us-east-1", "AWS_REGION": "us-east-1",
        "AWS_ENDPOINT": s3_server.endpoint_url, "AWS_ALLOW_HTTP": "true",
    }
    broker = Tansu(tmp, s3_env, bucket)
    broker.start()
    broker.create_topic(TOPIC, partitions=2)
    broker.create_topic(FLAKY, partitions=1)
    pipelines = tmp / "pipelines"
    (pipelines / "stream").mkdir(parents=True)
    (pipelines / "stream" / "kafka_rows.sql").write_text(STEP)
    (pipelines / "stream" / "flaky_rows.py").write_text(FLAKY_STEP)
    state = tmp / "state"
    env = {"LINEAGE_KAFKA_BOOTSTRAP": broker.bootstrap}
    daemon = Daemon(tmp, pipelines, state, env)
    daemon.start()
    try:
        yield {"tmp": tmp, "broker": broker, "daemon": daemon, "state": state, "pipelines": pipelines, "env": env}
    finally:
        daemon.stop()
        broker.stop()


def _logs(world: dict[str, Any]) -> Any:
    return lambda: world["daemon"].log_tail() + "\n--- broker ---\n" + world["broker"].log_tail(1500)


def test_messages_land_once_across_daemon_kill_broker_restart_and_reexecution(world: dict[str, Any]) -> None:
    broker, daemon, state = world["broker"], world["daemon"], world["state"]
    n, m = 240, 120  # max_batch=120: at least three batches, over ticks

    # 1. N messages: the daemon is SIGKILLed (with its code server) while they flow, then restarted
    first = n // 3
    broker.produce(TOPIC, [{"n": i} for i in range(first)], key=lambda v: str(v["n"]))
    wait_for("the first messages in the store", lambda: stored(state, f"kafka:stream__kafka_rows:{TOPIC}") > 0, 90, _logs(world))

    def produce_rest() -> None:
        for start in range(first, n, 40):
            broker.produce(TOPIC, [{"n": i} for i in range(start, min(start + 40, n))], key=lambda v: str(v["n"]))
            time.sleep(0.3)

    producer = threading.Thread(target=produce_rest)
    producer.start()
    daemon.kill()
    time.sleep(1)
    daemon.start()
    producer.join()
    wait_for(f"{n} rows", lambda: len(table_rows(state, ROWS)) >= n, 180, _logs(world))

    # 2. the broker restarts (its log is in S3), then M more messages
    broker.kill()
    broker.start()
    broker.produce(TOPIC, [{"n": i} for i in range(n, n + m)], key=lambda v: str(v["n"]))
    wait_for(f"{n + m} rows", lambda: len(table_rows(state, ROWS)) >= n + m, 180, _logs(world))
    instance = daemon.instance()
    wait_for("all runs finished", lambda: finished(instance), 120, _logs(world))

    rows = table_rows(state, ROWS, "n")
    assert sorted(r[0] for r in rows) == list(range(n + m)), "every message exactly once"
    batch_runs = runs(instance, **{"dagster/sensor_name": f"stream__kafka_rows__kafka_{TOPIC.replace('.', '_')}"})
    assert len(batch_runs) >= 3, "the messages arrived over several ticks and batches"
    by_batch: dict[str, list[Any]] = {}
    for r in batch_runs:
        by_batch.setdefault(r.tags["lineage/batch"], []).append(r)
    assert all([r.status.value for r in rs].count("SUCCESS") == 1 for rs in by_batch.values()), "one successful run per batch"
    # a batch's run executing when the daemon's group was killed died with it: failed (run monitoring) and run again
    extra = [r for rs in by_batch.values() if len(rs) > 1 for r in rs if r.status.value != "SUCCESS"]
    assert len(extra) <= 1 and all(r.status.value == "FAILURE" for r in extra), "no other run than the one the kill took down"

    # 3. re-executing a successful run reads the same batch and writes nothing
    run = next(r for r in batch_runs if r.status.value == "SUCCESS")
    again = reexecute(instance, run.run_id, world["tmp"] / "workspace.yaml", {"LINEAGE_PIPELINES_DIR": str(world["pipelines"]), "LINEAGE_STATE_DIR": str(state), **world["env"]})
    assert len(table_rows(state, ROWS)) == n + m
    from dagster import DagsterEventType

    (mat,) = instance.get_records_for_run(again, of_type=DagsterEventType.ASSET_MATERIALIZATION).records
    meta = mat.event_log_entry.asset_materialization.metadata
    assert meta["lineage/batch"].value == run.tags["lineage/batch"]
    assert meta["lineage/batch_already_written"].value is True


def test_a_step_failing_after_its_write_is_retried_without_duplicates(world: dict[str, Any]) -> None:
    broker, daemon, state = world["broker"], world["daemon"], world["state"]
    broker.produce(FLAKY, [{"n": i} for i in range(50)])
    instance = daemon.instance()
    sensor = "stream__flaky_rows__kafka_payments_events"
    wait_for("the flaky batch's run to finish", lambda: (rs := runs(instance, **{"dagster/sensor_name": sensor})) and all(r.is_finished for r in rs), 180, _logs(world))
    (run,) = runs(instance, **{"dagster/sensor_name": sensor})
    assert run.status.value == "SUCCESS"
    from dagster import DagsterEventType

    retried = instance.get_records_for_run(run.run_id, of_type=DagsterEventType.STEP_UP_FOR_RETRY).records
    assert retried, "the first attempt failed after writing and was retried"
    assert sorted(r[0] for r in table_rows(state, FLAKY_ROWS, "n")) == list(range(50))
