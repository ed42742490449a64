"""A run cancelled from the UI stops its step mid-run and writes nothing, whichever the language.

One `dagster dev` for the module (Dagster's default run launcher: each run in a process of the code
server, a one-step run's step in that process itself). The runs are cancelled with the UI's own
GraphQL mutation (``terminateRun``) while their step is working: the SQL step as soon as it starts,
where Dagster's interrupt is most often lost (``run.cancel``), the others in their sleep; a Bash step's script and every process it started stop too (SIGINT, then
SIGKILL for a script that ignores it), so nothing of a cancelled step writes after its run ended.
"""

from __future__ import annotations

import os
import shutil
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from lineage_defs.run.launch import GRACE
from lineage_defs.settings import LineageSettings
from lineage_defs.run.substrates import Session
from webserver import DagsterDev, free_port, wait_for_location

pytestmark = pytest.mark.daemon

REPO = Path(__file__).resolve().parents[1]
SLEEP = GRACE + 7  # how long each script works before it would write: well past the SIGKILL
LAUNCH = """
mutation($params: ExecutionParams!) {
  launchRun(executionParams: $params) {
    __typename
    ... on LaunchRunSuccess { run { runId } }
    ... on PythonError { message }
    ... on Error { message }
  }
}
"""
STATUS = """query($id: ID!) { runOrError(runId: $id) { ... on Run { status endTime stepStats { stepKey status } } } }"""
TERMINATE = """mutation($id: String!) { terminateRun(runId: $id) { __typename ... on TerminateRunFailure { message } ... on PythonError { message } } }"""


def steps(out: Path) -> dict[str, str]:
    """Four steps that work for a while, then write: a marker file, or their table."""
    bash = """
        # pipeline
        # materialize manual duckdb://warehouse/{name}
        {trap}echo started > {out}/{name}.started
        sleep {sleep}
        echo written > {out}/{name}.written
    """
    return {
        # about 4e10 rows to count: minutes of work, unless the query is interrupted
        "x/slow_sql.sql": f"""
            -- pipeline
            -- materialize ducklake://main/slow_sql
            SELECT count(*) AS n FROM range(40000000000) t(i) WHERE i % 7 = 3
        """,
        "x/slow_py.py": f"""
            # pipeline
            # materialize ducklake://main/slow_py
            import time
            import pandas as pd
            from lineage_defs.runtime import write
            open({str(out / "slow_py.started")!r}, "w").close()
            time.sleep({SLEEP})
            open({str(out / "slow_py.written")!r}, "w").close()
            write(pd.DataFrame({{"n": [1]}}))
        """,
        "x/slow_sh.sh": bash.format(name="slow_sh", trap="", out=out, sleep=SLEEP),
        # ignores SIGINT (and so does its `sleep`, which inherits that): only SIGKILL stops it
        "x/stubborn_sh.sh": bash.format(name="stubborn_sh", trap="trap '' INT\n", out=out, sleep=SLEEP),
    }


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    tmp = tmp_path_factory.mktemp("cancel")
    out = tmp / "out"
    out.mkdir()
    for rel, text in steps(out).items():
        (tmp / "p" / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp / "p" / rel).write_text(textwrap.dedent(text).lstrip())
    home = tmp / "home"
    home.mkdir()
    shutil.copy(REPO / "dagster_home" / "dagster.yaml", home / "dagster.yaml")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LINEAGE_", "DAGSTER_"))}
    env.update(LINEAGE_PIPELINES_DIR=str(tmp / "p"), LINEAGE_STATE_DIR=str(tmp / "s"), DAGSTER_HOME=str(home))
    port = free_port()
    dagster = Path(sys.executable).with_name("dagster")
    dev = DagsterDev([str(dagster), "dev", "-w", str(REPO / "workspace.yaml"), "-h", "127.0.0.1", "-p", str(port)], REPO, env, port, tmp / "dev.log")
    dev.start()
    try:
        wait_for_location(dev, "lineage_defs", 300)
        yield {"dev": dev, "out": out, "settings": LineageSettings(state_dir=str(tmp / "s"), pipelines_dir=str(tmp / "p"))}
    finally:
        dev.stop()


