"""``on schedule cron=... [tz=]`` → one ScheduleDefinition per line, RUNNING by default.

A time-partitioned step's tick builds the partition the tick closes: the
latest partition that is complete at the tick's scheduled time (a daily
step's midnight tick builds the day that just ended). A step with dynamic
partitions has no such partition: its schedule skips with the reason. Like
the cascade, a tick never starts a step while an input it reads (an asset of
the project) was never materialized: it skips, naming the inputs to build
first (a demo started just before the hour does not fail its first tick). Names
are ``<step>__schedule`` (``__schedule_2`` … for further lines of the same
script), stable across loads.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from dagster import (
    AssetKey,
    AssetSelection,
    DefaultScheduleStatus,
    DynamicPartitionsDefinition,
    PartitionsDefinition,
    RunRequest,
    ScheduleDefinition,
    SkipReason,
    TimeWindowPartitionsDefinition,
    define_asset_job,
)

from lineage_defs.plan.spec import ScriptStep
from lineage_defs.triggers.instance import tick_instance


def closed_partition(pdef: TimeWindowPartitionsDefinition, tick: Any) -> str | None:
    """The latest partition complete at ``tick`` (an aware datetime); None before the first one ends.

    >>> from dagster import DailyPartitionsDefinition
    >>> import datetime as dt
    >>> closed_partition(DailyPartitionsDefinition("2025-01-01"), dt.datetime(2025, 3, 2, 0, 30, tzinfo=dt.timezone.utc))
    '2025-03-01'
    """
    window = pdef.get_prev_partition_window(tick)
    if window is None:
        return None
    return pdef.get_partition_keys_in_time_window(window)[0]


def schedule_name(step: ScriptStep, index: int) -> str:
    return f"{step.name}__schedule" if index == 0 else f"{step.name}__schedule_{index + 1}"


def missing_inputs(instance: Any, inputs: Sequence[AssetKey]) -> list[AssetKey]:
    """The inputs with no materialization at all in ``instance``."""
    return [k for k in inputs if instance.get_latest_materialization_event(k) is None]


def step_schedules(step: ScriptStep, keys: Sequence[AssetKey], pdef: PartitionsDefinition | None, inputs: Sequence[AssetKey] = ()) -> list[ScheduleDefinition]:
    """The step's schedules; ``inputs``: the keys of the project's assets it reads (its tick waits for them)."""
    out = []
    for i, sched in enumerate(step.schedules):
        name = schedule_name(step, i)
        job = define_asset_job(f"{name}_job", selection=AssetSelection.assets(*keys))

        def run(context: Any, pdef: PartitionsDefinition | None = pdef, name: str = name, line: int = sched.at.line) -> Any:
            tick = context.scheduled_execution_time
            if inputs and (missing := missing_inputs(tick_instance(context), inputs)):  # no instance for a step that reads none
                names = ", ".join(k.to_user_string() for k in missing)
                return SkipReason(f"{step.path}:{line}: not started, its input(s) {names} were never materialized — materialize them first; the next tick runs it")
            if pdef is None:
                return RunRequest(run_key=tick.isoformat())
            if isinstance(pdef, DynamicPartitionsDefinition):
                return SkipReason(f"{step.path} has dynamic partitions (created by events): a schedule has no partition to build; trigger it from Kafka or a webhook instead")
            assert isinstance(pdef, TimeWindowPartitionsDefinition)
            key = closed_partition(pdef, tick)
            if key is None:
                return SkipReason(f"no partition of {step.path} is complete at {tick.isoformat()} (partitions start {pdef.start.isoformat()})")
            return RunRequest(run_key=f"{key}@{tick.isoformat()}", partition_key=key)

        out.append(
            ScheduleDefinition(
                name=name,
                cron_schedule=sched.cron,
                execution_timezone=sched.tz or "UTC",
                job=job,
                execution_fn=run,
                default_status=DefaultScheduleStatus.RUNNING,
                description=f"{step.path}:{sched.at.line}: on schedule cron=\"{sched.cron}\"" + (f" tz={sched.tz}" if sched.tz else ""),
            )
        )
    return out
