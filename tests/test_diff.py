"""``lineage-defs diff --since REF``: each changed step's output columns, classified, with exit codes.

A temporary git repository holds the example's scripts; each test edits the
working tree and compares with HEAD: a removed column read downstream is
breaking (the reader named with its file and line), an added column
non-breaking, a reformatted query metadata only, a retyped column read by a
data test breaking; ``-- breaking ok <column>`` accepts one. Exit codes: 0, 1
on a breaking change, 2 on bad usage.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from dbt_projects import SHOP_FILES, write_files
from lineage_defs import cli

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "pipelines"


def _git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(repo), "-c", "user.email=t@example.com", "-c", "user.name=t", *args], check=True, capture_output=True)


def _commit(repo: Path, message: str) -> None:
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", message)


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A git repository whose pipelines folder is the example's scripts (its dbt project: the dbt tier's)."""
    top = tmp_path_factory.mktemp("diff")
    shutil.copytree(EXAMPLE, top / "pipelines", ignore=shutil.ignore_patterns("dbt"))
    _git(top, "init", "-q")
    _commit(top, "the example")
    return top


@pytest.fixture
def folder(repo: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.setenv("LINEAGE_STATE_DIR", str(repo.parent / "state"))
    yield repo / "pipelines"
    _git(repo, "reset", "-q", "--hard", "HEAD")  # the next test starts from the committed example


def _diff(folder: Path, capsys: pytest.CaptureFixture[str], *extra: str) -> tuple[int, dict[str, Any]]:
    code = cli.main(["diff", "--since", "HEAD", "--json", "--folder", str(folder), *extra])
    return code, json.loads(capsys.readouterr().out)


def _edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text, f"{old!r} not in {path}"
    path.write_text(text.replace(old, new, 1))


def _line(path: Path, text: str) -> int:
    return next(i for i, line in enumerate(path.read_text().splitlines(), start=1) if text in line)


def _step(report: dict[str, Any], file: str) -> dict[str, Any]:
    return next(s for s in report["steps"] if s["file"] == file)


def test_a_removed_column_read_downstream_is_breaking_and_names_the_reader(folder: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _edit(folder / "shop" / "orders.sql", "    product_id,\n", "")
    code, report = _diff(folder, capsys)
    assert code == 1
    [step] = report["steps"]
    assert (step["file"], step["verdict"]) == ("shop/orders.sql", "breaking")
    [change] = step["changes"]
    assert (change["column"], change["change"], change["verdict"], change["accepted"]) == ("product_id", "removed", "breaking", False)
    reader_line = _line(folder / "analytics" / "daily_revenue.sql", "SELECT order_id, customer_id, product_id, amount_eur")
    assert change["readers"] == [{"asset": "ducklake://main/daily_revenue", "file": "analytics/daily_revenue.sql", "line": reader_line, "test": None}]
    assert report["breaking"] == 1

    # the text report says the same, file:line included
    assert cli.main(["diff", "--since", "HEAD", "--folder", str(folder)]) == 1
    out = capsys.readouterr().out
    assert "removed product_id" in out and f"read by ducklake://main/daily_revenue at analytics/daily_revenue.sql:{reader_line}" in out


def test_breaking_ok_accepts_the_change_of_that_column_only(folder: Path, capsys: pytest.CaptureFixture[str]) -> None:
    orders = folder / "shop" / "orders.sql"
    _edit(orders, "    product_id,\n", "")
    _edit(orders, "-- tag core\n", "-- tag core\n-- breaking ok product_id\n")
    code, report = _diff(folder, capsys)
    assert code == 0
    [change] = _step(report, "shop/orders.sql")["changes"]
    assert (change["column"], change["verdict"], change["accepted"]) == ("product_id", "breaking", True)
    assert report["breaking"] == 0
    # another column's breaking change is still one
    _edit(orders, "    customer_id,\n", "")
    code, report = _diff(folder, capsys)
    assert code == 1
    assert {(c["column"], c["accepted"]) for c in _step(report, "shop/orders.sql")["changes"]} == {("product_id", True), ("customer_id", False)}


def test_an_added_column_is_non_breaking(folder: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _edit(folder / "shop" / "orders.sql", "    payment_method,\n", "    payment_method,\n    quantity > 1 AS is_multi,\n")
    code, report = _diff(folder, capsys)
    assert code == 0
    step = _step(report, "shop/orders.sql")
    assert step["verdict"] == "non-breaking"
    assert [(c["column"], c["change"], c["verdict"], c["new_type"]) for c in step["changes"]] == [("is_multi", "added", "non-breaking", "BOOLEAN")]


def test_a_reformatted_query_is_metadata_only(folder: Path, capsys: pytest.CaptureFixture[str]) -> None:
    products = folder / "shop" / "products.sql"
    text = products.read_text()
    body = text[text.index("WITH catalogue AS") :]
    reformatted = body.replace("SELECT\n    product_id,\n    product_name,", "select product_id,   product_name, -- the key and the name\n").replace("FROM names", "from names")
    assert reformatted != body
    products.write_text(text.replace("-- Reference data", "-- Reference data (a prose edit)").replace(body, reformatted))
    code, report = _diff(folder, capsys)
    assert code == 0
    assert [(s["file"], s["verdict"], s["changes"]) for s in report["steps"]] == [("shop/products.sql", "metadata", [])]

    # a changed annotation is not metadata: the header's annotations are part of the code
    _edit(products, "-- tag reference\n", "-- tag reference\n-- tag catalogue\n")
    code, report = _diff(folder, capsys)
    assert (code, _step(report, "shop/products.sql")["verdict"], _step(report, "shop/products.sql")["note"]) == (0, "non-breaking", "no output column changed")


def test_a_retyped_column_read_by_a_data_test_is_breaking(repo: Path, folder: Path, capsys: pytest.CaptureFixture[str]) -> None:
    products = folder / "shop" / "products.sql"
    formula = "990 + (product_id * 7919) % 60 * 100 AS price_cents"
    _edit(products, formula, f"CAST({formula.removesuffix(' AS price_cents')} AS INTEGER) AS price_cents")
    _commit(repo, "price_cents typed")
    try:
        _edit(products, "AS INTEGER) AS price_cents", "AS VARCHAR) AS price_cents")
        code, report = _diff(folder, capsys)
        assert code == 1
        [change] = _step(report, "shop/products.sql")["changes"]
        assert (change["column"], change["change"], change["old_type"], change["new_type"], change["verdict"]) == ("price_cents", "retyped", "INT", "TEXT", "breaking")
        test_line = _line(products, "-- data_test not_null price_cents")
        assert change["readers"] == [{"asset": "ducklake://main/products", "file": "shop/products.sql", "line": test_line, "test": "not_null_price_cents"}]
    finally:
        _git(repo, "reset", "-q", "--hard", "HEAD~1")


def test_usage_errors_exit_2(folder: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["diff", "--since", "no-such-ref", "--folder", str(folder)]) == 2
    assert "'no-such-ref' is not a commit" in capsys.readouterr().err
    with pytest.raises(SystemExit) as both:
        cli.main(["diff", "--since", "HEAD", "--against-instance", "--folder", str(folder)])
    assert both.value.code == 2
    # no change at all: nothing to report, exit 0
    code, report = _diff(folder, capsys)
    assert (code, report["steps"], report["breaking"]) == (0, [], 0)


@pytest.mark.dbt
def test_a_column_removed_from_a_script_breaks_the_dbt_models_and_tests_reading_it(tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LINEAGE_STATE_DIR", str(tmp_path / "state"))
    folder = write_files(tmp_path / "pipelines", SHOP_FILES)
    orders = folder / "shop" / "orders.sql"
    _edit(orders, "SELECT i AS order_id", "SELECT CAST(i AS BIGINT) AS order_id")
    _git(tmp_path, "init", "-q")
    _commit(tmp_path, "shop")
    _edit(orders, "CAST(i AS DOUBLE) * 2.5 AS amount,", "")
    _edit(orders, "CAST(i AS BIGINT) AS order_id", "CAST(i AS VARCHAR) AS order_id")
    code, report = _diff(folder, capsys)
    assert code == 1
    changes = {c["column"]: c for c in _step(report, "shop/orders.sql")["changes"]}
    assert changes["amount"]["change"] == "removed"
    readers = {(r["asset"], r["file"], r["line"]) for r in changes["amount"]["readers"]}
    stg, daily = folder / "shop" / "dbt" / "models" / "stg_orders.sql", folder / "shop" / "dbt" / "models" / "orders_daily.sql"
    assert readers == {
        ("dbt://warehouse/main/stg_orders", "shop/dbt/models/stg_orders.sql", _line(stg, "amount")),
        ("dbt://warehouse/main/orders_daily", "shop/dbt/models/orders_daily.sql", _line(daily, "select order_id, order_ts, amount")),
    }
    assert (changes["order_id"]["change"], changes["order_id"]["old_type"], changes["order_id"]["new_type"]) == ("retyped", "BIGINT", "TEXT")
    tests = {(r["test"], r["file"], r["line"]) for r in changes["order_id"]["readers"] if r["test"]}
    yml_line = _line(folder / "shop" / "dbt" / "models" / "sources.yml", "- name: order_id")
    assert {t[0] for t in tests} >= {"source_not_null_lake_orders_order_id", "source_unique_lake_orders_order_id"}
    assert all(t[1:] == ("shop/dbt/models/sources.yml", yml_line) for t in tests)


def test_against_instance_compares_with_the_last_materialized_column_schema(folder: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """Materializations recorded in a Dagster instance (no daemon): orders' last one had another code version,
    a column since dropped (nobody reads it) and order_date as VARCHAR (the plan casts it to DATE: retyped, read)."""
    import dagster as dg

    from lineage_defs import uris
    from lineage_defs.project import load_project
    from lineage_defs.settings import LineageSettings

    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "dagster_home"))
    (tmp_path / "dagster_home").mkdir()
    (tmp_path / "dagster_home" / "dagster.yaml").write_text("")
    project = load_project(folder, LineageSettings(state_dir=str(tmp_path / "state")))
    with dg.DagsterInstance.get() as instance:
        for s in project.steps:
            if s.uri == "ducklake://main/payments":
                continue  # never materialized: a new step
            columns = [dg.TableColumn(c, "unknown") for c in s.output_columns or ()]
            version = s.code_version
            if s.uri == "ducklake://main/orders":
                columns = [dg.TableColumn(c, "VARCHAR" if c == "order_date" else "unknown") for c in s.output_columns or ()]
                columns += [dg.TableColumn("legacy_flag", "BOOLEAN"), dg.TableColumn("_partition", "VARCHAR")]
                version = "0" * 16
            instance.report_runless_asset_event(
                dg.AssetMaterialization(dg.AssetKey(list(uris.key_path(s.uri))), metadata={"dagster/column_schema": dg.TableSchema(columns)}, tags={"dagster/code_version": version or ""})
            )
    code = cli.main(["diff", "--against-instance", "--json", "--folder", str(folder)])
    report = json.loads(capsys.readouterr().out)
    assert code == 1
    assert report["against"] == "instance"
    assert {s["file"]: s["status"] for s in report["steps"]} == {"shop/orders.sql": "changed", "shop/payments.py": "new"}
    changes = {c["column"]: c for c in _step(report, "shop/orders.sql")["changes"]}
    assert set(changes) == {"legacy_flag", "order_date"}  # _partition is the runtime's, not the script's
    assert (changes["legacy_flag"]["change"], changes["legacy_flag"]["verdict"], changes["legacy_flag"]["readers"]) == ("removed", "non-breaking", [])
    assert (changes["order_date"]["change"], changes["order_date"]["old_type"], changes["order_date"]["new_type"], changes["order_date"]["verdict"]) == ("retyped", "TEXT", "DATE", "breaking")
    assert {r["file"] for r in changes["order_date"]["readers"]} == {"analytics/customer_ltv.py", "analytics/daily_funnel.sql", "analytics/kpi_snapshots.sql"}

    # `check --against-instance` applies the same rules: the breaking change on stderr, exit 1
    assert cli.main(["check", str(folder), "--against-instance"]) == 1
    captured = capsys.readouterr()
    assert "retyped order_date: TEXT → DATE" in captured.err and "legacy_flag" not in captured.err
    assert "1 breaking column change against the instance" in captured.out
    monkeypatch.delenv("DAGSTER_HOME")
    assert cli.main(["check", str(folder), "--against-instance"]) == 2
    assert "DAGSTER_HOME is not set" in capsys.readouterr().err


def test_a_renamed_column_nothing_reads_is_non_breaking(folder: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Made from the same source column under another name: a rename, not a removal and an addition."""
    _edit(folder / "shop" / "orders.sql", "    payment_method,\n", "    payment_method AS pay_method,\n")
    code, report = _diff(folder, capsys)
    assert code == 0
    [change] = _step(report, "shop/orders.sql")["changes"]
    assert (change["column"], change["change"], change["renamed_to"], change["verdict"], change["readers"]) == ("payment_method", "renamed", "pay_method", "non-breaking", [])


def test_the_breaking_ok_annotation_parses_and_stays_prose_without_ok() -> None:
    from lineage_defs.parse import parse_header

    header, errors = parse_header("p/x.sql", "-- pipeline\n-- breaking ok a, b\n-- breaking ok c\nSELECT 1", "duckdb")
    assert (header.breaking_ok, errors) == (("a", "b", "c"), [])
    header, errors = parse_header("p/x.sql", "-- pipeline\n-- breaking changes are announced on the list\nSELECT 1", "duckdb")
    assert (header.breaking_ok, header.description, errors) == ((), "breaking changes are announced on the list", [])
    _, errors = parse_header("p/x.sql", "-- pipeline\n-- breaking ok 1x\nSELECT 1", "duckdb")
    assert [(e.line, e.message) for e in errors] == [(2, "'1x' is not a column name")]
