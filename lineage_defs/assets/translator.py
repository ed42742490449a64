"""Customise how steps become Dagster assets through one object (like DagsterDbtTranslator)."""

from __future__ import annotations

from dagster import AssetKey

from lineage_defs import uris
from lineage_defs.plan.spec import StepSpec


class LineageTranslator:
    """Subclass and override to change keys, groups or descriptions.

    >>> class Prefixed(LineageTranslator):
    ...     def group_name(self, step):
    ...         return f"team_{step.pipeline}"
    """

    def asset_key(self, uri: str) -> AssetKey:
        return AssetKey(list(uris.key_path(uri)))

    def group_name(self, step: StepSpec) -> str:
        return step.pipeline

    def description(self, step: StepSpec) -> str:
        return step.description or f"Built by {step.path}."

    def external_group_name(self, uri: str) -> str | None:
        return "external"
