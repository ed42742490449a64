"""compile_statement: partition values bound, never spliced; paths checked; nothing passes unbound."""

from __future__ import annotations

import pytest

from lineage_defs.errors import RunError
from lineage_defs.run.compile import compile_statement
from lineage_defs.run.context import PartitionWindow


def test_token_in_a_string_becomes_a_bound_parameter() -> None:
    c = compile_statement("SELECT '{partition}' AS p, 'day {partition}' AS label", "duckdb", PartitionWindow("O'Brien"))
    assert "O'Brien" not in c.sql and "{partition}" not in c.sql
    assert c.params["partition"] == "O'Brien"
    assert "day O'Brien" in c.params.values()


@pytest.mark.parametrize("key", ["..", ".", "../../etc/passwd", "/etc/passwd", "a\\b", "x\x00y", ""])
def test_a_local_path_gets_the_object_path_rule(key: str) -> None:
    with pytest.raises(RunError, match="cannot be used in a path"):
        compile_statement("SELECT * FROM read_csv('/data/in/{partition}.csv')", "duckdb", PartitionWindow(key))


def test_a_safe_key_in_a_local_path_is_bound() -> None:
    c = compile_statement("SELECT * FROM read_csv('/data/in/{partition}.csv')", "duckdb", PartitionWindow("2025-01-02"))
    assert "/data/in/2025-01-02.csv" in c.params.values() and "2025-01-02" not in c.sql


def test_an_untokenizable_statement_with_a_partition_is_an_error() -> None:
    for sql in ("SELECT '{partition}' AS p, 'open", "SELECT $partition AS p /* open"):
        with pytest.raises(RunError, match="cannot be split into SQL tokens") as e:
            compile_statement(sql, "duckdb", PartitionWindow("2025-01-02"))
        assert e.value.fix and "close every string" in e.value.fix
    # without a partition to bind, the engine reports the syntax error itself
    assert compile_statement("SELECT 'open", "duckdb", None).sql == "SELECT 'open"


def test_the_token_outside_a_string_literal_is_an_error() -> None:
    with pytest.raises(RunError, match="only inside a string literal"):
        compile_statement('SELECT 1 AS "{partition}"', "duckdb", PartitionWindow("2025-01-02"))
