"""Event triggers (SPEC section 6): one room per source, one table from annotation kind to sensor.

Each source lives in a package of its own — ``kafka``, ``sqs``, ``postgres``, ``mqtt`` and ``nats`` (pull
sources: a ``pull.Reader`` and its sensor), ``webhook`` and ``email`` (push sources: a
receiver writing the store through ``push``, and its sensor) — over what they
share: the loop every pull source runs (``pull``),
the durable event store (``lineage_defs.events``), the sensor that cuts stored
events into batches and asks for runs (``sensor``), and event values →
partition keys (``keys``). To add a source: a type in ``parse.model``
(``EventTrigger``), its stream name in ``plan.names``, a package here, and a
row in ``SENSORS``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from dagster import AssetKey, PartitionsDefinition, SensorDefinition

from lineage_defs.parse.model import Email, Kafka, Mqtt, Nats, Postgres, Sqs, Webhook
from lineage_defs.plan.names import stream_of
from lineage_defs.plan.spec import ScriptStep
from lineage_defs.settings import LineageSettings
from lineage_defs.triggers.email.sensor import email_sensor
from lineage_defs.triggers.kafka.sensor import kafka_sensor
from lineage_defs.triggers.mqtt.sensor import mqtt_sensor
from lineage_defs.triggers.nats.sensor import nats_sensor
from lineage_defs.triggers.postgres.sensor import postgres_sensor
from lineage_defs.triggers.sqs.sensor import sqs_sensor
from lineage_defs.triggers.webhook.sensor import webhook_sensor

SensorBuilder = Callable[[ScriptStep, Any, Sequence[AssetKey], "PartitionsDefinition | None", LineageSettings], SensorDefinition]
SENSORS: dict[type, SensorBuilder] = {
    Kafka: kafka_sensor, Sqs: sqs_sensor, Postgres: postgres_sensor, Mqtt: mqtt_sensor, Nats: nats_sensor,
    Webhook: webhook_sensor, Email: email_sensor,
}


def event_sensors(step: ScriptStep, keys: Sequence[AssetKey], pdef: PartitionsDefinition | None, settings: LineageSettings) -> list[SensorDefinition]:
    """One sensor per event stream of the step (two lines on one Kafka topic share one)."""
    out: list[SensorDefinition] = []
    seen: set[str] = set()
    for t in step.events:
        stream = stream_of(step.name, t)
        if stream not in seen:
            seen.add(stream)
            out.append(SENSORS[type(t)](step, t, keys, pdef, settings))
    return out
