"""Build the receiver's hooks from a pipelines folder and the environment, and serve them.

The CLI entry (``lineage-defs webhooks serve``) reads the environment here —
the receiver's own entry point, like ``lineage_defs.definitions`` for the
code location:

- ``LINEAGE_WEBHOOK_TOKEN_<NAME>`` / ``LINEAGE_WEBHOOK_SECRET_<NAME>``: each hook's credentials
  (``<NAME>``: the hook name upper-cased, other characters as ``_``);
- ``LINEAGE_WEBHOOK_MAX_BYTES`` (default 1 MiB), ``LINEAGE_STATE_DIR``, ``LINEAGE_PIPELINES_DIR``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from lineage_defs.assets.partitions import partitions_def
from lineage_defs.errors import ProjectErrors
from lineage_defs.plan.graph import webhooks
from lineage_defs.plan.names import hook_env, webhook_stream
from lineage_defs.plan.project import load_project
from lineage_defs.plan.spec import Project
from lineage_defs.settings import LineageSettings
from lineage_defs.triggers.keys import default_source, partition_key
from lineage_defs.triggers.webhook.app import DEFAULT_MAX_BYTES, Hook, make_app


def build_hooks(project: Project, env: Mapping[str, str]) -> dict[str, Hook]:
    """Every `on webhook` line of the project as a Hook with its credentials and partition rule."""
    out: dict[str, Hook] = {}
    for name, step, w in webhooks(project.steps):
        suffix = hook_env(name)
        pdef = partitions_def(step.partitioning, step.name, live=True)
        source = default_source(step.partitioning, w.partition_from)
        to_key = None
        if pdef is not None and source is not None:
            def to_key(raw: str, pdef: Any = pdef) -> str:
                return partition_key(raw, pdef)
        out[name] = Hook(
            name=name,
            stream=webhook_stream(name),
            step_path=step.path,
            token=env.get(f"LINEAGE_WEBHOOK_TOKEN_{suffix}") or None,
            secret=env.get(f"LINEAGE_WEBHOOK_SECRET_{suffix}") or None,
            partition_from=source,
            partition_key=to_key,
        )
    return out


def app_from_env(env: Mapping[str, str], folder: str | None = None) -> tuple[Any, dict[str, Hook]]:
    settings = LineageSettings.from_env(env)
    if folder:
        settings = settings.replace(pipelines_dir=folder)
    project = load_project(settings.pipelines_dir, settings)
    if project.errors:
        raise ProjectErrors(project.errors)
    hooks_ = build_hooks(project, env)
    max_bytes = int(env.get("LINEAGE_WEBHOOK_MAX_BYTES") or DEFAULT_MAX_BYTES)
    return make_app(hooks_, settings.events_store, max_bytes), hooks_


def serve(host: str, port: int, env: Mapping[str, str], folder: str | None = None) -> int:
    import sys

    import uvicorn

    app, hooks_ = app_from_env(env, folder)
    for name, h in sorted(hooks_.items()):
        creds = " + ".join(c for c, v in (("bearer token", h.token), ("HMAC secret", h.secret)) if v) or "NO CREDENTIAL: refuses every request"
        print(f"POST http://{host}:{port}/hooks/{name}  → {h.step_path}  ({creds})", file=sys.stderr)
    uvicorn.run(app, host=host, port=port, log_level="warning", access_log=False)
    return 0
