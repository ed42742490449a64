"""`partitioned ...` → PartitionsDefinition and dep partition mappings (pure), then resolved through Dagster's asset graph."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest
from dagster import (
    AllPartitionMapping,
    AssetKey,
    DailyPartitionsDefinition,
    DynamicPartitionsDefinition,
    HourlyPartitionsDefinition,
    MonthlyPartitionsDefinition,
    StaticPartitionsDefinition,
    TimeWindowPartitionMapping,
    WeeklyPartitionsDefinition,
)

from lineage_defs import LineageSettings, build_definitions
from lineage_defs.assets.partitions import DEFAULT_START, partition_mapping, partitions_def
from lineage_defs.parse.model import Partitioning


# -- partitions_def --------------------------------------------------------------------
def test_none_is_unpartitioned() -> None:
    assert partitions_def(None, "x") is None


def test_daily_with_timezone_format_and_start() -> None:
    d = partitions_def(Partitioning("daily", tz="Europe/Berlin", format="%Y%m%d", start="2025-03-01"), "x")
    assert isinstance(d, DailyPartitionsDefinition)
    assert d.timezone == "Europe/Berlin"
    assert d.fmt == "%Y%m%d"
    assert d.start.isoformat() == "2025-03-01T00:00:00+01:00"  # midnight in Berlin, not in UTC
    assert d.get_first_partition_key() == "20250301"
    w = d.time_window_for_partition_key("20250330")  # the spring DST switch: a 23-hour day
    assert w.end.timestamp() - w.start.timestamp() == 23 * 3600


def test_hourly_follows_the_timezone_through_dst() -> None:
    h = partitions_def(Partitioning("hourly", tz="America/New_York", start="2025-03-09"), "x")
    assert isinstance(h, HourlyPartitionsDefinition)
    assert h.timezone == "America/New_York"
    assert h.fmt == "%Y-%m-%d-%H:%M"
    keys = h.get_partition_keys_in_range(h.get_partition_key_range_for_time_window(h.time_window_for_partition_key("2025-03-09-00:00")))
    assert keys == ["2025-03-09-00:00"]
    first = [h.get_next_partition_key(k) for k in ("2025-03-09-00:00", "2025-03-09-01:00")]
    assert first == ["2025-03-09-01:00", "2025-03-09-03:00"]  # 02:00 does not exist that night


def test_weekly_partitions_are_whole_weeks_from_start() -> None:
    w = partitions_def(Partitioning("weekly", start="2025-01-01"), "x")
    assert isinstance(w, WeeklyPartitionsDefinition)
    assert w.timezone == "UTC"
    first = dt.date.fromisoformat(w.get_first_partition_key())
    assert first >= dt.date(2025, 1, 1)
    window = w.time_window_for_partition_key(first.isoformat())
    assert window.end - window.start == dt.timedelta(days=7)


def test_monthly_with_format() -> None:
    m = partitions_def(Partitioning("monthly", start="2025-01-01", format="%Y-%m"), "x")
    assert isinstance(m, MonthlyPartitionsDefinition)
    assert m.get_first_partition_key() == "2025-01"
    window = m.time_window_for_partition_key("2025-02")
    assert (window.start.date(), window.end.date()) == (dt.date(2025, 2, 1), dt.date(2025, 3, 1))


def test_without_start_partitions_begin_at_the_default() -> None:
    d = partitions_def(Partitioning("daily"), "x")
    assert d is not None and d.start.date().isoformat() == DEFAULT_START
    assert d.timezone == "UTC" and d.fmt == "%Y-%m-%d"


def test_dynamic_is_named_after_the_step() -> None:
    d = partitions_def(Partitioning("dynamic", key="$.order.day"), "shop__orders")
    assert isinstance(d, DynamicPartitionsDefinition)
    assert d.name == "shop__orders"


# -- partition_mapping -----------------------------------------------------------------
DAILY = DailyPartitionsDefinition(start_date="2025-01-01")
HOURLY = HourlyPartitionsDefinition(start_date="2025-01-01-00:00")
MONTHLY = MonthlyPartitionsDefinition(start_date="2025-01-01")
DYN_A = DynamicPartitionsDefinition(name="a")
DYN_B = DynamicPartitionsDefinition(name="b")


@pytest.mark.parametrize(
    ("upstream", "downstream", "expected"),
    [
        (None, DAILY, None),  # Dagster's default: the whole unpartitioned upstream
        (DAILY, None, None),  # Dagster's default: every upstream partition
        (None, None, None),
        (DAILY, MONTHLY, TimeWindowPartitionMapping),
        (HOURLY, DAILY, TimeWindowPartitionMapping),
        (DAILY, DAILY, TimeWindowPartitionMapping),
        (MONTHLY, DAILY, TimeWindowPartitionMapping),
        (DYN_A, DYN_A, None),  # same definition: identity is Dagster's default
        (DYN_A, DYN_B, AllPartitionMapping),
        (DAILY, DYN_A, AllPartitionMapping),
        (DYN_A, DAILY, AllPartitionMapping),
        (StaticPartitionsDefinition(["x"]), DYN_A, AllPartitionMapping),
    ],
)
def test_partition_mapping(upstream: object, downstream: object, expected: type | None) -> None:
    got = partition_mapping(upstream, downstream)  # type: ignore[arg-type]
    if expected is None:
        assert got is None
    else:
        assert type(got) is expected
    if isinstance(got, TimeWindowPartitionMapping):  # plain overlap, no offsets
        assert (got.start_offset, got.end_offset) == (0, 0)


# -- through the asset graph -----------------------------------------------------------
def _key(name: str) -> AssetKey:
    return AssetKey(["ducklake", "main", name])


@pytest.fixture(scope="module")
def graph_defs(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    """ref (unpartitioned) → day_t (daily) → month_t (monthly); day_t → total_t (unpartitioned)."""
    root = tmp_path_factory.mktemp("partitions") / "pipelines"
    p = root / "p"
    p.mkdir(parents=True)
    (p / "ref.sql").write_text("-- pipeline\n-- materialize ducklake://main/ref\nSELECT 1 AS id\n")
    (p / "day.sql").write_text(
        "-- pipeline\n-- partitioned daily start=2025-01-01\n-- materialize ducklake://main/day_t\nSELECT id FROM lake.main.ref\n"
    )
    (p / "month.sql").write_text(
        "-- pipeline\n-- partitioned monthly start=2025-01-01\n-- materialize ducklake://main/month_t\nSELECT id FROM lake.main.day_t\n"
    )
    (p / "total.sql").write_text("-- pipeline\n-- materialize ducklake://main/total_t\nSELECT count(*) AS n FROM lake.main.day_t\n")
    state = root.parent / "state"
    return build_definitions(root, settings=LineageSettings(state_dir=str(state)))


def test_daily_feeding_monthly_resolves_to_that_months_days(graph_defs) -> None:  # type: ignore[no-untyped-def]
    graph = graph_defs.resolve_asset_graph()
    assert isinstance(graph.get_partition_mapping(_key("month_t"), _key("day_t")), TimeWindowPartitionMapping)

    result = graph.get_parent_partition_keys_for_child("2025-02-01", _key("day_t"), _key("month_t"))
    assert list(result.partitions_subset.get_partition_keys()) == [f"2025-02-{d:02d}" for d in range(1, 29)]
    assert not list(result.required_but_nonexistent_subset.get_partition_keys())

    # and back: any day of February feeds exactly February
    assert list(graph.get_child_partition_keys_of_parent("2025-02-14", _key("day_t"), _key("month_t"))) == ["2025-02-01"]


def test_unpartitioned_feeding_partitioned_needs_the_whole_upstream(graph_defs) -> None:  # type: ignore[no-untyped-def]
    graph = graph_defs.resolve_asset_graph()
    assert _key("ref") not in graph.get(_key("day_t")).partition_mappings  # left to Dagster's default...
    assert isinstance(graph.get_partition_mapping(_key("day_t"), _key("ref")), AllPartitionMapping)  # ...which is all of it
    parents = graph.get_parents_partitions(_key("day_t"), "2025-02-14")
    # the whole unpartitioned asset (no partition key)
    assert {(p.asset_key, p.partition_key) for p in parents.parent_partitions} == {(_key("ref"), None)}
    assert not parents.required_but_nonexistent_parents_partitions


def test_partitioned_feeding_unpartitioned_needs_every_partition(graph_defs) -> None:  # type: ignore[no-untyped-def]
    graph = graph_defs.resolve_asset_graph()
    day_def = graph.get(_key("day_t")).partitions_def
    assert isinstance(graph.get_partition_mapping(_key("total_t"), _key("day_t")), AllPartitionMapping)
    result = graph.get_parent_partition_keys_for_child(None, _key("day_t"), _key("total_t"))
    keys = list(result.partitions_subset.get_partition_keys())
    assert keys[0] == "2025-01-01"
    assert keys == list(day_def.get_partition_keys())
