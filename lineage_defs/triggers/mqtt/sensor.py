"""What an ``on mqtt topic=...`` sensor's tick reads with (``Source.connect``; the row: ``source``).

A pull source (``triggers.pull``): a tick connects the step's persistent
MQTT session, stores what the broker queued for it and acknowledges it after
the store (``reader.MqttReader``), then asks for one run per batch
(``emit``). The broker comes from ``LINEAGE_MQTT_URL[_<CONNECTION>]``;
without one the sensor skips and says which variable to set.
"""

from __future__ import annotations

from lineage_defs.plan.spec import ScriptStep
from lineage_defs.settings import LineageSettings
from lineage_defs.triggers.keys import PartitionOf
from lineage_defs.triggers.mqtt.source import SOURCE, Mqtt
from lineage_defs.triggers.pull import NotConfigured, Pull, Reader


def connect(step: ScriptStep, m: Mqtt, settings: LineageSettings, partition_of: PartitionOf | None) -> Pull:
    from lineage_defs.triggers.mqtt.reader import client_id  # no paho here: only the session's name

    env = SOURCE.connection_env(m.connection)
    session = client_id(step.name, m.topic)

    def reader() -> Reader:
        from lineage_defs.triggers.mqtt.reader import MqttReader, MqttSource  # paho: imported when a tick runs

        url = settings.connection("mqtt", m.connection)
        if not url:
            raise NotConfigured(f"no MQTT broker for connection '{m.connection}': set {env} (e.g. mqtt://127.0.0.1:1883)")
        return MqttReader(MqttSource(url, m.topic, session, partition_of))

    return Pull(reader, f"QoS 1, persistent session {session}; broker from {env}; acknowledged once stored")
