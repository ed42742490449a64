"""The Dagster code location: ``workspace.yaml`` loads ``lineage_defs.definitions:defs``.

The only module that reads the environment:
- LINEAGE_PIPELINES_DIR (default ``pipelines``), LINEAGE_STATE_DIR (default ``.lineage``)
- LINEAGE_ON_INVALID: raise (default) | skip
- LINEAGE_PG_DSN, LINEAGE_DUCKLAKE_CATALOG, LINEAGE_DUCKLAKE_DATA_PATH,
  LINEAGE_S3_ENDPOINT_URL, LINEAGE_S3_BUCKET, LINEAGE_S3_REGION,
  AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY
"""

from __future__ import annotations

import dataclasses
import os

from lineage_defs.assets.definitions import LineageSettings, build_definitions
from lineage_defs.assets.resources import LineageResource
from lineage_defs.run.substrates import RunSettings


def _from_env() -> tuple[str, LineageSettings, LineageResource]:
    env = os.environ
    pipelines = env.get("LINEAGE_PIPELINES_DIR", "pipelines")
    run = RunSettings.from_env()
    settings = LineageSettings(on_invalid=env.get("LINEAGE_ON_INVALID", "raise"), state_dir=run.state_dir)
    fields = LineageResource.model_fields
    resource = LineageResource(**{k: v for k, v in dataclasses.asdict(run).items() if k in fields})
    return pipelines, settings, resource


_pipelines, _settings, _resource = _from_env()
defs = build_definitions(_pipelines, settings=_settings, resource=_resource)
