"""Shared pieces of the multi-process tests: a fresh database on the suite's PostgreSQL, Dagster's
PostgreSQL instance for it, and the environment of one "machine" (its own state dir)."""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

DAGSTER = str(Path(sys.executable).with_name("dagster"))
LINEAGE_DEFS = str(Path(sys.executable).with_name("lineage-defs"))

DAGSTER_YAML = """\
storage:
  postgres:
    postgres_url: "{url}"
run_coordinator:
  module: dagster._core.run_coordinator
  class: DefaultRunCoordinator
telemetry:
  enabled: false
"""


def pg_url(dsn: str, dbname: str) -> str:
    # psycopg2 named: SQLAlchemy 2.1 picks psycopg 3 for postgresql://, on which dagster-postgres's NOTIFY fails
    parts = dict(p.split("=", 1) for p in dsn.split())
    return f"postgresql+psycopg2://{parts['user']}@{parts['host']}:{parts['port']}/{dbname}"


def create_database(dsn: str, name: str) -> str:
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute(f'CREATE DATABASE "{name}"')
    return " ".join(p for p in dsn.split() if not p.startswith("dbname=")) + f" dbname={name}"


def dagster_home(path: Path, pg_dsn: str, dbname: str, extra: str = "") -> Path:
    """A DAGSTER_HOME whose storage is database ``dbname`` (created here) on the suite's PostgreSQL."""
    from dagster import DagsterInstance

    create_database(pg_dsn, dbname)
    path.mkdir(parents=True)
    (path / "dagster.yaml").write_text(DAGSTER_YAML.format(url=pg_url(pg_dsn, dbname)) + extra)
    # Dagster's tables are created once, before any process starts, as a deployment does
    # (docs/deploy.md): processes opening an empty database at the same moment race on
    # CREATE TABLE ("type \"jobs\" already exists").
    with DagsterInstance.from_config(str(path)):
        pass
    return path


def machine_env(base: Mapping[str, str], state: Path, **more: str) -> dict[str, str]:
    """The environment of one process on its own "machine": everything shared, its own state dir."""
    state.mkdir(parents=True, exist_ok=True)
    return {**os.environ, **base, "LINEAGE_STATE_DIR": str(state), "PYTHONUNBUFFERED": "1", **more}


def files_under(state: Path) -> list[str]:
    """Every file a process left in its state dir, relative (to compare with what only caches may be)."""
    return sorted(p.relative_to(state).as_posix() for p in state.rglob("*") if p.is_file())


def lake_env(lake_dsn: str, s3_server: Any, prefix: str) -> dict[str, str]:
    """The variables of a DuckLake on PostgreSQL (``lake_dsn``) with its data under ``prefix`` on the S3 server."""
    s3 = s3_server.settings()
    return {
        "LINEAGE_DUCKLAKE_CATALOG": f"postgres:{lake_dsn}",
        "LINEAGE_DUCKLAKE_DATA_PATH": f"s3://{s3_server.bucket}/{prefix}/",
        "LINEAGE_S3_ENDPOINT_URL": s3["s3_endpoint_url"],
        "LINEAGE_S3_BUCKET": s3["s3_bucket"],
        "LINEAGE_S3_REGION": s3["s3_region"],
        "AWS_ACCESS_KEY_ID": s3["s3_access_key_id"],
        "AWS_SECRET_ACCESS_KEY": s3["s3_secret_access_key"],
    }
