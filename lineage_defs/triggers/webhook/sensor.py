"""``on webhook [name=]`` → a sensor per hook, RUNNING by default.

The receiver (``lineage-defs webhooks serve``, another process) stores each
accepted request in the event store with its partition key; this sensor cuts
the hook's stored events into batches and asks for a run per batch, exactly
as the Kafka sensor does after its drain.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from dagster import AssetKey, PartitionsDefinition, SensorDefinition, SensorResult

from lineage_defs.events.store import EventStore
from lineage_defs.parse.model import Webhook
from lineage_defs.plan.names import hook_name, webhook_stream
from lineage_defs.plan.spec import ScriptStep
from lineage_defs.settings import LineageSettings
from lineage_defs.triggers.sensor import DEFAULT_MAX_BATCH, emit, event_sensor, slug


def sensor_name(step: ScriptStep, w: Webhook) -> str:
    return f"{step.name}__webhook_{slug(hook_name(step.name, w.name))}"


def webhook_sensor(step: ScriptStep, w: Webhook, keys: Sequence[AssetKey], pdef: PartitionsDefinition | None, settings: LineageSettings) -> SensorDefinition:
    hook = hook_name(step.name, w.name)
    stream = webhook_stream(hook)

    def evaluate(context: Any) -> SensorResult:
        with EventStore(settings.events_location) as store:
            return emit(context, store, stream, max_batch=DEFAULT_MAX_BATCH, pdef=pdef, settings=settings, note=f"hook '{hook}': ")

    return event_sensor(sensor_name(step, w), evaluate, keys, settings, f"{step.path}:{w.at.line}: on webhook — POST /hooks/{hook} to `lineage-defs webhooks serve`")
