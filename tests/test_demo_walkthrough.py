"""The README's walkthrough (examples/README.md, "Try it"), literally, in Chromium, on a `make demo` of its own.

`make demo` (which runs `lineage-defs demo up`) on a fresh Dagster home and
state dir and ports of its own: the UI and its daemon, the Tansu broker with the example's topic,
the webhook and e-mail receivers. Then, as a person would: *Lineage* → **Materialize all**
with one partition and its **Preview**; *Catalog* → the raw inputs of two
more days, which the cascade turns into the rest of each day; `lineage-defs
demo send kafka`, `… send webhook` and `… send email`, each producing rows; readable graph
labels; no run failed on the way; `make demo-stop` stops every process.

The steps run in the README's order, each as a person does it; step 3's outcome is checked after
steps 4 to 7: the cascade it starts spends minutes waiting (`daily_funnel` builds a day two quiet
minutes after its clickstream landed), and the later steps, which build nothing the cascade reads,
take place meanwhile instead of after it.

Its demo is its own (ports, Dagster home, state dir), not the suite's shared one: it counts every
run and materialization on the instance and ends with `make demo-stop`. `make test` starts it
first on one of its two test processes (tests/conftest.py), next to the other process's modules.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys

from browser import Browser
from conftest import REPO, start_demo, stop_demo
from lineage_defs import uris
from lineage_defs.dagster_storage import CLOCK_TAG
from lineage_defs.project import load_project
from lineage_defs.run.substrates import Session
from lineage_defs.settings import LineageSettings
from webserver import DagsterDev, live_group_members, run_problems

pytestmark = [pytest.mark.daemon, pytest.mark.browser]

# The walkthrough's own values (examples/README.md, "Try it")
DAY = "2025-01-02"
MORE_DAYS = ["2025-01-03", "2025-01-04"]
RAW = ["s3:///raw/orders/{partition}.csv", "s3:///raw/events/{partition}.csv", "ducklake://main/customers"]
DAILY = ["ducklake://main/orders", "ducklake://main/daily_revenue", "ducklake://main/daily_funnel"]
BACKFILL_TIMEOUT = 900
CASCADE_TIMEOUT = 900
TERMINAL = {"SUCCESS", "FAILURE", "CANCELED"}

RUNS = """
query { runsOrError(limit: 500) { ... on Runs { results { runId status tags { key value } assetSelection { path } } } } }
"""
BACKFILLS = "query { partitionBackfillsOrError(limit: 20) { ... on PartitionBackfills { results { id status partitionNames assetSelection { path } } } } }"
MATERIALIZED = """
query($k: AssetKeyInput!) { assetNodeOrError(assetKey: $k) { ... on AssetNode { partitionStats { numMaterialized } } } }
"""
PARTITIONS_OF = """
query($k: AssetKeyInput!, $p: [String!]) { assetNodeOrError(assetKey: $k) { ... on AssetNode { latestMaterializationByPartition(partitions: $p) { partition runId } } } }
"""
ASSETS = "query { assetNodes { assetKey { path } isMaterializable isPartitioned } }"
LATEST = "query($k: AssetKeyInput!) { assetOrError(assetKey: $k) { ... on Asset { assetMaterializations(limit: 1) { runId } } } }"


def key_input(uri: str) -> dict[str, list[str]]:
    return {"path": list(uris.key_path(uri))}


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("walkthrough")


@pytest.fixture(scope="module")
def walk(root: Path) -> Iterator[DagsterDev]:
    """Step 1: `make demo` — ready for a browser (the fixture waits for the code location, as `demo: ready` does)."""
    server = start_demo(root, make=True)
    try:
        yield server
    finally:
        stop_demo(server, root)  # a no-op check once the last test ran `make demo-stop`


@pytest.fixture
def browser(walk: DagsterDev, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Browser]:
    walk.graphql("mutation { setNuxSeen }")  # no first-run modal over the page
    b = Browser(walk.url)
    yield b
    report = getattr(request.node, "rep_call", None)
    if report is not None and report.failed:
        b.screenshot(tmp_path / "failure.png")
        (tmp_path / "failure.html").write_text(b.driver.page_source)
        print(f"the page at the failure: {tmp_path / 'failure.png'}")
        print(trouble(walk.log_path.parent / "state" / "demo" / "dagster.log"))
    b.close()


TROUBLE = ("Traceback", "Error", "ERROR", "Fatal Python error", "signal", "heartbeat", "Killed", "exited", "terminated")


def trouble(log: Path, lines: int = 80) -> str:
    """The last ``lines`` lines of the demo's whole Dagster output (its code server's and run workers'
    included) that tell of a failure: a CI run's only record of why a run worker died."""
    try:
        text = log.read_text(errors="replace").splitlines()
    except OSError as e:
        return f"(no {log}: {e})"
    hits = [line for line in text if any(t in line for t in TROUBLE)]
    return f"{log}, the last {min(lines, len(hits))} of {len(hits)} lines telling of trouble:\n" + "\n".join(hits[-lines:])


