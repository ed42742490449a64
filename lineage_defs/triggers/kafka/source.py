"""``on kafka topic=<topic> [connection=…] [group=…]``: the Kafka source as data (see ``triggers.source``). No Dagster, no confluent_kafka."""

from __future__ import annotations

from dataclasses import dataclass

from lineage_defs.errors import Location
from lineage_defs.triggers.source import Option, Source


@dataclass(frozen=True)
class Kafka:
    """``on kafka topic=…``."""

    topic: str
    connection: str
    group: str | None
    partition_from: str | None
    max_batch: int | None
    at: Location


SOURCE = Source(
    keyword="kafka",
    record=Kafka,
    options=(
        Option("topic", required=True, example="orders"),
        Option("connection", default="default"),
        Option("group"),
    ),
    identity=lambda step, t: (t.topic,),
    env="LINEAGE_KAFKA_BOOTSTRAP",
    connect="lineage_defs.triggers.kafka.sensor:connect",
    label="topic {t.topic}",
)
