"""``on mqtt topic=<filter> [connection=…]``: the MQTT source as data (see ``triggers.source``). No Dagster, no paho."""

from __future__ import annotations

from dataclasses import dataclass

from lineage_defs.errors import Location
from lineage_defs.triggers.source import BadValue, Option, Source


@dataclass(frozen=True)
class Mqtt:
    """``on mqtt topic=<filter> [connection=…]``."""

    topic: str  # a topic filter: levels split by /, + for one whole level, # as the last
    connection: str
    partition_from: str | None
    max_batch: int | None
    at: Location


def mqtt_topic(v: str) -> str:
    """An MQTT topic filter: ``+`` only as a whole level, ``#`` only as the whole last level (MQTT 3.1.1/5 §4.7)."""
    levels = v.split("/")
    if v and all(lv in ("+", "#") or not ("+" in lv or "#" in lv) for lv in levels) and "#" not in levels[:-1]:
        return v
    fixed = "/".join("+" if "+" in lv else ("#" if "#" in lv else lv) for lv in levels)
    fixed = fixed.split("#", 1)[0] + "#" if "#" in fixed else fixed
    raise BadValue(f"bad MQTT topic filter '{v}'", f"'+' stands for one whole level and '#' only for the whole last one, e.g. topic={fixed or 'shop/orders'}")


SOURCE = Source(
    keyword="mqtt",
    record=Mqtt,
    options=(
        Option("topic", (mqtt_topic,), required=True, example="shop/orders (a topic filter: + for one level, # for the rest)"),
        Option("connection", ("connection",), default="default"),
    ),
    identity=lambda step, t: (t.topic,),
    env="LINEAGE_MQTT_URL",
    connect="lineage_defs.triggers.mqtt.sensor:connect",
    label="topic {t.topic}",
)
