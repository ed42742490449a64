"""An event's raw partition value → a partition key of the step's PartitionsDefinition.

Time partitions take a key in the definition's own format (``2025-01-02``)
or any instant (ISO 8601, epoch seconds or milliseconds: ``partition_from=timestamp``
gives one) and map it to the partition holding it. Dynamic partitions take
the value itself, once it passed ``check_safe``. Anything else is refused
with the reason, which the sensor or receiver reports.
"""

from __future__ import annotations

from collections.abc import Callable

from dagster import DynamicPartitionsDefinition, PartitionsDefinition, TimeWindowPartitionsDefinition

from lineage_defs.events.partition import PartitionValueError, check_safe, parse_instant, raw_value
from lineage_defs.parse.model import PartitionKind, Partitioning


def default_source(partitioning: Partitioning | None, given: str | None) -> str | None:
    """``partition_from=`` as written, else what the step's partitioning implies (None: the step takes none)."""
    if partitioning is None:
        return None
    if given:
        return given
    if partitioning.kind == PartitionKind.DYNAMIC:
        return f"json:{partitioning.key}" if partitioning.key else None
    return "timestamp"


def partition_key(raw: str, pdef: PartitionsDefinition | None) -> str:
    """The partition key for ``raw``; PartitionValueError saying why there is none."""
    if pdef is None:
        raise PartitionValueError("the step is not partitioned")
    if isinstance(pdef, DynamicPartitionsDefinition):
        return check_safe(raw)
    if isinstance(pdef, TimeWindowPartitionsDefinition):
        if pdef.has_partition_key(raw):
            return raw
        instant = parse_instant(raw)
        if instant is None:
            raise PartitionValueError(f"{raw[:40]!r} is neither a partition key like {pdef.get_first_partition_key()!r} nor a timestamp")
        if instant < pdef.start:
            raise PartitionValueError(f"{raw[:40]!r} is before the first partition ({pdef.get_first_partition_key()})")
        key = pdef.get_partition_key_for_timestamp(instant.timestamp())
        if not pdef.has_partition_key(key):
            raise PartitionValueError(f"{raw[:40]!r} falls in partition {key}, which does not exist yet")
        return key
    raise PartitionValueError(f"partitions of type {type(pdef).__name__} cannot come from events")


# (key, value, headers, timestamp_ms) -> (partition key, error): what a pull source's reader calls per message
PartitionOf = Callable[[bytes | None, bytes | None, list[tuple[str, str | None]], int | None], tuple[str | None, str | None]]


def partition_function(source: str | None, pdef: PartitionsDefinition | None) -> PartitionOf | None:
    """(key, value, headers, ts) → (partition key, error) for a reader; None when the step takes no partition."""
    if source is None or pdef is None:
        return None

    def of(key: bytes | None, value: bytes | None, headers: list[tuple[str, str | None]], ts: int | None) -> tuple[str | None, str | None]:
        try:
            return partition_key(raw_value(source, value=value, key=key, headers=headers, timestamp_ms=ts), pdef), None
        except PartitionValueError as e:
            return None, f"partition_from={source}: {e}"
        except Exception as e:  # noqa: BLE001 - whatever a message holds, it is rejected with a reason, never stalls the source
            return None, f"partition_from={source}: cannot read a partition value ({type(e).__name__}: {str(e)[:200]})"

    return of
