"""The Dagster code location: ``workspace.yaml`` loads ``lineage_defs.definitions:defs``.

The only module that reads the environment:
- LINEAGE_PIPELINES_DIR (default ``pipelines``), LINEAGE_STATE_DIR (default ``.lineage``)
- LINEAGE_ON_INVALID: raise (default) | skip
- LINEAGE_PG_DSN, LINEAGE_DUCKLAKE_CATALOG, LINEAGE_DUCKLAKE_DATA_PATH,
  LINEAGE_S3_ENDPOINT_URL, LINEAGE_S3_BUCKET, LINEAGE_S3_REGION,
  AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY
"""

from __future__ import annotations

import os

from lineage_defs.assets.definitions import LineageSettings, build_definitions
from lineage_defs.assets.resources import LineageResource


def _from_env() -> tuple[str, LineageSettings, LineageResource]:
    env = os.environ
    pipelines = env.get("LINEAGE_PIPELINES_DIR", "pipelines")
    state = env.get("LINEAGE_STATE_DIR", ".lineage")
    settings = LineageSettings(on_invalid=env.get("LINEAGE_ON_INVALID", "raise"), state_dir=state)
    resource = LineageResource(
        pipelines_dir=os.path.abspath(pipelines),
        state_dir=os.path.abspath(state),
        postgres_dsn=env.get("LINEAGE_PG_DSN"),
        ducklake_catalog=env.get("LINEAGE_DUCKLAKE_CATALOG"),
        ducklake_data_path=env.get("LINEAGE_DUCKLAKE_DATA_PATH"),
        s3_endpoint_url=env.get("LINEAGE_S3_ENDPOINT_URL"),
        s3_bucket=env.get("LINEAGE_S3_BUCKET"),
        s3_region=env.get("LINEAGE_S3_REGION"),
        s3_access_key_id=env.get("AWS_ACCESS_KEY_ID"),
        s3_secret_access_key=env.get("AWS_SECRET_ACCESS_KEY"),
    )
    return pipelines, settings, resource


_pipelines, _settings, _resource = _from_env()
defs = build_definitions(_pipelines, settings=_settings, resource=_resource)
