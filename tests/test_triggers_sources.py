"""The table of trigger sources: one row per source, read by the parser, the settings, the names and the sensors.

What a row promises: the parser, the settings and the names read only plain
data (no Dagster, no client library imported); each row's record holds what
its line says; and a row added to the table — nothing else — is parsed,
named, configured and built into a sensor.
"""

from __future__ import annotations

import dataclasses
import importlib
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from dagster import DagsterInstance, DefaultSensorStatus, build_sensor_context

from lineage_defs import build_definitions
from lineage_defs.errors import Location
from lineage_defs.parse import parse_header
from lineage_defs.plan.names import sensor_name, stream_of
from lineage_defs.settings import LineageSettings
from lineage_defs.triggers import sources
from lineage_defs.triggers.pull import NotConfigured, Pull, Reader
from lineage_defs.triggers.source import BadValue, Option, Source


def test_the_parser_settings_and_names_import_no_dagster_and_no_client() -> None:
    code = (
        "import sys; import lineage_defs.parse, lineage_defs.settings, lineage_defs.plan.names, lineage_defs.triggers.sources;"
        "print(sorted(m for m in ('dagster', 'confluent_kafka', 'paho', 'nats', 'boto3', 'psycopg', 'aiosmtpd', 'starlette') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


@pytest.mark.parametrize("source", sources.SOURCES, ids=lambda s: s.keyword)
def test_each_row_is_complete_and_its_runtime_resolves(source: Source) -> None:
    fields = [f.name for f in dataclasses.fields(source.record)]
    common = ["partition_from", *(["max_batch"] if source.pull else []), "at"]
    assert fields == [o.name for o in source.options] + common, "a record holds its options in order, then the common ones"
    if source.pull:
        module, _, function = source.connect.partition(":")
        assert callable(getattr(importlib.import_module(module), function))
        assert source.env and source.label
    else:
        assert importlib.import_module(source.receiver) and "{0}" in source.text and "{0}" in source.note


def test_the_table_has_one_row_per_keyword_and_per_variable() -> None:
    keywords = [s.keyword for s in sources.SOURCES]
    envs = [s.env for s in sources.SOURCES if s.env]
    assert len(set(keywords)) == len(keywords) and len(set(envs)) == len(envs)
    assert "schedule" not in keywords


# -- the names every existing source had before the table (stable: runs, cursors and stores use them) ---------
LINES = {
    "on kafka topic=a.b connection=events": ("kafka:p__s:a.b", "p__s__kafka_a_b"),
    "on sqs queue=https://sqs.eu-west-1.amazonaws.com/1/orders.fifo": ("sqs:p__s:orders.fifo", "p__s__sqs_orders_fifo"),
    "on postgres table=public.orders": ("postgres:p__s:public.orders", "p__s__postgres_public_orders"),
    "on mqtt topic=shop/+/orders": ("mqtt:p__s:shop/+/orders", "p__s__mqtt_shop___orders"),
    "on nats subject=orders.* stream=ORDERS": ("nats:p__s:ORDERS:orders.*", "p__s__nats_ORDERS_orders__"),
    "on webhook": ("webhook:p__s", "p__s__webhook_p__s"),
    "on webhook name=pay_eu": ("webhook:pay_eu", "p__s__webhook_pay_eu"),
    "on email name=orders.eu": ("email:orders.eu", "p__s__email_orders_eu"),
}


@pytest.mark.parametrize("line", LINES)
def test_stream_and_sensor_names_are_unchanged(line: str) -> None:
    header, errors = parse_header("p/s.sql", f"-- {line}\nselect 1", "duckdb")
    assert errors == [] and len(header.events) == 1
    assert (stream_of("p__s", header.events[0]), sensor_name("p__s", header.events[0])) == LINES[line]


def test_connection_variables_are_read_per_source_and_named_back() -> None:
    s = LineageSettings.from_env({
        "LINEAGE_KAFKA_BOOTSTRAP": "k:9092", "LINEAGE_KAFKA_BOOTSTRAP_EVENTS": "e:9092", "LINEAGE_SQS_ENDPOINT_URL_AWS2": "http://q",
        "LINEAGE_MQTT_URL_IOT": "mqtt://m:1883", "LINEAGE_NATS_URL": "nats://n:4222", "LINEAGE_PG_DSN_CRM": "host=db",
    })  # fmt: skip
    assert s.connections == {"kafka": {"default": "k:9092", "events": "e:9092"}, "sqs": {"aws2": "http://q"}, "mqtt": {"iot": "mqtt://m:1883"}, "nats": {"default": "nats://n:4222"}}
    assert (s.connection("kafka", "EVENTS"), s.connection("sqs", "default"), s.connection("mqtt", "other")) == ("e:9092", None, None)
    assert [s.connection_env(k, c) for k, c in (("kafka", "default"), ("sqs", "aws2"), ("postgres", "crm"), ("nats", "bus"))] == [
        "LINEAGE_KAFKA_BOOTSTRAP", "LINEAGE_SQS_ENDPOINT_URL_AWS2", "LINEAGE_PG_DSN_CRM", "LINEAGE_NATS_URL_BUS",
    ]  # fmt: skip
    assert s.postgres_dsns == {"crm": "host=db"}  # the PostgreSQL source's server is the substrate's setting


# -- a new source: one row, nothing else ------------------------------------------------------------------------
@dataclass(frozen=True)
class Redis:
    stream: str
    connection: str
    partition_from: str | None
    max_batch: int | None
    at: Location


def _redis_stream(v: str) -> str:
    if v and " " not in v:
        return v
    raise BadValue(f"bad Redis stream '{v}'", "write stream=<key>, e.g. stream=orders")


REDIS = Source(
    keyword="redis",
    record=Redis,
    options=(Option("stream", (_redis_stream,), required=True, example="orders"), Option("connection", ("connection",), default="default")),
    identity=lambda step, t: (t.stream,),
    env="LINEAGE_REDIS_URL",
    connect="test_triggers_sources:redis_connect",
    label="stream {t.stream}",
    interval=7,
)


def redis_connect(step: object, t: Redis, settings: LineageSettings, partition_of: object) -> Pull:
    env = REDIS.connection_env(t.connection)

    def reader() -> Reader:
        raise NotConfigured(f"no Redis for connection '{t.connection}': set {env}")

    return Pull(reader, f"consumer group of the step; server from {env}")


@pytest.fixture
def with_redis(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sources, "SOURCES", (*sources.SOURCES, REDIS))
    monkeypatch.setitem(sources.BY_KEYWORD, "redis", REDIS)
    monkeypatch.setitem(sources.BY_RECORD, Redis, REDIS)


def _errors(line: str) -> list[str]:
    return [e.headline() for e in parse_header("x.sql", f"-- {line}\nselect 1", "duckdb")[1]]


def test_a_row_added_to_the_table_is_parsed_named_configured_and_built(with_redis: None, tmp_path: Path) -> None:
    header, errors = parse_header("p/s.sql", "-- on redis stream=orders connection=cache max_batch=9\nselect 1", "duckdb")
    assert errors == [] and header.events == (Redis("orders", "cache", None, 9, header.events[0].at),)
    t = header.events[0]
    assert (stream_of("p__s", t), sensor_name("p__s", t)) == ("redis:p__s:orders", "p__s__redis_orders")
    assert _errors("on redis") == ["x.sql:1:12: 'on redis' needs stream= — write on redis stream=orders"]
    assert _errors("on redis stream=\"a b\"") == ["x.sql:1:21: bad Redis stream 'a b' — write stream=<key>, e.g. stream=orders"]
    assert _errors("on redis strem=a") == ["x.sql:1:13: unknown option 'strem' — did you mean 'stream'?"]
    assert _errors("on rediss stream=a") == ["x.sql:1:7: unknown trigger 'rediss' — did you mean 'redis'?"]
    assert "'email' or 'redis'" in _errors("on")[0]
    s = LineageSettings.from_env({"LINEAGE_REDIS_URL_CACHE": "redis://r:6379"})
    assert (s.connection("redis", "cache"), s.connection_env("redis", "cache")) == ("redis://r:6379", "LINEAGE_REDIS_URL_CACHE")

    # (no parse cache: the cache's codec knows the records the table had when it was imported)
    settings = LineageSettings(state_dir=str(tmp_path / "state"), use_cache=False)
    defs = build_definitions(_one_step(tmp_path), settings=settings)
    (sensor,) = [s for s in defs.sensors if s.name != "lineage_cascade"]
    assert (sensor.name, sensor.minimum_interval_seconds, sensor.default_status) == ("p__r__redis_orders", 7, DefaultSensorStatus.RUNNING)
    assert sensor.description == "p/r.sql:2: on redis stream=orders (consumer group of the step; server from LINEAGE_REDIS_URL)"
    with DagsterInstance.ephemeral() as instance:
        result = sensor.evaluate_tick(build_sensor_context(instance=instance, repository_def=defs.get_repository_def()))
    assert not result.run_requests and "no Redis for connection 'default': set LINEAGE_REDIS_URL; " in (result.skip_message or "")


def _one_step(tmp_path: Path) -> Path:
    pipes = tmp_path / "pipes"
    (pipes / "p").mkdir(parents=True)
    (pipes / "p" / "r.sql").write_text("-- pipeline\n-- on redis stream=orders\n-- materialize duckdb://warehouse/r append\nSELECT value FROM _events\n")
    return pipes


def test_the_runtime_named_by_a_row_closes_no_import_circle() -> None:
    """``connect`` is imported by name (a string the layout check cannot see): count it as an import of the builder."""
    from test_layout import MODULES, _cycles, _imports

    graph = {name: _imports(name, path) for name, path in MODULES.items()}
    named = {s.connect.partition(":")[0] for s in sources.SOURCES if s.pull}
    assert named <= set(MODULES) and {s.receiver for s in sources.SOURCES if not s.pull} <= set(MODULES)
    graph["lineage_defs.triggers.build"] |= named
    assert _cycles(graph) == []
    # and the table's side of it stays plain: no source row imports what builds or runs sensors
    plain = [n for n in MODULES if n == "lineage_defs.triggers.sources" or (n.startswith("lineage_defs.triggers.") and n.endswith(".source"))]
    assert len(plain) == len(sources.SOURCES) + 2
    assert not {m for n in plain for m in graph[n]} - {*plain, "lineage_defs.errors", "lineage_defs.triggers", *(n.rpartition(".")[0] for n in plain)}
