"""`on sqs queue=…`: the annotation, its sensor, and the queue → store → runs path on moto's SQS server.

moto's SQS server is started by this module on a free port, as a process of
its own (``python -m moto.server``: the in-process ThreadedMotoServer is not
thread-safe under concurrent receives and sends). The end-to-end test runs the real `dagster-daemon`:
N messages with malformed ones among them → exactly the good ones in an
`append` target, each once, the malformed ones stored as rejected with their
reason; the daemon's whole process group SIGKILLed while M more flow → exactly
N + M (run monitoring fails a run the crash orphaned; its batch runs again and the
target's ledger keeps it once). The redelivery test drives ``pull.drain`` directly: a chunk stored but
never deleted (what a crash between the store and the delete leaves) comes
back from SQS after its visibility timeout and stores nothing new.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from dagster import DagsterInstance, DefaultSensorStatus, build_sensor_context

from lineage_defs import LineageSettings, build_definitions
from lineage_defs.parse import parse_header
from lineage_defs.parse.model import Sqs
from services import Daemon, wait_for
from webserver import free_port
from triggers_support import check_landed_once, stored, write_steps

ENV = {"AWS_ACCESS_KEY_ID": "lineage-test-key", "AWS_SECRET_ACCESS_KEY": "lineage-test-secret", "AWS_DEFAULT_REGION": "us-east-1"}


# -- the annotation -----------------------------------------------------------------------------
def _errors(line: str) -> list[str]:
    _, errors = parse_header("x.sql", f"-- {line}\nSELECT 1\n", "duckdb")
    return [e.headline() for e in errors]


def test_on_sqs_parses_a_name_or_a_url() -> None:
    header, errors = parse_header("x.sql", "-- on sqs queue=orders connection=events partition_from=json:$.day max_batch=50\nSELECT 1\n", "duckdb")
    assert not errors
    (t,) = header.events
    assert t == Sqs("orders", "events", "json:$.day", 50, t.at)
    header, errors = parse_header("x.sql", "-- on sqs queue=https://sqs.eu-west-1.amazonaws.com/123456789012/orders.fifo\nSELECT 1\n", "duckdb")
    assert not errors and header.events[0].queue_name == "orders.fifo" and header.events[0].connection == "default"


@pytest.mark.parametrize(
    "line, headline",
    [
        ("on sqs", "x.sql:1:10: 'on sqs' needs queue= — write on sqs queue=orders (a queue name, or its https:// URL)"),
        ("on sqs queue=a/b", "x.sql:1:17: bad SQS queue 'a/b' — write a queue name of letters, digits, - and _ (e.g. queue=b) or the queue's https:// URL"),
        ("on sqs queue=or.ders", "x.sql:1:17: bad SQS queue 'or.ders' — write a queue name of letters, digits, - and _ (e.g. queue=or_ders) or the queue's https:// URL"),
        ("on sqs quee=orders", "x.sql:1:11: unknown option 'quee' — did you mean 'queue'?"),
        ("on sqs queue=o connection=my-aws", "x.sql:1:30: bad connection name 'my-aws' — use letters, digits and _ only, e.g. connection=my_aws"),
        ("on sqs queue=o partition_from=body", "x.sql:1:34: bad partition_from 'body' — use timestamp, key, header:<name> or json:$.path"),
        ("on sq queue=o", "x.sql:1:7: unknown trigger 'sq' — did you mean 'sqs'?"),
    ],
)
def test_bad_sqs_annotations_are_located_with_a_fix(line: str, headline: str) -> None:
    assert _errors(line) == [headline]


# -- the sensor ---------------------------------------------------------------------------------
def test_the_sqs_sensor_is_running_names_its_queue_and_says_what_to_set(tmp_path: Path) -> None:
    pipes = write_steps(tmp_path / "pipes", {"p/q.sql": "-- pipeline\n-- on sqs queue=orders connection=events\n-- materialize duckdb://warehouse/q append\nSELECT value FROM _events\n"})
    defs = build_definitions(pipes, settings=LineageSettings(state_dir=str(tmp_path / "state")))
    sensor = next(s for s in defs.sensors if s.name == "p__q__sqs_orders")
    assert sensor.default_status == DefaultSensorStatus.RUNNING
    assert "on sqs queue=orders" in (sensor.description or "") and "LINEAGE_SQS_ENDPOINT_URL_EVENTS" in (sensor.description or "")
    with DagsterInstance.ephemeral() as instance:
        result = sensor.evaluate_tick(build_sensor_context(instance=instance, repository_def=defs.get_repository_def()))
    assert not result.run_requests
    assert "no SQS endpoint for connection 'events': set LINEAGE_SQS_ENDPOINT_URL_EVENTS" in (result.skip_message or "")


# -- on a real SQS server (moto) ----------------------------------------------------------------
@pytest.fixture(scope="module")
def sqs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """moto's SQS server on a free port, as a separate process (moto's threaded server is not thread-safe
    under concurrent receives) — the process is this module's own and is killed at the end."""
    port = free_port()
    log = tmp_path_factory.mktemp("moto") / "moto.log"
    proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)], stdout=log.open("wb"), stderr=subprocess.STDOUT, start_new_session=True)
    try:
        import boto3

        url = f"http://127.0.0.1:{port}"
        client = boto3.client("sqs", endpoint_url=url, region_name="us-east-1", aws_access_key_id=ENV["AWS_ACCESS_KEY_ID"], aws_secret_access_key=ENV["AWS_SECRET_ACCESS_KEY"])
        def up() -> bool:
            try:
                return client.list_queues() is not None
            except Exception:  # noqa: BLE001 - not listening yet
                return False

        wait_for("moto's SQS server", up, 30, lambda: log.read_text())
        client.url = url
        yield client
    finally:
        proc.kill()
        proc.wait()


