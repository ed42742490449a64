"""partition_from= → a partition key: extraction, the safety rule, mapping onto PartitionsDefinitions."""

from __future__ import annotations

import pytest
from dagster import DailyPartitionsDefinition, DynamicPartitionsDefinition, MonthlyPartitionsDefinition

from lineage_defs.events.partition import PartitionValueError, check_safe, json_path, raw_value
from lineage_defs.triggers.keys import default_source, partition_key
from lineage_defs.parse.model import Partitioning


def test_sources() -> None:
    body = b'{"a": {"b": [1, {"c": "eu"}]}, "day": "2025-01-02", "n": 7}'
    assert raw_value("json:$.a.b[1].c", value=body) == "eu"
    assert raw_value("json:$.n", value=body) == "7"
    assert raw_value("key", value=None, key=b"k1") == "k1"
    assert raw_value("header:X-Day", value=None, headers=[("x-day", "2025-01-03")]) == "2025-01-03"
    assert raw_value("timestamp", value=None, timestamp_ms=86_400_000) == "1970-01-02T00:00:00+00:00"
    assert json_path({"a b": 1}, '$["a b"]') == 1
    for source, kw, why in [
        ("json:$.missing", {"value": body}, "nothing at"),
        ("json:$.a", {"value": body}, "not a string"),
        ("json:$.x", {"value": b"{nope"}, "not JSON"),
        ("key", {"value": None}, "no key"),
        ("header:X", {"value": None}, "no header"),
        ("timestamp", {"value": None}, "no timestamp"),
    ]:
        with pytest.raises(PartitionValueError, match=why):
            raw_value(source, **kw)


@pytest.mark.parametrize("value", ["../etc", "a/b", "a'b", 'a"b', "x\x00", "line\nbreak", "", " lead", "x" * 129, "..", "a..b", "ü", "abc\n", "abc\r", "abc\n\n"])
def test_hostile_values_are_refused(value: str) -> None:
    with pytest.raises(PartitionValueError):
        check_safe(value)


def test_keys_for_time_and_dynamic_partitions() -> None:
    daily = DailyPartitionsDefinition("2025-01-01", end_offset=1)
    assert partition_key("2025-01-02", daily) == "2025-01-02"
    assert partition_key("2025-01-02T23:59:59Z", daily) == "2025-01-02"
    assert partition_key("2025-01-02T23:30:00-02:00", daily) == "2025-01-03"  # 01:30 UTC on the 3rd
    assert partition_key("1735862400", daily) == "2025-01-03"  # epoch seconds
    assert partition_key("2025-02-10", MonthlyPartitionsDefinition("2025-01-01", end_offset=1)) == "2025-02-01"
    for bad, why in [("2024-12-31", "before the first"), ("2999-01-01", "does not exist yet"), ("soon", "neither")]:
        with pytest.raises(PartitionValueError, match=why):
            partition_key(bad, daily)
    assert partition_key("eu-west", DynamicPartitionsDefinition(name="x")) == "eu-west"
    with pytest.raises(PartitionValueError):
        partition_key("../x", DynamicPartitionsDefinition(name="x"))


def test_default_sources() -> None:
    assert default_source(None, "key") is None
    assert default_source(Partitioning("daily"), None) == "timestamp"
    assert default_source(Partitioning("dynamic", key="$.region"), None) == "json:$.region"
    assert default_source(Partitioning("daily"), "json:$.day") == "json:$.day"


@pytest.mark.parametrize(
    "value, why",
    [
        (b'{"day": ' + b"[" * 3000 + b"]" * 3000 + b"}", "nested deeper than 64"),  # once a RecursionError out of every tick
        (b"[" * 100 + b"]" * 100, "nested deeper than 64"),
        (b'{"day": NaN}', "NaN is not JSON"),
        (b'{"day": Infinity}', "Infinity is not JSON"),
        ('{"day": "2025-01-02"}'.encode("utf-16"), "not UTF-8"),
        (b'\xef\xbb\xbf{"day": "2025-01-02"}', "byte-order mark"),
    ],
)
def test_a_value_that_is_not_strict_json_gives_no_partition(value: bytes, why: str) -> None:
    with pytest.raises(PartitionValueError, match=why):
        raw_value("json:$.day", value=value)


def test_json_nested_at_the_limit_is_read() -> None:
    from lineage_defs.events.payload import depth, parse_json

    doc = parse_json(b'{"day": "2025-01-02", "x": ' + b"[" * 63 + b"]" * 63 + b"}")
    assert doc["day"] == "2025-01-02" and depth(doc, 64) == 64
    assert raw_value("json:$.day", value=b'{"day": 20250102}') == "20250102"


def test_the_kafka_partition_function_turns_any_failure_into_a_reason() -> None:
    """Whatever a message holds, the drain gets (None, reason) — never an exception that stalls the topic."""
    from lineage_defs.triggers.keys import partition_function

    of = partition_function("json:$.region", DynamicPartitionsDefinition(name="x"))
    assert of(None, b'{"region": "eu"}', [], 0) == ("eu", None)
    for value in (b"[" * 100_000, b'{"region": "abc\n"}', None, b"\x00\xff", b'{"region": {"deep": [1]}}'):
        key, reason = of(None, value, [], 0)
        assert key is None and reason and reason.startswith("partition_from=json:$.region: "), (value[:20] if value else value, reason)
