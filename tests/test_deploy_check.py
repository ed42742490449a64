"""`lineage-defs check` warns when runs execute on other machines but the project still keeps state on local disk."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from lineage_defs.deploy import local_state_warnings, remote_runs
from lineage_defs.project import load_project
from lineage_defs.settings import LineageSettings
from triggers_support import write_steps

STEPS = {
    "lake/orders.sql": """-- pipeline
-- on webhook name=orders
-- materialize ducklake://main/orders append
SELECT value FROM _events
""",
    "lake/daily.sql": """-- pipeline
-- materialize duckdb://warehouse/daily
SELECT count(*) AS n FROM lake.main.orders
""",
}
POSTGRES_INSTANCE = "storage:\n  postgres:\n    postgres_url: postgresql+psycopg2://u@db/dagster\n"


def _home(tmp: Path, text: str) -> str:
    home = tmp / "dagster_home"
    home.mkdir(exist_ok=True)
    (home / "dagster.yaml").write_text(text)
    return str(home)


def test_a_remote_instance_is_recognised_by_its_storage_or_launcher(tmp_path: Path) -> None:
    assert remote_runs({}) is None
    assert remote_runs({"DAGSTER_HOME": _home(tmp_path, "telemetry:\n  enabled: false\n")}) is None  # SQLite storage: one machine
    assert "PostgreSQL" in (remote_runs({"DAGSTER_HOME": _home(tmp_path, POSTGRES_INSTANCE)}) or "")
    per_store = "run_storage:\n  module: dagster_postgres.run_storage\n  class: PostgresRunStorage\n"
    assert "run storage on PostgreSQL" in (remote_runs({"DAGSTER_HOME": _home(tmp_path, per_store)}) or "")
    k8s = "run_launcher:\n  module: dagster_k8s\n  class: K8sRunLauncher\n"
    assert "dagster_k8s" in (remote_runs({"DAGSTER_HOME": _home(tmp_path, k8s)}) or "")


def test_each_local_part_is_one_warning_naming_the_step_and_the_fix(tmp_path: Path) -> None:
    pipelines = write_steps(tmp_path / "pipelines", STEPS)
    settings = LineageSettings(pipelines_dir=str(pipelines), state_dir=str(tmp_path / "state"), use_cache=False)
    project = load_project(str(pipelines), settings)
    assert project.errors == ()
    remote = {"DAGSTER_HOME": _home(tmp_path, POSTGRES_INSTANCE)}
    assert local_state_warnings(project, settings, {}) == []  # a local instance: the embedded defaults are right
    warned = {w.headline() for w in local_state_warnings(project, settings, remote)}
    assert len(warned) == 4, warned
    event = next(w for w in warned if "event store" in w)
    assert event.startswith("lake/orders.sql:2:") and "set LINEAGE_EVENTS_DSN" in event
    catalog = next(w for w in warned if "catalog is a local file" in w)
    assert "(and 1 more step)" in catalog and "LINEAGE_DUCKLAKE_CATALOG=postgres:" in catalog
    assert any("data files are on local disk" in w and "LINEAGE_DUCKLAKE_DATA_PATH=s3://" in w for w in warned)
    assert any(w.startswith("lake/daily.sql: ") and "duckdb://warehouse is the local file" in w for w in warned)
    shared = settings.replace(events_dsn="host=db dbname=events", ducklake_catalog="postgres:host=db dbname=lake", ducklake_data_path="s3://lake/data/")
    left = [w.headline() for w in local_state_warnings(project, shared, remote)]
    assert len(left) == 1 and "duckdb://warehouse" in left[0]


def test_check_prints_the_warnings_and_still_succeeds(tmp_path: Path) -> None:
    pipelines = write_steps(tmp_path / "pipelines", STEPS)
    env = {**os.environ, "LINEAGE_STATE_DIR": str(tmp_path / "state"), "DAGSTER_HOME": _home(tmp_path, POSTGRES_INSTANCE)}
    env.pop("LINEAGE_EVENTS_DSN", None)
    cli = str(Path(sys.executable).parent / "lineage-defs")
    out = subprocess.run([cli, "check", str(pipelines), "--no-cache"], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert "warning: runs execute on other machines" in out.stderr and "set LINEAGE_EVENTS_DSN" in out.stderr
    assert "2 steps, 0 errors, 4 warnings" in out.stdout
    env["LINEAGE_EVENTS_DSN"] = "host=db dbname=events"
    out = subprocess.run([cli, "check", str(pipelines), "--no-cache"], env=env, capture_output=True, text=True, timeout=300)
    assert "LINEAGE_EVENTS_DSN" not in out.stderr and "2 steps, 0 errors, 3 warnings" in out.stdout


CELERY = {"LINEAGE_CELERY_BROKER_URL": "redis://127.0.0.1:6399/0", "LINEAGE_CELERY_BACKEND_URL": "redis://127.0.0.1:6399/1"}


def test_the_celery_broker_setting_makes_every_job_use_the_celery_executor(tmp_path: Path) -> None:
    from dagster import Definitions

    from lineage_defs.assets.executor import default_executor
    from lineage_defs.location import build_definitions

    pipelines = write_steps(tmp_path / "pipelines", STEPS)
    base = {"LINEAGE_PIPELINES_DIR": str(pipelines), "LINEAGE_STATE_DIR": str(tmp_path / "state")}
    plain = build_definitions(settings=LineageSettings.from_env(base))
    assert plain.executor is default_executor  # a run of one step in the run worker (test_executor.py)
    settings = LineageSettings.from_env({**base, **CELERY})
    assert settings.celery_broker_url == CELERY["LINEAGE_CELERY_BROKER_URL"] and settings.secret_env["celery_broker_url"] == "LINEAGE_CELERY_BROKER_URL"
    defs = build_definitions(settings=settings)
    assert isinstance(defs, Definitions) and defs.executor is not None and defs.executor.name == "celery"
    assert defs.resolve_implicit_global_asset_job_def().executor_def.name == "celery"


def test_a_celery_executor_with_local_state_is_warned_with_the_variable_to_set(tmp_path: Path) -> None:
    pipelines = write_steps(tmp_path / "pipelines", STEPS)
    settings = LineageSettings(pipelines_dir=str(pipelines), state_dir=str(tmp_path / "state"), use_cache=False, celery_broker_url=CELERY["LINEAGE_CELERY_BROKER_URL"])
    project = load_project(str(pipelines), settings)
    # no DAGSTER_HOME: Dagster's storage, the event store, the lake and the duckdb file are all local
    warned = [w.headline() for w in local_state_warnings(project, settings, {})]
    assert len(warned) == 5, warned
    assert all("steps run on Celery workers (LINEAGE_CELERY_BROKER_URL)" in w for w in warned)
    storage = next(w for w in warned if "Dagster's storage is not on PostgreSQL" in w)
    assert storage.startswith("$DAGSTER_HOME/dagster.yaml: ") and "storage: postgres:" in storage
    assert any("set LINEAGE_EVENTS_DSN" in w for w in warned)
    assert any("LINEAGE_DUCKLAKE_CATALOG=postgres:" in w for w in warned)
    # Dagster on PostgreSQL, the event store and the lake remote: only the duckdb:// file is left
    remote = {"DAGSTER_HOME": _home(tmp_path, POSTGRES_INSTANCE)}
    shared = settings.replace(events_dsn="host=db dbname=events", ducklake_catalog="postgres:host=db dbname=lake", ducklake_data_path="s3://b/lake/")
    left = [w.headline() for w in local_state_warnings(project, shared, remote)]
    assert len(left) == 1 and "duckdb://warehouse is the local file" in left[0], left
    # the same setup without a Celery executor or a remote instance: nothing to warn about
    assert local_state_warnings(project, settings.replace(celery_broker_url=None), {}) == []


def test_event_steps_on_an_instance_that_would_never_fail_a_dead_run_are_warned(tmp_path: Path) -> None:
    """A launcher other than Dagster's default (whose runs the event sensors check themselves) without run
    monitoring: a batch run whose worker died would stay in progress — `check` says what to add."""
    from lineage_defs.deploy import dead_run_warnings

    project = load_project(write_steps(tmp_path / "p", STEPS), LineageSettings(state_dir=str(tmp_path / "state")))
    assert dead_run_warnings(project, {}) == [], "no DAGSTER_HOME"
    (tmp_path / "plain").mkdir()
    assert dead_run_warnings(project, {"DAGSTER_HOME": str(tmp_path / "plain")}) == [], "no dagster.yaml: the default launcher, judged by the sensors"
    docker = "run_launcher:\n  module: dagster_docker\n  class: DockerRunLauncher\n"
    (w,) = dead_run_warnings(project, {"DAGSTER_HOME": _home(tmp_path, docker)})
    text = w.render()
    assert w.severity == "warning" and "lake/orders.sql runs on events" in text and "dagster_docker.DockerRunLauncher" in text
    assert "run_monitoring: {enabled: true}" in text and "run_retries: {enabled: true}" in text and "dagster.yaml" in text
    assert dead_run_warnings(project, {"DAGSTER_HOME": _home(tmp_path, docker + "run_monitoring:\n  enabled: true\n")}) == []
    shipped = Path(__file__).parent.parent / "dagster_home"
    assert dead_run_warnings(project, {"DAGSTER_HOME": str(shipped)}) == [], "the repository's own instance"
    untriggered = load_project(write_steps(tmp_path / "q", {"lake/daily.sql": STEPS["lake/daily.sql"]}), LineageSettings(state_dir=str(tmp_path / "state")))
    assert dead_run_warnings(untriggered, {"DAGSTER_HOME": _home(tmp_path, docker)}) == [], "nothing runs on events"
