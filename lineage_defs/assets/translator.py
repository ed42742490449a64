"""Customise how steps become Dagster assets through one object (like DagsterDbtTranslator)."""

from __future__ import annotations

from dagster import AssetKey

from lineage_defs import uris
from lineage_defs.plan.spec import AnyStep


class LineageTranslator:
    """Subclass and override to change keys, groups or descriptions.

    An input no step produces is no asset of ours: Dagster draws it (group
    ``default``) from the readers' dependencies, or it is your own asset.

    >>> class Prefixed(LineageTranslator):
    ...     def group_name(self, step):
    ...         return f"team_{step.pipeline}"
    """

    def asset_key(self, uri: str) -> AssetKey:
        return AssetKey(list(uris.key_path(uri)))

    def group_name(self, step: AnyStep) -> str:
        return step.pipeline

    def description(self, step: AnyStep) -> str:
        return step.description or f"Built by {step.path}."


class CachedKeys(LineageTranslator):
    """The user's translator with asset keys memoised for one build (URIs repeat across the graph)."""

    def __init__(self, inner: LineageTranslator) -> None:
        self.inner = inner
        self.keys: dict[str, AssetKey] = {}

    def asset_key(self, uri: str) -> AssetKey:
        key = self.keys.get(uri)
        if key is None:
            key = self.keys[uri] = self.inner.asset_key(uri)
        return key

    def group_name(self, step: AnyStep) -> str:
        return self.inner.group_name(step)

    def description(self, step: AnyStep) -> str:
        return self.inner.description(step)
