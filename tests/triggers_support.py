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
