"""``on nats subject=... stream=...`` → a sensor per (step, stream, subject), RUNNING by default.

A pull source (``triggers.pull``): a tick fetches from the step's durable
JetStream consumer, stores the messages and acknowledges them after the store
(``reader.NatsReader``), then asks for one run per batch (``emit``). The
server comes from ``LINEAGE_NATS_URL[_<CONNECTION>]``; without one the sensor
skips and says which variable to set.
"""

from __future__ import annotations

from collections.abc import Sequence

from dagster import AssetKey, PartitionsDefinition, SensorDefinition

from lineage_defs.parse.model import Nats
from lineage_defs.plan.names import nats_stream
from lineage_defs.plan.spec import ScriptStep
from lineage_defs.settings import LineageSettings
from lineage_defs.triggers.keys import default_source, partition_function
from lineage_defs.triggers.pull import NotConfigured, Reader
from lineage_defs.triggers.sensor import pull_sensor, slug


def sensor_name(step: ScriptStep, n: Nats) -> str:
    return f"{step.name}__nats_{slug(n.stream)}_{slug(n.subject)}"


def nats_sensor(step: ScriptStep, n: Nats, keys: Sequence[AssetKey], pdef: PartitionsDefinition | None, settings: LineageSettings) -> SensorDefinition:
    from lineage_defs.triggers.nats.reader import consumer_name  # no nats-py here: only the consumer's name

    partition_of = partition_function(default_source(step.partitioning, n.partition_from), pdef)
    env = settings.nats_env(n.connection)
    consumer = consumer_name(step.name, n.subject)
    # a message fetched in a tick is not delivered again before that tick is over
    ack_wait = settings.kafka_poll_seconds + 20

    def reader() -> Reader:
        from lineage_defs.triggers.nats.reader import NatsReader, NatsSource  # nats-py: imported when a tick runs

        url = settings.nats_url(n.connection)
        if not url:
            raise NotConfigured(f"no NATS server for connection '{n.connection}': set {env} (e.g. nats://127.0.0.1:4222)")
        return NatsReader(NatsSource(url, n.stream, n.subject, consumer, partition_of, ack_wait_seconds=ack_wait))

    description = f"{step.path}:{n.at.line}: on nats subject={n.subject} stream={n.stream} (JetStream durable consumer {consumer}; server from {env}; acked once stored)"
    return pull_sensor(sensor_name(step, n), description, nats_stream(step.name, n.stream, n.subject), f"stream {n.stream} subject {n.subject}", reader, keys, pdef, settings, n.max_batch)
