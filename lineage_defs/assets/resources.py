"""The one Dagster resource: the run-time part of ``LineageSettings``, carried into run processes.

Not a second settings object: ``build_definitions`` makes it from the
settings (``for_settings``) and every run turns it back (``settings()``).
Secrets that came from the environment travel as ``EnvVar``s, so the UI shows
the variable's name, not its value, and the run process reads its own
environment.

The fields are ``RunSettingsConfig``'s: the resource is that config, and dagster-duckdb's
resource and I/O manager (``lineage_defs.duckdb_io``) carry the same config
nested. Config, not the resource itself: Dagster walks a nested resource's
requirements again for every asset it binds resources to (about 2 % of a
2,000-script load).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Self

from dagster import Config, ConfigurableResource, EnvVar

from lineage_defs.settings import RUN_FIELDS, LineageSettings

# The keys ``build_definitions`` binds dagster-duckdb's I/O manager and resource under (``lineage_defs.duckdb_io``)
IO_MANAGER_KEY = "lineage_io_manager"
RESOURCE_KEY = "lineage_duckdb"


class RunSettingsConfig(Config):
    """Where state lives and how to reach each substrate: LineageSettings' run fields (the UI shows this text as written)."""

    pipelines_dir: str
    state_dir: str
    postgres_dsn: str | None = None
    postgres_dsns: dict[str, str] = {}
    ducklake_catalog: str | None = None
    ducklake_data_path: str | None = None
    ducklake_catalogs: dict[str, str] = {}
    ducklake_data_paths: dict[str, str] = {}
    s3_endpoint_url: str | None = None
    s3_bucket: str | None = None
    s3_region: str | None = None
    s3_access_key_id: str | None = None
    s3_secret_access_key: str | None = None
    dbt_executable: str | None = None
    dbt_analysis_executable: str | None = None
    dbt_run_timeout: float = 3600.0
    openlineage_namespace: str = "lineage_defs"
    openlineage_timeout: float = 1.0
    events_dsn: str | None = None

    @classmethod
    def for_settings(cls, settings: LineageSettings) -> Self:
        values: dict[str, Any] = {}
        for f in RUN_FIELDS:
            value = getattr(settings, f)
            var = settings.secret_env.get(f)
            if var is None:
                values[f] = dict(value) if isinstance(value, Mapping) else value
            elif isinstance(value, Mapping):  # per-name secrets: one variable each (LINEAGE_PG_DSN_<NAME>)
                values[f] = {k: EnvVar(f"{var}{k.upper()}") for k in value}
            else:
                values[f] = EnvVar(var)
        return cls(**values)

    def settings(self) -> LineageSettings:
        """The run's settings (Dagster resolved the EnvVars in this process)."""
        values: dict[str, Any] = {f: dict(getattr(self, f)) if isinstance(getattr(self, f), dict) else getattr(self, f) for f in RUN_FIELDS}
        return LineageSettings(**values).absolute()


class LineageResource(ConfigurableResource, RunSettingsConfig):
    """The run settings as the ``lineage`` resource every step of ours requires."""
