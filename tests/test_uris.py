"""Asset URIs ↔ asset keys: one-to-one, and templated object keys readable in the asset graph."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from lineage_defs.uris import KEY_PARTITION_TOKEN, PARTITION_TOKEN, UriError, key_path, normalize, parse

import pytest


def unfold(parts: tuple[str, ...]) -> str:
    """The inverse the key spelling promises: each PARTITION (after the first path part:
    PARTITION-<the key part before>) is the token again."""
    kind, authority, *rest = parts
    path, prev = [], None
    for part in rest:
        spelled = KEY_PARTITION_TOKEN if prev is None else f"{KEY_PARTITION_TOKEN}-{prev}"
        assert KEY_PARTITION_TOKEN not in part.replace(spelled, ""), (prev, part)  # never a bare one
        path.append(part.replace(spelled, PARTITION_TOKEN))
        prev = part
    bucket = "" if authority == "_default" else authority.replace(KEY_PARTITION_TOKEN, PARTITION_TOKEN)
    return f"{kind}://{bucket}/{'/'.join(path)}"


def test_templated_objects_end_in_a_readable_distinct_part() -> None:
    orders, events = key_path("s3:///raw/orders/{partition}.csv"), key_path("s3:///raw/events/{partition}.csv")
    # the graph's label (the last part): the partition placeholder and the folder, within Dagster's
    # [A-Za-z0-9_.-], told apart by their ends (the UI shortens long names in the middle)
    assert orders[-1] == "PARTITION-orders.csv" and events[-1] == "PARTITION-events.csv"
    assert key_path("s3:///{partition}.parquet") == ("s3", "_default", "PARTITION.parquet")
    assert key_path("ducklake://main/orders") == ("ducklake", "main", "orders")


def test_the_key_spelling_of_the_token_is_reserved() -> None:
    """A URI holding PARTITION itself would share a key with a templated one (raw/orders/PARTITION-orders.csv)."""
    with pytest.raises(UriError, match="'PARTITION' .upper case. is reserved") as e:
        parse("s3:///raw/orders/PARTITION-orders.csv")
    assert e.value.fix and "{partition}" in e.value.fix
    assert key_path("s3:///raw/orders/partition-orders.csv")[-1] == "partition-orders.csv"  # lower case is a name like any


segment = st.text(alphabet="ab.-_P", min_size=1, max_size=4).filter(lambda s: s not in (".", "..")) | st.just(PARTITION_TOKEN) | st.builds(
    lambda a, b: a + PARTITION_TOKEN + b, st.text(alphabet="ab.", max_size=2), st.text(alphabet="ab.", max_size=2)
)


@given(st.lists(segment, min_size=1, max_size=4), st.sampled_from(["", "bucket"]))
def test_keys_are_one_to_one(path: list[str], bucket: str) -> None:
    uri = f"s3://{bucket}/{'/'.join(path)}"
    try:
        normalized = normalize(uri)
    except UriError:
        return
    assert unfold(key_path(uri)) == normalized


@pytest.mark.parametrize("uri", ["s3:///raw/../etc/passwd", "s3:///./x.csv", "datatable://crm/../t"])
def test_dot_segments_are_refused(uri: str) -> None:
    with pytest.raises(UriError, match="path segment"):
        parse(uri)
