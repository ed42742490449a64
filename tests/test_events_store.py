"""The event store: each event once, batches cut once, the same batch read back the same."""

from __future__ import annotations

from pathlib import Path

from lineage_defs.events.store import EventStore, NewEvent


def msg(p: int, o: int, pkey: str | None = None, error: str | None = None) -> NewEvent:
    return NewEvent(f"{p}:{o}", f'{{"o": {o}}}'.encode(), b"k", [("h", "v")], 1000 + o, "t", p, o, pkey, error)


def test_messages_are_stored_once_and_positions_advance(tmp_path: Path) -> None:
    with EventStore(tmp_path / "e.sqlite") as s:
        assert s.add_messages("kafka:a:t", [msg(0, o) for o in range(5)] + [msg(1, 0)]) == 6
        assert s.add_messages("kafka:a:t", [msg(0, o) for o in range(3, 8)]) == 3  # 3 and 4 again: ignored
        assert s.positions("kafka:a:t") == {0: 8, 1: 1}
        assert s.add_messages("kafka:b:t", [msg(0, 0)]) == 1  # another stream keeps its own copy
        assert s.counts("kafka:a:t") == {"events": 9, "batched": 0, "rejected": 0}


def test_batches_are_cut_once_per_partition_key_and_read_back_identically(tmp_path: Path) -> None:
    path = tmp_path / "e.sqlite"
    with EventStore(path) as s:
        s.add_messages("k", [msg(0, o, "2025-01-0" + str(1 + o % 2)) for o in range(7)] + [msg(0, 7, None, "bad partition")])
        batches = s.cut_batches("k", max_batch=2)
        assert sorted((b.partition_key, b.size) for b in batches) == [("2025-01-01", 2), ("2025-01-01", 2), ("2025-01-02", 1), ("2025-01-02", 2)]
        assert s.cut_batches("k", max_batch=2) == []  # nothing new: nothing cut again
        first = batches[0]
        events = s.events(first.id)
        assert [e.offset for e in events] == [0, 2]
        assert events[0].as_dict() == {"key": "k", "value": '{"o": 0}', "headers": {"h": "v"}, "timestamp": 1000, "topic": "t", "partition": 0, "offset": 0}
        assert s.rejected("k") == (1, ["bad partition"])
        assert [b.id for b in s.open_batches("k")] == [b.id for b in batches]
        s.mark_requested([first.id])
        assert first.id not in [b.id for b in s.open_batches("k")]
    with EventStore(path) as again:  # another connection (another process) sees the same batch
        assert again.events(first.id) == events
        assert again.store_id == first.id.split("-")[0]


def test_idempotency_keys_answer_the_first_id_and_store_nothing(tmp_path: Path) -> None:
    with EventStore(tmp_path / "e.sqlite") as s:
        (a,), (b,) = s.add("webhook:h", [NewEvent("key:1", b"{}")]), s.add("webhook:h", [NewEvent("key:1", b'{"x": 2}')])
        assert a == (a[0], False) and b == (a[0], True)
        mixed = s.add_many([("webhook:h", NewEvent("key:2", b"{}")), ("webhook:h", NewEvent("key:2", b"{}")), ("webhook:g", NewEvent("key:2", b"{}"))])
        assert [d for _, d in mixed] == [False, True, False]
        assert s.counts("webhook:h")["events"] == 2


def test_old_batches_are_pruned_with_their_events(tmp_path: Path) -> None:
    with EventStore(tmp_path / "e.sqlite") as s:
        s.add_messages("k", [msg(0, o) for o in range(4)])
        (b,) = s.cut_batches("k", max_batch=10)
        assert s.old_batches("k", created_before=10**12) == []  # no run known yet: never pruned
        s.mark_requested([b.id])
        assert s.old_batches("k", created_before=0) == []  # not old enough
        assert s.old_batches("k", created_before=10**12) == [b.id]
        assert s.prune([b.id]) == 4
        assert s.events(b.id) == [] and s.batch(b.id) is None
        assert s.add_messages("k", [msg(0, 1)]) == 1 and s.positions("k") == {0: 4}  # the position stays
