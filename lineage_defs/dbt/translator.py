"""dagster-dbt's translator over the plan's keys: a dbt node reports under its step's asset key."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dagster import AssetKey, AssetSpec
from dagster_dbt import DagsterDbtTranslator, DagsterDbtTranslatorSettings

from lineage_defs.uris import Kind


class LineageDbtTranslator(DagsterDbtTranslator):
    """dagster-dbt's event stream mapped to the plan: keys by unique id (nodes and sources)."""

    def __init__(self, keys: Mapping[str, AssetKey]) -> None:
        # tests on sources report as checks on the assets the sources are (the plan declares them)
        super().__init__(settings=DagsterDbtTranslatorSettings(enable_source_tests_as_checks=True))
        self.keys = keys

    def get_asset_key(self, dbt_resource_props: Mapping[str, Any]) -> AssetKey:
        key = self.keys.get(dbt_resource_props.get("unique_id", ""))
        if key is not None:
            return key
        p = dbt_resource_props
        return AssetKey([Kind.DBT.value, str(p.get("database") or "dbt"), str(p.get("schema") or "main"), str(p.get("alias") or p.get("identifier") or p["name"])])

    def get_asset_spec(self, manifest: Mapping[str, Any], unique_id: str, project: Any) -> AssetSpec:
        # dagster-dbt only needs a node's key when it reports events; the specs come from the plan
        props = manifest["nodes"].get(unique_id) or manifest["sources"].get(unique_id) or {"unique_id": unique_id, "name": unique_id}
        return AssetSpec(key=self.get_asset_key(props))
