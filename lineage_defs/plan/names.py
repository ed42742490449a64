"""Dagster op names for steps, and the names of event streams and sensors: unique, valid, stable across loads. Pure."""

from __future__ import annotations

import re

from lineage_defs.parse.model import EventTrigger
from lineage_defs.triggers.sources import source_of
from lineage_defs.triggers.webhook.source import hook_name as hook_name


def op_name(pipeline: str, rel: str, names: set[str]) -> str:
    stem = rel.split("/", 1)[1] if "/" in rel else rel
    for suffix in (".pg.sql", ".sql", ".py", ".sh"):
        if stem.endswith(suffix):
            stem = stem[: -len(suffix)]
            break
    base = re.sub(r"[^A-Za-z0-9_]", "_", f"{pipeline}__{stem}")
    if base[0].isdigit():
        base = "_" + base
    name, i = base, 2
    while name in names:
        name, i = f"{base}_{i}", i + 1
    names.add(name)
    return name


def hook_env(name: str) -> str:
    """``payments_eu`` → ``PAYMENTS_EU``: the suffix of LINEAGE_WEBHOOK_TOKEN_/SECRET_ (one-to-one on hook names)."""
    return re.sub(r"[^A-Za-z0-9]", "_", name).upper()


def stream_of(step_name: str, trigger: EventTrigger) -> str:
    """The event store's stream an `on <source>` line of a step feeds (named by its source's row)."""
    return source_of(trigger).stream(step_name, trigger)


def sensor_name(step_name: str, trigger: EventTrigger) -> str:
    """The Dagster sensor of an `on <source>` line: ``<step>__<keyword>_<what names its stream>``."""
    return source_of(trigger).sensor_name(step_name, trigger)
