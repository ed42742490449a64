"""Declared column lineage of Python and Bash steps (``column <out> <- <uri>.<col> [copy|mod]``),
checked at run time: a step that writes every declared column materializes with the edges in
``dagster/column_lineage``; one that lacks a declared output column (or declares an input column
the input does not have) fails at the ``column`` line and the target keeps its contents."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

import dagster as dg
import pytest

from lineage_defs import LineageSettings, build_definitions
from lineage_defs.run.substrates import Session

ORDERS = """
    -- pipeline
    -- materialize ducklake://main/orders
    SELECT * FROM (VALUES (1, 10.0, 'a'), (2, 5.0, 'b')) t(id, amount, customer)
"""

TOTALS = """
    # pipeline
    # on ducklake://main/orders
    # materialize ducklake://main/totals
    # column id <- ducklake://main/orders.id copy
    # column total <- ducklake://main/orders.amount
    # column total <- ducklake://main/orders.customer mod
    {extra}
    import pandas as pd
    from lineage_defs import runtime

    df = runtime.connect().execute("SELECT id, amount * 2 AS total FROM lake.main.orders ORDER BY id").df()
    runtime.write(df)
"""


def write(root: Path, rel: str, text: str) -> None:
    p = root / rel
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(textwrap.dedent(text).lstrip())


def materialize(root: Path, state: Path, instance: dg.DagsterInstance) -> dg.ExecuteInProcessResult:
    defs = build_definitions(root, settings=LineageSettings(state_dir=str(state)))
    return dg.materialize(defs.assets, instance=instance, resources=defs.resources, raise_on_error=False)


def failure(r: dg.ExecuteInProcessResult) -> str:
    return str(next(e for e in r.all_events if e.event_type_value == "STEP_FAILURE").event_specific_data.error)


def rows(state: Path, sql: str) -> list[tuple[Any, ...]]:
    with Session(LineageSettings(state_dir=str(state))) as s:
        return s.conn.execute(sql).fetchall()


@pytest.fixture
def instance() -> Any:
    with dg.instance_for_test() as inst:
        yield inst


def test_declared_columns_become_column_lineage_and_a_missing_one_fails_at_its_line(tmp_path: Path, instance: Any) -> None:
    root, state = tmp_path / "p", tmp_path / "s"
    write(root, "x/orders.sql", ORDERS)
    write(root, "x/totals.py", TOTALS.format(extra="#"))
    r = materialize(root, state, instance)
    assert r.success
    mats = {tuple(e.asset_key.path): e.event_specific_data.materialization for e in r.all_events if e.event_type_value == "ASSET_MATERIALIZATION"}
    meta = mats[("ducklake", "main", "totals")].metadata
    deps = meta["dagster/column_lineage"].column_lineage.deps_by_column
    orders = dg.AssetKey(["ducklake", "main", "orders"])
    assert {c: sorted((d.asset_key, d.column_name) for d in ds) for c, ds in deps.items()} == {
        "id": [(orders, "id")],
        "total": [(orders, "amount"), (orders, "customer")],  # two lines, one output column
    }
    table = meta["lineage/column_lineage"].value  # the kinds, readable in the OSS UI
    assert "copy" in table and "mod" in table
    assert rows(state, "SELECT id, total FROM lake.main.totals ORDER BY id") == [(1, 20.0), (2, 10.0)]

    # the script now declares a column it does not write: the step fails, the write is rolled back
    write(root, "x/totals.py", TOTALS.format(extra="# column tax <- ducklake://main/orders.amount").replace("amount * 2", "amount * 3"))
    r = materialize(root, state, instance)
    assert not r.success
    error = failure(r)
    assert "x/totals.py:7:10: x/totals.py declares column 'tax' (a 'column' line) but did not write it to ducklake://main/totals; it wrote id, total" in error
    assert "    # column tax <- ducklake://main/orders.amount\n             ^^^" in error
    assert "nothing was written: the write was rolled back" in error
    assert rows(state, "SELECT id, total FROM lake.main.totals ORDER BY id") == [(1, 20.0), (2, 10.0)]  # the first run's rows


def test_declared_source_column_the_input_lacks_fails_before_writing(tmp_path: Path, instance: Any) -> None:
    root, state = tmp_path / "p", tmp_path / "s"
    write(root, "x/orders.sql", ORDERS)
    write(root, "x/totals.py", TOTALS.format(extra="# column total <- ducklake://main/orders.amount_eur"))
    r = materialize(root, state, instance)
    assert not r.success
    error = failure(r)
    assert "x/totals.py:7:19: x/totals.py declares ducklake://main/orders.amount_eur as a source of column 'total', but ducklake://main/orders has no column 'amount_eur'" in error
    assert "did you mean 'amount'?" in error
    assert rows(state, "SELECT count(*) FROM duckdb_tables() WHERE table_name = 'totals'") == [(0,)]


def test_manual_bash_step_is_checked_against_what_it_wrote(tmp_path: Path, instance: Any) -> None:
    root, state = tmp_path / "p", tmp_path / "s"
    write(root, "x/orders.sql", ORDERS)
    write(root, "x/export.sh", """
        # pipeline
        # on ducklake://main/orders
        # materialize manual s3:///exports/orders.csv
        # column order_id <- ducklake://main/orders.id copy
        # column amount_cents <- ducklake://main/orders.amount
        set -euo pipefail
        printf 'order_id,amount\\n1,1000\\n' > "$LINEAGE_OUTPUT_PATH"
    """)
    r = materialize(root, state, instance)
    assert not r.success
    error = failure(r)
    assert "x/export.sh:5:10: x/export.sh declares column 'amount_cents' (a 'column' line) but did not write it to s3:///exports/orders.csv; it wrote order_id, amount" in error
    assert "the step wrote its target itself, which stays as written" in error
