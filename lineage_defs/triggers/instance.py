"""The Dagster instance a sensor or schedule tick reads: one per process, not one per tick.

Dagster's ``context.instance`` opens a new ``DagsterInstance`` from the tick's
instance reference on every tick and closes it at the tick's end. Opening one
sets up its storages, and on SQLite (the embedded default) each storage checks
its schema against Dagster's migrations by loading every migration script:
profiled in a busy code server during the test suite, that was half of the
samples in our sensors' ticks. A tick here asks
``tick_instance`` instead: the instance for that reference, opened once in the
process and shared by its ticks (Dagster's webserver and daemon share one
instance across their threads the same way).
"""

from __future__ import annotations

import threading
from typing import Any

from dagster import DagsterInstance, serialize_value

_OPEN: dict[str, DagsterInstance] = {}
_LOCK = threading.Lock()


def tick_instance(context: Any) -> DagsterInstance:
    """The instance of ``context`` (a sensor's or schedule's evaluation context), opened once per process.

    A context built with an instance and no reference (``build_sensor_context(instance=…)`` in a test)
    gives that instance."""
    ref = getattr(context, "instance_ref", None)
    if ref is None:
        return context.instance
    key = serialize_value(ref)
    with _LOCK:
        instance = _OPEN.get(key)
        if instance is None:
            instance = _OPEN[key] = DagsterInstance.from_ref(ref)
    return instance
