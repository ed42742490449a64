"""Which parts of a setup still live on one machine's disk while runs execute elsewhere (``lineage-defs check``).

Runs execute elsewhere when the Dagster instance (``$DAGSTER_HOME/dagster.yaml``)
keeps its storage on PostgreSQL or launches runs in containers, or when steps
run on Celery workers (``LINEAGE_CELERY_BROKER_URL``): then every
run process, sensor and receiver may be on another machine, and whatever the
project keeps under the state dir — the SQLite event store, the embedded
lake's catalog and data, ``duckdb://`` files, default object storage — is a
different, private copy in each of them. Each such use is one warning naming
the step and the variable that moves it off local disk. Also (``dead_run_warnings``):
steps run on events on an instance where nothing would fail a batch run whose
worker died. No Dagster import: the instance's YAML is read as text, nothing
is created.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from lineage_defs import uris
from lineage_defs.errors import Location, SpecError
from lineage_defs.plan.spec import Project, ScriptStep
from lineage_defs.settings import ENV_VARS, LineageSettings

# Run launchers that start each run on another machine (a container or a pod).
_REMOTE_LAUNCHERS = ("dagster_k8s", "dagster_docker", "dagster_aws", "dagster_celery_k8s", "dagster_celery_docker")
_STORAGES = ("storage", "run_storage", "event_log_storage", "schedule_storage")


def _instance_yaml(env: Mapping[str, str] | None) -> tuple[Path, dict[str, Any]] | None:
    """``$DAGSTER_HOME/dagster.yaml`` and what it says; None without one (or when it is not a mapping)."""
    import yaml  # type: ignore[import-untyped]  # PyYAML (Dagster depends on it) ships no types; imported when `check` asks

    e = os.environ if env is None else env
    home = e.get("DAGSTER_HOME")
    path = Path(home) / "dagster.yaml" if home else None
    if path is None or not path.is_file():
        return None
    try:
        config: Any = yaml.safe_load(path.read_text()) or {}
    except (OSError, yaml.YAMLError):
        return None  # Dagster itself reports a broken instance file; this check has nothing to add
    return (path, config) if isinstance(config, dict) else None


def remote_runs(env: Mapping[str, str] | None = None) -> str | None:
    """Why runs of this instance may execute on other machines (None: the instance is a local one)."""
    found = _instance_yaml(env)
    if found is None:
        return None
    path, config = found
    for key in _STORAGES:
        section = config.get(key)
        if isinstance(section, dict) and ("postgres" in section or "dagster_postgres" in str(section.get("module", ""))):
            return f"{path} keeps Dagster's {key.replace('_', ' ')} on PostgreSQL"
    launcher = config.get("run_launcher")
    module = str(launcher.get("module", "")) if isinstance(launcher, dict) else ""
    if module.startswith(_REMOTE_LAUNCHERS):
        return f"{path} launches runs with {module}"
    return None


# Launchers whose runs the event sensors judge themselves when run monitoring is off (their workers are
# processes of a code server: ``dagster_storage.dead_worker``).
_DEFAULT_LAUNCHERS = {("dagster", "DefaultRunLauncher"), ("dagster._core.launcher", "DefaultRunLauncher"), ("lineage_defs.dagster_storage", "MonitoredRunLauncher")}


def dead_run_warnings(project: Project, env: Mapping[str, str] | None = None) -> list[SpecError]:
    """A warning when steps run on events but nothing in the instance would notice a batch run whose worker died:
    run monitoring off with a run launcher other than Dagster's default (whose runs the event sensors check)."""
    triggered = [s for s in project.steps if isinstance(s, ScriptStep) and s.events]
    found = _instance_yaml(env) if triggered else None
    if found is None:
        return []  # no dagster.yaml: Dagster's default launcher, judged by the sensors
    path, config = found
    launcher = config.get("run_launcher")
    module = str(launcher.get("module", "")) if isinstance(launcher, dict) else "dagster"
    cls = str(launcher.get("class", "")) if isinstance(launcher, dict) else "DefaultRunLauncher"
    monitoring = config.get("run_monitoring")
    if (module, cls) in _DEFAULT_LAUNCHERS or (isinstance(monitoring, dict) and monitoring.get("enabled") is True):
        return []
    step = triggered[0]
    others = f" (and {len(triggered) - 1} more step{'s' * (len(triggered) > 2)})" if len(triggered) > 1 else ""
    return [SpecError(
        f"{step.path}{others} runs on events, but {path} launches runs with {module}.{cls} and has no run monitoring: "
        "a batch run whose worker dies (a crash, an evicted pod) stays in progress and its batch never runs again",
        Location(str(path)), "add `run_monitoring: {enabled: true}` and `run_retries: {enabled: true}` to it (Dagster then fails such a run and retries it)",
        severity="warning",
    )]  # fmt: skip


