"""The event store: each event once, batches cut once, the same batch read back the same.

Every test of the interface runs against both backends: the SQLite file and a
fresh database on the suite's PostgreSQL (``LINEAGE_EVENTS_DSN``).
"""

from __future__ import annotations

import threading
import uuid
from pathlib import Path
from typing import Any

import pytest

from lineage_defs.events.store import BatchStatus, EventStore, NewEvent, is_dsn


@pytest.fixture(params=["sqlite", "postgresql"])
def where(request: Any, tmp_path: Path) -> Any:
    """Where a store lives: a SQLite file, or the DSN of an empty PostgreSQL database of its own."""
    if request.param == "sqlite":
        return tmp_path / "e.sqlite"
    import psycopg

    dsn = request.getfixturevalue("pg_dsn")
    name = f"events_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    return dsn.replace("dbname=lineage_test", f"dbname={name}")


def msg(p: int, o: int, pkey: str | None = None, error: str | None = None) -> NewEvent:
    return NewEvent(f"{p}:{o}", f'{{"o": {o}}}'.encode(), b"k", [("h", "v")], 1000 + o, "t", p, o, pkey, error)


def test_messages_are_stored_once_and_positions_advance(where: Any) -> None:
    with EventStore(where) as s:
        assert s.add_messages("kafka:a:t", [msg(0, o) for o in range(5)] + [msg(1, 0)]) == 6
        assert s.add_messages("kafka:a:t", [msg(0, o) for o in range(3, 8)]) == 3  # 3 and 4 again: ignored
        assert s.positions("kafka:a:t") == {0: 8, 1: 1}
        assert s.add_messages("kafka:b:t", [msg(0, 0)]) == 1  # another stream keeps its own copy
        assert s.counts("kafka:a:t") == {"events": 9, "batched": 0, "rejected": 0, "batches_open": 0, "batches_done": 0, "batches_failed": 0}


def test_batches_are_cut_once_per_partition_key_and_read_back_identically(where: Any) -> None:
    path = where
    with EventStore(path) as s:
        s.add_messages("k", [msg(0, o, "2025-01-0" + str(1 + o % 2)) for o in range(7)] + [msg(0, 7, None, "bad partition")])
        batches = s.cut_batches("k", max_batch=2)
        assert sorted((b.partition_key, b.size) for b in batches) == [("2025-01-01", 2), ("2025-01-01", 2), ("2025-01-02", 1), ("2025-01-02", 2)]
        assert s.cut_batches("k", max_batch=2) == []  # nothing new: nothing cut again
        first = batches[0]
        events = s.events(first.id)
        assert [e.offset for e in events] == [0, 2]
        assert events[0].as_dict() == {"key": "k", "value": '{"o": 0}', "headers": {"h": "v"}, "timestamp": 1000, "topic": "t", "partition": 0, "offset": 0}
        n, (rejected,) = s.rejected("k")
        assert (n, rejected.dedupe, rejected.reason) == (1, "0:7", "bad partition")
        assert [b.id for b in s.open_batches("k")] == [b.id for b in batches]
        s.settle(done=[first.id])
        assert first.id not in [b.id for b in s.open_batches("k")]
    with EventStore(path) as again:  # another connection (another process) sees the same batch
        assert again.events(first.id) == events
        assert again.store_id == first.id.split("-")[0]


def test_idempotency_keys_answer_the_first_id_and_store_nothing(where: Any) -> None:
    with EventStore(where) as s:
        (a,), (b,) = s.add("webhook:h", [NewEvent("key:1", b"{}")]), s.add("webhook:h", [NewEvent("key:1", b'{"x": 2}')])
        assert a == (a[0], False) and b == (a[0], True)
        mixed = s.add_many([("webhook:h", NewEvent("key:2", b"{}")), ("webhook:h", NewEvent("key:2", b"{}")), ("webhook:g", NewEvent("key:2", b"{}"))])
        assert [d for _, d in mixed] == [False, True, False]
        assert s.counts("webhook:h")["events"] == 2


def test_old_batches_are_pruned_with_their_events(where: Any) -> None:
    with EventStore(where) as s:
        s.add_messages("k", [msg(0, o) for o in range(4)])
        (b,) = s.cut_batches("k", max_batch=10)
        assert s.old_batches("k", created_before=10**12) == []  # no run succeeded yet: never pruned
        assert s.prune([b.id]) == 0 and s.batch(b.id) is not None  # not even when asked to
        s.settle(done=[b.id])
        assert s.old_batches("k", created_before=0) == []  # not old enough
        assert s.old_batches("k", created_before=10**12) == [b.id]
        assert s.prune([b.id]) == 4
        assert s.events(b.id) == [] and s.batch(b.id) is None
        assert s.add_messages("k", [msg(0, 1)]) == 1 and s.positions("k") == {0: 4}  # the position stays


