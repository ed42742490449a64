"""The batch ledger: a trigger batch written twice to any target is written once, atomically with the data."""

from __future__ import annotations

from typing import Any

import pytest

from conftest import SUBSTRATES

V1 = "SELECT * FROM (VALUES (1, 'a'), (2, 'b')) AS v(id, name)"
V2 = "SELECT * FROM (VALUES (3, 'c')) AS v(id, name)"


@pytest.mark.parametrize("substrate", SUBSTRATES)
def test_append_of_a_batch_is_written_once(write_target: Any, substrate: str) -> None:
    t = write_target(substrate)
    first = t.write("append", V1, batch="s1-1")
    assert first.rows == 2 and not first.skipped
    again = t.write("append", V1, batch="s1-1")  # a retry or re-execution of the same batch
    assert again.skipped and again.rows == 0 and "already in" in again.warnings[0]
    t.write("append", V2, batch="s1-3")
    t.write("append", V2)  # a write without a batch (a manual run) appends as before…
    assert t.rows() == [(1, "a"), (2, "b"), (3, "c"), (3, "c")]
    assert t.write("append", V1, batch="s1-1").skipped  # …and keeps the ledger


@pytest.mark.parametrize("substrate", ["ducklake", "parquet"])
def test_a_failed_write_records_no_batch(write_target: Any, substrate: str) -> None:
    t = write_target(substrate)
    t.write("append", V1, batch="s2-1")

    def refuse(conn: Any) -> None:
        raise RuntimeError("audit failed")

    with pytest.raises(RuntimeError):
        t.write("append", V2, audit=refuse, batch="s2-2")
    assert t.rows() == [(1, "a"), (2, "b")]
    assert not t.write("append", V2, batch="s2-2").skipped  # rolled back together: the batch can still land
    assert t.rows() == [(1, "a"), (2, "b"), (3, "c")]


def test_batch_ids_are_checked(write_target: Any) -> None:
    from lineage_defs.errors import RunError

    t = write_target("duckdb")
    with pytest.raises(RunError, match="not a lineage batch id"):
        t.write("append", V1, batch="x'; DROP TABLE t; --")
