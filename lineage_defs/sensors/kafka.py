"""``on kafka topic=...`` → a sensor per (step, topic), RUNNING by default.

A tick drains the topic into the event store (``lineage_defs.events.kafka``:
messages stored before offsets are committed), then asks for one run per
batch (``sensors.batches``). Brokers come from the settings
(``LINEAGE_KAFKA_BOOTSTRAP`` or ``LINEAGE_KAFKA_BOOTSTRAP_<CONNECTION>``); a
step whose connection has none skips with that reason, so a project without
Kafka still loads and runs. The consumer group defaults to one per asset.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from dagster import AssetKey, PartitionsDefinition, SensorDefinition, SensorResult, SkipReason

from lineage_defs.events.partition import PartitionValueError, raw_value
from lineage_defs.events.store import EventStore, store_path
from lineage_defs.parse.model import Kafka
from lineage_defs.plan.spec import StepSpec
from lineage_defs.run.events import kafka_stream
from lineage_defs.sensors.batches import DEFAULT_MAX_BATCH, EventSettings, emit, event_sensor, slug
from lineage_defs.sensors.keys import default_source, partition_key


def sensor_name(step: StepSpec, k: Kafka) -> str:
    return f"{step.name}__kafka_{slug(k.topic)}"


def group_of(step: StepSpec, k: Kafka) -> str:
    """``group=``, else one group per asset: ``lineage.<asset uri>``."""
    return k.group or f"lineage.{step.uri}"


def bootstrap_for(connection: str, servers: Mapping[str, str]) -> str | None:
    return servers.get(connection.lower()) or (servers.get("default") if connection == "default" else None)


def partition_function(step: StepSpec, source: str | None, pdef: PartitionsDefinition | None) -> Any:
    """(key, value, headers, ts) → (partition key, error) for the drain; None when the step takes no partition."""
    if source is None or pdef is None:
        return None

    def of(key: bytes | None, value: bytes | None, headers: list[tuple[str, str | None]], ts: int | None) -> tuple[str | None, str | None]:
        try:
            return partition_key(raw_value(source, value=value, key=key, headers=headers, timestamp_ms=ts), pdef), None
        except PartitionValueError as e:
            return None, f"partition_from={source}: {e}"

    return of


def kafka_sensor(
    step: StepSpec,
    k: Kafka,
    keys: Sequence[AssetKey],
    pdef: PartitionsDefinition | None,
    servers: Mapping[str, str],
    settings: EventSettings,
) -> SensorDefinition:
    stream = kafka_stream(step, k.topic)
    source = default_source(step.partitioning, k.partition_from)
    env = "LINEAGE_KAFKA_BOOTSTRAP" + ("" if k.connection == "default" else f"_{k.connection.upper()}")

    def evaluate(context: Any) -> SensorResult | SkipReason:
        from lineage_defs.events.kafka import KafkaUnavailable, drain

        bootstrap = bootstrap_for(k.connection, servers)
        with EventStore(store_path(settings.state_dir)) as store:
            note = ""
            if bootstrap is None:
                note = f"no Kafka brokers for connection '{k.connection}': set {env} (host:port,…); "
            else:
                try:
                    got = drain(
                        store, stream, bootstrap=bootstrap, topic=k.topic, group=group_of(step, k),
                        partition_of=partition_function(step, source, pdef), budget_seconds=settings.poll_seconds,
                    )
                except KafkaUnavailable as e:
                    # batches already stored still get their runs; the tick says why nothing new came
                    note = f"{e}; "
                    context.log.warning(str(e))
                else:
                    if got.consumed:
                        context.log.info(f"{k.topic}: read {got.consumed} messages, {got.stored} new to the store, {got.rejected} without a usable partition value")
            return emit(context, store, stream, max_batch=k.max_batch or DEFAULT_MAX_BATCH, pdef=pdef, settings=settings, note=note)

    return event_sensor(sensor_name(step, k), evaluate, keys, settings, f"{step.path}:{k.at.line}: on kafka topic={k.topic} (group {group_of(step, k)}, brokers from {env})")
