"""Build the receiver's hooks from a pipelines folder and the environment, and serve them.

The CLI entry (``lineage-defs webhooks serve``) reads the environment here —
the receiver's own entry point, like ``lineage_defs.definitions`` for the
code location:

- ``LINEAGE_WEBHOOK_TOKEN_<NAME>`` / ``LINEAGE_WEBHOOK_SECRET_<NAME>``: each hook's credentials
  (``<NAME>``: the hook name upper-cased, other characters as ``_``);
- ``LINEAGE_WEBHOOK_MAX_BYTES`` (default 1 MiB), ``LINEAGE_STATE_DIR``, ``LINEAGE_PIPELINES_DIR``;
- the limits of ``guard.Limits``: ``LINEAGE_WEBHOOK_MAX_CONNECTIONS`` (1000, and never more than the
  process's file descriptors allow), ``LINEAGE_WEBHOOK_HEADER_TIMEOUT`` (10 s; also the longest pause
  in a body), ``LINEAGE_WEBHOOK_BODY_TIMEOUT`` (30 s), ``LINEAGE_WEBHOOK_KEEP_ALIVE`` (5 s),
  ``LINEAGE_WEBHOOK_MAX_BUFFERED`` (16 MiB of memory for bodies read before their HMAC can be
  checked; the rest are held in temporary files).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from lineage_defs.errors import RunError
from lineage_defs.plan.graph import webhooks
from lineage_defs.plan.names import hook_env, stream_of
from lineage_defs.plan.spec import Project
from lineage_defs.triggers.push import partition_rule, receiver_project
from lineage_defs.triggers.webhook.app import DEFAULT_MAX_BYTES, Hook, make_app
from lineage_defs.triggers.webhook.guard import Limits

# variable → (Limits field, parse)
_LIMIT_VARS = {
    "LINEAGE_WEBHOOK_MAX_CONNECTIONS": ("max_connections", int),
    "LINEAGE_WEBHOOK_HEADER_TIMEOUT": ("header_timeout", float),
    "LINEAGE_WEBHOOK_BODY_TIMEOUT": ("body_timeout", float),
    "LINEAGE_WEBHOOK_KEEP_ALIVE": ("keep_alive", float),
    "LINEAGE_WEBHOOK_MAX_BUFFERED": ("max_buffered_bytes", int),
}


def build_hooks(project: Project, env: Mapping[str, str]) -> dict[str, Hook]:
    """Every `on webhook` line of the project as a Hook with its credentials and partition rule."""
    out: dict[str, Hook] = {}
    for name, step, w in webhooks(project.steps):
        suffix = hook_env(name)
        source, to_key = partition_rule(step, w.partition_from)
        out[name] = Hook(
            name=name,
            stream=stream_of(step.name, w),
            step_path=step.path,
            token=env.get(f"LINEAGE_WEBHOOK_TOKEN_{suffix}") or None,
            secret=env.get(f"LINEAGE_WEBHOOK_SECRET_{suffix}") or None,
            partition_from=source,
            partition_key=to_key,
        )
    return out


def limits_from_env(env: Mapping[str, str]) -> Limits:
    """The receiver's limits, each from its variable when set; the connection cap fits the descriptors there are (two per connection)."""
    import resource

    values: dict[str, Any] = {}
    for var, (field, kind) in _LIMIT_VARS.items():
        text = env.get(var)
        if text:
            try:
                value = kind(text)
            except ValueError:
                value = 0
            if not value > 0:  # NaN too
                raise RunError(f"{var}={text!r} is not a positive number", fix=f"set {var} to a positive {kind.__name__}, or unset it")
            values[field] = value
    limits = Limits(**values)
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    fit = (soft - 64) // 2  # a connection's socket, and the temporary file of an unauthenticated body it sends
    if soft != resource.RLIM_INFINITY and limits.max_connections > fit:
        limits = dataclasses.replace(limits, max_connections=max(fit, 16))
    return limits


def app_from_env(env: Mapping[str, str], folder: str | None = None) -> tuple[Any, dict[str, Hook], Limits]:
    settings, project = receiver_project(env, folder)
    hooks_ = build_hooks(project, env)
    max_bytes = int(env.get("LINEAGE_WEBHOOK_MAX_BYTES") or DEFAULT_MAX_BYTES)
    limits = limits_from_env(env)
    return make_app(hooks_, settings.events_location, max_bytes, limits), hooks_, limits


def serve(host: str, port: int, env: Mapping[str, str], folder: str | None = None) -> int:
    import sys

    import uvicorn

    from lineage_defs.triggers.webhook.guard import guarded_protocol

    app, hooks_, limits = app_from_env(env, folder)
    for name, h in sorted(hooks_.items()):
        creds = " + ".join(c for c, v in (("bearer token", h.token), ("HMAC secret", h.secret)) if v) or "NO CREDENTIAL: refuses every request"
        print(f"POST http://{host}:{port}/hooks/{name}  → {h.step_path}  ({creds})", file=sys.stderr)
    config = uvicorn.Config(
        app, host=host, port=port, log_level="warning", access_log=False,
        http=guarded_protocol(limits),  # connection cap, header deadline and size, requests per connection
        timeout_keep_alive=int(max(limits.keep_alive, 1)),
        backlog=2048,
    )  # fmt: skip
    uvicorn.Server(config).run()
    return 0
