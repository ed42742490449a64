"""Asset URIs ↔ asset keys: one-to-one, and templated object keys readable in the asset graph."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from lineage_defs.uris import KEY_PARTITION_TOKEN, PARTITION_TOKEN, UriError, key_path, normalize, parse

import pytest


def unfold(parts: tuple[str, ...]) -> str:
    """The inverse the key spelling promises: each PARTITION-<the key part before> is the token again."""
    kind, *rest = parts
    decoded = [part.replace(f"{KEY_PARTITION_TOKEN}-{prev}", PARTITION_TOKEN) for prev, part in zip(parts, rest)]
    bucket, *path = decoded
    return f"{kind}://{'' if bucket == '_default' else bucket}/{'/'.join(path)}"


def test_templated_objects_end_in_a_readable_distinct_part() -> None:
    orders, events = key_path("s3:///raw/orders/{partition}.csv"), key_path("s3:///raw/events/{partition}.csv")
    # the graph's label (the last part): the partition placeholder and the folder, within Dagster's
    # [A-Za-z0-9_.-], told apart by their ends (the UI shortens long names in the middle)
    assert orders[-1] == "PARTITION-orders.csv" and events[-1] == "PARTITION-events.csv"
    assert key_path("s3:///{partition}.parquet") == ("s3", "_default", "PARTITION-_default.parquet")
    assert key_path("ducklake://main/orders") == ("ducklake", "main", "orders")


def test_only_the_exact_key_spelling_of_the_token_is_reserved() -> None:
    """A URI holding PARTITION-<the part before> itself would share a key with a templated one; any other
    name with PARTITION in it (a table PARTITION_LOG, an object REPARTITIONED.csv) is a name like any."""
    with pytest.raises(UriError, match="'PARTITION-orders' is reserved") as e:
        parse("s3:///raw/orders/PARTITION-orders.csv")
    assert e.value.fix and "{partition}" in e.value.fix
    with pytest.raises(UriError, match="'PARTITION-_default' is reserved"):
        parse("s3:///PARTITION-_default.csv")
    assert key_path("ducklake:///PARTITION_LOG") == ("ducklake", "main", "PARTITION_LOG")
    assert key_path("s3:///raw/PARTITION/REPARTITIONED.csv")[-2:] == ("PARTITION", "REPARTITIONED.csv")
    assert key_path("s3:///raw/orders/PARTITION-events.csv")[-1] == "PARTITION-events.csv"  # not the part before


segment = (
    st.text(alphabet="ab.-_P", min_size=1, max_size=4).filter(lambda s: s not in (".", ".."))
    | st.just(PARTITION_TOKEN)
    | st.builds(lambda a, b: a + PARTITION_TOKEN + b, st.text(alphabet="ab.", max_size=2), st.text(alphabet="ab.", max_size=2))
    # the key spelling itself, after parts the strategy can draw (a, b, _default, bucket)
    | st.builds(lambda prev, tail: f"{KEY_PARTITION_TOKEN}-{prev}{tail}", st.sampled_from(["a", "b", "_default", "bucket", ""]), st.sampled_from(["", ".csv", PARTITION_TOKEN]))
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
