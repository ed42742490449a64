"""The Dagster UI as a person uses it, in a real browser, on `make demo`'s bundled example.

Chromium (Debian's, headless) against the suite's `dagster dev`: the global asset
graph, the partition backfill launcher clicked through, the Columns table with
types and lineage, the run log of a failing partition. A failing test leaves a
screenshot and the page's HTML in its temp dir. With UPDATE_SCREENSHOTS=1 the
README's screenshots in docs/ are taken again from what the tests see.
"""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path
from typing import Any

import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys

from browser import Browser
from lineage_defs import uris
from lineage_defs.definitions import user_definitions
from lineage_defs.project import load_project
from lineage_defs.settings import LineageSettings
from lineage_defs.run.substrates import Session
from webserver import DagsterDev

DEMO_LOCATION = "lineage_defs"

pytestmark = [pytest.mark.daemon, pytest.mark.browser]

REPO = Path(__file__).resolve().parent.parent
DOCS = REPO / "docs"
RAW_ORDERS = "s3:///raw/orders/{partition}.csv"
CUSTOMERS = "ducklake://main/customers"
ORDERS = "ducklake://main/orders"
UPSTREAM_DAYS = ["2025-01-05", "2025-01-06"]
LAUNCHED_DAYS = ["2025-01-05", "2025-01-06", "2025-01-07"]  # no raw export for the 7th: that partition fails
BACKFILL_TIMEOUT = 300
ENDED = {"COMPLETED", "COMPLETED_SUCCESS", "COMPLETED_FAILED", "FAILED", "CANCELED"}


def key_input(uri: str) -> dict[str, list[str]]:
    return {"path": list(uris.key_path(uri))}


def update_screenshot(browser: Browser, name: str) -> None:
    if os.environ.get("UPDATE_SCREENSHOTS") == "1":
        browser.screenshot(DOCS / name)


LAUNCH = """
mutation Launch($params: LaunchBackfillParams!) {
  launchPartitionBackfill(backfillParams: $params) {
    __typename ... on LaunchBackfillSuccess { backfillId } ... on PythonError { message }
  }
}
"""
BACKFILLS = """
query { partitionBackfillsOrError(limit: 50) { ... on PartitionBackfills { results { id status timestamp assetSelection { path } partitionNames } } } }
"""
BACKFILL = """
query B($id: String!) {
  partitionBackfillOrError(backfillId: $id) {
    __typename
    ... on PartitionBackfill { status runs { runId status tags { key value } } }
  }
}
"""
RUN_LOGS = """
query Logs($runId: ID!, $cursor: String) {
  logsForRun(runId: $runId, afterCursor: $cursor) {
    ... on EventConnection { cursor hasMore events { __typename ... on MessageEvent { message } } }
  }
}
"""


def wait_for_backfill(demo: DagsterDev, backfill_id: str) -> dict[str, Any]:
    def probe() -> dict[str, Any] | None:
        b = demo.graphql(BACKFILL, {"id": backfill_id})["partitionBackfillOrError"]
        assert b["__typename"] == "PartitionBackfill", b
        running = [r for r in b["runs"] if r["status"] not in ("SUCCESS", "FAILURE", "CANCELED")]
        return b if b["status"] in ENDED and not running else None

    return dict(demo.wait_until(f"backfill {backfill_id}", probe, BACKFILL_TIMEOUT, interval=2))


@pytest.fixture(scope="module", autouse=True)
def upstream_launched(demo: DagsterDev) -> str:
    """The raw exports and customers of two days, launched through the API as the module starts (the UI is
    tested on what follows): the graph test, which needs none of it, runs while it builds. The backfill's id."""
    params = {"assetSelection": [key_input(RAW_ORDERS), key_input(CUSTOMERS)], "partitionNames": UPSTREAM_DAYS}
    launched = demo.graphql(LAUNCH, {"params": params})["launchPartitionBackfill"]
    assert launched["__typename"] == "LaunchBackfillSuccess", launched
    return str(launched["backfillId"])


