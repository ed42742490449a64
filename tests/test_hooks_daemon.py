"""Hooks (SPEC section 13) under the real `dagster-daemon`: one daemon for the module.

The steps run in this process (``execute_in_process`` on the daemon's instance, as `dagster asset
materialize` does); the daemon's run-status sensors see them finish and launch the hook jobs. Each hook
appends its ``LINEAGE_HOOK_CONTEXT`` to a file: the assertions read what the hooks themselves wrote.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from dagster import AssetKey, DagsterRunStatus, Definitions

from lineage_defs.location import build_definitions
from lineage_defs.sensors.hooks import FAILURE_SENSOR, HOOK_TAG, SUCCESS_SENSOR
from lineage_defs.settings import LineageSettings
from services import Daemon, wait_for
from triggers_support import evaluated_once, finished, runs, ticks_since, write_steps

pytestmark = pytest.mark.daemon

UI = "http://ui.example.test:3000"


def _record(out: Path, name: str, fail: bool = False) -> str:
    """A Python hook appending its context to ``out/<name>.jsonl`` (then failing, if ``fail``)."""
    return f"# hook\nimport os, sys\nwith open({str(out / (name + '.jsonl'))!r}, 'a') as f:\n    f.write(os.environ['LINEAGE_HOOK_CONTEXT'] + '\\n')\n" + ("sys.exit('this hook always fails')\n" if fail else "")


def _step(name: str, data: Path, hooks: str) -> str:
    return f"-- pipeline\n-- trigger manual\n-- materialize duckdb://warehouse/{name}\n{hooks}SELECT * FROM read_json_auto('{data}')\n"


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    tmp = tmp_path_factory.mktemp("hooks-e2e")
    out, data = tmp / "out", tmp / "data"
    out.mkdir()
    data.mkdir()
    (data / "stable.json").write_text('[{"x": 1}]')
    steps = {
        "shop/orders.sql": _step("orders", data / "orders.json", "-- on_failure hooks/record.py\n"),
        "shop/counts.sql": _step("counts", data / "counts.json", "-- on_failure hooks/third.py after=3\n-- on_recovery hooks/recovered.py\n"),
        "shop/stable.sql": _step("stable", data / "stable.json", "-- on_success hooks/broken.py\n"),
        "shop/hooks/record.py": _record(out, "record"),
        "shop/hooks/third.py": _record(out, "third"),
        "shop/hooks/recovered.py": _record(out, "recovered"),
        "shop/hooks/broken.py": _record(out, "broken", fail=True),
    }
    pipelines = write_steps(tmp / "pipelines", steps)
    state = tmp / "state"
    daemon = Daemon(tmp, pipelines, state, {"LINEAGE_UI_URL": UI})
    daemon.start()
    try:
        instance = daemon.instance()
        # a run-status sensor's first tick only sets its cursor: a run that ended before it is not seen
        for sensor in (FAILURE_SENSOR, SUCCESS_SENSOR):
            wait_for(f"{sensor}'s first tick", lambda s=sensor: evaluated_once(instance, s), 300, daemon.log_tail)
        defs = build_definitions(settings=LineageSettings(pipelines_dir=str(pipelines), state_dir=str(state)))
        yield {"daemon": daemon, "instance": instance, "defs": defs, "out": out, "data": data}
    finally:
        daemon.stop()


def _run(w: dict[str, Any], table: str) -> Any:
    """Materialize one step's table in this process (on the daemon's instance); returns its run."""
    defs: Definitions = w["defs"]
    result = defs.resolve_implicit_global_asset_job_def().execute_in_process(
        instance=w["instance"], asset_selection=[AssetKey(["duckdb", "warehouse", table])], raise_on_error=False
    )
    return w["instance"].get_run_by_id(result.run_id)


def _written(w: dict[str, Any], hook: str) -> list[dict[str, Any]]:
    path = w["out"] / f"{hook}.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def _settled(w: dict[str, Any], sensor: str) -> None:
    """Two ticks of ``sensor`` that began after now, and every run (hook runs included) finished."""
    since = time.time()
    wait_for(f"two ticks of {sensor}", lambda: ticks_since(w["instance"], sensor, since) >= 2, 180, w["daemon"].log_tail)
    wait_for("every run finished", lambda: finished(w["instance"]), 180, w["daemon"].log_tail)


def test_on_failure_runs_once_per_failed_run_with_the_documented_context(world: dict[str, Any]) -> None:
    first = _run(world, "orders")
    assert first.status is DagsterRunStatus.FAILURE
    ctx = wait_for("the on_failure hook's context", lambda: _written(world, "record"), 240, world["daemon"].log_tail)[0]
    assert ctx["event"] == "failure" and ctx["hook"] == "shop/hooks/record.py"
    assert ctx["step"] == "shop__orders" and ctx["script"] == "shop/orders.sql" and ctx["pipeline"] == "shop"
    assert ctx["asset_keys"] == ["duckdb/warehouse/orders"] and ctx["partitions"] == []
    assert ctx["run_id"] == first.run_id and ctx["attempt"] == 1 and ctx["failures_in_a_row"] == 1
    assert "No files found" in ctx["error"] and "shop/orders.sql:" in ctx["error"], ctx["error"]  # the failing statement, located
    assert ctx["ui_url"] == f"{UI}/runs/{first.run_id}"

    _settled(world, FAILURE_SENSOR)  # later ticks see the same failed run: no second hook run
    assert [c["run_id"] for c in _written(world, "record")] == [first.run_id]
    assert len(runs(world["instance"], **{HOOK_TAG: "shop/hooks/record.py"})) == 1

    second = _run(world, "orders")
    wait_for("the second failure's hook", lambda: len(_written(world, "record")) >= 2, 240, world["daemon"].log_tail)
    _settled(world, FAILURE_SENSOR)
    assert [c["run_id"] for c in _written(world, "record")] == [first.run_id, second.run_id]
    assert _written(world, "record")[1]["failures_in_a_row"] == 2


def test_after_3_waits_for_the_third_failure_and_on_recovery_fires_once(world: dict[str, Any]) -> None:
    for _ in range(2):
        assert _run(world, "counts").status is DagsterRunStatus.FAILURE
    _settled(world, FAILURE_SENSOR)
    assert _written(world, "third") == []  # two failures in a row: not yet
    third = _run(world, "counts")
    ctx = wait_for("the after=3 hook", lambda: _written(world, "third"), 240, world["daemon"].log_tail)[0]
    assert ctx["run_id"] == third.run_id and ctx["failures_in_a_row"] == 3
    assert _written(world, "recovered") == []

    (world["data"] / "counts.json").write_text('[{"x": 1}]')
    ok = _run(world, "counts")
    assert ok.status is DagsterRunStatus.SUCCESS
    ctx = wait_for("the on_recovery hook", lambda: _written(world, "recovered"), 240, world["daemon"].log_tail)[0]
    assert ctx["event"] == "recovery" and ctx["run_id"] == ok.run_id and ctx["error"] is None
    assert _run(world, "counts").status is DagsterRunStatus.SUCCESS  # a success after a success recovers nothing
    _settled(world, SUCCESS_SENSOR)
    assert [c["run_id"] for c in _written(world, "recovered")] == [ok.run_id]
    assert len(_written(world, "third")) == 1


def test_a_failing_hook_is_retried_and_reported_and_the_step_run_stays_green(world: dict[str, Any]) -> None:
    step = _run(world, "stable")
    assert step.status is DagsterRunStatus.SUCCESS

    def hook_run() -> Any:
        found = runs(world["instance"], **{HOOK_TAG: "shop/hooks/broken.py"})
        return found[0] if found and found[0].status is DagsterRunStatus.FAILURE else None

    failed = wait_for("the hook's run to fail after its retries", hook_run, 300, world["daemon"].log_tail)
    assert failed.tags["lineage/hook_run"] == step.run_id
    attempts = _written(world, "broken")
    assert len(attempts) == 1 + LineageSettings().hook_retries and {a["run_id"] for a in attempts} == {step.run_id}
    assert world["instance"].get_run_by_id(step.run_id).status is DagsterRunStatus.SUCCESS
    _settled(world, SUCCESS_SENSOR)
    assert len(runs(world["instance"], **{HOOK_TAG: "shop/hooks/broken.py"})) == 1  # one hook run, its op retried inside it


def test_a_daemon_killed_right_after_the_failure_runs_the_hook_exactly_once(world: dict[str, Any]) -> None:
    before = len(_written(world, "record"))
    failed = _run(world, "orders")
    world["daemon"].crash()  # the whole process group, SIGKILL, before or while its sensor handles the failure
    world["daemon"].start()
    wait_for("the hook after the restart", lambda: len(_written(world, "record")) > before, 300, world["daemon"].log_tail)
    _settled(world, FAILURE_SENSOR)
    assert [c["run_id"] for c in _written(world, "record")][before:] == [failed.run_id]
    assert len(runs(world["instance"], **{"lineage/hook_run": failed.run_id})) == 1
