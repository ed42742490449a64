"""``on email name=<mailbox>`` → a sensor per mailbox, RUNNING by default.

The receiver (``lineage-defs email serve``, another process) stores each
accepted message in the event store; this sensor cuts the mailbox's stored
events into batches and asks for a run per batch, as the webhook sensor does.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from dagster import AssetKey, PartitionsDefinition, SensorDefinition, SensorResult

from lineage_defs.events.store import EventStore
from lineage_defs.parse.model import Email
from lineage_defs.plan.names import email_stream
from lineage_defs.plan.spec import ScriptStep
from lineage_defs.settings import LineageSettings
from lineage_defs.triggers.sensor import DEFAULT_MAX_BATCH, emit, event_sensor, slug


def sensor_name(step: ScriptStep, m: Email) -> str:
    return f"{step.name}__email_{slug(m.name)}"


def email_sensor(step: ScriptStep, m: Email, keys: Sequence[AssetKey], pdef: PartitionsDefinition | None, settings: LineageSettings) -> SensorDefinition:
    stream = email_stream(m.name)

    def evaluate(context: Any) -> SensorResult:
        with EventStore(settings.events_location) as store:
            return emit(context, store, stream, max_batch=DEFAULT_MAX_BATCH, pdef=pdef, settings=settings, note=f"mailbox '{m.name}': ")

    return event_sensor(sensor_name(step, m), evaluate, keys, settings, f"{step.path}:{m.at.line}: on email — mail to {m.name}@… sent to `lineage-defs email serve`")
