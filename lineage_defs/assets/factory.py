"""StepSpecs → Dagster assets, checks and external assets."""

from __future__ import annotations

import datetime as dt
import inspect
import warnings
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from dagster import (
    AssetCheckSpec,
    AssetDep,
    AssetKey,
    AssetsDefinition,
    AssetSpec,
    AutomationCondition,
    Backoff,
    BackfillPolicy,
    FreshnessPolicy,
    PartitionsDefinition,
    RetryPolicy,
    multi_asset,
)
from dagster._core.definitions.metadata.source_code import CodeReferencesMetadataValue, LocalFileCodeReference

from lineage_defs.assets import metadata as md
from lineage_defs.assets.partitions import partition_mapping, partitions_def
from lineage_defs.assets.translator import LineageTranslator
from lineage_defs.plan.spec import Project, StepSpec

_COMPUTE_SIGNATURE = inspect.Signature([inspect.Parameter("context", inspect.Parameter.POSITIONAL_OR_KEYWORD)])
_URI_KINDS = {"ducklake": "ducklake", "duckdb": "duckdb", "datatable": "postgres", "s3": "s3", "dbt": "dbt"}


def check_specs(step: StepSpec, key: AssetKey, translator: LineageTranslator) -> list[AssetCheckSpec]:
    out = []
    for t in step.tests:
        extra = [translator.asset_key(t.ref_uri)] if t.kind == "relationships" and t.ref_uri else []
        desc = {
            "unique": f"{t.column} is unique in the written slice",
            "not_null": f"{t.column} has no nulls in the written slice",
            "accepted_values": f"{t.column} in ({', '.join(t.values)})",
            "relationships": f"{t.column} → {t.ref_uri}.{t.ref_column}",
            "row_count": f"row count in [{t.min if t.min is not None else '-∞'}, {t.max if t.max is not None else '∞'}]",
            "custom": f"{t.script} returns no rows",
        }[t.kind]
        out.append(
            AssetCheckSpec(
                name=t.name,
                asset=key,
                description=f"{desc} (severity={t.severity})",
                blocking=t.severity == "error",
                additional_deps=extra,
            )
        )
    return out


def asset_metadata(step: StepSpec, uri: str, root: Path, translator: LineageTranslator) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "lineage/uri": uri,
        "lineage/script": step.path,
        "lineage/strategy": step.strategy,
    }
    with warnings.catch_warnings():  # code references are a beta API; the UI links the script with them
        warnings.simplefilter("ignore")
        meta["dagster/code_references"] = CodeReferencesMetadataValue(
            code_references=[LocalFileCodeReference(file_path=str(root / step.path), line_number=1)]
        )
    if uri != step.uri:
        return meta
    table = md.table_name(uri)
    if table:
        meta["dagster/table_name"] = table
    schema = md.column_schema(uri, step.output_columns, step.column_edges)
    if schema:
        meta["dagster/column_schema"] = schema
    lineage = md.column_lineage(uri, step.column_edges, translator.asset_key)
    if lineage:
        meta["dagster/column_lineage"] = lineage
    table_md = md.lineage_markdown(uri, step.column_edges)
    if table_md:
        meta["lineage/column_lineage"] = table_md
    return meta


