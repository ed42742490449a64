"""Stored events → runs: what every event trigger's sensor shares.

Each tick: cut the stream's new events into batches (one store transaction),
then ask for a run per batch that has none yet, ``run_key`` = batch id (so
Dagster never launches a batch twice) and the tag ``lineage/batch`` (so the
run reads that batch). A batch whose run the instance already holds is
marked and not asked for again; one whose request was lost (the daemon died
between this tick and creating the run) is asked for again next tick. The
target's ledger makes a second execution of a batch a no-op.
"""

from __future__ import annotations

import re
import time
from collections.abc import Sequence
from typing import Any

from dagster import (
    AddDynamicPartitionsRequest,
    DagsterRunStatus,
    AssetKey,
    DefaultSensorStatus,
    SensorDefinition,
    DynamicPartitionsDefinition,
    PartitionsDefinition,
    RunRequest,
    RunsFilter,
    SensorResult,
    SkipReason,
)

from lineage_defs.events.store import BATCH_TAG, STREAM_TAG, EventStore
from lineage_defs.settings import LineageSettings

DEFAULT_MAX_BATCH = 10_000


def event_sensor(name: str, evaluate: Any, keys: Sequence[AssetKey], settings: LineageSettings, description: str) -> SensorDefinition:
    """An event trigger's sensor: targets the step's assets, RUNNING by default."""
    return SensorDefinition(
        name=name,
        evaluation_fn=evaluate,
        asset_selection=list(keys),
        minimum_interval_seconds=settings.event_interval,
        default_status=DefaultSensorStatus.RUNNING,
        description=description,
    )


def slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_]", "_", text)


def known_runs(instance: Any, batch_ids: Sequence[str]) -> set[str]:
    """Which of the batches already have a run in the instance (any status)."""
    if not batch_ids:
        return set()
    return instance_batches(instance, batch_ids)


def prune(context: Any, store: EventStore, stream: str, settings: LineageSettings) -> None:
    """Drop old batches whose run succeeded (a re-execution after that has no batch to read)."""
    old = store.old_batches(stream, time.time() - settings.batch_retention_days * 86400)
    if not old:
        return
    done = instance_batches(context.instance, old, [DagsterRunStatus.SUCCESS])
    if done:
        n = store.prune(done)
        context.log.info(f"pruned {len(done)} batches ({n} events) older than {settings.batch_retention_days:g} days whose runs succeeded")


def instance_batches(instance: Any, batch_ids: Sequence[str], statuses: Sequence[Any] | None = None) -> set[str]:
    records = instance.get_run_records(filters=RunsFilter(tags={BATCH_TAG: list(batch_ids)}, statuses=list(statuses) if statuses else None))
    return {r.dagster_run.tags.get(BATCH_TAG) for r in records} & set(batch_ids)


def emit(
    context: Any,
    store: EventStore,
    stream: str,
    *,
    max_batch: int,
    pdef: PartitionsDefinition | None,
    settings: LineageSettings,
    note: str = "",
) -> SensorResult:
    """Cut batches and ask for the runs still missing; a SkipReason saying what was seen when there are none."""
    prune(context, store, stream, settings)
    store.cut_batches(stream, max_batch)
    pending = store.open_batches(stream, limit=max(4 * settings.max_runs_per_tick, 100))
    seen = known_runs(context.instance, [b.id for b in pending])
    store.mark_requested(seen)
    todo = [b for b in pending if b.id not in seen][: settings.max_runs_per_tick]
    dynamic: list[AddDynamicPartitionsRequest] = []
    if isinstance(pdef, DynamicPartitionsDefinition) and todo:
        have = set(context.instance.get_dynamic_partitions(pdef.name))
        new = sorted({str(b.partition_key) for b in todo if b.partition_key and b.partition_key not in have})
        if new:
            dynamic.append(AddDynamicPartitionsRequest(str(pdef.name), new))
    requests = [
        RunRequest(
            run_key=b.id,
            partition_key=b.partition_key if pdef is not None else None,
            tags={BATCH_TAG: b.id, STREAM_TAG: stream, "lineage/events": str(b.size)},
        )
        for b in todo
        if pdef is None or b.partition_key is not None
    ]
    rejected, reasons = store.rejected(stream)
    problems = f"; {rejected} events have no usable partition value and will not run (latest: {reasons[0]})" if rejected else ""
    if not requests:
        counts = store.counts(stream)
        return SensorResult(skip_reason=SkipReason(f"{note}no new batch ({counts['events']} events stored, {counts['batched']} in batches){problems}"), dynamic_partitions_requests=dynamic)
    if problems:
        context.log.warning(problems.lstrip("; "))
    return SensorResult(run_requests=requests, dynamic_partitions_requests=dynamic)
