"""The table of sources → one Dagster sensor per event stream of a step.

Every source's sensor has one shape: a pull source's drains its reader into
the store and then ``emit``s (``sensor.pull_sensor``); a push source's only
``emit``s what its receiver stored. The source's row (``sources``) gives the
names, the texts and, for a pull source, ``connect`` — imported here, when
sensors are built, so the table itself stays free of Dagster and clients.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from typing import Any

from dagster import AssetKey, PartitionsDefinition, SensorDefinition, SensorResult

from lineage_defs.events.store import EventStore
from lineage_defs.plan.spec import ScriptStep
from lineage_defs.settings import LineageSettings
from lineage_defs.triggers.keys import default_source, partition_function
from lineage_defs.triggers.pull import Pull
from lineage_defs.triggers.sensor import DEFAULT_MAX_BATCH, emit, event_sensor, pull_sensor
from lineage_defs.triggers.source import Source
from lineage_defs.triggers.sources import source_of


def event_sensors(step: ScriptStep, keys: Sequence[AssetKey], pdef: PartitionsDefinition | None, settings: LineageSettings) -> list[SensorDefinition]:
    """One sensor per event stream of the step (two lines on one Kafka topic share one)."""
    out: list[SensorDefinition] = []
    seen: set[str] = set()
    for t in step.events:
        source = source_of(t)
        stream = source.stream(step.name, t)
        if stream not in seen:
            seen.add(stream)
            out.append(source_sensor(source, step, t, keys, pdef, settings))
    return out


def source_sensor(source: Source, step: ScriptStep, t: Any, keys: Sequence[AssetKey], pdef: PartitionsDefinition | None, settings: LineageSettings) -> SensorDefinition:
    """The sensor of one ``on <source>`` line."""
    if source.interval is not None:
        settings = settings.replace(event_interval=source.interval)
    name, stream, where = source.sensor_name(step.name, t), source.stream(step.name, t), f"{step.path}:{t.at.line}: "
    if source.pull:
        partition_of = partition_function(default_source(step.partitioning, t.partition_from), pdef)
        pull = connect_of(source)(step, t, settings, partition_of)
        description = f"{where}{source.head(t)} ({pull.detail})"
        return pull_sensor(name, description, stream, source.label.format(t=t), pull.reader, keys, pdef, settings, t.max_batch)
    ident = source.identity(step.name, t)[0]
    note = source.note.format(ident)

    def evaluate(context: Any) -> SensorResult:
        with EventStore(settings.events_location) as store:
            return emit(context, store, stream, max_batch=DEFAULT_MAX_BATCH, pdef=pdef, settings=settings, note=note)

    return event_sensor(name, evaluate, keys, settings, where + source.text.format(ident))


def connect_of(source: Source) -> Callable[..., Pull]:
    """A pull source's ``connect`` (``"module:function"``), imported now."""
    module, _, function = source.connect.partition(":")
    fn: Callable[..., Pull] = getattr(importlib.import_module(module), function)
    return fn
