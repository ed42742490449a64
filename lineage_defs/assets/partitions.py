"""`partitioned ...` → Dagster PartitionsDefinition, and dep partition mappings. Pure."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable

from dagster import (
    AllPartitionMapping,
    DailyPartitionsDefinition,
    DynamicPartitionsDefinition,
    HourlyPartitionsDefinition,
    MonthlyPartitionsDefinition,
    PartitionMapping,
    PartitionsDefinition,
    TimeWindowPartitionMapping,
    TimeWindowPartitionsDefinition,
    WeeklyPartitionsDefinition,
)

from lineage_defs.parse.model import PartitionKind, Partitioning

# Without start=, partitions begin here: old enough for typical history, small enough to list fast.
DEFAULT_START = "2024-01-01"

_TIME: dict[PartitionKind, Callable[..., TimeWindowPartitionsDefinition]] = {
    PartitionKind.HOURLY: HourlyPartitionsDefinition,
    PartitionKind.DAILY: DailyPartitionsDefinition,
    PartitionKind.WEEKLY: WeeklyPartitionsDefinition,
    PartitionKind.MONTHLY: MonthlyPartitionsDefinition,
}


def partitions_def(p: Partitioning | None, dynamic_name: str, live: bool = False) -> PartitionsDefinition | None:
    """>>> partitions_def(Partitioning(PartitionKind.DAILY, start="2024-05-01"), "x").start.date().isoformat()
    '2024-05-01'

    ``live``: the step is fed by events (Kafka, webhooks), so the partition in
    progress exists too (``end_offset=1``): today's events build today.
    """
    if p is None:
        return None
    if p.kind == PartitionKind.DYNAMIC:
        return DynamicPartitionsDefinition(name=dynamic_name)
    start = dt.datetime.fromisoformat(p.start or DEFAULT_START)
    return _TIME[p.kind](start_date=start, timezone=p.tz, fmt=p.format, end_offset=1 if live else 0)


# Mappings are immutable: one of each serves every dependency (thousands per load).
_TIME_TO_TIME = TimeWindowPartitionMapping()
_ALL = AllPartitionMapping()


def partition_mapping(upstream: PartitionsDefinition | None, downstream: PartitionsDefinition | None) -> PartitionMapping | None:
    """The mapping for an upstream→downstream edge; None where Dagster's default is right.

    Time to time (daily feeding monthly, hourly feeding daily): the overlapping
    windows. Unpartitioned on either side: Dagster's default (all partitions).
    Two different non-time definitions: every upstream partition feeds each
    downstream one.
    """
    if upstream is None or downstream is None:
        return None
    if isinstance(upstream, TimeWindowPartitionsDefinition) and isinstance(downstream, TimeWindowPartitionsDefinition):
        return _TIME_TO_TIME
    if upstream == downstream:
        return None
    return _ALL
