"""``lineage-defs docs build`` / ``docs serve``: the lineage explorer's static site, without a browser.

On the example's scripts (its dbt project is the browser test's): one JSON file
per asset holding its details and exactly the column graph's edges at it (what
``lineage-defs impact`` walks), a search index, the vendored graph library with
its licence and nothing loaded from the network; the last status and types from
a Dagster instance when ``DAGSTER_HOME`` has materializations; the settings
that link the explorer and the Dagster UI both ways.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from dagster import AssetKey, AssetMaterialization, DagsterInstance, TableColumn, TableSchema

from conftest import free_port
from lineage_defs import build_definitions, cli
from lineage_defs.errors import RunError
from lineage_defs.explorer.build import MARKER, shard_of, build_site, dagster_url
from lineage_defs.plan.impact import ColumnGraph
from lineage_defs.plan.spec import Project
from lineage_defs.project import load_project
from lineage_defs.settings import DEFAULT_UI_URL, LineageSettings

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "pipelines"
ORDERS = "ducklake://main/orders"


@pytest.fixture(scope="module")
def scripts(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The example without its dbt project."""
    tmp = tmp_path_factory.mktemp("explorer")
    return Path(shutil.copytree(EXAMPLE, tmp / "pipelines", ignore=shutil.ignore_patterns("dbt")))


@pytest.fixture(scope="module")
def project(scripts: Path) -> Project:
    p = load_project(scripts, LineageSettings(state_dir=str(scripts.parent / "state")))
    assert not p.errors, [e.render() for e in p.errors]
    return p


def _site(project: Project, out: Path, **settings: Any) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    build_site(project, out, LineageSettings(**{"state_dir": str(out.parent / "state"), **settings}))  # not the working directory's .lineage
    index = json.loads((out / "data" / "index.json").read_text())
    files = {uri: json.loads((out / "data" / "a" / f"{shard}.json").read_text())[uri] for uri, shard, _, _ in index["assets"]}
    return index, files


def test_every_asset_in_its_shard_and_a_search_index_of_every_column(project: Project, tmp_path: Path) -> None:
    index, files = _site(project, tmp_path / "site")
    graph = ColumnGraph.build(project)
    expected = set(graph.columns) | {u for s in project.steps for u in s.outputs} | set(project.externals)
    assert set(files) == expected and len(index["assets"]) == len(expected)
    shards = {p.stem: json.loads(p.read_text()) for p in (tmp_path / "site" / "data" / "a").iterdir()}
    assert sorted(u for docs in shards.values() for u in docs) == sorted(expected)  # each asset once
    for uri, shard, kind, cols in index["assets"]:
        assert shard == shard_of(uri) and uri in shards[shard] and files[uri]["kind"] == kind
        assert cols == [c["name"] for c in files[uri]["columns"]]
        assert set(graph.columns.get(uri, ())) <= set(cols)
    kinds = {uri: kind for uri, _, kind, _ in index["assets"]}
    assert kinds[ORDERS] == "script" and project.externals and all(kinds[u] == "external" for u in project.externals)


def test_the_files_hold_exactly_the_column_graphs_edges(project: Project, tmp_path: Path) -> None:
    """What the page walks is what `impact` walks: every edge out of and into each column, no more."""
    _, files = _site(project, tmp_path / "site")
    graph = ColumnGraph.build(project)
    want = sorted((h.source, h.target, str(h.kind)) for hops in graph.out_edges.values() for h in hops)
    out = sorted((f"{uri}.{col}", target, kind) for uri, f in files.items() for col, hops in f["out"].items() for target, kind in hops)
    into = sorted((source, f"{uri}.{col}", kind) for uri, f in files.items() for col, hops in f["in"].items() for source, kind in hops)
    scans = sorted((source, uri, kind) for uri, f in files.items() for source, kind in f["scans"])
    assert out == want
    assert sorted(into + scans) == want
    assert len(want) > 50 and any(k == "scan" for _, _, k in want)


def test_an_asset_page_has_its_description_owners_partitions_columns_tests_and_links(project: Project, tmp_path: Path) -> None:
    _, files = _site(project, tmp_path / "site", ui_url="http://dagster.example:3000/")
    orders = files[ORDERS]
    step = next(s for s in project.steps if s.uri == ORDERS)
    assert orders["description"] == step.description and orders["source"] == "shop/orders.sql"
    assert orders["owners"] == ["team:data-eng"]
    assert orders["partitions"] == {"kind": "daily", "start": "2025-01-01", "tz": None}
    assert [c["name"] for c in orders["columns"]] == list(step.output_columns or ())
    types = {c["name"]: (c["type"], c["typed_by"]) for c in orders["columns"]}
    assert types["order_date"] == ("DATE", "plan")  # the SQL's own cast
    assert {(t["name"], t["column"]) for t in orders["tests"]} >= {("unique_order_id", "order_id"), ("accepted_values_status", "status")}
    assert all(t["file"] == "shop/orders.sql" and t["line"] > 0 for t in orders["tests"])
    assert orders["dagster_url"] == "http://dagster.example:3000/assets/ducklake/main/orders"
    assert orders["last"] is None  # no instance given
    assert "s3:///raw/orders/{partition}.csv" in orders["upstream"]
    assert "ducklake://main/daily_revenue" in orders["downstream"]