def dialog(b: Browser) -> Any:
    return b.driver.find_elements(By.CSS_SELECTOR, ".bp5-dialog")[-1]  # found again each time: the dialog re-renders


def type_partitions(b: Browser, text: str) -> None:
    """*Show all partitions* (the launcher opens on the last 90 days), then ``text`` in the partition field, Enter."""
    b.wait("the partition selector", lambda: "Partition selection" in dialog(b).text)
    b.show_all_partitions(lambda: dialog(b))

    def typed() -> bool:
        field = dialog(b).find_element(By.XPATH, ".//input[@type='text']")
        if field.get_attribute("value") == text:
            return True
        field.click()
        field.send_keys(Keys.CONTROL, "a")
        field.send_keys(text, Keys.ENTER)
        time.sleep(1)
        return False

    b.wait(f"{text} in the partition field", typed)


def launch(walk: DagsterDev, b: Browser, selection: list[tuple[str, ...]]) -> dict[str, Any]:
    """**Launch backfill**; the backfill it created (of exactly the asset keys ``selection``)."""
    before = {r["id"] for r in walk.graphql(BACKFILLS)["partitionBackfillsOrError"]["results"]}
    b.click("(//div[contains(@class, 'bp5-dialog')])[last()]//button[contains(normalize-space(.), 'Launch backfill')]")
    want = sorted(tuple(k) for k in selection)
    created = b.wait("the backfill to be created", lambda: [
        r for r in walk.graphql(BACKFILLS)["partitionBackfillsOrError"]["results"] if r["id"] not in before
    ], timeout=60)
    (backfill,) = created
    assert sorted(tuple(k["path"]) for k in backfill["assetSelection"]) == want, backfill
    return dict(backfill)


def runs(walk: DagsterDev) -> list[dict[str, Any]]:
    out = []
    for r in walk.graphql(RUNS)["runsOrError"]["results"]:
        out.append(r | {"tags": {t["key"]: t["value"] for t in r["tags"]}})
    return out


def wait_quiet(walk: DagsterDev, timeout: float) -> list[dict[str, Any]]:
    """Until no run is queued or running; every run so far."""
    def ended() -> list[dict[str, Any]] | None:
        rs = runs(walk)
        return rs if all(r["status"] in TERMINAL for r in rs) else None

    return list(walk.wait_until("every run to end", ended, timeout, interval=2))


def failures(walk: DagsterDev, rs: list[dict[str, Any]]) -> str:
    return "\n".join(f"run {r['runId']} ({r['tags'].get('dagster/sensor_name') or r['tags'].get('dagster/backfill')}) "
                     f"{[p['path'] for p in r['assetSelection'] or []]}:\n{run_problems(walk, r['runId'])}" for r in rs if r["status"] != "SUCCESS")


def rows(root: Path, sql: str) -> list[tuple[Any, ...]]:
    with Session(LineageSettings(state_dir=str(root / "state"))) as s:
        return list(s.conn.execute(sql).fetchall())


