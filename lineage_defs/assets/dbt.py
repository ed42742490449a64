"""dbt steps → Dagster multi-assets that dagster-dbt runs.

One multi-asset per dbt project (plus one per microbatch model, which is
time-partitioned), whose specs come from the plan — keys from the step URIs
(``dbt://warehouse/main/orders`` → ``dbt/warehouse/main/orders``), group =
the pipeline folder, dbt tests as asset checks named like dagster-dbt names
them. The specs carry dagster-dbt's own metadata keys (manifest, translator,
unique id) so ``DbtCliResource.cli(..., context=context).stream()`` selects,
runs and reports them exactly as for ``@dbt_assets``.

Why not ``@dbt_assets`` itself: it re-evaluates the dbt selection (importing
dbt's graph machinery) and builds each spec from the full manifest on every
load, which every Dagster run process pays; here the selection was evaluated
once when the manifest was cached, and the manifest is read only when dbt runs.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from dagster import AssetCheckSpec, AssetDep, AssetKey, AssetsDefinition, AssetSpec, BackfillPolicy, PartitionsDefinition, multi_asset
from dagster_dbt import DagsterDbtTranslator
from dagster_dbt.asset_utils import (
    DAGSTER_DBT_EXCLUDE_METADATA_KEY,
    DAGSTER_DBT_MANIFEST_METADATA_KEY,
    DAGSTER_DBT_SELECT_METADATA_KEY,
    DAGSTER_DBT_SELECTOR_METADATA_KEY,
    DAGSTER_DBT_TRANSLATOR_METADATA_KEY,
    DAGSTER_DBT_UNIQUE_ID_METADATA_KEY,
)
from dagster_dbt.dagster_dbt_translator import DbtManifestWrapper

from lineage_defs.assets.factory import _asset_metadata
from lineage_defs.assets.partitions import partition_mapping
from lineage_defs.assets.translator import LineageTranslator
from lineage_defs.plan.dbt import DbtProject, project_op_name
from lineage_defs.plan.spec import Project, StepSpec

_COMPUTE_SIGNATURE = inspect.Signature([inspect.Parameter("context", inspect.Parameter.POSITIONAL_OR_KEYWORD)])


class LazyManifest(DbtManifestWrapper):
    """dagster-dbt's manifest holder, reading the cached slim manifest the first time dbt runs (never at load)."""

    def __init__(self, path: str) -> None:  # no dataclass __init__: nothing is read yet
        self.path = path
        self._data: dict[str, Any] | None = None

    @property
    def manifest(self) -> Mapping[str, Any]:  # type: ignore[override]
        if self._data is None:
            self._data = json.loads(Path(self.path).read_text())
        return self._data


class LineageDbtTranslator(DagsterDbtTranslator):
    """dagster-dbt's translator over the plan's keys: a dbt node's key is its step's URI key."""

    def __init__(self, keys: Mapping[str, AssetKey]) -> None:
        super().__init__()
        self.keys = keys

    def get_asset_key(self, dbt_resource_props: Mapping[str, Any]) -> AssetKey:
        key = self.keys.get(dbt_resource_props.get("unique_id", ""))
        if key is not None:
            return key
        p = dbt_resource_props
        return AssetKey(["dbt", str(p.get("database") or "dbt"), str(p.get("schema") or "main"), str(p.get("alias") or p.get("identifier") or p["name"])])

    def get_asset_spec(self, manifest: Mapping[str, Any], unique_id: str, project: Any) -> AssetSpec:
        # At run time dagster-dbt only needs the key of a node; the full spec is built by the plan.
        props = manifest["nodes"].get(unique_id) or manifest["sources"].get(unique_id) or {"unique_id": unique_id, "name": unique_id}
        return AssetSpec(key=self.get_asset_key(props))


def _groups(steps: Sequence[StepSpec]) -> list[tuple[str, list[StepSpec]]]:
    """(suffix, steps): the unpartitioned models together, each microbatch model on its own."""
    plain = [s for s in steps if s.partitioning is None]
    out: list[tuple[str, list[StepSpec]]] = [("", plain)] if plain else []
    out.extend((f"__{s.uri.rsplit('/', 1)[-1]}", [s]) for s in steps if s.partitioning is not None)
    return out