def _send(client: Any, queue_url: str, bodies: list[str]) -> None:
    for i in range(0, len(bodies), 10):
        resp = client.send_message_batch(QueueUrl=queue_url, Entries=[{"Id": str(j), "MessageBody": b} for j, b in enumerate(bodies[i : i + 10])])
        assert not resp.get("Failed"), resp


def test_a_message_stored_but_not_deleted_comes_back_once_and_is_ignored(sqs: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from lineage_defs.events.store import EventStore
    from lineage_defs.triggers.pull import drain
    from lineage_defs.triggers.sqs.reader import SqsReader, SqsSource

    for k, v in ENV.items():
        monkeypatch.setenv(k, v)
    url = sqs.create_queue(QueueName="redelivered")["QueueUrl"]
    _send(sqs, url, [json.dumps({"n": i}) for i in range(25)])
    source = SqsSource("redelivered", sqs.url, visibility_seconds=2)
    with EventStore(tmp_path / "events.sqlite") as store:
        # a crash after the store, before the delete: the chunk is stored, SQS still holds it
        crashed = SqsReader(source)
        crashed.connect({})
        chunk = crashed.read(100)
        assert len(chunk.events) == 25 and store.add_messages("sqs:x:redelivered", chunk.events) == 25
        crashed.close()
        time.sleep(2.5)  # the visibility timeout passes: SQS hands the messages out again
        got = drain(store, "sqs:x:redelivered", SqsReader(source), max_messages=1000, budget_seconds=10)
        assert (got.consumed, got.stored, got.rejected) == (25, 0, 0), "redelivered by SQS, deduplicated by MessageId"
        assert got.lag == 0 and got.note("queue redelivered") == "queue redelivered: read 25 (0 new, 0 rejected), 0 left; "
        assert store.counts("sqs:x:redelivered")["events"] == 25
        # and deleted this time: nothing comes back
        time.sleep(2.5)
        assert drain(store, "sqs:x:redelivered", SqsReader(source), max_messages=1000, budget_seconds=10).consumed == 0


def test_a_missing_queue_is_a_skip_reason_naming_it(sqs: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from lineage_defs.events.store import EventStore
    from lineage_defs.triggers.pull import SourceUnavailable, drain
    from lineage_defs.triggers.sqs.reader import SqsReader, SqsSource

    for k, v in ENV.items():
        monkeypatch.setenv(k, v)
    with EventStore(tmp_path / "events.sqlite") as store, pytest.raises(SourceUnavailable, match=f"SQS queue 'nope' at {sqs.url} does not exist: create it"):
        drain(store, "s", SqsReader(SqsSource("nope", sqs.url)), max_messages=10, budget_seconds=5)


ROWS = "duckdb://warehouse/sqs_rows"
STEP = f"""-- pipeline
-- partitioned dynamic key="$.region"
-- on sqs queue=orders max_batch=80
-- materialize {ROWS} append
SELECT json_extract_string(value, '$.region') AS region, CAST(json_extract_string(value, '$.n') AS BIGINT) AS n FROM _events
"""
SENSOR = "e2e__sqs_rows__sqs_orders"
STREAM = "sqs:e2e__sqs_rows:orders"


@pytest.mark.daemon
def test_sqs_messages_land_once_across_a_daemon_kill_and_malformed_ones_are_rejected(sqs: Any, tmp_path: Path) -> None:
    url = sqs.create_queue(QueueName="orders")["QueueUrl"]
    pipelines = write_steps(tmp_path / "pipelines", {"e2e/sqs_rows.sql": STEP})
    state = tmp_path / "state"
    daemon = Daemon(tmp_path, pipelines, state, {"LINEAGE_SQS_ENDPOINT_URL": sqs.url, **ENV})
    logs = daemon.log_tail
    n, m = 120, 80
    good = [json.dumps({"region": ["eu", "us"][i % 2], "n": i}) for i in range(n + m)]
    malformed = ["not json at all", '{"region": "eu", "n": NaN}', json.dumps({"region": "abc\n", "n": -1})]
    _send(sqs, url, good[: n // 2] + malformed + good[n // 2 : n])
    daemon.start()
    try:
        # 1. the first messages are stored; the daemon's whole group is SIGKILLed while M more are sent
        wait_for("the first messages in the store", lambda: stored(state, STREAM) > 0, 120, logs)

        def send_rest() -> None:
            for start in range(n, n + m, 20):
                _send(sqs, url, good[start : start + 20])
                time.sleep(0.3)

        sender = threading.Thread(target=send_rest)
        sender.start()
        time.sleep(0.5)
        assert daemon.crash(), "the daemon's whole process group (code server, run workers) was SIGKILLed"
        time.sleep(1)
        daemon.start()
        sender.join()
        # every good message exactly once; the malformed ones stored as rejected, named in the skip reason
        check_landed_once(daemon, pipelines, state, rows_uri=ROWS, stream=STREAM, sensor=SENSOR, source="queue orders", good=n + m, rejected=3)
        # 3. the queue is empty: every stored message was deleted
        attrs = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"])["Attributes"]
        assert attrs == {"ApproximateNumberOfMessages": "0", "ApproximateNumberOfMessagesNotVisible": "0"}
    finally:
        daemon.stop()
