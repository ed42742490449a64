"""The Dagster code location: ``workspace.yaml`` loads ``lineage_defs.definitions:defs``.

The only module that reads the environment (``settings_from_env``), and only
when ``defs`` is first asked for — importing this module does no work:
- LINEAGE_PIPELINES_DIR (default ``pipelines``), LINEAGE_STATE_DIR (default ``.lineage``)
- LINEAGE_ON_INVALID: raise (default) | skip
- LINEAGE_PG_DSN[_<NAME>], LINEAGE_DUCKLAKE_CATALOG[_<NAME>], LINEAGE_DUCKLAKE_DATA_PATH[_<NAME>],
  LINEAGE_S3_ENDPOINT_URL, LINEAGE_S3_BUCKET, LINEAGE_S3_REGION,
  AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY
- LINEAGE_KAFKA_BOOTSTRAP, LINEAGE_KAFKA_BOOTSTRAP_<CONNECTION>: Kafka brokers of `on kafka` steps
- LINEAGE_SENSOR_INTERVAL: seconds between ticks of every lineage sensor (default: cascade 15, events 5)
- LINEAGE_WEBHOOK_TOKEN_<NAME>, LINEAGE_WEBHOOK_SECRET_<NAME>, LINEAGE_WEBHOOK_MAX_BYTES: the
  webhook receiver's (``webhook_env``, read by ``lineage-defs webhooks serve``)
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from lineage_defs.run.substrates import ENV_PREFIXES, ENV_VARS, SECRET_FIELDS, RunSettings

if TYPE_CHECKING:  # building the Definitions imports Dagster; this module's import must not
    from lineage_defs.assets.definitions import LineageSettings
    from lineage_defs.assets.resources import LineageResource
    from lineage_defs.sensors import TriggerSettings

DEFAULT_WEBSERVER_URL = "http://127.0.0.1:3000"


def paths_from_env(env: Mapping[str, str] | None = None) -> tuple[str, str]:
    """(pipelines folder, state dir) as the environment sets them (for the CLI: no Dagster import)."""
    e = os.environ if env is None else env
    return e.get("LINEAGE_PIPELINES_DIR", "pipelines"), e.get("LINEAGE_STATE_DIR", ".lineage")


def trigger_settings(env: Mapping[str, str]) -> TriggerSettings:
    """Kafka brokers per connection and sensor intervals."""
    from lineage_defs.sensors import TriggerSettings

    prefix = "LINEAGE_KAFKA_BOOTSTRAP"
    servers = {("default" if k == prefix else k[len(prefix) + 1 :].lower()): v for k, v in env.items() if (k == prefix or k.startswith(prefix + "_")) and v}
    interval = env.get("LINEAGE_SENSOR_INTERVAL")
    if interval:
        return TriggerSettings(kafka_bootstrap=servers, cascade_interval=int(interval), event_interval=int(interval))
    return TriggerSettings(kafka_bootstrap=servers)


def webhook_env(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """What the webhook receiver reads: the folders, LINEAGE_WEBHOOK_TOKEN_/SECRET_<NAME>, LINEAGE_WEBHOOK_MAX_BYTES."""
    e = os.environ if env is None else env
    keep = ("LINEAGE_PIPELINES_DIR", "LINEAGE_STATE_DIR")
    return {k: v for k, v in e.items() if k in keep or k.startswith("LINEAGE_WEBHOOK_")}


def webserver_url_from_env(env: Mapping[str, str] | None = None) -> str:
    """Where ``lineage-defs backfill`` finds the Dagster webserver (DAGSTER_WEBSERVER_URL)."""
    e = os.environ if env is None else env
    return e.get("DAGSTER_WEBSERVER_URL", DEFAULT_WEBSERVER_URL)


def settings_from_env(env: Mapping[str, str] | None = None) -> tuple[str, LineageSettings, LineageResource]:
    """(pipelines folder, load settings, resource) from the environment.

    Secrets go into the resource as ``EnvVar``s: Dagster resolves them in the
    run process, and the UI shows the variable's name instead of its value.
    """
    from dagster import EnvVar

    from lineage_defs.assets.definitions import LineageSettings
    from lineage_defs.assets.resources import LineageResource

    e = os.environ if env is None else env
    run = RunSettings.from_env(e)
    values: dict[str, Any] = {}
    for f, var in ENV_VARS.items():
        value = getattr(run, f)
        if value:
            values[f] = EnvVar(var) if f in SECRET_FIELDS else value
    for f, prefix in ENV_PREFIXES.items():
        values[f] = {k: EnvVar(f"{prefix}{k.upper()}") if f in SECRET_FIELDS else v for k, v in getattr(run, f).items()}
    settings = LineageSettings(on_invalid=e.get("LINEAGE_ON_INVALID", "raise"), state_dir=run.state_dir, triggers=trigger_settings(e))
    return run.pipelines_dir, settings, LineageResource(**values)


_defs: Any = None


def __getattr__(name: str) -> Any:
    global _defs
    if name != "defs":
        raise AttributeError(name)
    if _defs is None:
        from lineage_defs.assets.definitions import build_definitions

        pipelines, settings, resource = settings_from_env()
        _defs = build_definitions(pipelines, settings=settings, resource=resource)
    return _defs
