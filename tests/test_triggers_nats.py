"""`on nats subject=… stream=…`: the annotation, its sensor, and JetStream → store → runs on Debian's nats-server.

nats-server (``-js``, file storage) is started by this module on a free port
(``services.NatsServer``). The end-to-end test runs the real `dagster-daemon`:
N messages with malformed ones among them → exactly the good ones in an
`append` target, the malformed ones stored as rejected with their reason;
the daemon's whole process group SIGKILLed while M more are published →
exactly N + M. The drain-level tests drive ``pull.drain`` directly: a chunk
stored but never acknowledged (what a crash between the store and the acks
leaves) is delivered again by JetStream after the consumer's ack wait and
stores nothing new (dedupe by stream sequence).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from dagster import DagsterInstance, DefaultSensorStatus, build_sensor_context

from lineage_defs import LineageSettings, build_definitions
from lineage_defs.events.store import EventStore
from lineage_defs.parse import parse_header
from lineage_defs.parse.model import Nats
from lineage_defs.triggers.pull import SourceUnavailable, drain
from services import Daemon, NatsServer, wait_for
from triggers_support import GOOD_REGIONS, check_landed_once, stored, write_steps
from webserver import free_port


# -- the annotation -----------------------------------------------------------------------------
def _errors(line: str) -> list[str]:
    _, errors = parse_header("x.sql", f"-- {line}\nSELECT 1\n", "duckdb")
    return [e.headline() for e in errors]


def test_on_nats_parses_subject_stream_and_connection() -> None:
    header, errors = parse_header("x.sql", "-- on nats subject=orders.* stream=ORDERS connection=bus partition_from=json:$.day max_batch=50\nSELECT 1\n", "duckdb")
    assert not errors
    (t,) = header.events
    assert t == Nats("orders.*", "ORDERS", "bus", "json:$.day", 50, t.at)
    header, errors = parse_header("x.sql", "-- on nats subject=orders.> stream=ORDERS\nSELECT 1\n", "duckdb")
    assert not errors and header.events[0].subject == "orders.>" and header.events[0].connection == "default"


@pytest.mark.parametrize(
    "line, headline",
    [
        ("on nats stream=ORDERS", "x.sql:1:25: 'on nats' needs subject= — write on nats subject=orders.created stream=ORDERS"),
        ("on nats subject=orders", "x.sql:1:26: 'on nats' needs stream= (the JetStream stream holding the subject) — write on nats subject=orders stream=ORDERS"),
        ("on nats subject=orders.>.eu stream=S", "x.sql:1:20: bad NATS subject 'orders.>.eu' — write tokens split by '.', '*' for one whole token and '>' only for the whole last one, e.g. subject=orders.>"),
        ("on nats subject=orders..eu stream=S", "x.sql:1:20: bad NATS subject 'orders..eu' — write tokens split by '.', '*' for one whole token and '>' only for the whole last one, e.g. subject=orders.eu"),
        ("on nats subject=a stream=OR.DERS", "x.sql:1:29: bad JetStream stream name 'OR.DERS' — use letters, digits, - and _ only, e.g. stream=OR_DERS"),
        ("on nats subjet=a stream=S", "x.sql:1:12: unknown option 'subjet' — did you mean 'subject'?"),
        ("on nats subject=a stream=S connection=my-bus", "x.sql:1:42: bad connection name 'my-bus' — use letters, digits and _ only, e.g. connection=my_bus"),
        ("on nat subject=a stream=S", "x.sql:1:7: unknown trigger 'nat' — did you mean 'nats'?"),
    ],
)
def test_bad_nats_annotations_are_located_with_a_fix(line: str, headline: str) -> None:
    assert _errors(line) == [headline]


# -- the sensor ---------------------------------------------------------------------------------
def test_the_nats_sensor_is_running_names_its_stream_and_says_what_to_set(tmp_path: Path) -> None:
    pipes = write_steps(tmp_path / "pipes", {"p/n.sql": "-- pipeline\n-- on nats subject=orders.* stream=ORDERS connection=bus\n-- materialize duckdb://warehouse/n append\nSELECT value FROM _events\n"})
    defs = build_definitions(pipes, settings=LineageSettings(state_dir=str(tmp_path / "state")))
    sensor = next(s for s in defs.sensors if s.name == "p__n__nats_ORDERS_orders__")
    assert sensor.default_status == DefaultSensorStatus.RUNNING
    description = sensor.description or ""
    assert "p/n.sql:2: on nats subject=orders.* stream=ORDERS" in description and "LINEAGE_NATS_URL_BUS" in description and "durable consumer lineage_p__n_" in description
    with DagsterInstance.ephemeral() as instance:
        result = sensor.evaluate_tick(build_sensor_context(instance=instance, repository_def=defs.get_repository_def()))
    assert not result.run_requests
    assert "no NATS server for connection 'bus': set LINEAGE_NATS_URL_BUS (e.g. nats://127.0.0.1:4222)" in (result.skip_message or "")


def test_settings_read_the_nats_urls() -> None:
    s = LineageSettings.from_env({"LINEAGE_NATS_URL": "nats://a:4222", "LINEAGE_NATS_URL_BUS": "nats://b:4222,nats://c:4222"})
    assert (s.connection("nats", "default"), s.connection("nats", "bus"), s.connection("nats", "other")) == ("nats://a:4222", "nats://b:4222,nats://c:4222", None)


# -- on a real server (nats-server -js) ----------------------------------------------------------
@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NatsServer]:
    n = NatsServer(tmp_path_factory.mktemp("nats"))
    n.start()
    try:
        yield n
    finally:
        n.stop()


def test_a_chunk_stored_but_not_acknowledged_comes_back_once_and_is_ignored(server: NatsServer, tmp_path: Path) -> None:
    from lineage_defs.triggers.nats.reader import NatsReader, NatsSource

    server.add_stream("REDELIVERED", ["redelivered.>"])
    server.publish("redelivered.eu", [json.dumps({"n": i}).encode() for i in range(40)])
    source = NatsSource(server.url, "REDELIVERED", "redelivered.*", "lineage_test_redelivered", ack_wait_seconds=2)
    with EventStore(tmp_path / "events.sqlite") as store:
        # a crash after the store, before the acks: the connection just closes
        crashed = NatsReader(source)
        crashed.connect({})
        chunk = crashed.read(100)
        assert len(chunk.events) == 40 and store.add_messages("n", chunk.events) == 40
        assert {e.topic for e in chunk.events} == {"redelivered.eu"} and sorted(int(e.dedupe) for e in chunk.events) == list(range(1, 41))
        crashed.close()
        time.sleep(2.5)  # the ack wait passes: JetStream delivers them again
        got = drain(store, "n", NatsReader(source), max_messages=1000, budget_seconds=10)
        assert (got.consumed, got.stored, got.rejected) == (40, 0, 0), "delivered again, deduplicated by stream sequence"
        assert got.note("stream REDELIVERED") == "stream REDELIVERED: read 40 (0 new, 0 rejected), 0 left; "
        # acknowledged this time: nothing comes back, and new messages come in order
        time.sleep(2.5)
        server.publish("redelivered.us", [b'{"n": 40}'])
        got = drain(store, "n", NatsReader(source), max_messages=1000, budget_seconds=10)
        assert (got.consumed, got.stored) == (1, 1)
        assert store.counts("n")["events"] == 41


def test_a_missing_stream_or_server_is_a_skip_reason_naming_it(server: NatsServer, tmp_path: Path) -> None:
    from lineage_defs.triggers.nats.reader import NatsReader, NatsSource

    port = free_port()
    with EventStore(tmp_path / "events.sqlite") as store:
        with pytest.raises(SourceUnavailable, match=r"the NATS stream 'NOPE' \(subject 'a.b'\) at 127.0.0.1:\d+ does not exist: create the stream"):
            drain(store, "n", NatsReader(NatsSource(server.url, "NOPE", "a.b", "x")), max_messages=10, budget_seconds=5)
        with pytest.raises(SourceUnavailable, match=f"cannot reach the NATS stream 'S' \\(subject 'a.b'\\) at 127.0.0.1:{port}"):
            drain(store, "n", NatsReader(NatsSource(f"nats://127.0.0.1:{port}", "S", "a.b", "x")), max_messages=10, budget_seconds=5)
        with pytest.raises(SourceUnavailable, match="bad NATS URL 'tcp://x:1': write nats://host:port"):
            NatsReader(NatsSource("tcp://x:1", "S", "a.b", "x"))


ROWS = "duckdb://warehouse/nats_rows"
STEP = f"""-- pipeline
-- partitioned dynamic key="$.region"
-- on nats subject=shop.*.orders stream=SHOP max_batch=80
-- materialize {ROWS} append
SELECT json_extract_string(value, '$.region') AS region, CAST(json_extract_string(value, '$.n') AS BIGINT) AS n FROM _events
"""
SENSOR = "e2e__nats_rows__nats_SHOP_shop___orders"
STREAM = "nats:e2e__nats_rows:SHOP:shop.*.orders"


@pytest.mark.daemon
def test_nats_messages_land_once_across_a_daemon_kill_and_malformed_ones_are_rejected(server: NatsServer, tmp_path: Path) -> None:
    server.add_stream("SHOP", ["shop.>"])
    pipelines = write_steps(tmp_path / "pipelines", {"e2e/nats_rows.sql": STEP})
    state = tmp_path / "state"
    daemon = Daemon(tmp_path, pipelines, state, {"LINEAGE_NATS_URL": server.url})
    logs = daemon.log_tail
    n, m = 120, 80
    good = [json.dumps({"region": GOOD_REGIONS[i % 2], "n": i}).encode() for i in range(n + m)]
    malformed = [b"not json at all", b'{"region": "eu", "n": NaN}', json.dumps({"region": "abc\n", "n": -1}).encode()]
    server.publish("shop.eu.orders", good[: n // 2] + malformed)
    server.publish("shop.us.orders", good[n // 2 : n])
    daemon.start()
    try:
        # 1. the first messages are stored; the daemon's whole group is SIGKILLed while M more are published
        wait_for("the first messages in the store", lambda: stored(state, STREAM) > 0, 120, logs)

        def publish_rest() -> None:
            for start in range(n, n + m, 20):
                server.publish("shop.eu.orders", good[start : start + 20])
                time.sleep(0.3)

        publisher = threading.Thread(target=publish_rest)
        publisher.start()
        time.sleep(0.5)
        assert daemon.crash(), "the daemon's whole process group (code server, run workers) was SIGKILLed"
        time.sleep(1)
        daemon.start()
        publisher.join()
        check_landed_once(daemon, pipelines, state, rows_uri=ROWS, stream=STREAM, sensor=SENSOR, source="stream SHOP subject shop.*.orders", good=n + m, rejected=3)
        # 2. the consumer holds nothing more: every stored message was acknowledged
        from lineage_defs.triggers.nats.reader import consumer_name

        info = server.run(lambda js: js.consumer_info("SHOP", consumer_name("e2e__nats_rows", "shop.*.orders")))
        assert (info.num_pending, info.num_ack_pending) == (0, 0)
    finally:
        daemon.stop()
