"""Triggers (SPEC section 6) → Dagster sensors and schedules, all RUNNING by default.

- ``cascade``: ``trigger any|all|manual`` + ``debounce`` → an AutomationCondition per asset, and the project's automation sensor;
- ``schedules``: ``on schedule`` → ScheduleDefinitions;
- ``kafka`` / ``webhooks``: ``on kafka`` / ``on webhook`` → sensors turning stored events into runs (``batches``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from dagster import AssetKey, PartitionsDefinition, ScheduleDefinition, SensorDefinition

from lineage_defs.plan.spec import Project
from lineage_defs.run.events import hooks
from lineage_defs.sensors.batches import EventSettings
from lineage_defs.sensors.cascade import cascade_sensors
from lineage_defs.sensors.kafka import kafka_sensor
from lineage_defs.sensors.schedules import step_schedules
from lineage_defs.sensors.webhooks import webhook_sensor


@dataclass(frozen=True)
class TriggerSettings:
    """Sensor settings, resolved by ``lineage_defs.definitions`` (never read from the environment here)."""

    kafka_bootstrap: Mapping[str, str] = field(default_factory=dict)  # connection (lower case; "default") → host:port,…
    cascade_interval: int = 15  # seconds between evaluations of the cascade
    event_interval: int = 5  # seconds between ticks of Kafka and webhook sensors
    max_runs_per_tick: int = 25
    kafka_poll_seconds: float = 10.0


def trigger_definitions(
    project: Project,
    key_of: Mapping[str, AssetKey],
    pdefs: Mapping[str, PartitionsDefinition | None],
    conditioned: list[AssetKey],
    settings: TriggerSettings,
    state_dir: str,
) -> tuple[list[SensorDefinition], list[ScheduleDefinition]]:
    """Every sensor and schedule of the project (``conditioned``: the assets that carry a cascade condition)."""
    events = EventSettings(state_dir, settings.event_interval, settings.max_runs_per_tick, settings.kafka_poll_seconds)
    sensors: list[SensorDefinition] = list(cascade_sensors(conditioned, settings.cascade_interval)) if conditioned else []
    schedules: list[ScheduleDefinition] = []
    hooks(project.steps)  # two steps claiming one hook name is an error before anything is built
    for step in project.steps:
        keys = [key_of[u] for u in step.outputs]
        pdef = pdefs.get(step.uri)
        schedules.extend(step_schedules(step, keys, pdef))
        seen_topics: set[str] = set()
        for k in step.kafka:
            if k.topic not in seen_topics:
                seen_topics.add(k.topic)
                sensors.append(kafka_sensor(step, k, keys, pdef, settings.kafka_bootstrap, events))
        for w in step.webhooks:
            sensors.append(webhook_sensor(step, w, keys, pdef, events))
    return sensors, schedules


__all__ = ["TriggerSettings", "trigger_definitions"]
