"""The one Dagster resource: where state lives and how to reach each substrate.

``lineage_defs.definitions`` fills it from the environment when the code
location is built (never at import), passing secrets (DSNs, catalog strings,
S3 keys) as ``EnvVar``s so the UI shows the variable's name, not its value.
"""

from __future__ import annotations

from dagster import ConfigurableResource


class LineageResource(ConfigurableResource):
    """Connections for the runtime. Set in code or via LINEAGE_* environment variables."""

    pipelines_dir: str
    state_dir: str = ".lineage"
    # PostgreSQL DSN for datatable:// assets; per-name override (LINEAGE_PG_DSN_<NAME>) in postgres_dsns.
    postgres_dsn: str | None = None
    postgres_dsns: dict[str, str] = {}
    # DuckLake catalog: default is a DuckDB file under state_dir/lake.
    ducklake_catalog: str | None = None  # e.g. "postgres:dbname=lake host=..."
    ducklake_data_path: str | None = None  # e.g. "s3://bucket/lake/"
    # Other lakes (ducklake://<name>): LINEAGE_DUCKLAKE_CATALOG_<NAME> / LINEAGE_DUCKLAKE_DATA_PATH_<NAME>.
    ducklake_catalogs: dict[str, str] = {}
    ducklake_data_paths: dict[str, str] = {}
    # S3: default object storage is state_dir/objects.
    s3_endpoint_url: str | None = None
    s3_bucket: str | None = None  # the default bucket for s3:///<key>
    s3_region: str | None = None
    s3_access_key_id: str | None = None
    s3_secret_access_key: str | None = None
    # dbt: the executable that builds (default: this interpreter's dbt-core) and the one whose
    # strict static analysis writes the lineage index (default: the same).
    dbt_executable: str | None = None
    dbt_analysis_executable: str | None = None
    # A dbt run's time budget in seconds when the run has no `dagster/max_runtime` tag; the
    # lineage pass gets half of what is left of it after the build.
    dbt_run_timeout: float = 3600.0
