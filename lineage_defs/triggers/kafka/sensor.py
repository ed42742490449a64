"""``on kafka topic=...`` → a sensor per (step, topic), RUNNING by default.

A tick drains the topic into the event store (``drain``: messages stored
before offsets are committed), then asks for one run per batch
(``triggers.sensor.emit``). Brokers come from the settings
(``LINEAGE_KAFKA_BOOTSTRAP`` or ``LINEAGE_KAFKA_BOOTSTRAP_<CONNECTION>``); a
step whose connection has none skips with that reason, so a project without
Kafka still loads and runs. The consumer group defaults to one per asset.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from dagster import AssetKey, PartitionsDefinition, SensorDefinition, SensorResult, SkipReason

from lineage_defs.events.partition import PartitionValueError, raw_value
from lineage_defs.events.store import EventStore
from lineage_defs.parse.model import Kafka
from lineage_defs.plan.names import kafka_stream
from lineage_defs.plan.spec import ScriptStep
from lineage_defs.settings import LineageSettings
from lineage_defs.triggers.keys import default_source, partition_key
from lineage_defs.triggers.sensor import DEFAULT_MAX_BATCH, emit, event_sensor, slug


def sensor_name(step: ScriptStep, k: Kafka) -> str:
    return f"{step.name}__kafka_{slug(k.topic)}"


def group_of(step: ScriptStep, k: Kafka) -> str:
    """``group=``, else one group per asset: ``lineage.<asset uri>``."""
    return k.group or f"lineage.{step.uri}"


def partition_function(source: str | None, pdef: PartitionsDefinition | None) -> Any:
    """(key, value, headers, ts) → (partition key, error) for the drain; None when the step takes no partition."""
    if source is None or pdef is None:
        return None

    def of(key: bytes | None, value: bytes | None, headers: list[tuple[str, str | None]], ts: int | None) -> tuple[str | None, str | None]:
        try:
            return partition_key(raw_value(source, value=value, key=key, headers=headers, timestamp_ms=ts), pdef), None
        except PartitionValueError as e:
            return None, f"partition_from={source}: {e}"
        except Exception as e:  # noqa: BLE001 - whatever a message holds, it is rejected with a reason, never stalls the topic
            return None, f"partition_from={source}: cannot read a partition value ({type(e).__name__}: {str(e)[:200]})"

    return of


def kafka_sensor(step: ScriptStep, k: Kafka, keys: Sequence[AssetKey], pdef: PartitionsDefinition | None, settings: LineageSettings) -> SensorDefinition:
    stream = kafka_stream(step.name, k.topic)
    partition_of = partition_function(default_source(step.partitioning, k.partition_from), pdef)
    env = settings.kafka_env(k.connection)

    def evaluate(context: Any) -> SensorResult | SkipReason:
        from lineage_defs.triggers.kafka.drain import KafkaSource, KafkaUnavailable, drain  # confluent_kafka: imported when a tick runs

        bootstrap = settings.kafka_brokers(k.connection)
        with EventStore(settings.events_location) as store:
            note = ""
            if bootstrap is None:
                note = f"no Kafka brokers for connection '{k.connection}': set {env} (host:port,…); "
            else:
                try:
                    source = KafkaSource(bootstrap, k.topic, group_of(step, k), partition_of, budget_seconds=settings.kafka_poll_seconds)
                    got = drain(store, stream, source)
                except KafkaUnavailable as e:
                    # batches already stored still get their runs; the tick says why nothing new came
                    note = f"{e}; "
                    context.log.warning(str(e))
                else:
                    if got.consumed:
                        context.log.info(f"{k.topic}: read {got.consumed} messages, {got.stored} new to the store, {got.rejected} without a usable partition value")
            return emit(context, store, stream, max_batch=k.max_batch or DEFAULT_MAX_BATCH, pdef=pdef, settings=settings, note=note)

    return event_sensor(sensor_name(step, k), evaluate, keys, settings, f"{step.path}:{k.at.line}: on kafka topic={k.topic} (group {group_of(step, k)}, brokers from {env})")
