"""What the trigger end-to-end tests share: reading targets, run queries, re-execution through the workspace."""

from __future__ import annotations

import os
from unittest import mock
from pathlib import Path
from typing import Any

from lineage_defs.events.store import EventStore
from lineage_defs.settings import LineageSettings
from lineage_defs.run.substrates import Session


def write_steps(root: Path, steps: dict[str, str]) -> Path:
    """A pipelines folder holding ``steps`` (relative path → script text)."""
    for rel, text in steps.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


def stored(state: Path, stream: str) -> int:
    """How many events the state dir's event store holds for ``stream`` (0 before it exists)."""
    if not LineageSettings(state_dir=str(state)).events_store.exists():
        return 0
    with EventStore(LineageSettings(state_dir=str(state)).events_store) as store:
        return store.counts(stream)["events"]


def table_rows(state: Path, uri: str, columns: str = "*") -> list[tuple[Any, ...]]:
    """The rows of a table target (takes the state dir's lock like a run does); [] before it exists."""
    if not (state / "warehouse.duckdb").exists() and uri.startswith("duckdb://"):
        return []
    with Session(LineageSettings(state_dir=str(state))) as s:
        sql = s.table_sql(uri)
        catalog, schema, table = (p.strip('"') for p in sql.split("."))
        n = s.conn.execute(
            "SELECT count(*) FROM duckdb_tables() WHERE database_name = $1 AND schema_name = $2 AND table_name = $3", [catalog, schema, table]
        ).fetchone()
        if not n or not n[0]:
            return []
        return list(s.conn.execute(f"SELECT {columns} FROM {sql} ORDER BY ALL").fetchall())


def runs(instance: Any, **tags: str) -> list[Any]:
    from dagster import RunsFilter

    return [r.dagster_run for r in instance.get_run_records(filters=RunsFilter(tags=tags) if tags else None)]


def finished(instance: Any) -> bool:
    from dagster import DagsterRunStatus

    pending = {DagsterRunStatus.QUEUED, DagsterRunStatus.NOT_STARTED, DagsterRunStatus.STARTING, DagsterRunStatus.STARTED}
    return not any(r.status in pending for r in runs(instance))


def reexecute(instance: Any, run_id: str, workspace: Path, env: dict[str, str]) -> str:
    """Re-execute a run (all steps) as the UI does, and wait for it; returns the new run's id.

    Uses Dagster's own re-execution path (``create_reexecuted_run``) on a
    workspace loaded here, with the code location's environment.
    """
    import time

    from dagster import DagsterRunStatus
    from dagster._core.execution.plan.resume_retry import ReexecutionStrategy
    from dagster._core.workspace.context import WorkspaceProcessContext
    from dagster._core.workspace.load_target import WorkspaceFileTarget
    from dagster._core.definitions.selector import JobSubsetSelector

    with mock.patch.dict(os.environ, env):  # the code location's environment, restored after
        with WorkspaceProcessContext(instance, WorkspaceFileTarget([str(workspace)])) as ctx:
            request = ctx.create_request_context()
            parent = instance.get_run_by_id(run_id)
            origin = parent.remote_job_origin.repository_origin
            location = request.get_code_location(origin.code_location_origin.location_name)
            job = location.get_job(
                JobSubsetSelector(
                    location_name=origin.code_location_origin.location_name,
                    repository_name=origin.repository_name,
                    job_name=parent.job_name,
                    op_selection=parent.op_selection,
                    asset_selection=list(parent.asset_selection) if parent.asset_selection else None,
                )
            )
            new = instance.create_reexecuted_run(
                request_context=request, parent_run=parent, code_location=location, remote_job=job, strategy=ReexecutionStrategy.ALL_STEPS
            )
            assert not new.tags.get("lineage/batch"), "the re-execution runs without the batch tag: the run finds it through its parent"
            instance.submit_run(new.run_id, request)
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline:
                run = instance.get_run_by_id(new.run_id)
                if run.status in (DagsterRunStatus.SUCCESS, DagsterRunStatus.FAILURE, DagsterRunStatus.CANCELED):
                    assert run.status == DagsterRunStatus.SUCCESS, f"re-execution {new.run_id} ended {run.status}"
                    return str(new.run_id)
                time.sleep(0.5)
            raise AssertionError(f"re-execution {new.run_id} did not finish")