def step_assets(
    step: StepSpec,
    project: Project,
    pdefs: Mapping[str, PartitionsDefinition | None],
    translator: LineageTranslator,
    condition: AutomationCondition | None = None,
) -> AssetsDefinition:
    root = Path(project.root)
    pdef = pdefs.get(step.uri)
    deps = []
    for d in step.deps:
        mapping = partition_mapping(pdefs.get(d.uri), pdef)
        deps.append(AssetDep(translator.asset_key(d.uri), partition_mapping=mapping))
    freshness = None
    if step.freshness:
        f = step.freshness
        freshness = FreshnessPolicy.time_window(
            fail_window=dt.timedelta(seconds=f.fail_after),
            warn_window=dt.timedelta(seconds=f.warn_after) if f.warn_after else None,
        )
    kinds = set(step.kinds)
    tags = {t: "" for t in step.tags}
    specs = [
        AssetSpec(
            key=translator.asset_key(uri),
            deps=deps,
            description=translator.description(step),
            group_name=translator.group_name(step),
            metadata=asset_metadata(step, uri, root, translator),
            kinds=kinds,
            tags=tags,
            owners=list(step.owners),
            partitions_def=pdef,
            freshness_policy=freshness,
            automation_condition=condition,
            # outputs are reported per partition (a failed partition in a range
            # run must not be recorded as materialized), so none is required
            skippable=True,
        )
        for uri in step.outputs
    ]
    retry = None
    if step.retry:
        r = step.retry
        retry = RetryPolicy(max_retries=r.max_retries, delay=r.delay, backoff=Backoff.EXPONENTIAL if r.exponential else None)
    # SQL steps can take a partition range in one run (one transaction per partition).
    backfill = BackfillPolicy.single_run() if pdef is not None and step.language in ("duckdb", "postgres") and step.partitioning and step.partitioning.kind != "dynamic" else None

    def _compute(context: Any) -> Iterator[Any]:
        from lineage_defs.assets.execute import execute

        yield from execute(context, step, project, translator)

    # Dagster inspects the compute function's signature ~16 times per asset;
    # a precomputed one makes that a lookup (load time is paid by every run).
    _compute.__signature__ = _COMPUTE_SIGNATURE  # type: ignore[attr-defined]

    return multi_asset(
        name=step.name,
        specs=specs,
        check_specs=check_specs(step, specs[0].key, translator),
        partitions_def=pdef,
        retry_policy=retry,
        pool=step.pool,
        backfill_policy=backfill,
        op_tags={"lineage/script": step.path},
        required_resource_keys={"lineage"},
    )(_compute)


def external_specs(project: Project, translator: LineageTranslator) -> list[AssetSpec]:
    out = []
    for uri in project.externals:
        kind = uri.split("://", 1)[0]
        out.append(
            AssetSpec(
                key=translator.asset_key(uri),
                group_name=translator.external_group_name(uri),
                description=f"External: read by the pipelines but produced by none of them ({uri}).",
                kinds={_URI_KINDS[kind]},
                metadata={"lineage/uri": uri},
            )
        )
    return out


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

    def group_name(self, step: StepSpec) -> str:
        return self.inner.group_name(step)

    def description(self, step: StepSpec) -> str:
        return self.inner.description(step)

    def external_group_name(self, uri: str) -> str | None:
        return self.inner.external_group_name(uri)


def partition_defs(project: Project) -> dict[str, PartitionsDefinition | None]:
    """Each output URI's PartitionsDefinition (one object per step, shared by its outputs)."""
    pdefs: dict[str, PartitionsDefinition | None] = {}
    for s in project.steps:
        pdef = partitions_def(s.partitioning, s.name, live=bool(s.kafka or s.webhooks))
        for u in s.outputs:
            pdefs[u] = pdef
    return pdefs


def all_assets(
    project: Project,
    translator: LineageTranslator,
    pdefs: Mapping[str, PartitionsDefinition | None] | None = None,
    conditions: Mapping[str, AutomationCondition | None] | None = None,
) -> list[AssetsDefinition | AssetSpec]:
    """Every step's assets and the external ones; ``conditions`` by step name (the cascade)."""
    translator = translator if isinstance(translator, CachedKeys) else CachedKeys(translator)
    pdefs = pdefs if pdefs is not None else partition_defs(project)
    conditions = conditions or {}
    assets: list[AssetsDefinition | AssetSpec] = [step_assets(s, project, pdefs, translator, conditions.get(s.name)) for s in project.steps if s.dbt is None]
    if project.dbt_projects:
        from lineage_defs.assets.dbt import dbt_assets_for

        for dbt_project in project.dbt_projects:
            steps = [s for s in project.steps if s.dbt is not None and s.dbt.project == dbt_project.path]
            if steps:
                assets.extend(dbt_assets_for(dbt_project, steps, project, pdefs, translator, conditions))
    assets.extend(external_specs(project, translator))
    return assets


__all__: Sequence[str] = ["CachedKeys", "all_assets", "check_specs", "partition_defs", "step_assets"]
