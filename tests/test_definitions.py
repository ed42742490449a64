"""The code location module: environment read when `defs` is asked for, secrets kept out of the UI."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from lineage_defs.assets.resources import LineageResource
from lineage_defs.settings import LineageSettings

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "pipelines"


def test_secrets_reach_the_resource_as_env_vars(tmp_path: Path) -> None:
    env = {
        "LINEAGE_PIPELINES_DIR": str(EXAMPLE),
        "LINEAGE_STATE_DIR": str(tmp_path),
        "LINEAGE_PG_DSN": "host=db password=hunter2-main",
        "LINEAGE_PG_DSN_CRM": "host=crm password=hunter2-crm",
        "LINEAGE_DUCKLAKE_CATALOG": "postgres:host=lake password=hunter2-lake",
        "AWS_ACCESS_KEY_ID": "AKIA-hunter2",
        "AWS_SECRET_ACCESS_KEY": "hunter2-secret",
        "LINEAGE_S3_BUCKET": "my-bucket",
    }
    settings = LineageSettings.from_env(env)
    resource = LineageResource.for_settings(settings)
    assert settings.pipelines_dir == str(EXAMPLE) and settings.state_dir == str(tmp_path)
    shown = resource.get_resource_definition().config_schema.default_value_as_json_str  # what the UI lists
    assert "hunter2" not in shown
    values = json.loads(shown)
    assert values["postgres_dsn"] == {"env": "LINEAGE_PG_DSN"}
    assert values["postgres_dsns"] == {"crm": {"env": "LINEAGE_PG_DSN_CRM"}}
    assert values["ducklake_catalog"] == {"env": "LINEAGE_DUCKLAKE_CATALOG"}
    assert values["s3_secret_access_key"] == {"env": "AWS_SECRET_ACCESS_KEY"}
    assert values["s3_bucket"] == "my-bucket"  # not a secret: shown as is


def test_importing_the_code_location_reads_nothing() -> None:
    code = "import lineage_defs.definitions as d; print('imported'); d.defs"
    env = {**os.environ, "LINEAGE_PIPELINES_DIR": "/nonexistent/pipelines"}
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert r.stdout.strip() == "imported"  # the import itself did no work
    assert r.returncode != 0 and "pipelines folder '/nonexistent/pipelines' does not exist" in r.stderr
