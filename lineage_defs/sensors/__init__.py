"""Triggers (SPEC section 6) → Dagster sensors and schedules, all RUNNING by default.

- ``cascade``: ``trigger any|all|manual`` + ``debounce`` → an AutomationCondition per asset, and the project's automation sensor;
- ``schedules``: ``on schedule`` → ScheduleDefinitions;
- event triggers (``on kafka``, ``on webhook`` …) → their sources' sensors (``lineage_defs.triggers``).
"""

from __future__ import annotations

from collections.abc import Mapping

from dagster import AssetKey, PartitionsDefinition, ScheduleDefinition, SensorDefinition

from lineage_defs.plan.spec import Project
from lineage_defs.sensors.cascade import cascade_sensors
from lineage_defs.sensors.schedules import step_schedules
from lineage_defs.settings import LineageSettings
from lineage_defs.triggers.build import event_sensors


def trigger_definitions(
    project: Project,
    key_of: Mapping[str, AssetKey],
    pdefs: Mapping[str, PartitionsDefinition | None],
    conditioned: list[AssetKey],
    settings: LineageSettings,
) -> tuple[list[SensorDefinition], list[ScheduleDefinition]]:
    """Every sensor and schedule of the project (``conditioned``: the assets that carry a cascade condition)."""
    sensors: list[SensorDefinition] = list(cascade_sensors(conditioned, settings.cascade_interval)) if conditioned else []
    schedules: list[ScheduleDefinition] = []
    for step in project.scripts:
        keys = [key_of[u] for u in step.outputs]
        pdef = pdefs.get(step.uri)
        inputs = [key_of[d.uri] for d in step.deps if d.uri in key_of]  # external inputs never materialize here
        schedules.extend(step_schedules(step, keys, pdef, inputs))
        sensors.extend(event_sensors(step, keys, pdef, settings))
    return sensors, schedules


__all__ = ["trigger_definitions"]