def local_state_warnings(project: Project, settings: LineageSettings, env: Mapping[str, str] | None = None) -> list[SpecError]:
    """One warning per part of the project that stays on local disk while the instance runs elsewhere."""
    instance = remote_runs(env)
    celery = f"steps run on Celery workers ({ENV_VARS['celery_broker_url']})" if settings.celery_broker_url else None
    why = celery or instance
    if why is None:
        return []
    found: dict[str, tuple[Location, list[str], str]] = {}  # what → (first place, steps, fix)
    out = []
    if celery and (instance is None or "PostgreSQL" not in instance):
        # a worker writes its step's events into the run's instance: a SQLite file it cannot reach
        e = os.environ if env is None else env
        home = e.get("DAGSTER_HOME")
        yaml_path = str(Path(home) / "dagster.yaml") if home else "$DAGSTER_HOME/dagster.yaml"
        out.append(SpecError(
            f"{celery}, but Dagster's storage is not on PostgreSQL ({'no DAGSTER_HOME' if not home else 'the instance keeps SQLite files under ' + home}): "
            "a worker on another machine cannot write its steps' events",
            Location(yaml_path), "set `storage: postgres: postgres_url: postgresql+psycopg2://…` in DAGSTER_HOME's dagster.yaml, reachable from every worker",
            severity="warning",
        ))  # fmt: skip

    def note(what: str, at: Location, step: str, fix: str) -> None:
        steps = found.setdefault(what, (at, [], fix))[1]
        if step not in steps:
            steps.append(step)

    for step in project.steps:
        for trigger in step.events if isinstance(step, ScriptStep) else ():
            if not settings.events_dsn:
                note(f"the event store is the SQLite file {settings.events_store}", trigger.at, step.path,
                     "set LINEAGE_EVENTS_DSN to a PostgreSQL database every receiver, sensor and run reaches")
        for uri in (*step.outputs, *(d.uri for d in step.deps)):
            try:
                u = uris.parse(uri)
            except uris.UriError:
                continue  # loading reports it
            at = Location(step.path)
            if u.kind is uris.Kind.DUCKLAKE:
                catalog, data = _lake(settings, u.authority)
                var = "" if u.authority == "main" else f"_{u.authority.upper()}"
                if not (catalog or "").startswith(("postgres:", "mysql:")):
                    note(f"ducklake://{u.authority}'s catalog is a local file ({catalog or settings.lake_catalog})", at, step.path,
                         f"set LINEAGE_DUCKLAKE_CATALOG{var}=postgres:<dsn>")
                if not _remote_path(data):
                    note(f"ducklake://{u.authority}'s data files are on local disk ({data or settings.lake_data})", at, step.path,
                         f"set LINEAGE_DUCKLAKE_DATA_PATH{var}=s3://<bucket>/<prefix>/")
            elif u.kind is uris.Kind.DUCKDB:
                note(f"duckdb://{u.authority} is the local file {settings.database_file(u.authority)}", at, step.path,
                     "write tables every machine shares to ducklake:// (a PostgreSQL catalog, S3 data) or datatable://")
            elif u.kind is uris.Kind.S3 and not u.authority and not settings.s3_bucket:
                note(f"s3:/// objects are kept under {settings.objects_dir}", at, step.path, "set LINEAGE_S3_BUCKET (and LINEAGE_S3_ENDPOINT_URL)")
    for what, (at, steps, fix) in found.items():
        others = f" (and {len(steps) - 1} more step{'s' * (len(steps) > 2)})" if len(steps) > 1 else ""
        out.append(SpecError(f"runs execute on other machines ({why}), but {what}{others}: each process gets its own copy", at, fix, severity="warning"))
    return out


def _lake(settings: LineageSettings, name: str) -> tuple[str | None, str | None]:
    if name == "main":
        return settings.ducklake_catalog, settings.ducklake_data_path
    return settings.ducklake_catalogs.get(name.lower()), settings.ducklake_data_paths.get(name.lower())


def _remote_path(path: str | None) -> bool:
    return bool(path) and "://" in (path or "") and not (path or "").startswith("file://")
