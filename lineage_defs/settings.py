"""The one settings object: where things are, how to reach each substrate, how triggers behave.

``LineageSettings`` is built once — from the environment by the code location
(``lineage_defs.definitions``), by the CLI and the receivers, or in code by a
user — and passed down to every layer: loading, the Dagster build, sensors,
runs and step subprocesses (``to_env`` / ``from_env`` is one table, so a
child process gets exactly what its parent had). Every path under the state
dir is named here and nowhere else. No Dagster import, no I/O.

>>> s = LineageSettings.from_env({"LINEAGE_STATE_DIR": "/data/lineage", "LINEAGE_PG_DSN_CRM": "host=db"})
>>> s.events_store.as_posix(), s.dsn("crm")
('/data/lineage/events/events.sqlite', 'host=db')
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any
from urllib.parse import quote

from lineage_defs import uris
from lineage_defs.errors import RunError
from lineage_defs.events.store import is_dsn
from lineage_defs.triggers import sources  # the trigger sources' rows: plain data, no clients

DEFAULT_PIPELINES_DIR = "pipelines"
DEFAULT_STATE_DIR = ".lineage"
DEFAULT_UI_URL = "http://127.0.0.1:3000"


class OnInvalid(str, Enum):
    """What loading does while the folder has errors: refuse (``raise``) or load the valid scripts (``skip``)."""

    RAISE = "raise"
    SKIP = "skip"

    def __str__(self) -> str:
        return self.value


# Field → the environment variable it comes from (one table for the code
# location's environment and a step subprocess's).
ENV_VARS = {
    "pipelines_dir": "LINEAGE_PIPELINES_DIR",
    "state_dir": "LINEAGE_STATE_DIR",
    "on_invalid": "LINEAGE_ON_INVALID",
    "postgres_dsn": "LINEAGE_PG_DSN",
    "ducklake_catalog": "LINEAGE_DUCKLAKE_CATALOG",
    "ducklake_data_path": "LINEAGE_DUCKLAKE_DATA_PATH",
    "s3_endpoint_url": "LINEAGE_S3_ENDPOINT_URL",
    "s3_bucket": "LINEAGE_S3_BUCKET",
    "s3_region": "LINEAGE_S3_REGION",
    "s3_access_key_id": "AWS_ACCESS_KEY_ID",
    "s3_secret_access_key": "AWS_SECRET_ACCESS_KEY",
    "definitions": "LINEAGE_DEFINITIONS",
    "openlineage_namespace": "OPENLINEAGE_NAMESPACE",
    "openlineage_timeout": "LINEAGE_OPENLINEAGE_TIMEOUT",
    "events_dsn": "LINEAGE_EVENTS_DSN",
    "celery_broker_url": "LINEAGE_CELERY_BROKER_URL",
    "celery_backend_url": "LINEAGE_CELERY_BACKEND_URL",
    "email_max_bytes": "LINEAGE_EMAIL_MAX_BYTES",
    "ui_url": "LINEAGE_UI_URL",
    "docs_url": "LINEAGE_DOCS_URL",
}
# Per-name variants: field → variable prefix (``LINEAGE_PG_DSN_CRM`` → postgres_dsns["crm"]).
ENV_PREFIXES = {
    "postgres_dsns": "LINEAGE_PG_DSN_",
    "ducklake_catalogs": "LINEAGE_DUCKLAKE_CATALOG_",
    "ducklake_data_paths": "LINEAGE_DUCKLAKE_DATA_PATH_",
}
# May hold a password or key: never shown in the UI, logs or errors.
SECRET_FIELDS = ("postgres_dsn", "postgres_dsns", "ducklake_catalog", "ducklake_catalogs", "s3_access_key_id", "s3_secret_access_key", "events_dsn", "celery_broker_url", "celery_backend_url")
# What a run needs (the Dagster resource carries these into run processes).
RUN_FIELDS = (
    "pipelines_dir", "state_dir", "postgres_dsn", "postgres_dsns", "ducklake_catalog", "ducklake_data_path",
    "ducklake_catalogs", "ducklake_data_paths", "s3_endpoint_url", "s3_bucket", "s3_region", "s3_access_key_id",
    "s3_secret_access_key", "dbt_executable", "dbt_analysis_executable", "dbt_run_timeout", "openlineage_namespace",
    "openlineage_timeout", "events_dsn",
)  # fmt: skip


@dataclass(frozen=True)
class LineageSettings:
    """Everything configurable, in one place. Set in code or from LINEAGE_* environment variables.

    >>> LineageSettings(pipelines_dir="pipelines", on_invalid=OnInvalid.SKIP).on_invalid
    <OnInvalid.SKIP: 'skip'>
    """

    # -- where things are
    pipelines_dir: str = DEFAULT_PIPELINES_DIR
    state_dir: str = DEFAULT_STATE_DIR  # the embedded default's files, caches, the event store
    # -- loading
    on_invalid: OnInvalid = OnInvalid.RAISE
    use_cache: bool = True  # parse and manifest caches under the state dir
    # -- substrates (SPEC section 3)
    postgres_dsn: str | None = None  # datatable://<any name> unless overridden below
    postgres_dsns: Mapping[str, str] = field(default_factory=dict)  # per datatable name (lower case)
    ducklake_catalog: str | None = None  # "postgres:dbname=... host=..." for a PostgreSQL catalog
    ducklake_data_path: str | None = None  # "s3://bucket/prefix/" for S3 data files
    ducklake_catalogs: Mapping[str, str] = field(default_factory=dict)  # other lakes: ducklake://<name>
    ducklake_data_paths: Mapping[str, str] = field(default_factory=dict)
    s3_endpoint_url: str | None = None
    s3_bucket: str | None = None  # the bucket of s3:///<key> when object storage is S3
    s3_region: str | None = None
    s3_access_key_id: str | None = None
    s3_secret_access_key: str | None = None
    # -- triggers (SPEC section 6)
    # The event store on PostgreSQL ("host=... dbname=..." or postgresql://...): receivers, sensors and
    # runs on several machines share it. Unset: SQLite under the state dir (one machine).
    events_dsn: str | None = None
    # each trigger source's connections (``triggers.sources``: its ``env`` variable, ``<env>[_<CONNECTION>]``):
    # source keyword → connection (lower case; "default") → address, e.g. {"kafka": {"default": "host:9092"}}
    connections: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    # the e-mail receiver refuses a larger message with 552 (SMTP SIZE); 10 MiB: a mail with a few attachments
    email_max_bytes: int = 10 * 1024 * 1024
    cascade_interval: int = 15  # seconds between evaluations of the cascade
    # Seconds between ticks of the event sensors. Dagster's sensor daemon looks at sensors every 5 s: an
    # interval of exactly 5 falls just short on every other look (a tick every 10 s); 4 is every look.
    event_interval: int = 4
    max_runs_per_tick: int = 25
    kafka_poll_seconds: float = 10.0  # how long one tick of a pull source (Kafka, SQS) may read
    batch_retention_days: float = 7.0  # a batch whose run succeeded is deleted from the store after this
    # a batch runs until a run of it succeeds (triggers.outcome): Dagster retries each requested
    # run batch_retries times at once, the sensor requests up to batch_attempts runs with backoff
    batch_attempts: int = 3
    batch_retries: int = 2
    batch_backoff: float = 30.0  # seconds before the second request; doubled for each after it
    # -- where steps run: set, every step of every run is a task for Dagster's Celery executor (dagster-celery,
    # the `celery` extra) on this broker ("redis://host:6379/0"), its results on the backend (default: the broker)
    celery_broker_url: str | None = None
    celery_backend_url: str | None = None
    # -- dbt (SPEC section 8)
    dbt_executable: str | None = None  # builds (default: this interpreter's dbt-core)
    dbt_analysis_executable: str | None = None  # writes the lineage index (default: the same)
    dbt_run_timeout: float = 3600.0  # a dbt run's budget without a `dagster/max_runtime` tag
    # -- shared folders of test types (``test_type`` scripts) a team ships as a package, besides the pipelines folder's own
    library_dirs: tuple[str, ...] = ()  # LINEAGE_LIBRARY_DIRS, os.pathsep-separated
    # -- your own Dagster definitions, merged into the code location (``lineage_defs.definitions``)
    definitions: tuple[str, ...] = ()  # "pkg.module[:attr]" or "path/to/file.py[:attr]"; attr defaults to `defs`
    # -- OpenLineage (the client itself is configured its own way: OPENLINEAGE_URL, openlineage.yml)
    openlineage_namespace: str = "lineage_defs"  # the jobs' namespace
    openlineage_timeout: float = 1.0  # seconds a run may wait at its end for events still being sent
    # -- the Dagster UI's address as users reach it ("http://dagster.example.com"): hook contexts link to the run, the lineage
    # explorer's pages to the asset. From LINEAGE_UI_URL, else DAGSTER_WEBSERVER_URL; unset: hooks carry no link and the
    # explorer links to DEFAULT_UI_URL (``ui_link``)
    ui_url: str | None = None
    # -- hooks (SPEC section 13): a failed hook run's op is retried this many times, after hook_backoff seconds, doubled each time
    hook_retries: int = 3
    hook_backoff: float = 2.0
    # -- the lineage explorer (``lineage-defs docs``): where the built site is published (set: each asset's description
    # links to its page)
    docs_url: str | None = None
    # Secret fields that came from the environment, by field → variable: the Dagster
    # resource passes them as EnvVars, so the UI shows the variable's name.
    secret_env: Mapping[str, str] = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self) -> None:
        # a DSN EventStore would not recognise would open a SQLite file of that name instead
        if self.events_dsn and not is_dsn(self.events_dsn):
            raise RunError(
                "LINEAGE_EVENTS_DSN (events_dsn) is neither a postgresql:// URL nor key=value connection words",
                fix="set e.g. LINEAGE_EVENTS_DSN='host=db dbname=lineage_events user=lineage', or unset it for the SQLite store under the state dir",
            )

    # -- the environment ----------------------------------------------------
    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> LineageSettings:
        """Settings from LINEAGE_* variables (the code location's, or those a step subprocess was given)."""
        e = os.environ if env is None else env
        values: dict[str, Any] = {f: e[v] for f, v in ENV_VARS.items() if e.get(v)}
        secret_env: dict[str, str] = {f: v for f, v in ENV_VARS.items() if f in SECRET_FIELDS and e.get(v)}
        for f, prefix in ENV_PREFIXES.items():
            values[f] = {k[len(prefix):].lower(): v for k, v in e.items() if k.startswith(prefix) and v}
            if f in SECRET_FIELDS and values[f]:
                secret_env[f] = prefix
        values["connections"] = _connections(e)
        ui_url = e.get("LINEAGE_UI_URL") or e.get("DAGSTER_WEBSERVER_URL")
        if ui_url:
            values["ui_url"] = ui_url.rstrip("/")
        interval = e.get("LINEAGE_SENSOR_INTERVAL")
        if interval:
            values["cascade_interval"] = values["event_interval"] = _positive_int(interval, "LINEAGE_SENSOR_INTERVAL")
        for f, var in (("batch_attempts", "LINEAGE_BATCH_ATTEMPTS"), ("batch_backoff", "LINEAGE_BATCH_BACKOFF")):
            if e.get(var):
                values[f] = _positive_int(e[var], var)
        if "email_max_bytes" in values:
            values["email_max_bytes"] = _positive_int(values["email_max_bytes"], "LINEAGE_EMAIL_MAX_BYTES")
        if e.get("LINEAGE_BATCH_RETRIES"):
            values["batch_retries"] = _count(e["LINEAGE_BATCH_RETRIES"], "LINEAGE_BATCH_RETRIES")
        if "on_invalid" in values:
            values["on_invalid"] = _on_invalid(values["on_invalid"])
        if e.get("LINEAGE_LIBRARY_DIRS"):
            values["library_dirs"] = tuple(os.path.abspath(d) for d in e["LINEAGE_LIBRARY_DIRS"].split(os.pathsep) if d.strip())
        if "definitions" in values:
            values["definitions"] = tuple(d.strip() for d in values["definitions"].split(",") if d.strip())
        if "openlineage_timeout" in values:
            values["openlineage_timeout"] = _seconds(values["openlineage_timeout"], "LINEAGE_OPENLINEAGE_TIMEOUT")
        values["state_dir"] = os.path.abspath(values.get("state_dir", DEFAULT_STATE_DIR))
        values["pipelines_dir"] = os.path.abspath(values.get("pipelines_dir", DEFAULT_PIPELINES_DIR))
        return cls(**values, secret_env=secret_env)

    def to_env(self) -> dict[str, str]:
        """The inverse of ``from_env`` for what a run needs: the environment a step subprocess gets."""
        out = {v: str(getattr(self, f)) for f, v in ENV_VARS.items() if f in RUN_FIELDS and getattr(self, f)}
        for f, prefix in ENV_PREFIXES.items():
            if f in RUN_FIELDS:
                out.update({f"{prefix}{k.upper()}": v for k, v in getattr(self, f).items() if v})
        return out

    def replace(self, **changes: Any) -> LineageSettings:
        return dataclasses.replace(self, **changes)

    def absolute(self) -> LineageSettings:
        """The same settings with absolute folders (run processes start elsewhere)."""
        return self.replace(state_dir=os.path.abspath(self.state_dir), pipelines_dir=os.path.abspath(self.pipelines_dir))

    # -- the state dir: every path under it is named here ----------------------
    @property
    def state(self) -> Path:
        return Path(self.state_dir)

    @property
    def cache_dir(self) -> Path | None:
        """Parse, manifest and lineage caches (None: caching off)."""
        return self.state / "cache" if self.use_cache else None

    @property
    def events_store(self) -> Path:
        """The embedded event store's file (SQLite in WAL mode) between triggers and their runs."""
        return self.state / "events" / "events.sqlite"

    @property
    def events_location(self) -> str | Path:
        """What ``EventStore`` opens: the PostgreSQL DSN when ``events_dsn`` is set, else ``events_store``."""
        return self.events_dsn or self.events_store

    @property
    def events_made(self) -> bool:
        """Whether the event store may hold anything yet (a PostgreSQL store always may; a file once it exists)."""
        return bool(self.events_dsn) or self.events_store.exists()

    @property
    def events_where(self) -> str:
        """The event store for messages: its file, or which variable names the database (never the DSN: it may hold a password)."""
        return "the PostgreSQL event store (LINEAGE_EVENTS_DSN)" if self.events_dsn else str(self.events_store)

    @property
    def ui_link(self) -> str:
        """The Dagster UI pages link to: ``ui_url``, else Dagster's own default address."""
        return self.ui_url or DEFAULT_UI_URL

    def docs_link(self, uri: str) -> str | None:
        """The explorer's page of the asset ``uri`` under ``docs_url`` (None when it is not set)."""
        if not self.docs_url:
            return None
        return f"{self.docs_url.rstrip('/')}/#/asset/{quote(uri, safe='')}"

    @property
    def schemas_dir(self) -> Path:
        """Captured target schemas (``on_schema_change`` and the consumer column checks)."""
        return self.state / "schemas"

    @property
    def lock_file(self) -> Path:
        """One writing process at a time on the embedded DuckDB files."""
        return self.state / ".duckdb.lock"

    @property
    def lake_catalog(self) -> Path:
        return self.state / "lake" / "metadata.ducklake"

    @property
    def lake_data(self) -> Path:
        return self.state / "lake" / "data"

    def database_file(self, name: str) -> Path:
        """``duckdb://<name>`` → its file (``warehouse.duckdb``)."""
        return self.state / f"{name}.duckdb"

    @property
    def objects_dir(self) -> Path:
        """Default object storage for ``s3:///<key>`` when no bucket is configured."""
        return self.state / "objects"

    @property
    def dbt_profiles_dir(self) -> Path:
        """Generated profiles for dbt projects that bring none."""
        return self.state / "dbt" / "profiles"

    # -- substrates -----------------------------------------------------------
    def dsn(self, name: str) -> str:
        dsn = self.postgres_dsns.get(name.lower()) or self.postgres_dsn
        if not dsn:
            raise RunError(
                f"datatable://{name} has no PostgreSQL connection",
                fix=f"set LINEAGE_PG_DSN (or LINEAGE_PG_DSN_{name.upper()}) or the settings' postgres_dsn",
            )
        return dsn

    @property
    def s3_remote(self) -> bool:
        return bool(self.s3_endpoint_url or self.s3_bucket)

    def object_location(self, uri: str) -> str:
        """Where an ``s3://`` object lives: a local path (default storage) or an s3:// URL."""
        u = uris.parse(uri)
        key = "/".join(u.path)
        if u.authority:
            return f"s3://{u.authority}/{key}"
        if self.s3_bucket:
            return f"s3://{self.s3_bucket}/{key}"
        return str(self.objects_dir / key)

    # -- trigger sources ----------------------------------------------------
    def connection(self, source: str, name: str) -> str | None:
        """A trigger source's connection address (``connection=<name>`` of ``on <source>``; None: not configured),
        from ``<env>[_<NAME>]`` of its row in ``triggers.sources``: ``connection("kafka", "default")`` → host:port,…"""
        return self.connections.get(source, {}).get(name.lower())

    @staticmethod
    def connection_env(source: str, name: str) -> str:
        """The variable holding it: ``connection_env("kafka", "crm")`` → ``LINEAGE_KAFKA_BOOTSTRAP_CRM``."""
        return sources.BY_KEYWORD[source].connection_env(name)


def _connections(e: Mapping[str, str]) -> dict[str, dict[str, str]]:
    """Each trigger source's ``<env>_<CONNECTION>`` variables, then ``<env>`` itself as the default connection."""
    out: dict[str, dict[str, str]] = {}
    for source in sources.SOURCES:
        if source.env is None or not source.settings_field:
            continue
        prefix = source.env + "_"
        found = {k[len(prefix):].lower(): v for k, v in e.items() if k.startswith(prefix) and v}
        if e.get(source.env):
            found["default"] = e[source.env]
        if found:
            out[source.keyword] = found
    return out


def _positive_int(text: str, name: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise RunError(f"{name}={text!r} is not a positive whole number", fix=f"set e.g. {name}=5")
    return int(text)


def _count(text: str, name: str) -> int:
    if not text.isdigit():
        raise RunError(f"{name}={text!r} is not a whole number", fix=f"set e.g. {name}=2")
    return int(text)


def _seconds(text: str, name: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value >= 0:
        raise RunError(f"{name}={text!r} is not a number of seconds", fix=f"set e.g. {name}=1.0")
    return value


def _on_invalid(text: str) -> OnInvalid:
    try:
        return OnInvalid(text)
    except ValueError:
        raise RunError(f"LINEAGE_ON_INVALID={text!r} is neither 'raise' nor 'skip'", fix="set LINEAGE_ON_INVALID=raise (default) or skip") from None
