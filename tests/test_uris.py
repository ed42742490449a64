"""Asset URIs ↔ asset keys: one-to-one, and templated object keys readable in the asset graph."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from lineage_defs.uris import KEY_JOIN, KEY_PARTITION_TOKEN, PARTITION_TOKEN, UriError, key_path, normalize, parse

import pytest


def unfold(parts: tuple[str, ...]) -> str:
    """The inverse the key spelling promises (a part with the token carries one prefix: the part before it)."""
    kind, authority, *rest = parts
    prev, path = authority, []
    for part in rest:
        if KEY_PARTITION_TOKEN in part:
            assert part.startswith(prev + KEY_JOIN), (prev, part)
            part = part[len(prev) + 1 :]
        path.append(part)
        prev = part
    text = "/".join(p.replace(KEY_PARTITION_TOKEN, PARTITION_TOKEN) for p in path)
    return f"{kind}://{'' if authority == '_default' else authority.replace(KEY_PARTITION_TOKEN, PARTITION_TOKEN)}/{text}"


def test_templated_objects_end_in_a_readable_distinct_part() -> None:
    orders, events = key_path("s3:///raw/orders/{partition}.csv"), key_path("s3:///raw/events/{partition}.csv")
    # the graph's label (the last part) reads like orders/{partition}.csv, within Dagster's [A-Za-z0-9_.-]
    assert orders[-1] == "orders-PARTITION.csv" and events[-1] == "events-PARTITION.csv"
    assert key_path("ducklake://main/orders") == ("ducklake", "main", "orders")


def test_the_key_spelling_of_the_token_is_reserved() -> None:
    """A URI holding PARTITION itself would share a key with a templated one (raw/orders/orders-PARTITION.csv)."""
    with pytest.raises(UriError, match="'PARTITION' .upper case. is reserved") as e:
        parse("s3:///raw/orders/orders-PARTITION.csv")
    assert e.value.fix and "{partition}" in e.value.fix
    assert key_path("s3:///raw/orders/orders-partition.csv")[-1] == "orders-partition.csv"  # lower case is a name like any


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
