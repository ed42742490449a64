"""`make demo` end to end: `dagster dev -w workspace.yaml` on the bundled example, driven over GraphQL.

The suite's one `dagster dev` (webserver + daemon, the `demo` fixture of conftest.py) on a free port,
with its own Dagster home and state dir. The tests read the asset graph the UI
shows, launch a run and a partition backfill the way the UI does, and read the
results back from the DuckLake and from Dagster's event log.
"""

from __future__ import annotations

import datetime as dt
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from dagster import AssetKey

from lineage_defs import uris
from lineage_defs.definitions import user_definitions
from lineage_defs.project import load_project
from lineage_defs.plan.spec import Project
from lineage_defs.settings import LineageSettings
from lineage_defs.run.substrates import Session

from webserver import DagsterDev, launch_supervised, live_group_members, run_problems, stop_group

REPO = Path(__file__).resolve().parent.parent
PIPELINES = REPO / "examples" / "pipelines"
LOCATION = "lineage_defs"  # workspace.yaml's location_name
REPOSITORY = "__repository__"  # Definitions' implicit repository
ASSET_JOB = "__ASSET_JOB"  # the implicit job of every asset

PRODUCTS = "ducklake://main/products"
RAW_ORDERS = "s3:///raw/orders/{partition}.csv"
CUSTOMERS = "ducklake://main/customers"
ORDERS = "ducklake://main/orders"
BACKFILL_DAYS = ["2025-01-02", "2025-01-03"]

RUN_TIMEOUT = 180
BACKFILL_TIMEOUT = 300

TERMINAL_RUN = {"SUCCESS", "FAILURE", "CANCELED"}
BACKFILL_OK = {"COMPLETED", "COMPLETED_SUCCESS"}
BACKFILL_BAD = {"FAILED", "COMPLETED_FAILED", "CANCELED", "FAILING", "CANCELING"}


def key_input(uri: str) -> dict[str, list[str]]:
    return {"path": list(uris.key_path(uri))}


@pytest.fixture(scope="module")
def state_root(demo_root: Path) -> Path:
    return demo_root


@pytest.fixture(scope="module")
def dev(demo: DagsterDev) -> DagsterDev:
    """The suite's one `dagster dev` on the bundled example (conftest.py)."""
    return demo


@pytest.fixture(scope="module")
def project() -> Project:
    p = load_project(PIPELINES)
    assert not p.errors, [e.render() for e in p.errors]
    return p


@pytest.fixture(scope="module")
def settings(state_root: Path) -> LineageSettings:
    return LineageSettings(state_dir=str(state_root / "state"), pipelines_dir=str(PIPELINES))


# -- GraphQL helpers -------------------------------------------------------------------

RUN_STATUS = """
query($runId: ID!) {
  runOrError(runId: $runId) {
    __typename
    ... on Run { runId status tags { key value } }
    ... on Error { message }
  }
}
"""

def wait_for_run(dev: DagsterDev, run_id: str, timeout: float) -> dict[str, Any]:
    def probe() -> dict[str, Any] | None:
        run = dev.graphql(RUN_STATUS, {"runId": run_id})["runOrError"]
        assert run["__typename"] == "Run", run
        return run if run["status"] in TERMINAL_RUN else None

    return dev.wait_until(f"run {run_id}", probe, timeout)


