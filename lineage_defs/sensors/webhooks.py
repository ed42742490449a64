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

from lineage_defs.events.store import EventStore, store_path
from lineage_defs.parse.model import Webhook
from lineage_defs.plan.spec import StepSpec
from lineage_defs.run.events import hook_name, webhook_stream
from lineage_defs.sensors.batches import DEFAULT_MAX_BATCH, EventSettings, emit, event_sensor, slug


def sensor_name(step: StepSpec, w: Webhook) -> str:
    return f"{step.name}__webhook_{slug(hook_name(step, w.name))}"


def webhook_sensor(step: StepSpec, w: Webhook, keys: Sequence[AssetKey], pdef: PartitionsDefinition | None, settings: EventSettings) -> SensorDefinition:
    hook = hook_name(step, w.name)
    stream = webhook_stream(hook)

    def evaluate(context: Any) -> SensorResult:
        path = store_path(settings.state_dir)
        with EventStore(path) as store:
            return emit(context, store, stream, max_batch=DEFAULT_MAX_BATCH, pdef=pdef, settings=settings, note=f"hook '{hook}': ")

    return event_sensor(sensor_name(step, w), evaluate, keys, settings, f"{step.path}:{w.at.line}: on webhook — POST /hooks/{hook} to `lineage-defs webhooks serve`")