def cli(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """`.venv/bin/lineage-defs …` from the repository root, in the Makefile's environment of this demo."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LINEAGE_", "DAGSTER_"))}
    env.update(LINEAGE_PIPELINES_DIR=str(REPO / "examples" / "pipelines"), LINEAGE_STATE_DIR=str(root / "state"))
    return subprocess.run([str(Path(sys.executable).with_name("lineage-defs")), *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=300)


# -- step 2: Lineage → Materialize all, one partition, Preview, Launch backfill --------------------------


def test_materialize_all_with_one_partition(walk: DagsterDev, browser: Browser, root: Path) -> None:
    b = browser
    b.open("/")
    b.click("//a[normalize-space(.)='Lineage']")
    b.open_dialog("Materialize all")
    type_partitions(b, DAY)
    # Preview: every asset with what it builds, no error (the roots share one partitions definition)
    b.click("//div[contains(@class, 'bp5-dialog')]//*[normalize-space(text())='Preview']")
    preview = b.wait("the backfill preview", lambda: (t if "2025-01-02...2025-01-02" in (t := dialog(b).text) else None), timeout=60)
    assert "Unexpected GraphQL error" not in preview and "must have the same" not in preview, preview
    assert "2025-01-01...2025-01-01" in preview  # January of monthly_revenue
    assert "End offsetted by 1 partition" in preview  # payments (today included) follows orders
    b.click("(//div[contains(@class, 'bp5-dialog')])[last()]//button[normalize-space(.)='OK']")
    # every asset of the code location: the scripts' and dbt models' and the example's hand-written one
    nodes = [n for n in walk.graphql(ASSETS)["assetNodes"] if n["isMaterializable"]]
    every = [tuple(n["assetKey"]["path"]) for n in nodes]
    project = load_project(REPO / "examples" / "pipelines")
    assert {uris.key_path(u) for s in project.steps for u in s.outputs} < set(every)
    backfill = launch(walk, b, every)  # of every asset; its partitions are the anchor's one day, mapped down

    done = walk.wait_until("the backfill", lambda: (x if (x := walk.graphql(
        """query($id: String!) { partitionBackfillOrError(backfillId: $id) { ... on PartitionBackfill { status runs { runId status } } } }""",
        {"id": backfill["id"]})["partitionBackfillOrError"])["status"] not in ("REQUESTED",) else None), BACKFILL_TIMEOUT, interval=2)
    rs = wait_quiet(walk, 300)
    assert done["status"] == "COMPLETED_SUCCESS", f"the backfill: {done['status']}\n{failures(walk, rs)}"
    assert all(r["status"] == "SUCCESS" for r in rs), failures(walk, rs)
    # the demo's launcher (dagster_home/dagster.yaml) recorded the clock each run's worker is judged by
    assert all(CLOCK_TAG in r["tags"] for r in rs), [r["tags"] for r in rs]
    partitioned = {tuple(n["assetKey"]["path"]) for n in nodes if n["isPartitioned"]}
    for key in every:  # everything of that day is built: one partition of each partitioned asset
        latest = walk.graphql(LATEST, {"k": {"path": list(key)}})["assetOrError"]["assetMaterializations"]
        assert latest, f"{key} was not materialized"
        if key in partitioned:
            stats = walk.graphql(MATERIALIZED, {"k": {"path": list(key)}})["assetNodeOrError"]["partitionStats"]
            assert stats["numMaterialized"] == 1, (key, stats)
    assert rows(root, f"SELECT count(*) FROM lake.main.orders WHERE _partition = '{DAY}'")[0][0] > 100


# -- step 3: Catalog → the raw inputs of two more days; the cascade builds the rest -----------------------
# The cascade takes minutes whatever the test does: `daily_funnel` waits two quiet minutes after the
# day's clickstream landed (`debounce=2m`). The README's next steps (4 to 7, and reading the graph)
# need nothing of it, and nothing they build is an input of a step: they run while it waits, and
# test_the_cascade_builds_the_rest_of_each_day, after them, checks what the cascade built.


@pytest.fixture(scope="module")
def cascade_backfill() -> dict[str, Any]:
    """The backfill step 3 launched (filled in by test_the_catalog_launches_the_raw_inputs_of_two_more_days)."""
    return {}


def test_the_catalog_launches_the_raw_inputs_of_two_more_days(walk: DagsterDev, browser: Browser, cascade_backfill: dict[str, Any]) -> None:
    b = browser
    b.resize(1600, 2400)  # the catalog renders only the rows in view: all of them (a person scrolls)
    b.open("/")
    b.click("//a[normalize-space(.)='Catalog']")
    for uri in RAW:
        b.click(f"//input[@data-testid='checkbox-{'/'.join(uris.key_path(uri))}']/parent::label")
    b.open_dialog("Materialize selected")
    type_partitions(b, f"[{MORE_DAYS[0]}...{MORE_DAYS[-1]}]")
    assert "2 partitions" in dialog(b).text
    backfill = launch(walk, b, [uris.key_path(u) for u in RAW])
    assert backfill["partitionNames"] == MORE_DAYS, backfill
    cascade_backfill.update(backfill)


def test_the_automation_tab_shows_the_input_gate(walk: DagsterDev, browser: Browser) -> None:
    """A step's evaluation lists `inputs_materialized` with each input it waits for."""
    b = browser
    b.open("/assets/" + "/".join(uris.key_path("ducklake://main/orders")) + "?view=automation")
    b.click("(//table//tbody//tr)[1]//td[1]//*[self::button or self::a or self::span][1]", timeout=60)
    gate = b.find("//*[normalize-space(text())='inputs_materialized']", root=None, timeout=30)
    row = gate.find_element(By.XPATH, "./ancestor::tr[1]")
    row.find_element(By.XPATH, ".//*[@aria-label='arrow_drop_down']").click()  # expand it: one row per input
    text = b.wait("the inputs of the gate", lambda: (t if "materialized_or_requested" in (t := dialog(b).text) else None))
    assert "ducklake/main/customers" in text and "s3/_default/raw/orders/PARTITION-orders.csv" in text, text


# -- steps 5 to 7: a Kafka message, a webhook post and a mail, each producing rows --------------------------


def test_a_kafka_message_produces_rows(walk: DagsterDev, root: Path) -> None:
    sent = cli(root, "demo", "send", "kafka")
    assert sent.returncode == 0, sent.stderr
    assert sent.stdout.count('"order_id": 202501020001') == 3, sent.stdout
    sensor = "shop__order_events__kafka_shop_order_events"
    run = walk.wait_until("the Kafka sensor's run", lambda: next((r for r in runs(walk) if r["tags"].get("dagster/sensor_name") == sensor and r["status"] in TERMINAL), None), 300, interval=3)
    assert run["status"] == "SUCCESS", failures(walk, [run])
    got = rows(root, "SELECT order_id, event_type FROM lake.main.order_events ORDER BY kafka_offset")
    assert got == [(202501020001, "placed"), (202501020001, "paid"), (202501020001, "shipped")]


def test_a_webhook_post_produces_rows(walk: DagsterDev, root: Path) -> None:
    sent = cli(root, "demo", "send", "webhook", "--count", "1")
    assert sent.returncode == 0, sent.stderr
    answer, body = sent.stdout.strip().split("  ", 1)
    assert json.loads(answer)["duplicate"] is False
    payment = json.loads(body)["payment_id"]
    sensor = "shop__payments__webhook_payments"
    run = walk.wait_until("the webhook sensor's run", lambda: next((r for r in runs(walk) if r["tags"].get("dagster/sensor_name") == sensor and r["status"] in TERMINAL), None), 300, interval=3)
    assert run["status"] == "SUCCESS", failures(walk, [run])
    assert run["tags"]["dagster/partition"] == DAY
    assert rows(root, f"SELECT order_id, _partition FROM lake.main.payments WHERE payment_id = '{payment}'") == [(202501020001, DAY)]
    checks = walk.graphql(
        """query($k: AssetKeyInput!) { assetNodeOrError(assetKey: $k) { ... on AssetNode { assetChecksOrError { ... on AssetChecks {
             checks { name executionForLatestMaterialization { runId status } } } } } } }""", {"k": key_input("ducklake://main/payments")})
    status = {c["name"]: c["executionForLatestMaterialization"] for c in checks["assetNodeOrError"]["assetChecksOrError"]["checks"]}
    assert status["relationships_order_id"] == {"runId": run["runId"], "status": "SUCCEEDED"}, status  # the order is known


def test_a_mail_produces_rows(walk: DagsterDev, root: Path) -> None:
    sent = cli(root, "demo", "send", "email", "--count", "2")
    assert sent.returncode == 0, sent.stderr
    assert sent.stdout.count("250 <invoice-") == 2, sent.stdout
    sensor = "shop__supplier_invoices__email_invoices"
    run = walk.wait_until("the e-mail sensor's run", lambda: next((r for r in runs(walk) if r["tags"].get("dagster/sensor_name") == sensor and r["status"] in TERMINAL), None), 300, interval=3)
    assert run["status"] == "SUCCESS", failures(walk, [run])
    got = rows(root, "SELECT sender, subject, attachments, attachment_bytes FROM lake.main.supplier_invoices ORDER BY subject")
    assert got == [("Acme Supplies <billing@acme.example>", "Invoice 20250102-001", 1, [48]), ("Acme Supplies <billing@acme.example>", "Invoice 20250102-002", 1, [48])], got


# -- what a person reads -----------------------------------------------------------------------------------


def test_graph_labels_are_readable(walk: DagsterDev, browser: Browser) -> None:
    """Every node's label is its key's last part, whole; the raw objects read PARTITION-orders.csv and
    PARTITION-events.csv; in a narrow catalog (names shortened in the middle) they still differ by name."""
    b = browser
    project = load_project(REPO / "examples" / "pipelines")
    labels = {n["assetKey"]["path"][-1] for n in walk.graphql(ASSETS)["assetNodes"]}  # the hand-written asset too
    assert {uris.key_path(u)[-1] for s in project.steps for u in s.outputs} < labels
    assert {"PARTITION-orders.csv", "PARTITION-events.csv"} <= labels
    b.resize(2400, 5000)  # the graph renders only what is in view
    b.open("/asset-groups")
    b.local_storage("asset-graph-open-graph-nodes-global-__GLOBAL__", json.dumps({"expanded": ",".join(f"global@global:{s}" for s in ("analytics", "reporting", "shop"))}))
    b.open("/asset-groups")
    nodes = b.wait("every node", lambda: (n if set(n := b.asset_graph()[0]) >= labels else None), timeout=60)
    assert set(nodes) == labels
    assert not [n for n in nodes if "…" in n]

    b.resize(1280, 2400)  # narrow; tall enough that every row of the catalog is rendered
    b.open("/assets")
    names = {}
    for uri in RAW[:2]:
        link = b.find(f"//a[contains(@href, '/assets/{'/'.join(uris.key_path(uri))}')]")
        names[uri] = link.text.strip()
    shown = list(names.values())
    assert shown[0] != shown[1], names
    assert shown[0].endswith("ders.csv") and shown[1].endswith("ents.csv"), names  # the names' own ends


# -- step 3, its outcome: the cascade built the rest of each day ------------------------------------------


def test_the_cascade_builds_the_rest_of_each_day(walk: DagsterDev, root: Path, cascade_backfill: dict[str, Any]) -> None:
    assert cascade_backfill, "step 3 launched no backfill (see test_the_catalog_launches_the_raw_inputs_of_two_more_days)"

    def filled() -> bool:
        for uri in DAILY:
            got = walk.graphql(PARTITIONS_OF, {"k": key_input(uri), "p": MORE_DAYS})["assetNodeOrError"]["latestMaterializationByPartition"]
            if sorted(m["partition"] for m in got if m) != MORE_DAYS:
                return False
        return True

    walk.wait_until("the cascade to build orders, daily_revenue and daily_funnel of both days", filled, CASCADE_TIMEOUT, interval=2)
    rs = wait_quiet(walk, 600)
    assert all(r["status"] == "SUCCESS" for r in rs), failures(walk, rs)
    raw = [r for r in rs if r["tags"].get("dagster/backfill") == cascade_backfill["id"]]
    assert sorted(r["tags"].get("dagster/partition") for r in raw) == MORE_DAYS, raw  # step 3's backfill built the raw inputs only
    assert {"/".join(p["path"]) for r in raw for p in r["assetSelection"] or []} == {"/".join(uris.key_path(u)) for u in RAW}, raw
    by_cascade = [r for r in rs if r["tags"].get("dagster/sensor_name") == "lineage_cascade"]
    built = {"/".join(p["path"]) for r in by_cascade for p in r["assetSelection"] or []}
    for uri in [*DAILY, "ducklake://main/dim_customers", "dbt://warehouse/main/stg_orders"]:
        assert "/".join(uris.key_path(uri)) in built, (uri, built)  # the cascade built them, not a backfill
    days = rows(root, "SELECT DISTINCT _partition FROM lake.main.daily_revenue ORDER BY 1")
    assert [d for (d,) in days] == [DAY, *MORE_DAYS]


def test_no_run_failed(walk: DagsterDev) -> None:
    rs = wait_quiet(walk, 600)
    assert rs and all(r["status"] == "SUCCESS" for r in rs), failures(walk, rs)


# -- step 7: make demo-stop --------------------------------------------------------------------------------


def test_make_demo_stop_stops_every_process(walk: DagsterDev, root: Path) -> None:
    running = json.loads((root / "state" / "demo" / "running.json").read_text())
    groups = list(running["groups"].values())
    assert set(running["groups"]) == {"kafka", "webhooks", "email", "ui"}
    assert all(live_group_members(g) for g in groups)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LINEAGE_", "DAGSTER_"))}
    env.update(LINEAGE_PIPELINES_DIR=str(REPO / "examples" / "pipelines"), LINEAGE_STATE_DIR=str(root / "state"))
    stopped = subprocess.run(["make", "demo-stop", f"VENV={sys.prefix}"], cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert stopped.returncode == 0, stopped.stderr
    assert f"demo (pid {running['pid']}) stopped" in stopped.stderr
    assert not [g for g in groups if live_group_members(g)]
    assert walk.proc is not None and walk.proc.wait(timeout=30) == 0  # `make demo` (and `demo up` in it) ended, cleanly
    assert not (root / "state" / "demo" / "running.json").exists()