def _selection(project: DbtProject, group: Sequence[StepSpec], whole_project: bool) -> dict[str, str]:
    """dagster-dbt's op tags: the dbt selection a non-subset run of this group uses."""
    if whole_project:
        cfg = project.config
        tags = {DAGSTER_DBT_SELECT_METADATA_KEY: cfg.select} if not cfg.selector else {DAGSTER_DBT_SELECTOR_METADATA_KEY: cfg.selector}
        if cfg.exclude:
            tags[DAGSTER_DBT_EXCLUDE_METADATA_KEY] = cfg.exclude
        return tags
    return {DAGSTER_DBT_SELECT_METADATA_KEY: " ".join(f"fqn:{s.dbt.fqn}" for s in group if s.dbt)}


def dbt_assets_for(
    project: DbtProject,
    steps: Sequence[StepSpec],
    plan: Project,
    pdefs: Mapping[str, PartitionsDefinition | None],
    translator: LineageTranslator,
) -> list[AssetsDefinition]:
    """The multi-assets of one dbt project."""
    root = Path(plan.root)
    keys = {s.dbt.unique_id: translator.asset_key(s.uri) for s in steps if s.dbt}
    keys.update({u: translator.asset_key(uri) for u, uri in project.node_uris if u not in keys})
    dbt_translator = LineageDbtTranslator(keys)
    wrapper = LazyManifest(project.manifest_path)
    kinds = {"dbt", "duckdb"} if project.default_profile else {"dbt"}
    groups = _groups(steps)
    out = []
    for suffix, group in groups:
        pdef = pdefs.get(group[0].uri) if suffix else None
        specs: list[AssetSpec] = []
        checks: list[AssetCheckSpec] = []
        for s in group:
            assert s.dbt is not None
            key = keys[s.dbt.unique_id]
            meta = _asset_metadata(s, s.uri, root, translator)
            meta["dagster/table_name"] = s.dbt.relation
            meta["lineage/dbt_unique_id"] = s.dbt.unique_id
            meta[DAGSTER_DBT_MANIFEST_METADATA_KEY] = wrapper
            meta[DAGSTER_DBT_TRANSLATOR_METADATA_KEY] = dbt_translator
            meta[DAGSTER_DBT_UNIQUE_ID_METADATA_KEY] = s.dbt.unique_id
            deps = [AssetDep(translator.asset_key(d.uri), partition_mapping=partition_mapping(pdefs.get(d.uri), pdef)) for d in s.deps]
            specs.append(
                AssetSpec(
                    key=key,
                    deps=deps,
                    description=translator.description(s),
                    group_name=translator.group_name(s),
                    metadata=meta,
                    kinds=kinds,
                    tags={t: "" for t in s.tags},
                    skippable=True,
                )
            )
            checks.extend(
                AssetCheckSpec(name=t.name, asset=key, blocking=t.severity == "error", description=f"dbt test {t.name} (severity={t.severity})", metadata={DAGSTER_DBT_UNIQUE_ID_METADATA_KEY: t.unique_id})
                for t in s.dbt.tests
            )

        def _compute(context: Any, _group: Sequence[StepSpec] = group) -> Iterator[Any]:
            from lineage_defs.assets.dbt_execute import execute_dbt

            yield from execute_dbt(context, project, _group, plan, translator)

        _compute.__signature__ = _COMPUTE_SIGNATURE  # type: ignore[attr-defined]
        out.append(
            multi_asset(
                name=project_op_name(project) + suffix,
                specs=specs,
                check_specs=checks,
                can_subset=True,
                partitions_def=pdef,
                backfill_policy=BackfillPolicy.single_run() if pdef is not None else None,
                op_tags={**_selection(project, group, whole_project=len(groups) == 1), "lineage/dbt_project": project.path},
                required_resource_keys={"lineage"},
                allow_arbitrary_check_specs=True,
            )(_compute)
        )
    return out
