"""What building one project's Dagster definitions shares: the plan, keys, partitions, conditions, settings."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

from dagster import AssetDep, AutomationCondition, PartitionsDefinition

from lineage_defs import uris
from lineage_defs.assets import metadata as md
from lineage_defs.assets.partitions import partition_mapping
from lineage_defs.assets.resources import IO_MANAGER_KEY
from lineage_defs.assets.translator import CachedKeys
from lineage_defs.plan.spec import Project
from lineage_defs.settings import LineageSettings


@dataclass(frozen=True)
class BuildContext:
    project: Project
    settings: LineageSettings
    keys: CachedKeys  # the user's translator, keys memoised for this build
    pdefs: Mapping[str, PartitionsDefinition | None]  # output URI → its PartitionsDefinition (shared per step)
    conditions: Mapping[str, AutomationCondition | None]  # step name → its cascade condition

    @cached_property
    def root(self) -> Path:
        return Path(self.project.root)

    @cached_property
    def _external_metadata(self) -> dict[str, dict[str, Any]]:
        out: dict[str, dict[str, Any]] = {}
        for uri in self.project.externals:
            meta: dict[str, Any] = {"lineage/uri": uri, md.EXTERNAL: True}
            if uris.is_table(uri):  # a hand-written asset's input gets the table as a DataFrame
                meta["dagster/io_manager_key"] = IO_MANAGER_KEY  # what AssetSpec.with_io_manager_key sets
            out[uri] = meta
        return out

    def dep(self, uri: str, pdef: PartitionsDefinition | None) -> AssetDep:
        """A step's dependency on ``uri``, its partitions mapped to the reader's ``pdef``.

        An input no step produces gets no spec of ours: Dagster draws the node
        itself from the dependency (with this metadata), and an asset of the
        user's own Definitions with that key (``Definitions.merge``) is that node.
        """
        memo = (uri, id(pdef))  # a dependency is immutable: readers alike share one (the pdefs live as long as the build)
        dep = self._deps.get(memo)
        if dep is None:
            dep = self._deps[memo] = AssetDep(self.keys.asset_key(uri), partition_mapping=partition_mapping(self.pdefs.get(uri), pdef), metadata=self._external_metadata.get(uri))
        return dep

    @cached_property
    def _deps(self) -> dict[tuple[str, int], AssetDep]:
        return {}
