"""``on mqtt topic=...`` → a sensor per (step, topic filter), RUNNING by default.

A pull source (``triggers.pull``): a tick connects the step's persistent
MQTT session, stores what the broker queued for it and acknowledges it after
the store (``reader.MqttReader``), then asks for one run per batch
(``emit``). The broker comes from ``LINEAGE_MQTT_URL[_<CONNECTION>]``;
without one the sensor skips and says which variable to set.
"""

from __future__ import annotations

from collections.abc import Sequence

from dagster import AssetKey, PartitionsDefinition, SensorDefinition

from lineage_defs.parse.model import Mqtt
from lineage_defs.plan.names import mqtt_stream
from lineage_defs.plan.spec import ScriptStep
from lineage_defs.settings import LineageSettings
from lineage_defs.triggers.keys import default_source, partition_function
from lineage_defs.triggers.pull import NotConfigured, Reader
from lineage_defs.triggers.sensor import pull_sensor, slug


def sensor_name(step: ScriptStep, m: Mqtt) -> str:
    return f"{step.name}__mqtt_{slug(m.topic)}"


def mqtt_sensor(step: ScriptStep, m: Mqtt, keys: Sequence[AssetKey], pdef: PartitionsDefinition | None, settings: LineageSettings) -> SensorDefinition:
    from lineage_defs.triggers.mqtt.reader import client_id  # no paho here: only the session's name

    partition_of = partition_function(default_source(step.partitioning, m.partition_from), pdef)
    env = settings.mqtt_env(m.connection)
    session = client_id(step.name, m.topic)

    def reader() -> Reader:
        from lineage_defs.triggers.mqtt.reader import MqttReader, MqttSource  # paho: imported when a tick runs

        url = settings.mqtt_url(m.connection)
        if not url:
            raise NotConfigured(f"no MQTT broker for connection '{m.connection}': set {env} (e.g. mqtt://127.0.0.1:1883)")
        return MqttReader(MqttSource(url, m.topic, session, partition_of))

    description = f"{step.path}:{m.at.line}: on mqtt topic={m.topic} (QoS 1, persistent session {session}; broker from {env}; acknowledged once stored)"
    return pull_sensor(sensor_name(step, m), description, mqtt_stream(step.name, m.topic), f"topic {m.topic}", reader, keys, pdef, settings, m.max_batch)
