"""Customise how steps become Dagster assets through one object (like DagsterDbtTranslator)."""

from __future__ import annotations

from collections.abc import Callable

from dagster import AssetKey, TableColumnDep

from lineage_defs import uris
from lineage_defs.assets.metadata import column_dep
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

    def __init__(self, inner: LineageTranslator, docs_link: Callable[[str], str | None] | None = None) -> None:
        self.inner = inner
        self.keys: dict[str, AssetKey] = {}
        self.column_deps: dict[str, TableColumnDep] = {}
        self.docs_link = docs_link  # LineageSettings.docs_link: the explorer's page of an asset

    def asset_key(self, uri: str) -> AssetKey:
        key = self.keys.get(uri)
        if key is None:
            key = self.keys[uri] = self.inner.asset_key(uri)
        return key

    def column_dep(self, source: str) -> TableColumnDep:
        """The upstream column ``source`` (``<uri>.<column>``) for column lineage: one per column, shared by its readers."""
        dep = self.column_deps.get(source)
        if dep is None:
            dep = self.column_deps[source] = column_dep(self.asset_key, source)
        return dep

    def group_name(self, step: AnyStep) -> str:
        return self.inner.group_name(step)

    def description(self, step: AnyStep) -> str:
        return self.inner.description(step)

    def describe(self, step: AnyStep, uri: str) -> str:
        """The description of the output ``uri``: the translator's, with a link to its explorer page when LINEAGE_DOCS_URL is set."""
        text = self.inner.description(step)
        link = self.docs_link(uri) if self.docs_link else None
        return f"{text}\n\n[Column lineage and docs]({link})" if link else text
