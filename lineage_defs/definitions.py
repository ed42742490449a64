"""The Dagster code location: ``workspace.yaml`` loads ``lineage_defs.definitions:defs``.

The only module that reads the environment for the code location, and only
when ``defs`` is first asked for — importing this module does no work. The
variables are ``LineageSettings.from_env``'s (see docs/configuration.md);
the webhook receiver reads its credentials itself (``webhook_env``). Your own
Definitions named by ``LINEAGE_DEFINITIONS`` are merged in (``build_definitions``'
``defs``).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

DEFAULT_WEBSERVER_URL = "http://127.0.0.1:3000"


def webhook_env(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """What the webhook receiver reads: the folders, the event store, LINEAGE_WEBHOOK_TOKEN_/SECRET_<NAME>, LINEAGE_WEBHOOK_MAX_BYTES."""
    e = os.environ if env is None else env
    keep = ("LINEAGE_PIPELINES_DIR", "LINEAGE_STATE_DIR", "LINEAGE_EVENTS_DSN")
    return {k: v for k, v in e.items() if k in keep or k.startswith("LINEAGE_WEBHOOK_")}


def webserver_url_from_env(env: Mapping[str, str] | None = None) -> str:
    """Where ``lineage-defs backfill`` finds the Dagster webserver (DAGSTER_WEBSERVER_URL)."""
    e = os.environ if env is None else env
    return e.get("DAGSTER_WEBSERVER_URL", DEFAULT_WEBSERVER_URL)


# Built once per process, when first asked for. Held in a dict, not in a module-level
# variable: Dagster's autodiscovery takes every Definitions value among the module's
# attributes, and two (the cache and ``defs``) are an error.
_built: dict[str, Any] = {}


def __getattr__(name: str) -> Any:
    if name != "defs":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    if "defs" not in _built:
        from lineage_defs.location import build_definitions
        from lineage_defs.settings import LineageSettings

        settings = LineageSettings.from_env()
        _built["defs"] = build_definitions(settings=settings, defs=[user_definitions(spec) for spec in settings.definitions])
    return _built["defs"]


def user_definitions(spec: str) -> Any:
    """The Definitions ``LINEAGE_DEFINITIONS`` names: ``pkg.module[:attr]`` or ``path/to/file.py[:attr]`` (attr ``defs``)."""
    import importlib
    import importlib.util
    import sys

    from dagster import Definitions

    from lineage_defs.errors import RunError

    target, attr = spec, "defs"
    head, sep, tail = spec.rpartition(":")
    if sep and tail.isidentifier():
        target, attr = head, tail
    where = f"LINEAGE_DEFINITIONS={spec!r}"
    try:
        if target.endswith(".py"):
            path = os.path.abspath(target)
            name = "lineage_user_defs_" + "".join(c if c.isalnum() else "_" for c in path)
            module = sys.modules.get(name)
            if module is None:
                found = importlib.util.spec_from_file_location(name, path)
                if found is None or found.loader is None or not os.path.exists(path):
                    raise RunError(f"{where}: no Python file {path}", fix="give the path of a .py file, or a module name")
                module = importlib.util.module_from_spec(found)
                sys.modules[name] = module
                found.loader.exec_module(module)
        else:
            module = importlib.import_module(target)
    except ImportError as e:
        raise RunError(f"{where}: cannot import {target}: {e}", fix="give an importable module name (on PYTHONPATH) or the path of a .py file") from e
    value = getattr(module, attr, None)
    if not isinstance(value, Definitions):
        raise RunError(f"{where}: {target} has no Definitions named {attr!r}", fix=f"define `{attr} = dagster.Definitions(...)` in it, or name the attribute: {target}:<name>")
    return value


def __dir__() -> list[str]:
    # Dagster finds a code location's Definitions by listing the module's attributes
    # (``dagster dev -m lineage_defs.definitions`` without ``-a defs``, ``dg``): a
    # lazy ``defs`` must be listed to be found. Listing it builds nothing.
    return sorted([*globals(), "defs"])
