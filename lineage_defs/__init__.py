"""lineage_defs: annotated scripts and dbt projects as one Dagster asset graph."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__all__ = ["LineageResource", "LineageSettings", "LineageTranslator", "build_definitions", "load_project"]

if TYPE_CHECKING:
    from lineage_defs.assets.definitions import LineageSettings, build_definitions
    from lineage_defs.assets.resources import LineageResource
    from lineage_defs.assets.translator import LineageTranslator
    from lineage_defs.plan.project import load_project


def __getattr__(name: str) -> Any:
    # Lazy: importing lineage_defs (e.g. lineage_defs.runtime in a step's
    # subprocess) must not import Dagster.
    if name in ("LineageSettings", "build_definitions"):
        from lineage_defs.assets import definitions

        return getattr(definitions, name)
    if name == "LineageResource":
        from lineage_defs.assets import resources

        return getattr(resources, name)
    if name == "LineageTranslator":
        from lineage_defs.assets import translator

        return getattr(translator, name)
    if name == "load_project":
        from lineage_defs.plan import project

        return getattr(project, name)
    raise AttributeError(name)
