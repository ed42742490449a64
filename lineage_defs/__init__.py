"""lineage_defs: annotated scripts and dbt projects as one Dagster asset graph."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__all__ = ["LineageResource", "LineageSettings", "LineageTranslator", "build_definitions", "load_project"]

if TYPE_CHECKING:
    from lineage_defs.assets.definitions import build_definitions
    from lineage_defs.assets.resources import LineageResource
    from lineage_defs.assets.translator import LineageTranslator
    from lineage_defs.plan.project import load_project
    from lineage_defs.settings import LineageSettings

# Lazy: importing lineage_defs (e.g. lineage_defs.runtime in a step's subprocess) must not import Dagster.
_WHERE = {
    "build_definitions": "lineage_defs.assets.definitions",
    "LineageResource": "lineage_defs.assets.resources",
    "LineageTranslator": "lineage_defs.assets.translator",
    "load_project": "lineage_defs.plan.project",
    "LineageSettings": "lineage_defs.settings",
}


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(name)
    import importlib

    return getattr(importlib.import_module(module), name)
