"""Where a run's steps execute under the code location's default executor (lineage_defs.assets.executor).

The runs go through ``execute_job`` of a reconstructable job on a persistent instance, as a run worker
executes them (``materialize`` / ``execute_in_process`` swap in an in-process executor of their own and
would prove nothing): this process is the run worker, and a step's events carry the pid it ran in.
"""

from __future__ import annotations

import os
import threading
import time
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import dagster as dg
import pytest

from lineage_defs.assets.executor import default_executor
from lineage_defs.location import build_definitions
from lineage_defs.settings import LineageSettings

STEPS = {
    "wh/first.sql": """
        -- pipeline
        -- materialize duckdb://warehouse/first
        SELECT 1 AS n
    """,
    "wh/pooled.sql": """
        -- pipeline
        -- pool narrow
        -- materialize duckdb://warehouse/pooled
        SELECT 3 AS n
    """,
    "wh/second.sql": """
        -- pipeline
        -- materialize duckdb://warehouse/second
        SELECT n + 1 AS n FROM warehouse.main.first
    """,
}
FIRST, SECOND, FLAKY, POOLED = (dg.AssetKey(["duckdb", "warehouse", n]) for n in ("first", "second", "flaky", "pooled"))


def asset_job() -> dg.JobDefinition:
    """An asset job of the code location from the environment (a step's own process builds it again;
    Dagster does not reconstruct its implicit ``__ASSET_JOB`` from a function)."""
    mine = dg.Definitions(jobs=[dg.define_asset_job("everything")])  # the code location's executor
    return build_definitions(settings=LineageSettings.from_env(os.environ), defs=mine).resolve_job_def("everything")


