"""`on mqtt topic=…`: the annotation, its sensor, and broker → store → runs on Debian's mosquitto.

mosquitto is started by this module on a free port (``services.Mosquitto``:
raised ``max_queued_messages``, persistence in a directory its user can
write). The end-to-end test runs the real `dagster-daemon`: N messages with
malformed ones among them → exactly the good ones in an `append` target, the
malformed ones stored as rejected with their reason; the daemon's whole
process group SIGKILLed while M more are published → exactly N + M. The
drain-level tests drive ``pull.drain`` directly: a chunk stored but never
acknowledged (the connection dropped between the store and the PUBACKs, as a
crash leaves it) is sent again by the broker and stores nothing new; messages
published while no tick runs are kept by the session; the dedupe id is the
publisher's ``event_id``, else a hash of topic and payload.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from dagster import DagsterInstance, DefaultSensorStatus, build_sensor_context

from lineage_defs import LineageSettings, build_definitions
from lineage_defs.events.store import EventStore
from lineage_defs.parse import parse_header
from lineage_defs.parse.model import Mqtt
from lineage_defs.triggers.pull import SourceUnavailable, drain
from services import Daemon, Mosquitto, wait_for
from triggers_support import GOOD_REGIONS, check_landed_once, skip_reasons, stored, write_steps
from webserver import free_port


# -- the annotation -----------------------------------------------------------------------------
def _errors(line: str) -> list[str]:
    _, errors = parse_header("x.sql", f"-- {line}\nSELECT 1\n", "duckdb")
    return [e.headline() for e in errors]


def test_on_mqtt_parses_a_topic_filter() -> None:
    header, errors = parse_header("x.sql", "-- on mqtt topic=shop/+/orders connection=iot partition_from=json:$.day max_batch=50\nSELECT 1\n", "duckdb")
    assert not errors
    (t,) = header.events
    assert t == Mqtt("shop/+/orders", "iot", "json:$.day", 50, t.at)
    header, errors = parse_header("x.sql", "-- on mqtt topic=shop/#\nSELECT 1\n", "duckdb")
    assert not errors and header.events[0].topic == "shop/#" and header.events[0].connection == "default"


@pytest.mark.parametrize(
    "line, headline",
    [
        ("on mqtt", "x.sql:1:11: 'on mqtt' needs topic= — write on mqtt topic=shop/orders (a topic filter: + for one level, # for the rest)"),
        ("on mqtt topic=shop/#/eu", "x.sql:1:18: bad MQTT topic filter 'shop/#/eu' — '+' stands for one whole level and '#' only for the whole last one, e.g. topic=shop/#"),
        ("on mqtt topic=shop/eu+/x", "x.sql:1:18: bad MQTT topic filter 'shop/eu+/x' — '+' stands for one whole level and '#' only for the whole last one, e.g. topic=shop/+/x"),
        ("on mqtt topc=shop", "x.sql:1:12: unknown option 'topc' — did you mean 'topic'?"),
        ("on mqtt topic=a connection=my-iot", "x.sql:1:31: bad connection name 'my-iot' — use letters, digits and _ only, e.g. connection=my_iot"),
        ("on mqtt topic=a max_batch=lots", "x.sql:1:30: 'lots' is not a whole number — write e.g. 100"),
        ("on mqt topic=a", "x.sql:1:7: unknown trigger 'mqt' — did you mean 'mqtt'?"),
    ],
)
def test_bad_mqtt_annotations_are_located_with_a_fix(line: str, headline: str) -> None:
    assert _errors(line) == [headline]


# -- the sensor ---------------------------------------------------------------------------------
def test_the_mqtt_sensor_is_running_names_its_topic_and_says_what_to_set(tmp_path: Path) -> None:
    pipes = write_steps(tmp_path / "pipes", {"p/m.sql": "-- pipeline\n-- on mqtt topic=shop/+/orders connection=iot\n-- materialize duckdb://warehouse/m append\nSELECT value FROM _events\n"})
    defs = build_definitions(pipes, settings=LineageSettings(state_dir=str(tmp_path / "state")))
    sensor = next(s for s in defs.sensors if s.name == "p__m__mqtt_shop___orders")
    assert sensor.default_status == DefaultSensorStatus.RUNNING
    description = sensor.description or ""
    assert "p/m.sql:2: on mqtt topic=shop/+/orders" in description and "LINEAGE_MQTT_URL_IOT" in description and "persistent session lineage_defs-p__m-" in description
    with DagsterInstance.ephemeral() as instance:
        result = sensor.evaluate_tick(build_sensor_context(instance=instance, repository_def=defs.get_repository_def()))
    assert not result.run_requests
    assert "no MQTT broker for connection 'iot': set LINEAGE_MQTT_URL_IOT (e.g. mqtt://127.0.0.1:1883)" in (result.skip_message or "")


def test_settings_read_the_mqtt_urls() -> None:
    s = LineageSettings.from_env({"LINEAGE_MQTT_URL": "mqtt://a:1883", "LINEAGE_MQTT_URL_IOT": "mqtt://b:1884"})
    assert (s.connection("mqtt", "default"), s.connection("mqtt", "iot"), s.connection("mqtt", "IOT"), s.connection("mqtt", "other")) == ("mqtt://a:1883", "mqtt://b:1884", "mqtt://b:1884", None)


def test_the_dedupe_id_is_the_publishers_event_id_else_a_hash_of_topic_and_payload() -> None:
    from lineage_defs.triggers.mqtt.reader import dedupe_id

    assert dedupe_id("a", b'{"event_id": "e-1", "n": 1}') == dedupe_id("a", b'{"event_id": "e-1", "n": 2}') == "id:e-1"
    assert dedupe_id("a", b'{"event_id": 7}') == "id:7"
    assert dedupe_id("a", b'{"event_id": true}').startswith("sha256:"), "not an id: hashed"
    assert dedupe_id("a", b'{"n": 1}') == dedupe_id("a", b'{"n": 1}') != dedupe_id("b", b'{"n": 1}')
    assert dedupe_id("a", b"{\"event_id\": " + b"[" * 100_000).startswith("sha256:"), "unreadable JSON never fails the tick"


# -- on a real broker (mosquitto) ---------------------------------------------------------------
@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Mosquitto]:
    m = Mosquitto(tmp_path_factory.mktemp("mosquitto"))
    m.start()
    try:
        yield m
    finally:
        m.stop()


def _source(broker: Mosquitto, topic: str, session: str) -> Any:
    from lineage_defs.triggers.mqtt.reader import MqttSource

    return MqttSource(broker.url, topic, session, first_wait=0.5)


def test_a_chunk_stored_but_not_acknowledged_comes_back_once_and_is_ignored(broker: Mosquitto, tmp_path: Path) -> None:
    from lineage_defs.triggers.mqtt.reader import MqttReader

    source = _source(broker, "redelivered/+", "lineage-test-redelivered")
    with EventStore(tmp_path / "events.sqlite") as store:
        assert drain(store, "m", MqttReader(source), max_messages=100, budget_seconds=5).consumed == 0  # first tick: the session and its subscription
        # published while no tick runs: the broker queues them for the session
        broker.publish("redelivered/eu", [json.dumps({"n": i}).encode() for i in range(40)])
        # a crash after the store, before the PUBACKs: the connection just drops
        crashed = MqttReader(source)
        crashed.connect({})
        chunk = crashed.read(100)
        assert len(chunk.events) == 40 and store.add_messages("m", chunk.events) == 40
        assert {e.topic for e in chunk.events} == {"redelivered/eu"}
        crashed.client.socket().close()
        got = drain(store, "m", MqttReader(source), max_messages=1000, budget_seconds=10)
        assert (got.consumed, got.stored, got.rejected) == (40, 0, 0), "sent again by the broker, deduplicated"
        assert got.note("topic redelivered/+") == "topic redelivered/+: read 40 (0 new, 0 rejected); "
        # acknowledged this time: nothing comes back
        assert drain(store, "m", MqttReader(source), max_messages=1000, budget_seconds=10).consumed == 0
        # the publisher's event_id: the same event published twice is stored once
        broker.publish("redelivered/us", [b'{"event_id": "x-1", "n": 1}', b'{"event_id": "x-1", "n": 1}', b'{"event_id": "x-2", "n": 1}'])
        got = drain(store, "m", MqttReader(source), max_messages=1000, budget_seconds=10)
        assert (got.consumed, got.stored) == (3, 2)
        assert store.counts("m")["events"] == 42
        # a message published at QoS 0 arrives at QoS 0 and gets no PUBACK (one would be a protocol error that
        # makes the broker drop the connection, and with it the PUBACKs of the QoS 1 messages after it)
        broker.publish("redelivered/eu", [b'{"n": "qos0"}'], qos=0)
        broker.publish("redelivered/eu", [json.dumps({"n": f"after-{i}"}).encode() for i in range(3)])
        got = drain(store, "m", MqttReader(source), max_messages=1000, budget_seconds=10)
        assert (got.consumed, got.stored) == (4, 4)
        assert drain(store, "m", MqttReader(source), max_messages=1000, budget_seconds=10).consumed == 0, "every QoS 1 message was acknowledged"


def test_an_unreachable_broker_is_a_skip_reason_naming_it(tmp_path: Path) -> None:
    from lineage_defs.triggers.mqtt.reader import MqttReader, MqttSource

    port = free_port()
    with EventStore(tmp_path / "events.sqlite") as store:
        with pytest.raises(SourceUnavailable, match=f"cannot reach the MQTT broker 127.0.0.1:{port}, topic 'a/b'"):
            drain(store, "m", MqttReader(MqttSource(f"mqtt://127.0.0.1:{port}", "a/b", "x")), max_messages=10, budget_seconds=5)
        with pytest.raises(SourceUnavailable, match="bad MQTT URL 'tcp://x:1': write mqtt://host:port"):
            MqttReader(MqttSource("tcp://x:1", "a/b", "x"))


ROWS = "duckdb://warehouse/mqtt_rows"
STEP = f"""-- pipeline
-- partitioned dynamic key="$.region"
-- on mqtt topic=shop/+/orders max_batch=80
-- materialize {ROWS} append
SELECT json_extract_string(value, '$.region') AS region, CAST(json_extract_string(value, '$.n') AS BIGINT) AS n FROM _events
"""
SENSOR = "e2e__mqtt_rows__mqtt_shop___orders"
STREAM = "mqtt:e2e__mqtt_rows:shop/+/orders"


@pytest.mark.daemon
def test_mqtt_messages_land_once_across_a_daemon_kill_and_malformed_ones_are_rejected(broker: Mosquitto, tmp_path: Path) -> None:
    pipelines = write_steps(tmp_path / "pipelines", {"e2e/mqtt_rows.sql": STEP})
    state = tmp_path / "state"
    daemon = Daemon(tmp_path, pipelines, state, {"LINEAGE_MQTT_URL": broker.url})
    logs = daemon.log_tail
    n, m = 120, 80
    good = [json.dumps({"region": GOOD_REGIONS[i % 2], "n": i}).encode() for i in range(n + m)]
    malformed = [b"not json at all", b'{"region": "eu", "n": NaN}', json.dumps({"region": "abc\n", "n": -1}).encode()]
    daemon.start()
    try:
        # the sensor's first tick makes the step's session: from then on the broker keeps its messages
        instance = daemon.instance()
        wait_for("the sensor's first tick", lambda: any(r.startswith("topic shop/+/orders: read") for r in skip_reasons(instance, SENSOR, 5)), 120, logs)
        broker.publish("shop/eu/orders", good[: n // 2] + malformed)
        broker.publish("shop/us/orders", good[n // 2 : n])
        # 1. the first messages are stored; the daemon's whole group is SIGKILLed while M more are published
        wait_for("the first messages in the store", lambda: stored(state, STREAM) > 0, 120, logs)

        def publish_rest() -> None:
            for start in range(n, n + m, 20):
                broker.publish("shop/eu/orders", good[start : start + 20])
                time.sleep(0.3)

        publisher = threading.Thread(target=publish_rest)
        publisher.start()
        time.sleep(0.5)
        assert daemon.crash(), "the daemon's whole process group (code server, run workers) was SIGKILLed"
        time.sleep(1)
        daemon.start()
        publisher.join()
        check_landed_once(daemon, pipelines, state, rows_uri=ROWS, stream=STREAM, sensor=SENSOR, source="topic shop/+/orders", good=n + m, rejected=3)
    finally:
        daemon.stop()
