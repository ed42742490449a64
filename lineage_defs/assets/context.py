"""What building one project's Dagster definitions shares: the plan, keys, partitions, conditions, settings."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from dagster import AutomationCondition, PartitionsDefinition

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

    @property
    def root(self) -> Path:
        return Path(self.project.root)