def by_label(entries: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {e["label"]: e for e in entries}


METADATA_FIELDS = """
metadataEntries {
  __typename
  label
  ... on IntMetadataEntry { intValue intRepr }
  ... on TextMetadataEntry { text }
  ... on MarkdownMetadataEntry { mdStr }
}
"""


# -- the supervisor -------------------------------------------------------------------------


def test_supervised_group_dies_with_the_test_process(tmp_path: Path) -> None:
    """The fixture's guarantee: if the process that started the server dies, its whole group dies.

    A stand-in for a crashed test process starts `sleep` (and a grandchild) the
    way the fixture starts `dagster dev`, then exits without any cleanup.
    """
    tests_dir = Path(__file__).resolve().parent
    code = (
        "import os, subprocess, sys\n"
        f"sys.path.insert(0, {str(tests_dir)!r})\n"
        "import time\n"
        "from webserver import launch_supervised, live_group_members\n"
        "p = launch_supervised(['bash', '-c', 'sleep 600 & sleep 600'], '.', os.environ, subprocess.DEVNULL)\n"
        "deadline = time.monotonic() + 10\n"
        "while len(live_group_members(p.pid)) < 4 and time.monotonic() < deadline:  # supervisor, bash, 2 x sleep\n"
        "    time.sleep(0.05)\n"
        "print(p.pid, len(live_group_members(p.pid)), flush=True)\n"
        "os._exit(0)  # no teardown, like a crash\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30, check=True)
    pgid, running = map(int, out.stdout.split())
    assert running == 4, out.stdout  # the group was up when its parent died
    deadline = time.monotonic() + 10
    while live_group_members(pgid) and time.monotonic() < deadline:
        time.sleep(0.1)
    left = live_group_members(pgid)
    if left:  # don't leak them into the rest of the run
        os.killpg(pgid, signal.SIGKILL)
    assert not left, f"the group outlived its parent: {left}"


def test_supervised_group_is_stopped_with_sigterm_then_sigkill(tmp_path: Path) -> None:
    """A member that ignores SIGTERM is SIGKILLed after the grace period."""
    proc = launch_supervised(["bash", "-c", "trap '' TERM; sleep 600 & wait"], tmp_path, os.environ, subprocess.DEVNULL)
    deadline = time.monotonic() + 10
    while len(live_group_members(proc.pid)) < 3 and time.monotonic() < deadline:  # supervisor, bash, sleep
        time.sleep(0.05)
    t0 = time.monotonic()
    stop_group(proc, grace=1.0)
    assert time.monotonic() - t0 < 8
    assert not live_group_members(proc.pid)


# -- the demo ---------------------------------------------------------------------------------

ASSET_NODES = """
{
  assetNodes {
    assetKey { path }
    groupName
    dependencyKeys { path }
    isPartitioned
    isMaterializable
    partitionDefinition { type description fmt }
    partitionKeyConnection(limit: 1, ascending: true) { results }
    assetChecksOrError {
      __typename
      ... on AssetChecks { checks { name blocking } }
    }
  }
}
"""

PERIOD = {"hourly": "Hourly", "daily": "Daily", "weekly": "Weekly", "monthly": "Monthly"}


@pytest.mark.daemon
def test_asset_graph_matches_the_project(dev: DagsterDev, project: Project) -> None:
    nodes = {tuple(n["assetKey"]["path"]): n for n in dev.graphql(ASSET_NODES)["assetNodes"]}

    expected: dict[tuple[str, ...], Any] = {}
    for step in project.steps:
        for uri in step.outputs:
            expected[uris.key_path(uri)] = step
    for uri in project.externals:
        expected[uris.key_path(uri)] = None
    assert set(nodes) == set(expected), (sorted(set(nodes) ^ set(expected)))

    # the example's hand-written assets (examples/python_assets.py, merged in by LINEAGE_DEFINITIONS)
    handwritten = {a.key: a for a in user_definitions(str(REPO / "examples" / "python_assets.py")).assets or ()}
    for key, step in expected.items():
        node = nodes[key]
        where = "/".join(key)
        if step is None and AssetKey(list(key)) in handwritten:  # the table a script reads is the hand-written asset
            a = handwritten[AssetKey(list(key))]
            assert node["isMaterializable"] and node["groupName"] == a.group_names_by_key[a.key], where
            assert {tuple(d["path"]) for d in node["dependencyKeys"]} == {tuple(k.path) for k in a.dependency_keys}, where
            continue
        if step is None:  # read by the pipelines, produced by none: Dagster's own node for the dependency
            assert node["groupName"] == "default" and not node["isMaterializable"], where
            assert node["dependencyKeys"] == [], where
            continue
        assert node["groupName"] == step.pipeline, where
        assert node["isMaterializable"], where
        deps = {tuple(d["path"]) for d in node["dependencyKeys"]}
        assert deps == {uris.key_path(d.uri) for d in step.deps}, where

        p = step.partitioning
        if p is None:
            assert not node["isPartitioned"] and node["partitionDefinition"] is None, where
        else:
            assert node["isPartitioned"], where
            pdef = node["partitionDefinition"]
            assert pdef["type"] == ("DYNAMIC" if p.kind == "dynamic" else "TIME_WINDOW"), (where, pdef)
            if p.kind != "dynamic":
                assert pdef["description"].startswith(f"{PERIOD[p.kind]}, starting {p.start}"), (where, pdef)
                assert node["partitionKeyConnection"]["results"][:1] == [p.start], where

        checks = node["assetChecksOrError"]
        assert checks["__typename"] == "AssetChecks", (where, checks)
        if key == uris.key_path(step.uri):  # data tests are checks of the primary output
            got = {c["name"]: c["blocking"] for c in checks["checks"]}
            tests = step.tests  # a dbt model's checks are its dbt tests
            assert got == {t.name: t.severity == "error" for t in tests}, where

    # the example's data tests are all there, e.g. every one of orders.sql
    orders_checks = {c["name"] for c in nodes[uris.key_path(ORDERS)]["assetChecksOrError"]["checks"]}
    assert orders_checks == {
        "unique_order_id", "not_null_customer_id", "accepted_values_status",
        "relationships_customer_id", "row_count", "order_amounts",
    }


@pytest.mark.daemon
def test_first_run_modal_can_be_dismissed(dev: DagsterDev) -> None:
    assert dev.graphql("mutation { setNuxSeen }") == {"setNuxSeen": True}


LAUNCH_RUN = """
mutation($params: ExecutionParams!) {
  launchRun(executionParams: $params) {
    __typename
    ... on LaunchRunSuccess { run { runId status } }
    ... on Error { message }
    ... on PythonError { stack }
    ... on RunConfigValidationInvalid { errors { message } }
  }
}
"""

ASSET_MATERIALIZATIONS = (
    """
query($key: AssetKeyInput!) {
  assetOrError(assetKey: $key) {
    __typename
    ... on Asset {
      assetMaterializations(limit: 10) { runId partition %s }
    }
  }
}
"""
    % METADATA_FIELDS
)

CHECK_EXECUTIONS = """
query($key: AssetKeyInput!) {
  assetNodeOrError(assetKey: $key) {
    ... on AssetNode {
      assetChecksOrError { ... on AssetChecks { checks { name executionForLatestMaterialization { runId status } } } }
    }
  }
}
"""


@pytest.mark.daemon
def test_materialize_products(dev: DagsterDev, settings: LineageSettings) -> None:
    params = {
        "selector": {
            "jobName": ASSET_JOB,
            "repositoryName": REPOSITORY,
            "repositoryLocationName": LOCATION,
            "assetSelection": [key_input(PRODUCTS)],
        },
    }
    t0 = time.monotonic()
    launched = dev.graphql(LAUNCH_RUN, {"params": params})["launchRun"]
    assert launched["__typename"] == "LaunchRunSuccess", launched
    run_id = launched["run"]["runId"]
    run = wait_for_run(dev, run_id, RUN_TIMEOUT)
    assert run["status"] == "SUCCESS", f"run {run_id} ended {run['status']}:\n{run_problems(dev, run_id)}"
    print(f"products run: {time.monotonic() - t0:.1f}s")

    with Session(settings) as session:
        rows = session.conn.execute("SELECT count(*) FROM lake.main.products").fetchone()[0]
    assert rows > 0

    asset = dev.graphql(ASSET_MATERIALIZATIONS, {"key": key_input(PRODUCTS)})["assetOrError"]
    assert asset["__typename"] == "Asset", asset
    mats = [m for m in asset["assetMaterializations"] if m["runId"] == run_id]
    assert len(mats) == 1, asset["assetMaterializations"]
    meta = by_label(mats[0]["metadataEntries"])
    assert meta["dagster/row_count"]["__typename"] == "IntMetadataEntry"
    assert int(meta["dagster/row_count"]["intRepr"]) == rows
    sql = meta["lineage/sql"]
    assert sql["__typename"] == "MarkdownMetadataEntry"
    assert '"lake"."main"."products"' in sql["mdStr"], sql["mdStr"]
    assert meta["lineage/trigger"]["text"] == "manual"
    assert "dagster/column_schema" in meta

    node = dev.graphql(CHECK_EXECUTIONS, {"key": key_input(PRODUCTS)})["assetNodeOrError"]
    executions = {c["name"]: c["executionForLatestMaterialization"] for c in node["assetChecksOrError"]["checks"]}
    assert executions.keys() == {"unique_product_id", "not_null_price_cents", "accepted_values_category", "rows_between_10_1000"}  # the last: a test type (shop/tests/rows_between.sql)
    for name, ex in executions.items():
        assert ex is not None and ex["runId"] == run_id and ex["status"] == "SUCCEEDED", (name, ex)


LAUNCH_BACKFILL = """
mutation($params: LaunchBackfillParams!) {
  launchPartitionBackfill(backfillParams: $params) {
    __typename
    ... on LaunchBackfillSuccess { backfillId }
    ... on Error { message }
    ... on PythonError { stack }
  }
}
"""

BACKFILL_STATUS = """
query($id: String!) {
  partitionBackfillOrError(backfillId: $id) {
    __typename
    ... on PartitionBackfill {
      status
      error { message stack }
      runs { runId status }
    }
    ... on Error { message }
  }
}
"""

PARTITION_STATUS = (
    """
query($key: AssetKeyInput!, $partitions: [String!]) {
  assetNodeOrError(assetKey: $key) {
    __typename
    ... on AssetNode {
      partitionStats { numMaterialized numFailed numMaterializing }
      assetPartitionStatuses {
        __typename
        ... on TimePartitionStatuses { ranges { startKey endKey status } }
      }
      latestMaterializationByPartition(partitions: $partitions) { partition runId %s }
    }
  }
}
"""
    % METADATA_FIELDS
)


def _days(start: str, end: str) -> list[str]:
    d, last = dt.date.fromisoformat(start), dt.date.fromisoformat(end)
    out = []
    while d <= last:
        out.append(d.isoformat())
        d += dt.timedelta(days=1)
    return out


@pytest.mark.daemon
def test_backfill_daily_chain(dev: DagsterDev, settings: LineageSettings) -> None:
    params = {
        "assetSelection": [key_input(RAW_ORDERS), key_input(CUSTOMERS), key_input(ORDERS)],
        "partitionNames": BACKFILL_DAYS,
    }
    t0 = time.monotonic()
    launched = dev.graphql(LAUNCH_BACKFILL, {"params": params})["launchPartitionBackfill"]
    assert launched["__typename"] == "LaunchBackfillSuccess", launched
    backfill_id = launched["backfillId"]

    def probe() -> dict[str, Any] | None:
        b = dev.graphql(BACKFILL_STATUS, {"id": backfill_id})["partitionBackfillOrError"]
        assert b["__typename"] == "PartitionBackfill", b
        failed = [r for r in b["runs"] if r["status"] in ("FAILURE", "CANCELED")]
        if b["status"] in BACKFILL_BAD or failed:
            problems = "\n".join(f"run {r['runId']} {r['status']}:\n{run_problems(dev, r['runId'])}" for r in failed)
            raise AssertionError(f"backfill {backfill_id} {b['status']}: {b['error']}\n{problems}")
        return b if b["status"] in BACKFILL_OK else None

    backfill = dev.wait_until(f"backfill {backfill_id}", probe, BACKFILL_TIMEOUT, interval=2)
    assert backfill["runs"] and all(r["status"] == "SUCCESS" for r in backfill["runs"]), backfill
    print(f"backfill: {time.monotonic() - t0:.1f}s, {len(backfill['runs'])} runs")

    with Session(settings) as session:
        by_day = dict(
            session.conn.execute("SELECT _partition, count(*) FROM lake.main.orders GROUP BY ALL").fetchall()
        )
        stray = session.conn.execute(
            "SELECT count(*) FROM lake.main.orders WHERE CAST(order_ts AS DATE)::VARCHAR <> _partition"
        ).fetchone()[0]
        customers = session.conn.execute("SELECT count(*) FROM lake.main.customers").fetchone()[0]
    assert set(by_day) == set(BACKFILL_DAYS), by_day
    assert all(n > 0 for n in by_day.values()), by_day
    assert stray == 0
    assert customers > 0

    for uri in (RAW_ORDERS, CUSTOMERS, ORDERS):
        node = dev.graphql(PARTITION_STATUS, {"key": key_input(uri), "partitions": BACKFILL_DAYS})["assetNodeOrError"]
        assert node["__typename"] == "AssetNode", node
        assert node["partitionStats"] == {"numMaterialized": 2, "numFailed": 0, "numMaterializing": 0}, (uri, node["partitionStats"])
        statuses = node["assetPartitionStatuses"]
        assert statuses["__typename"] == "TimePartitionStatuses", statuses
        materialized = [d for r in statuses["ranges"] if r["status"] == "MATERIALIZED" for d in _days(r["startKey"], r["endKey"])]
        assert sorted(materialized) == BACKFILL_DAYS, (uri, statuses)
        latest = {m["partition"]: m for m in node["latestMaterializationByPartition"] if m}
        assert set(latest) == set(BACKFILL_DAYS), (uri, latest)
        if uri == ORDERS:  # each day's materialization reports that day's rows
            for day, m in latest.items():
                meta = by_label(m["metadataEntries"])
                assert int(meta["dagster/row_count"]["intRepr"]) == by_day[day], (day, meta.get("dagster/row_count"))
                assert meta["lineage/partition"]["text"] == day
                assert meta["lineage/trigger"]["text"] == f"backfill:{backfill_id}"
                assert "lineage/sql" in meta


@pytest.mark.daemon
def test_backfill_cli_launches_on_the_running_instance(dev: DagsterDev) -> None:
    """`lineage-defs backfill` sends the UI's launchPartitionBackfill for a URI and a range."""
    import subprocess
    import sys

    cli = [sys.executable, "-m", "lineage_defs.cli", "backfill", "ducklake://main/daily_revenue", "--url", dev.url]
    out = subprocess.run([*cli, "--from", "2025-02-01", "--to", "2025-02-03"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    backfill_id = out.stdout.split()[1].rstrip(":")
    assert "3 partitions of ducklake://main/daily_revenue (2025-02-01 … 2025-02-03)" in out.stdout
    data = dev.graphql(
        """query B($id: String!) { partitionBackfillOrError(backfillId: $id) {
             __typename ... on PartitionBackfill { id partitionNames assetSelection { path } } } }""",
        {"id": backfill_id},
    )["partitionBackfillOrError"]
    assert data["__typename"] == "PartitionBackfill"
    assert data["partitionNames"] == ["2025-02-01", "2025-02-02", "2025-02-03"]
    assert data["assetSelection"] == [{"path": ["ducklake", "main", "daily_revenue"]}]
    dev.graphql("mutation C($id: String!) { cancelPartitionBackfill(backfillId: $id) { __typename } }", {"id": backfill_id})

    bad = subprocess.run([*cli, "--from", "2025-02-03", "--to", "2025-02-01"], capture_output=True, text=True, timeout=120)
    assert bad.returncode == 1 and "comes after" in bad.stderr
    nopool = subprocess.run([sys.executable, "-m", "lineage_defs.cli", "backfill", "ducklake://main/orders", "--url", dev.url,
                             "--from", "2025-02-01", "--to", "2025-02-02", "--concurrency", "2"], capture_output=True, text=True, timeout=120)
    assert nopool.returncode == 2 and "needs a pool" in nopool.stderr


@pytest.mark.daemon
def test_backfill_cli_waits_shows_progress_and_restores_the_pool_limit(dev: DagsterDev) -> None:
    """`--concurrency` sets the pool's limit for this backfill only; `--wait` follows each partition to the end."""
    import subprocess
    import sys

    limit = "query L { instance { concurrencyLimit(concurrencyKey: \"ingest\") { limit usingDefaultLimit } } }"
    assert dev.graphql(limit, {})["instance"]["concurrencyLimit"]["usingDefaultLimit"] is True
    cli = [sys.executable, "-m", "lineage_defs.cli", "backfill", "--url", dev.url]
    # both at once: each waits on the backfill daemon's 30 s cycle
    ok_proc = subprocess.Popen([*cli, "s3:///raw/events/{partition}.csv", "--from", "2025-03-01", "--to", "2025-03-02", "--concurrency", "1"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    # no raw export for that day yet: the partition fails, the command says which and exits 1
    bad_proc = subprocess.Popen([*cli, ORDERS, "--from", "2025-03-05", "--to", "2025-03-05", "--wait"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    ok_out, ok_err = ok_proc.communicate(timeout=300)
    bad_out, bad_err = bad_proc.communicate(timeout=300)

    assert ok_proc.returncode == 0, ok_out + ok_err
    assert "pool ingest: limit 1 for this backfill (was the default" in ok_err
    assert "[██] 2/2 materialized" in ok_err and "all 2 partitions materialized" in ok_err
    assert "pool ingest: limit restored to the default" in ok_err
    assert dev.graphql(limit, {})["instance"]["concurrencyLimit"]["usingDefaultLimit"] is True

    assert bad_proc.returncode == 1, bad_out + bad_err
    assert "[x] 0/1 materialized, 1 failed" in bad_err and "not materialized: 2025-03-05" in bad_err
    # and why, partition by partition: the failed run's own error line
    assert "  2025-03-05: shop/orders.sql:" in bad_err, bad_err
    why = next(line for line in bad_err.splitlines() if line.startswith("  2025-03-05: "))
    assert "input not there yet: s3:///raw/orders/{partition}.csv partition 2025-03-05" in why and "(run " in why, why