def _launch(dev: DagsterDev, key: list[str]) -> str:
    selector = {"jobName": "__ASSET_JOB", "repositoryName": "__repository__", "repositoryLocationName": "lineage_defs", "assetSelection": [{"path": key}]}
    launched = dev.graphql(LAUNCH, {"params": {"selector": selector}})["launchRun"]
    assert launched["__typename"] == "LaunchRunSuccess", launched
    return str(launched["run"]["runId"])


def _status(dev: DagsterDev, run_id: str) -> dict[str, Any]:
    return dev.graphql(STATUS, {"id": run_id})["runOrError"]


def _running_processes(text: str) -> list[str]:
    """Command lines of live processes that mention ``text`` (this test's own excluded)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) != os.getpid():
            try:
                cmd = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
                state = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[0]
            except OSError:
                continue
            if text in cmd and state not in ("Z", "X"):
                found.append(f"{entry}: {cmd}")
    return found


def test_a_cancelled_run_stops_its_step_and_writes_nothing(world: dict[str, Any]) -> None:
    dev, out = world["dev"], world["out"]
    keys = {
        "slow_sql": ["ducklake", "main", "slow_sql"],
        "slow_py": ["ducklake", "main", "slow_py"],
        "slow_sh": ["duckdb", "warehouse", "slow_sh"],
        "stubborn_sh": ["duckdb", "warehouse", "stubborn_sh"],
    }
    runs = {name: _launch(dev, key) for name, key in keys.items()}

    def working(name: str) -> bool:
        if name == "slow_sql":  # cancelled as soon as its step starts: the SIGINT's interrupt is most often lost there
            return any(s["status"] == "IN_PROGRESS" for s in _status(dev, runs[name])["stepStats"])
        return (out / f"{name}.started").exists()

    cancelled: dict[str, float] = {}
    deadline = time.monotonic() + 240
    while len(cancelled) < len(runs):  # each run is cancelled as soon as its step works
        assert time.monotonic() < deadline, f"steps never started: {set(runs) - set(cancelled)}\n{dev.log_tail()}"
        for name in runs.keys() - cancelled.keys():
            if working(name):
                answer = dev.graphql(TERMINATE, {"id": runs[name]})["terminateRun"]
                assert answer["__typename"] == "TerminateRunSuccess", answer
                cancelled[name] = time.time()  # compared with the run's own end time
        time.sleep(0.2)

    for name, run_id in runs.items():
        status = dev.wait_until(f"{name} ended", lambda: (s := _status(dev, run_id))["status"] in ("CANCELED", "FAILURE", "SUCCESS") and s, 120, 0.3)
        took = status["endTime"] - cancelled[name]
        assert status["status"] == "CANCELED", (name, status)
        # long before the step would have finished on its own (the query: minutes; the scripts: SLEEP seconds)
        assert took < SLEEP, (name, took)
        print(f"{name}: CANCELED {took:.1f}s after terminateRun")

    # past the moment each script would have written: nothing did, and nothing of them still runs
    time.sleep(max(0.0, max(cancelled.values()) + SLEEP + 1 - time.time()))
    assert sorted(p.name for p in out.iterdir()) == ["slow_py.started", "slow_sh.started", "stubborn_sh.started"]
    for script in ("slow_sh.sh", "stubborn_sh.sh"):  # (a Python step's process is `python -m lineage_defs.run.launch`)
        assert _running_processes(f"x/{script}") == [], script
    with Session(world["settings"]) as session:
        tables = {r[0] for r in session.conn.execute("SELECT table_name FROM information_schema.tables WHERE table_catalog = 'lake'").fetchall()}
    assert not tables & {"slow_sql", "slow_py"}, tables