@pytest.fixture(scope="module")
def upstream(demo: DagsterDev, upstream_launched: str) -> None:
    """That backfill, built."""
    b = wait_for_backfill(demo, upstream_launched)
    assert b["status"] in ("COMPLETED", "COMPLETED_SUCCESS") and all(r["status"] == "SUCCESS" for r in b["runs"]), b


@pytest.fixture
def browser(demo: DagsterDev, tmp_path: Path, request: pytest.FixtureRequest) -> Any:
    demo.graphql("mutation { setNuxSeen }")  # no first-run modal over the page
    b = Browser(demo.url)
    yield b
    report = getattr(request.node, "rep_call", None)
    if report is not None and report.failed:
        shot = b.screenshot(tmp_path / "failure.png")
        (tmp_path / "failure.html").write_text(b.driver.page_source)
        print(f"the page at the failure: {shot} and {tmp_path / 'failure.html'}")
    b.close()


@pytest.fixture(scope="module")
def launched(demo: DagsterDev, upstream: None, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A backfill of three days of orders, launched by clicking through the asset page's launcher."""
    b = Browser(demo.url)
    shots = tmp_path_factory.mktemp("launcher")
    try:
        demo.graphql("mutation { setNuxSeen }")
        before = {r["id"] for r in demo.graphql(BACKFILLS)["partitionBackfillsOrError"]["results"]}
        b.open("/assets/" + "/".join(uris.key_path(ORDERS)))
        b.open_dialog("Materialize")

        def dialog() -> Any:
            return b.driver.find_elements(By.CSS_SELECTOR, ".bp5-dialog")[-1]  # found again each time: the dialog re-renders

        b.wait("the partition selector", lambda: "Partition selection" in dialog().text)

        b.show_all_partitions(dialog)

        def select_range() -> bool:
            if "3 partitions" in dialog().text:
                return True
            field = dialog().find_element(By.XPATH, ".//input[@type='text']")
            field.click()
            field.send_keys(Keys.CONTROL, "a")
            field.send_keys(f"[{LAUNCHED_DAYS[0]}...{LAUNCHED_DAYS[-1]}]", Keys.ENTER)
            time.sleep(1)
            return "3 partitions" in dialog().text

        b.wait("3 partitions selected", select_range)
        b.screenshot(shots / "launcher.png")
        b.button("Launch backfill", root=dialog())
        # the cascade may launch backfills of its own meanwhile: this one is of the asset the launcher was opened on
        new = b.wait("the backfill to be created", lambda: [
            r for r in demo.graphql(BACKFILLS)["partitionBackfillsOrError"]["results"]
            if r["id"] not in before and r["assetSelection"] == [key_input(ORDERS)]
        ], timeout=60)
    except BaseException:
        b.screenshot(shots / "failure.png")
        print(f"the launcher at the failure: {shots / 'failure.png'}")
        raise
    finally:
        b.close()
    (backfill,) = new
    assert backfill["partitionNames"] == LAUNCHED_DAYS, backfill
    return wait_for_backfill(demo, backfill["id"]) | {"id": backfill["id"]}


def test_global_graph_shows_every_asset_and_edge(demo: DagsterDev, browser: Browser) -> None:
    project = load_project(REPO / "examples" / "pipelines")
    label = {u: uris.key_path(u)[-1] for s in project.steps for u in s.outputs} | {u: uris.key_path(u)[-1] for u in project.externals}
    expected_edges = {(label[d.uri], label[s.uri]) for s in project.steps for d in s.deps}
    # the example's hand-written asset (LINEAGE_DEFINITIONS, as make demo sets it): its own node and inputs
    for spec in (spec for a in user_definitions(str(REPO / "examples" / "python_assets.py")).assets or [] for spec in a.specs):
        expected_edges |= {(dep.asset_key.path[-1], spec.key.path[-1]) for dep in spec.deps}
    groups = sorted({s.pipeline for s in project.steps})

    browser.resize(2400, 5000)  # the graph renders only what is in view: make all of it in view
    # the link `demo: ready` prints: the Lineage page with every group open (it opens on collapsed boxes)
    link = re.search(r"^  graph: (\S+)$", demo.log_path.read_text(errors="replace"), re.M)
    assert link, f"no graph link in what demo up printed:\n{demo.log_tail()}"
    assert link[1].startswith(demo.url + "/asset-groups?expanded=") and all(f"global@global:{g}" in link[1] for g in groups), link[1]
    browser.open(link[1].removeprefix(demo.url))
    def complete() -> tuple[dict[str, Any], set[tuple[str, str]]] | None:
        graph = browser.asset_graph()
        return graph if set(graph[0]) >= set(label.values()) and len(graph[1]) >= len(expected_edges) else None

    nodes, edges = browser.wait("every asset node and edge", complete, timeout=60)
    assert set(nodes) == set(label.values())
    assert len(set(label.values())) == len(label), "two assets share a label in the graph"
    assert edges == expected_edges
    if os.environ.get("UPDATE_SCREENSHOTS") == "1":  # for the README: scripts and dbt models in one lineage
        browser.resize(1700, 1000)
        browser.open("/assets/" + "/".join(uris.key_path("dbt://warehouse/main/store_daily")) + "?view=lineage&lineageDepth=3")
        browser.wait("the lineage graph", lambda: len(browser.asset_graph()[0]) >= 4)
        time.sleep(2)
        update_screenshot(browser, "asset-graph.png")


def partition_dots(browser: Browser, days: list[str]) -> dict[str, str]:
    """The status dot of each day in the asset's Partitions tab: green, red, gray … (the UI's accent color)."""
    out = {}
    for day in days:
        label = browser.find(f"//div[@data-tooltip='{day}']")
        dot = label.find_element(By.XPATH, "./following-sibling::div[contains(@style, 'border-radius')]")
        style = dot.get_attribute("style") or ""
        out[day] = style.split("--color-accent-", 1)[1].split(")", 1)[0] if "--color-accent-" in style else style
    return out


def test_backfill_launched_from_the_ui_turns_its_partitions_green(demo: DagsterDev, browser: Browser, launched: dict[str, Any], demo_root: Path) -> None:
    ok, failed = LAUNCHED_DAYS[:2], LAUNCHED_DAYS[2]
    browser.open("/assets/" + "/".join(uris.key_path(ORDERS)) + "?view=partitions")
    browser.find("//input[@placeholder='Filter by name…']").send_keys("2025-01-0")
    def settled() -> dict[str, str] | None:
        dots = partition_dots(browser, LAUNCHED_DAYS)
        return dots if "gray" not in dots.values() else None

    dots = browser.wait("the launched days' status dots", settled, timeout=60)
    assert dots == {ok[0]: "green", ok[1]: "green", failed: "red"}, dots

    with Session(LineageSettings(state_dir=str(demo_root / "state"))) as s:
        rows = dict(s.conn.execute("SELECT _partition, count(*) FROM lake.main.orders WHERE _partition IN (?, ?, ?) GROUP BY ALL", LAUNCHED_DAYS).fetchall())
    assert set(rows) == set(ok) and all(n > 0 for n in rows.values()), rows


def test_columns_table_shows_types_and_lineage(demo: DagsterDev, browser: Browser, launched: dict[str, Any]) -> None:
    browser.open("/assets/" + "/".join(uris.key_path(ORDERS)))
    table = browser.find("//table[.//thead//td[normalize-space(.)='Column name']]", timeout=60)
    rows = browser.wait("typed columns", lambda: [
        [c.text for c in tr.find_elements(By.TAG_NAME, "td")] for tr in table.find_elements(By.TAG_NAME, "tr") if tr.find_elements(By.TAG_NAME, "td")
    ] if "unknown" not in table.text else None, timeout=60)
    by_name = {r[0]: r for r in rows}
    assert by_name["order_id"][1] in ("BIGINT", "INTEGER"), by_name["order_id"]
    assert "copy ← s3:///raw/orders/{partition}.csv.order_id" in by_name["order_id"][2]
    assert by_name["amount_eur"][2].startswith("mod ← s3:///raw/orders/{partition}.csv.")
    assert "partition key" in by_name["_partition"][2]
    update_screenshot(browser, "columns-lineage.png")


@pytest.fixture(scope="module")
def receiver(demo: DagsterDev, demo_root: Path) -> tuple[str, Any]:
    """The webhook receiver `make demo` started beside the UI, and the credential it generated for the example's hook."""
    from lineage_defs.demo.state import credentials, require_running

    running = require_running(demo_root / "state")
    assert running.webhooks and running.hooks == ["payments"], running
    return running.webhooks, credentials(demo_root / "state", ["payments"], {})["payments"]


def test_a_webhook_post_runs_under_the_sensors_ticks(demo: DagsterDev, browser: Browser, receiver: tuple[str, Any], demo_root: Path, launched: dict[str, Any]) -> None:
    """A payment posted to the demo's receiver becomes a run under the sensor's ticks (after ``launched``, which
    built ``orders``: the payment's relationships check reads it)."""
    import urllib.request

    from lineage_defs.demo.send import signed_request

    url, credential = receiver
    payment = {"payment_id": "ui-p-1", "order_id": 17, "amount_eur": 42.5, "paid_at": "2025-01-09T10:15:00Z"}
    with urllib.request.urlopen(signed_request(f"{url}/hooks/payments", json.dumps(payment).encode(), credential, "ui-p-1"), timeout=30) as resp:
        assert resp.status == 202 and json.loads(resp.read())["id"]

    sensor = "shop__payments__webhook_payments"
    browser.open(f"/locations/{DEMO_LOCATION}/sensors/{sensor}")
    browser.wait("the sensor page", lambda: sensor in browser.text())
    assert "Running" in browser.text()  # on by default: nothing was switched on

    def run_of_a_tick() -> str | None:  # the tick table links the run it requested
        links = browser.driver.find_elements(By.XPATH, "//a[contains(@href, '/runs/')]")
        return next((str(a.get_attribute("href")) for a in links if a.get_attribute("href")), None)

    href = browser.wait("a tick that requested a run", run_of_a_tick, timeout=120)
    update_screenshot(browser, "sensor-ticks.png")
    run_id = href.rstrip("/").rsplit("/", 1)[-1].split("?")[0]
    def finished() -> dict[str, Any] | None:
        run = demo.graphql("query R($id: ID!) { runOrError(runId: $id) { ... on Run { status tags { key value } } } }", {"id": run_id})["runOrError"]
        return dict(run) if run["status"] in ("SUCCESS", "FAILURE", "CANCELED") else None

    status = demo.wait_until(f"run {run_id}", finished, 180)
    assert status["status"] == "SUCCESS", status
    assert {"key": "dagster/sensor_name", "value": sensor} in status["tags"]
    browser.open(f"/runs/{run_id}")
    browser.wait("the payment's materialization in the run log", lambda: "ASSET_MATERIALIZATION" in browser.text(), timeout=60)
    with Session(LineageSettings(state_dir=str(demo_root / "state"))) as s:
        rows = s.conn.execute("SELECT payment_id, amount_eur, _partition FROM lake.main.payments WHERE payment_id = 'ui-p-1'").fetchall()
    assert rows == [("ui-p-1", 42.5, "2025-01-09")]


def test_failing_partition_shows_its_actionable_error_in_the_run_log(demo: DagsterDev, browser: Browser, launched: dict[str, Any]) -> None:
    failed_runs = [r for r in launched["runs"] if r["status"] == "FAILURE"]
    assert len(failed_runs) == 1, launched
    browser.open(f"/runs/{failed_runs[0]['runId']}")
    browser.find("//input[@placeholder='Filter…']").send_keys("type:STEP_FAILURE")
    row = browser.find("//*[normalize-space(text())='STEP_FAILURE']/ancestor::*[.//*[contains(., 'View full message')]][1]", timeout=60)
    browser.button("View full message", root=row)
    def full_message() -> str | None:
        text = str(browser.driver.find_element(By.CSS_SELECTOR, ".bp5-dialog").text)
        return text if "lineage_defs.errors" in text else None

    message = browser.wait("the full message", full_message)
    # what to build first, by name and partition — not "fix the statement" for a file that is not there yet
    assert "2025-01-07" in message and RAW_ORDERS in message, message
    assert "fix the statement shown above" not in message, message