def test_the_site_loads_nothing_from_the_network_and_ships_the_librarys_licence(project: Project, tmp_path: Path) -> None:
    site = tmp_path / "site"
    build_site(project, site, LineageSettings(state_dir=str(tmp_path / "state")))
    html = (site / "index.html").read_text()
    refs = re.findall(r'(?:src|href)="([^"]+)"', html)
    assert "vendor/cytoscape.min.js" in refs and all(not r.startswith(("http:", "https:", "//")) for r in refs), refs
    for name in ("index.html", "app.js", "style.css"):
        assert not re.search(r"https?://", (site / name).read_text()), name
    assert (site / "vendor" / "cytoscape.min.js").stat().st_size > 100_000
    assert "Cytoscape Consortium" in (site / "vendor" / "cytoscape.LICENSE").read_text()


def test_a_build_replaces_its_previous_build_but_no_other_folder(project: Project, tmp_path: Path) -> None:
    site = tmp_path / "site"
    build_site(project, site, LineageSettings(state_dir=str(tmp_path / "state")))
    (site / "data" / "a" / "stale.json").write_text("{}")
    build_site(project, site, LineageSettings(state_dir=str(tmp_path / "state")))
    assert not (site / "data" / "a" / "stale.json").exists() and (site / MARKER).exists()
    other = tmp_path / "mine"
    other.mkdir()
    (other / "notes.txt").write_text("keep me")
    with pytest.raises(RunError, match="not empty") as e:
        build_site(project, other, LineageSettings(state_dir=str(tmp_path / "state")))
    assert "empty or new folder" in e.value.render()
    assert (other / "notes.txt").read_text() == "keep me"


def test_the_last_materialization_gives_status_and_types(scripts: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    home = tmp_path / "dagster_home"
    home.mkdir()
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    monkeypatch.setenv("LINEAGE_STATE_DIR", str(scripts.parent / "state"))
    schema = TableSchema(columns=[TableColumn("order_id", "BIGINT"), TableColumn("amount_eur", "DECIMAL(12,2)")])
    with DagsterInstance.get() as instance:
        instance.report_runless_asset_event(AssetMaterialization(AssetKey(["ducklake", "main", "orders"]), partition="2025-01-02", metadata={"dagster/column_schema": schema}))
    site = tmp_path / "site"
    assert cli.main(["docs", "build", str(site), "--folder", str(scripts)]) == 0
    index = json.loads((site / "data" / "index.json").read_text())
    assert index["instance"] is True
    orders = json.loads((site / "data" / "a" / f"{shard_of(ORDERS)}.json").read_text())[ORDERS]
    assert orders["last"]["status"] == "materialized" and orders["last"]["partition"] == "2025-01-02"
    assert abs(orders["last"]["time"] - time.time()) < 600 and orders["last"]["run_url"].endswith("/runs/" + orders["last"]["run_id"])
    types = {c["name"]: (c["type"], c["typed_by"]) for c in orders["columns"]}
    assert types["amount_eur"] == ("DECIMAL(12,2)", "last run") and types["order_date"] == ("DATE", "plan")
    never = json.loads((site / "data" / "a" / f"{shard_of('ducklake://main/daily_revenue')}.json").read_text())["ducklake://main/daily_revenue"]
    assert never["last"] is None


def test_ui_url_falls_back_to_the_webserver_url_and_docs_links_quote_the_uri() -> None:
    assert LineageSettings.from_env({}).ui_url is None and LineageSettings.from_env({}).ui_link == DEFAULT_UI_URL
    assert LineageSettings.from_env({"DAGSTER_WEBSERVER_URL": "http://web:3000/"}).ui_url == "http://web:3000"
    assert LineageSettings.from_env({"DAGSTER_WEBSERVER_URL": "http://web:3000", "LINEAGE_UI_URL": "https://ui.example"}).ui_url == "https://ui.example"
    s = LineageSettings.from_env({"LINEAGE_DOCS_URL": "https://docs.example/lineage/"})
    assert s.docs_link(ORDERS) == "https://docs.example/lineage/#/asset/ducklake%3A%2F%2Fmain%2Forders"
    assert LineageSettings.from_env({}).docs_link(ORDERS) is None
    assert dagster_url("http://h:1/", "duckdb://warehouse/customer_ltv") == "http://h:1/assets/duckdb/warehouse/customer_ltv"


def test_asset_descriptions_link_to_the_docs_page_when_docs_url_is_set(scripts: Path, tmp_path: Path) -> None:
    state = str(scripts.parent / "state")
    plain = build_definitions(scripts, settings=LineageSettings(state_dir=state))
    linked = build_definitions(scripts, settings=LineageSettings(state_dir=state, docs_url="https://docs.example"))
    key = AssetKey(["ducklake", "main", "orders"])

    def description(defs: Any) -> str:
        return str(next(s for s in defs.resolve_all_asset_specs() if s.key == key).description)

    link = f"(https://docs.example/#/asset/{quote(ORDERS, safe='')})"
    assert link not in description(plain)
    assert description(linked) == f"{description(plain)}\n\n[Column lineage and docs]{link}"


def test_docs_serve_serves_the_site_on_localhost(scripts: Path, tmp_path: Path) -> None:
    port = free_port()
    env = {**os.environ, "LINEAGE_STATE_DIR": str(scripts.parent / "state")}
    env.pop("DAGSTER_HOME", None)
    cmd = [str(Path(sys.executable).parent / "lineage-defs"), "docs", "serve", "--port", str(port), "--folder", str(scripts), "--dir", str(tmp_path / "site")]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert f"http://127.0.0.1:{port}/" in line, (line, proc.stderr.read() if proc.poll() is not None else "")
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/data/index.json", timeout=10) as r:
            assert ORDERS in {a[0] for a in json.loads(r.read())["assets"]}
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=10) as r:
            assert b"vendor/cytoscape.min.js" in r.read()
        busy = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)  # the port is taken
        assert busy.returncode == 1 and f"cannot listen on 127.0.0.1:{port}" in busy.stderr and "--port" in busy.stderr
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def test_the_package_data_ships_every_file_of_the_site() -> None:
    """pyproject's package-data patterns cover each static file (a wheel without the page or the licence is broken)."""
    import fnmatch
    import tomllib

    patterns = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]["lineage_defs"]
    package = ROOT / "lineage_defs"
    static = [p.relative_to(package).as_posix() for p in (package / "explorer" / "static").rglob("*") if p.is_file()]
    assert {"explorer/static/index.html", "explorer/static/app.js", "explorer/static/vendor/cytoscape.min.js", "explorer/static/vendor/cytoscape.LICENSE"} <= set(static)
    missing = [f for f in static if not any(fnmatch.fnmatchcase(f, p) and "/" not in f[len(p.rsplit("/", 1)[0]) + 1 :] for p in patterns)]
    assert missing == []


