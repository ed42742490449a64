"""``lineage-defs impact``: every column downstream (or upstream) of one, with its path, readers and tests.

The answers are compared exactly with golden files in ``tests/fixtures/impact/``
(checked by hand against the scripts: each path is the chain of edges
``lineage-defs graph --columns`` lists). Bad input names the asset or column
it could not find and guesses the one meant.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from conftest import with_example_parse
from dbt_projects import SHOP_FILES, write_files
from lineage_defs import cli
from lineage_defs.parse.model import Severity
from lineage_defs.plan.impact import ColumnGraph, as_json, render
from lineage_defs.plan.spec import ColumnEdge, DbtStep, DbtTest, EdgeKind, Project
from lineage_defs.project import load_project
from lineage_defs.settings import LineageSettings

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "pipelines"
GOLDEN = Path(__file__).parent / "fixtures" / "impact"


def _answer(folder: Path, state: Path, spec: str, upstream: bool = False) -> dict[str, Any]:
    project = load_project(folder, LineageSettings(state_dir=str(state)))
    assert not project.errors, [e.render() for e in project.errors]
    graph = ColumnGraph.build(project)
    asset, column = graph.resolve(spec)
    return as_json(graph, asset, column, upstream, graph.walk(asset, column, upstream))


def _golden(name: str) -> Any:
    return json.loads((GOLDEN / name).read_text())


@pytest.fixture(scope="module")
def scripts(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The example without its dbt project (a dbt parse is the slow tier's)."""
    tmp = tmp_path_factory.mktemp("impact")
    return Path(shutil.copytree(EXAMPLE, tmp / "pipelines", ignore=shutil.ignore_patterns("dbt")))


def test_downstream_of_an_example_column_is_the_golden_answer(scripts: Path, tmp_path: Path) -> None:
    got = _answer(scripts, tmp_path / "state", "ducklake://main/orders.amount_eur")
    assert got == _golden("example_scripts_orders_amount_eur.json")
    # two hops away, through daily_revenue, with the kinds of both edges
    by_node = {(c["asset"], c["column"]): c for c in got["columns"]}
    hop = by_node[("ducklake://main/monthly_revenue", "revenue_eur")]["path"]
    assert [(h["from"], h["to"], h["kind"]) for h in hop] == [
        ("ducklake://main/orders.amount_eur", "ducklake://main/daily_revenue.revenue_eur", "mod"),
        ("ducklake://main/daily_revenue.revenue_eur", "ducklake://main/monthly_revenue.revenue_eur", "mod"),
    ]


def test_upstream_and_scans_of_example_columns_are_the_golden_answers(scripts: Path, tmp_path: Path) -> None:
    up = _answer(scripts, tmp_path / "state", "ducklake://main/monthly_revenue.revenue_eur", upstream=True)
    assert up == _golden("example_scripts_monthly_revenue_revenue_eur_upstream.json")
    # a column read only as a filter reaches the rows of its readers, and the walk stops there
    status = _answer(scripts, tmp_path / "state", "ducklake://main/orders.status")
    assert status == _golden("example_scripts_orders_status.json")
    assert [(c["asset"], c["column"]) for c in status["columns"]] == [("ducklake://main/daily_revenue", None)]