def skip_reasons(instance: Any, sensor: str, limit: int = 5) -> list[str]:
    """The latest ticks' skip reasons of a sensor (newest first)."""
    states = [s for s in instance.all_instigator_state() if s.name == sensor]
    if not states:
        return []
    ticks = instance.get_ticks(states[0].instigator_origin_id, states[0].selector_id, limit=limit)
    return [t.skip_reason for t in ticks if t.skip_reason]


def evaluated_once(instance: Any, sensor: str) -> bool:
    """The sensor finished a tick (skipped or requested runs): an automation sensor's first tick only
    records what exists, so an update counts for its conditions only once this holds."""
    from dagster._core.scheduler.instigation import TickStatus

    states = [s for s in instance.all_instigator_state() if s.name == sensor]
    return bool(states) and bool(
        instance.get_ticks(states[0].instigator_origin_id, states[0].selector_id, limit=1, statuses=[TickStatus.SKIPPED, TickStatus.SUCCESS])
    )


def ticks_since(instance: Any, sensor: str, since: float) -> int:
    """How many ticks of a sensor started after ``since`` (a ``time.time()``) and finished (skipped or
    requested runs): each saw every update recorded before ``since``, and the runs it asked for exist.
    What "a few evaluations and nothing happened" waits for, however slow the machine."""
    from dagster._core.scheduler.instigation import TickStatus

    states = [s for s in instance.all_instigator_state() if s.name == sensor]
    if not states:
        return 0
    ticks = instance.get_ticks(states[0].instigator_origin_id, states[0].selector_id, after=since, statuses=[TickStatus.SKIPPED, TickStatus.SUCCESS])
    return sum(1 for t in ticks if t.timestamp > since)


GOOD_REGIONS = ("eu", "us")


def check_landed_once(daemon: Any, pipelines: Path, state: Path, *, rows_uri: str, stream: str, sensor: str, source: str, good: int, rejected: int) -> Any:
    """What every pull source's daemon-kill end-to-end test asserts once the source was drained: each of the ``good``
    messages (``{"region": GOOD_REGIONS[n % 2], "n": n}`` for n < good) exactly once in ``rows_uri``, in at least two
    batches; the ``rejected`` malformed ones (not JSON, NaN, an unsafe key) stored with their reasons, named in the
    sensor's skip reason (which starts with ``source``) and listed by `lineage-defs events`. Returns the instance."""
    import subprocess
    import sys

    from services import wait_for

    logs = daemon.log_tail
    wait_for(f"{good} rows", lambda: len(table_rows(state, rows_uri)) >= good, 240, logs)
    instance = daemon.instance()
    wait_for("all runs finished", lambda: finished(instance), 120, logs)
    rows = table_rows(state, rows_uri, "region, n")
    assert sorted(r[1] for r in rows) == list(range(good)), "every good message exactly once"
    assert all(r[0] == GOOD_REGIONS[r[1] % 2] for r in rows)
    assert len({r.tags["lineage/batch"] for r in runs(instance, **{"dagster/sensor_name": sensor})}) >= 2

    with EventStore(LineageSettings(state_dir=str(state)).events_store) as store:
        count, latest = store.rejected(stream, limit=10)
        assert store.counts(stream)["events"] == good + rejected
    assert count == rejected
    reasons = sorted(r.reason for r in latest)
    assert any("not usable JSON" in r for r in reasons) and any("NaN is not JSON" in r for r in reasons), reasons
    assert any('"abc\\n" holds characters' in r for r in reasons), reasons

    def told() -> Any:
        return next((r for r in skip_reasons(instance, sensor, 20) if "rejected" in r), None)

    reason = wait_for("a skip reason naming the rejected messages", told, 60, logs)
    assert f"{rejected} events rejected and will not run" in reason and reason.startswith(f"{source}: read "), reason
    listing = subprocess.run(
        [str(Path(sys.executable).parent / "lineage-defs"), "events", "--stream", stream],
        capture_output=True, text=True, timeout=120,
        env={**os.environ, "LINEAGE_STATE_DIR": str(state), "LINEAGE_PIPELINES_DIR": str(pipelines), "DAGSTER_HOME": str(daemon.home)},
    )
    assert listing.returncode == 0, listing.stderr
    assert f"{good + rejected} events stored, {good} batched, {rejected} rejected" in listing.stdout and "NaN is not JSON" in listing.stdout
    return instance