WALK_JS = r"""
const fs = require('fs');
const [app, site, specs] = [process.argv[2], process.argv[3], JSON.parse(process.argv[4])];
const src = fs.readFileSync(app, 'utf8');
const grab = (name) => src.match(new RegExp(`^(async )?function ${name}\\([^]*?^}$`, 'm'))[0];
const index = JSON.parse(fs.readFileSync(`${site}/data/index.json`, 'utf8'));
const byUri = new Map(index.assets.map((a) => [a[0], a]));
const loadAsset = async (uri) => {  // the page's loadAsset, reading the shard from disk
  const e = byUri.get(uri);
  return e ? JSON.parse(fs.readFileSync(`${site}/data/a/${e[1]}.json`, 'utf8'))[uri] || null : null;
};
eval(grab('split') + '\n' + grab('walk') + '\nglobalThis.walk = walk;');
(async () => {
  const out = {};
  for (const spec of specs) out[spec] = { up: (await walk(spec, true)).map((r) => r.node), down: (await walk(spec, false)).map((r) => r.node) };
  process.stdout.write(JSON.stringify(out));
})();
"""


def test_the_pages_walk_is_impacts_for_every_column(project: Project, tmp_path: Path) -> None:
    """app.js's walk (run in Node over the built files) answers exactly ColumnGraph.walk, for every column of the example."""
    site = tmp_path / "site"
    build_site(project, site, LineageSettings(state_dir=str(tmp_path / "state")))
    graph = ColumnGraph.build(project)
    specs = sorted(f"{a}.{c}" for a, cols in graph.columns.items() for c in cols)
    assert len(specs) > 80
    script = tmp_path / "walk.js"
    script.write_text(WALK_JS)
    app = ROOT / "lineage_defs" / "explorer" / "static" / "app.js"
    got = json.loads(subprocess.run(["node", str(script), str(app), str(site), json.dumps(specs)], capture_output=True, text=True, check=True, timeout=120).stdout)
    for spec in specs:
        asset, column = spec.rsplit(".", 1)
        for upstream, key in ((True, "up"), (False, "down")):
            want = [r.node for r in graph.walk(asset, column, upstream)]
            assert sorted(got[spec][key]) == sorted(want), (spec, key)
            assert len(got[spec][key]) == len(set(got[spec][key]))  # each column once
    assert any(n in graph.columns for s in specs for n in got[s]["down"])  # an asset's rows reached by a scan