def test_a_batch_stays_open_until_settled_and_a_failed_one_can_be_replayed(where: Any) -> None:
    with EventStore(where) as s:
        s.add_messages("k", [msg(0, o) for o in range(6)])
        a, b, c = s.cut_batches("k", max_batch=2)
        s.settle(done=[a.id], failed={b.id: "3 runs failed"})
        assert [x.id for x in s.open_batches("k")] == [c.id]
        failed = s.batch(b.id)
        assert failed is not None and (failed.status, failed.reason, failed.replay) == (BatchStatus.FAILED, "3 runs failed", 0)
        assert [x.id for x in s.batches("k", BatchStatus.FAILED)] == [b.id]
        again = s.replay(b.id)
        assert again is not None and (again.status, again.reason, again.replay) == (BatchStatus.OPEN, None, 1)
        assert s.replay(a.id).status is BatchStatus.DONE  # type: ignore[union-attr]  # a done batch stays done
        assert s.replay("nope") is None
        assert s.counts("k")["batches_open"] == 2 and s.counts("k")["batches_done"] == 1
        s.settle(failed={a.id: "late"})  # a done batch never fails afterwards
        assert s.batch(a.id).status is BatchStatus.DONE  # type: ignore[union-attr]


def test_the_store_file_is_private_and_an_old_store_is_migrated(tmp_path: Path) -> None:
    import sqlite3
    import stat

    path = tmp_path / "events" / "e.sqlite"
    path.parent.mkdir()
    old = sqlite3.connect(path)  # a store as the previous version made it: `requested` instead of a status
    old.executescript(
        "CREATE TABLE batches (id TEXT PRIMARY KEY, stream TEXT NOT NULL, partition_key TEXT, n INTEGER NOT NULL, created REAL NOT NULL, requested INTEGER NOT NULL DEFAULT 0);"
        "INSERT INTO batches VALUES ('x-1', 'k', NULL, 3, 1.0, 1);"
    )
    old.commit()
    old.close()
    with EventStore(path) as s:
        (b,) = s.open_batches("k")  # "had a run" is not "succeeded": open until the sensor settles it
        assert (b.id, b.status, b.size) == ("x-1", BatchStatus.OPEN, 3)
    fresh = tmp_path / "new" / "events.sqlite"
    with EventStore(fresh) as s:
        s.add("w", [NewEvent("1", b"{}")])
    for f in fresh.parent.iterdir():
        assert stat.S_IMODE(f.stat().st_mode) == 0o600, f
    assert stat.S_IMODE(fresh.parent.stat().st_mode) == 0o700


def test_concurrent_writers_and_cutters_lose_nothing_and_batch_nothing_twice(where: Any) -> None:
    """Four writers (webhook posts with repeated keys, Kafka messages) and two cutters at once, each on its own connection."""
    stop = threading.Event()
    cut: list[Any] = []
    errors: list[BaseException] = []

    def post(w: int) -> None:
        try:
            with EventStore(where) as s:
                for i in range(60):
                    s.add("hook", [NewEvent(f"key:{(w * 60 + i) // 2}", b"{}")])  # every key posted twice, by turns
        except BaseException as e:  # noqa: BLE001 - reported by the assertion below
            errors.append(e)

    def consume(p: int) -> None:
        try:
            with EventStore(where) as s:
                for o in range(0, 60, 10):
                    s.add_messages("hook", [msg(p, x) for x in range(o, o + 10)])
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    def cutter() -> None:
        try:
            with EventStore(where) as s:
                while not stop.is_set():
                    cut.extend(s.cut_batches("hook", max_batch=7))
                cut.extend(s.cut_batches("hook", max_batch=7))
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    writers = [threading.Thread(target=post, args=(w,)) for w in range(2)] + [threading.Thread(target=consume, args=(p,)) for p in range(2)]
    cutters = [threading.Thread(target=cutter) for _ in range(2)]
    for t in writers + cutters:
        t.start()
    for t in writers:
        t.join(120)
    stop.set()
    for t in cutters:
        t.join(120)
    assert errors == []
    with EventStore(where) as s:
        cut.extend(s.cut_batches("hook", max_batch=7))
        assert s.counts("hook")["events"] == 60 + 120  # 60 distinct keys, 120 distinct messages
        seen = [e for b in cut for e in s.events(b.id)]
        assert sum(b.size for b in cut) == len(seen) == 180  # every event in exactly one batch, sizes exact
        assert len({(e.partition, e.offset) for e in seen if e.offset is not None}) == 120
        assert len({b.id for b in cut}) == len(cut)


def test_a_dsn_is_told_from_a_file() -> None:
    assert is_dsn("host=db dbname=events user=lineage") and is_dsn("postgresql://u@db/events") and is_dsn("postgres://db/e")
    assert not is_dsn("/data/events.sqlite") and not is_dsn(Path("host=x")) and not is_dsn("events.sqlite")