@pytest.fixture
def instance(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[dg.DagsterInstance]:
    marker = tmp_path / "attempts"
    from conftest import flaky_step  # here, not at the top: a step's own process imports this module from the repository root

    steps = {**STEPS, "wh/flaky.py": flaky_step(marker, "duckdb://warehouse/flaky", retries=1)}
    for rel, text in steps.items():
        (tmp_path / "p" / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "p" / rel).write_text(textwrap.dedent(text).lstrip())
    monkeypatch.setenv("LINEAGE_PIPELINES_DIR", str(tmp_path / "p"))  # the steps' own processes inherit it
    monkeypatch.setenv("LINEAGE_STATE_DIR", str(tmp_path / "s"))
    with dg.instance_for_test() as inst:
        yield inst


def _job() -> Any:
    """``asset_job`` as a step's own process finds it: ``tests.test_executor`` from the repository root
    (Dagster's loader drops ``sys.path[0]``, where pytest put the tests folder)."""
    return dg.build_reconstructable_job("tests.test_executor", "asset_job", reconstructor_working_directory=str(Path(__file__).parents[1]))


def _execute(instance: dg.DagsterInstance, keys: list[dg.AssetKey], run_config: dict[str, Any] | None = None) -> tuple[bool, dict[str, int], str]:
    """Execute ``keys`` in one run: success, each step's STEP_START pid, the executor's engine message."""
    with dg.execute_job(_job(), instance, asset_selection=keys, run_config=run_config, raise_on_error=False) as result:
        logs = instance.all_logs(result.run_id)
        pids = {e.step_key: e.dagster_event.pid for e in logs if e.dagster_event and e.dagster_event.event_type_value == "STEP_START" and e.step_key}
        engine = next(e.user_message for e in logs if e.user_message.startswith("Executing steps "))
        return result.success, pids, engine


def test_your_own_executor_wins_and_the_requirements_are_dagsters(instance: dg.DagsterInstance) -> None:
    settings = LineageSettings.from_env(os.environ)
    mine = build_definitions(settings=settings, defs=dg.Definitions(executor=dg.in_process_executor))  # no "both have an executor"
    assert mine.resolve_implicit_global_asset_job_def().executor_def is dg.in_process_executor
    # as with Dagster's default executor: `multiprocess` (the default) needs a persistent instance, `in_process` does not
    ephemeral = dg.DagsterInstance.ephemeral()
    with dg.execute_job(_job(), ephemeral, asset_selection=[FIRST], raise_on_error=False) as result:
        assert not result.success
        said = [str(e.dagster_event.event_specific_data) for e in ephemeral.all_logs(result.run_id) if e.dagster_event]
        assert any("multiple processes with an ephemeral DagsterInstance" in s for s in said), said
    in_process = {"execution": {"config": {"in_process": {}}}}
    with dg.execute_job(_job(), ephemeral, asset_selection=[FIRST], run_config=in_process) as result:
        assert result.success


def test_a_one_step_run_executes_in_the_run_worker_and_more_steps_one_process_each(instance: dg.DagsterInstance) -> None:
    assert asset_job().executor_def is default_executor
    ok, pids, engine = _execute(instance, [FIRST])
    assert ok and pids == {"wh__first": os.getpid()}, (pids, engine)
    assert engine == f"Executing steps in process (pid: {os.getpid()})"

    # two steps: Dagster's multiprocess executor, a child process per step
    ok, pids, engine = _execute(instance, [FIRST, SECOND])
    assert ok and set(pids) == {"wh__first", "wh__second"}, (pids, engine)
    assert os.getpid() not in pids.values() and pids["wh__first"] != pids["wh__second"]
    assert engine.startswith("Executing steps using multiprocess executor")

    # `multiprocess:` in the run's own config: a process even for one step (max_concurrent etc. still apply)
    ok, pids, engine = _execute(instance, [SECOND], {"execution": {"config": {"multiprocess": {"max_concurrent": 1}}}})
    assert ok and list(pids) == ["wh__second"] and pids["wh__second"] != os.getpid(), (pids, engine)
    # `in_process:` (the trigger sensors' run config): every step in the run worker, as with Dagster's default
    ok, pids, engine = _execute(instance, [FIRST, SECOND], {"execution": {"config": {"in_process": {}}}})
    assert ok and set(pids.values()) == {os.getpid()}, (pids, engine)


def test_a_one_step_run_in_the_run_worker_still_retries(instance: dg.DagsterInstance, tmp_path: Path) -> None:
    ok, pids, engine = _execute(instance, [FLAKY])
    assert engine == f"Executing steps in process (pid: {os.getpid()})"
    assert ok and (tmp_path / "attempts").read_text() == "2"  # the `# retry 1` policy ran it again, in this process
    (run,) = instance.get_runs()
    kinds = [e.dagster_event.event_type_value for e in instance.all_logs(run.run_id) if e.dagster_event and e.step_key]
    assert "STEP_UP_FOR_RETRY" in kinds and "STEP_RESTARTED" in kinds, kinds


def test_a_one_step_run_in_the_run_worker_waits_for_a_slot_of_its_pool(instance: dg.DagsterInstance) -> None:
    storage = instance.event_log_storage
    assert storage.supports_global_concurrency_limits
    storage.set_concurrency_slots("narrow", 1)
    assert storage.claim_concurrency_slot("narrow", "another-run", "its_step").is_claimed  # the pool's one slot is taken
    done: list[tuple[bool, dict[str, int], str]] = []
    worker = threading.Thread(target=lambda: done.append(_execute(instance, [POOLED])))
    worker.start()
    deadline = time.monotonic() + 120
    while storage.get_concurrency_info("narrow").pending_step_count == 0 and worker.is_alive() and time.monotonic() < deadline:
        time.sleep(0.2)
    time.sleep(2)  # waiting, not executing: no step starts while the slot is taken
    (run,) = instance.get_runs()
    started = [e for e in instance.all_logs(run.run_id) if e.dagster_event and e.dagster_event.event_type_value == "STEP_START"]
    assert worker.is_alive() and started == [] and storage.get_concurrency_info("narrow").pending_step_count == 1
    storage.free_concurrency_slots_for_run("another-run")
    worker.join(120)
    (ok, pids, engine), = done
    assert ok and pids == {"wh__pooled": os.getpid()}, (pids, engine)
    assert storage.get_concurrency_info("narrow").active_slot_count == 0  # given back at the step's end