def test_the_cli_prints_the_json_and_rejects_what_it_cannot_find(scripts: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LINEAGE_STATE_DIR", str(tmp_path / "state"))
    assert cli.main(["impact", "ducklake://main/orders.amount_eur", "--json", "--folder", str(scripts)]) == 0
    assert json.loads(capsys.readouterr().out) == _golden("example_scripts_orders_amount_eur.json")

    assert cli.main(["impact", "ducklake://main/orders.amount_eur", "--folder", str(scripts)]) == 0
    text = capsys.readouterr().out
    assert "ducklake://main/orders.amount_eur -mod-> ducklake://main/daily_revenue.revenue_eur -mod-> ducklake://main/monthly_revenue.revenue_eur" in text
    assert "tested by: not_null_revenue_eur (analytics/monthly_revenue.sql:6)" in text

    assert cli.main(["impact", "ducklake://main/order.amount_eur", "--folder", str(scripts)]) == 2
    assert "no asset ducklake://main/order in the project — did you mean ducklake://main/orders?" in capsys.readouterr().err
    assert cli.main(["impact", "ducklake://main/orders.amount_euro", "--folder", str(scripts)]) == 2
    assert "ducklake://main/orders has no column 'amount_euro' in the plan's lineage — did you mean ducklake://main/orders.amount_eur?" in capsys.readouterr().err
    assert cli.main(["impact", "orders", "--folder", str(scripts)]) == 2
    assert "'orders' is not <asset-uri>.<column>" in capsys.readouterr().err


@pytest.mark.dbt
def test_impact_crosses_scripts_and_dbt_models_on_the_example(tmp_path: Path) -> None:
    """orders (script) → stg_orders → store_daily (dbt models) → category_trend (script)."""
    got = _answer(EXAMPLE, with_example_parse(tmp_path / "state"), "ducklake://main/orders.amount_eur")
    assert got == _golden("example_orders_amount_eur.json")
    dbt = {(c["asset"], c["column"]) for c in got["columns"] if c["dbt"]}
    assert dbt == {
        ("dbt://warehouse/main/stg_orders", "amount_eur"),
        ("dbt://warehouse/main/stg_orders", None),
        ("dbt://warehouse/main/store_daily", "revenue_eur"),
    }


@pytest.mark.dbt
def test_impact_on_a_generated_project_with_scripts_and_dbt(tmp_path: Path) -> None:
    folder = write_files(tmp_path / "pipelines", SHOP_FILES)
    down = _answer(folder, tmp_path / "state", "ducklake://main/orders.amount")
    assert down == _golden("shop_orders_amount.json")
    up = _answer(folder, tmp_path / "state", "ducklake://main/report.doubled_revenue", upstream=True)
    assert up == _golden("shop_report_doubled_revenue_upstream.json")


def test_a_dbt_test_has_its_yaml_file_and_no_line() -> None:
    """dbt's manifest names the YAML file declaring a test but not its line: the JSON says null (not 0), the text the file alone."""
    stg = "dbt://warehouse/main/stg_orders"
    test = DbtTest("not_null_stg_orders_amount", "test.shop.not_null_stg_orders_amount", Severity.ERROR, column="amount", path="shop/dbt/models/schema.yml")
    step = DbtStep(
        name="shop__stg_orders", pipeline="shop", path="shop/dbt/models/stg_orders.sql", description="", outputs=(stg,), deps=(),
        column_edges=(ColumnEdge("ducklake://main/orders.amount", f"{stg}.amount", EdgeKind.COPY),), output_columns=("amount",),
        unique_id="model.shop.stg_orders", project="shop/dbt", relation="warehouse.main.stg_orders", resource_type="model", materialized="view", tests=(test,),
    )  # fmt: skip
    graph = ColumnGraph.build(Project("p", (step,), ("ducklake://main/orders",)))
    found = graph.walk("ducklake://main/orders", "amount", False)
    (entry,) = as_json(graph, "ducklake://main/orders", "amount", False, found)["columns"]  # type: ignore[misc]
    assert entry["tests"] == [{"asset": stg, "name": "not_null_stg_orders_amount", "file": "shop/dbt/models/schema.yml", "line": None}]
    assert "      tested by: not_null_stg_orders_amount (shop/dbt/models/schema.yml)" in render(graph, "ducklake://main/orders", "amount", False, found)
    assert ColumnGraph.from_data(json.loads(json.dumps(graph.to_data()))).tests == graph.tests  # the stored index keeps the null


def test_a_second_answer_comes_from_the_index_until_a_file_changes(tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """The column graph is kept in the state dir with the folder's fingerprint: no planning while nothing changed."""
    from lineage_defs import project as plan_project  # load_project lives above plan/ and dbt/

    folder = Path(shutil.copytree(EXAMPLE, tmp_path / "pipelines", ignore=shutil.ignore_patterns("dbt")))
    monkeypatch.setenv("LINEAGE_STATE_DIR", str(tmp_path / "state"))
    args = ["impact", "ducklake://main/orders.amount_eur", "--json", "--folder", str(folder)]
    assert cli.main(args) == 0
    first = json.loads(capsys.readouterr().out)

    loads: list[Path] = []
    real = plan_project.load_project
    monkeypatch.setattr(plan_project, "load_project", lambda root, settings=None: loads.append(Path(root)) or real(root, settings))
    assert cli.main(args) == 0
    assert json.loads(capsys.readouterr().out) == first and loads == []

    kpi = folder / "analytics" / "kpi_snapshots.sql"
    kpi.write_text(kpi.read_text().replace("    c.vip_customers\n", "    c.vip_customers,\n    r.revenue_eur_total * 2 AS doubled_total\n"))
    assert cli.main(args) == 0
    again = json.loads(capsys.readouterr().out)
    assert len(loads) == 1
    added = [c for c in again["columns"] if c not in first["columns"]]
    # orders.amount_eur -mod-> daily_revenue.revenue_eur -mod-> kpi_snapshots.doubled_total (the CTE's column is no asset's)
    assert [(c["asset"], c["column"], [(h["to"], h["kind"]) for h in c["path"]]) for c in added] == [
        ("ducklake://main/kpi_snapshots", "doubled_total", [("ducklake://main/daily_revenue.revenue_eur", "mod"), ("ducklake://main/kpi_snapshots.doubled_total", "mod")])
    ]


def _through_python(folder: Path) -> Path:
    """orders (SQL) → totals (Python, declared lineage: two lines for one column, a copy) → report (SQL)."""
    files = {
        "x/orders.sql": "-- pipeline\n-- materialize ducklake://main/orders\nSELECT 1 AS id, 2.0 AS amount, 0.5 AS tax, 'a' AS note\n",
        "x/totals.py": (
            "# pipeline\n# on ducklake://main/orders\n# materialize ducklake://main/totals\n"
            "# column id <- ducklake://main/orders.id copy\n"
            "# column total <- ducklake://main/orders.amount\n"
            "# column total <- ducklake://main/orders.tax mod\n"
            "from lineage_defs import runtime\n"
        ),
        "x/report.sql": "-- pipeline\n-- materialize ducklake://main/report\nSELECT id, total * 2 AS doubled FROM lake.main.totals\n",
    }
    for rel, text in files.items():
        (folder / rel).parent.mkdir(parents=True, exist_ok=True)
        (folder / rel).write_text(text)
    return folder


def test_impact_goes_through_a_python_steps_declared_lineage(tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    folder = _through_python(tmp_path / "pipelines")
    down = _answer(folder, tmp_path / "state", "ducklake://main/orders.tax")
    paths = {(c["asset"], c["column"]): [(h["from"], h["to"], h["kind"]) for h in c["path"]] for c in down["columns"]}
    assert paths == {
        ("ducklake://main/totals", "total"): [("ducklake://main/orders.tax", "ducklake://main/totals.total", "mod")],
        ("ducklake://main/report", "doubled"): [
            ("ducklake://main/orders.tax", "ducklake://main/totals.total", "mod"),
            ("ducklake://main/totals.total", "ducklake://main/report.doubled", "mod"),
        ],
    }
    up = _answer(folder, tmp_path / "state", "ducklake://main/report.id", upstream=True)
    assert [(c["asset"], c["column"], [h["kind"] for h in c["path"]]) for c in up["columns"]] == [
        ("ducklake://main/totals", "id", ["copy"]),
        ("ducklake://main/orders", "id", ["copy", "copy"]),
    ]
    # `graph --json` lists the declared edges with their kinds
    monkeypatch.setenv("LINEAGE_STATE_DIR", str(tmp_path / "state"))
    assert cli.main(["graph", str(folder), "--json"]) == 0
    edges = json.loads(capsys.readouterr().out)["column_edges"]
    into_totals = sorted((e["from"], e["to"], e["kind"]) for e in edges if e["to"].startswith("ducklake://main/totals"))
    assert into_totals == [
        ("ducklake://main/orders.amount", "ducklake://main/totals.total", "mod"),
        ("ducklake://main/orders.id", "ducklake://main/totals.id", "copy"),
        ("ducklake://main/orders.tax", "ducklake://main/totals.total", "mod"),
    ]
    # the impact index sees an edited kind (a file changed)
    args = ["impact", "ducklake://main/orders.amount", "--json", "--folder", str(folder)]
    assert cli.main(args) == 0
    first = json.loads(capsys.readouterr().out)
    assert [h["kind"] for c in first["columns"] if c["column"] == "total" for h in c["path"]] == ["mod"]
    py = folder / "x" / "totals.py"
    py.write_text(py.read_text().replace("orders.amount\n", "orders.amount copy\n"))
    assert cli.main(args) == 0
    again = json.loads(capsys.readouterr().out)
    assert [h["kind"] for c in again["columns"] if c["column"] == "total" for h in c["path"]] == ["copy"]


def test_a_declared_source_that_is_not_an_input_is_an_error_at_its_word(tmp_path: Path) -> None:
    folder = _through_python(tmp_path / "pipelines")
    py = folder / "x" / "totals.py"
    py.write_text(py.read_text().replace("# column total <- ducklake://main/orders.amount\n", "# column total <- ducklake://main/order.amount\n"))
    project = load_project(folder, LineageSettings(state_dir=str(tmp_path / "state")))
    assert [e.headline() for e in project.errors] == [
        "x/totals.py:5:19: ducklake://main/order is not an input of this step (it reads ducklake://main/orders)"
        " — add '# on ducklake://main/order' if the script reads it (e.g. through runtime.connect()), or correct the URI"
    ]
