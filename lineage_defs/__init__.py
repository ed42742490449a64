"""lineage_defs: annotated scripts and dbt projects as one Dagster asset graph."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__all__ = [
    "LineageDefsComponent", "LineageDuckDBIOManager", "LineageDuckDBResource", "LineageResource", "LineageSettings",
    "LineageTranslator", "build_definitions", "load_project", "merge_definitions",
]  # fmt: skip

if TYPE_CHECKING:
    from lineage_defs.component import LineageDefsComponent
    from lineage_defs.location import build_definitions, merge_definitions
    from lineage_defs.assets.resources import LineageResource
    from lineage_defs.assets.translator import LineageTranslator
    from lineage_defs.duckdb_io import LineageDuckDBIOManager, LineageDuckDBResource
    from lineage_defs.project import load_project
    from lineage_defs.settings import LineageSettings

# Lazy: importing lineage_defs (e.g. lineage_defs.runtime in a step's subprocess) must not import Dagster.
_WHERE = {
    "LineageDefsComponent": "lineage_defs.component",
    "LineageDuckDBIOManager": "lineage_defs.duckdb_io",
    "LineageDuckDBResource": "lineage_defs.duckdb_io",
    "merge_definitions": "lineage_defs.location",
    "build_definitions": "lineage_defs.location",
    "LineageResource": "lineage_defs.assets.resources",
    "LineageTranslator": "lineage_defs.assets.translator",
    "load_project": "lineage_defs.project",
    "LineageSettings": "lineage_defs.settings",
}


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(name)
    import gc
    import importlib

    # The first import brings in most of the package: tens of thousands of long-lived objects
    # that the cyclic GC would walk again and again (about a third of the import's time).
    paused = gc.isenabled()
    gc.disable()
    try:
        value = getattr(importlib.import_module(module), name)
    finally:
        if paused:
            gc.enable()
    globals()[name] = value  # found once: later lookups do not come here
    return value


def __dir__() -> list[str]:
    # `dg` finds component types by listing the registry module (this package, see
    # pyproject's entry point): the lazy names must be listed to be found.
    return sorted({*globals(), *_WHERE})
