"""What an ``on kafka topic=...`` sensor's tick reads with (``Source.connect``; the row: ``source``).

A pull source (``triggers.pull``): a tick drains the topic into the event
store (``drain.KafkaReader``: messages stored before offsets are committed),
then asks for one run per batch (``triggers.sensor.emit``). Brokers come from
the settings (``LINEAGE_KAFKA_BOOTSTRAP`` or ``LINEAGE_KAFKA_BOOTSTRAP_<CONNECTION>``);
a step whose connection has none skips with that reason, so a project without
Kafka still loads and runs. The consumer group defaults to one per asset.
"""

from __future__ import annotations

from lineage_defs.plan.spec import ScriptStep
from lineage_defs.settings import LineageSettings
from lineage_defs.triggers.keys import PartitionOf
from lineage_defs.triggers.kafka.source import SOURCE, Kafka
from lineage_defs.triggers.pull import NotConfigured, Pull, Reader


def group_of(step: ScriptStep, k: Kafka) -> str:
    """``group=``, else one group per asset: ``lineage.<asset uri>``."""
    return k.group or f"lineage.{step.uri}"


def connect(step: ScriptStep, k: Kafka, settings: LineageSettings, partition_of: PartitionOf | None) -> Pull:
    env = SOURCE.connection_env(k.connection)

    def reader() -> Reader:
        from lineage_defs.triggers.kafka.drain import KafkaReader, KafkaSource  # confluent_kafka: imported when a tick runs

        bootstrap = settings.connection("kafka", k.connection)
        if bootstrap is None:
            raise NotConfigured(f"no Kafka brokers for connection '{k.connection}': set {env} (host:port,…)")
        return KafkaReader(KafkaSource(bootstrap, k.topic, group_of(step, k), partition_of, budget_seconds=settings.kafka_poll_seconds))

    return Pull(reader, f"group {group_of(step, k)}, brokers from {env}")
