"""``on kafka topic=...`` → a sensor per (step, topic), RUNNING by default.

A pull source (``triggers.pull``): a tick drains the topic into the event
store (``drain.KafkaReader``: messages stored before offsets are committed),
then asks for one run per batch (``triggers.sensor.emit``). Brokers come from
the settings (``LINEAGE_KAFKA_BOOTSTRAP`` or ``LINEAGE_KAFKA_BOOTSTRAP_<CONNECTION>``);
a step whose connection has none skips with that reason, so a project without
Kafka still loads and runs. The consumer group defaults to one per asset.
"""

from __future__ import annotations

from collections.abc import Sequence

from dagster import AssetKey, PartitionsDefinition, SensorDefinition

from lineage_defs.parse.model import Kafka
from lineage_defs.plan.names import kafka_stream
from lineage_defs.plan.spec import ScriptStep
from lineage_defs.settings import LineageSettings
from lineage_defs.triggers.keys import default_source, partition_function
from lineage_defs.triggers.pull import NotConfigured, Reader
from lineage_defs.triggers.sensor import pull_sensor, slug

__all__ = ["group_of", "kafka_sensor", "partition_function", "sensor_name"]


def sensor_name(step: ScriptStep, k: Kafka) -> str:
    return f"{step.name}__kafka_{slug(k.topic)}"


def group_of(step: ScriptStep, k: Kafka) -> str:
    """``group=``, else one group per asset: ``lineage.<asset uri>``."""
    return k.group or f"lineage.{step.uri}"


def kafka_sensor(step: ScriptStep, k: Kafka, keys: Sequence[AssetKey], pdef: PartitionsDefinition | None, settings: LineageSettings) -> SensorDefinition:
    partition_of = partition_function(default_source(step.partitioning, k.partition_from), pdef)
    env = settings.kafka_env(k.connection)

    def reader() -> Reader:
        from lineage_defs.triggers.kafka.drain import KafkaReader, KafkaSource  # confluent_kafka: imported when a tick runs

        bootstrap = settings.kafka_brokers(k.connection)
        if bootstrap is None:
            raise NotConfigured(f"no Kafka brokers for connection '{k.connection}': set {env} (host:port,…)")
        return KafkaReader(KafkaSource(bootstrap, k.topic, group_of(step, k), partition_of, budget_seconds=settings.kafka_poll_seconds))

    description = f"{step.path}:{k.at.line}: on kafka topic={k.topic} (group {group_of(step, k)}, brokers from {env})"
    return pull_sensor(sensor_name(step, k), description, kafka_stream(step.name, k.topic), f"topic {k.topic}", reader, keys, pdef, settings, k.max_batch)
