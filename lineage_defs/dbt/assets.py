"""dbt steps → Dagster multi-assets; dagster-dbt runs them (``execute.py``).

One multi-asset per dbt project (plus one per microbatch model, which is
time-partitioned), whose specs come from the plan — keys from the step URIs
(``dbt://warehouse/main/orders`` → ``dbt/warehouse/main/orders``), group =
the pipeline folder, dbt tests as asset checks named like dagster-dbt names
them (the test's name).

Why not ``@dbt_assets``: it re-evaluates the dbt selection (importing dbt) and
builds each spec from the full manifest on every load, and every Dagster run
process loads the code location. Here the selection was evaluated once when
the manifest was cached, and neither dbt nor dagster-dbt is imported until a
dbt asset runs; then ``DbtCliResource`` invokes dbt and its event stream
reports the models and tests.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from dagster import AssetCheckSpec, AssetsDefinition, AssetSpec, BackfillPolicy, multi_asset

from lineage_defs.assets.context import BuildContext
from lineage_defs.assets.metadata import asset_metadata
from lineage_defs.assets.resources import IO_MANAGER_KEY
from lineage_defs.dbt.project import DbtProject
from lineage_defs.dbt.selection import groups, selection_args
from lineage_defs.parse.model import Severity
from lineage_defs.plan.spec import DbtStep
from lineage_defs.uris import Kind

_COMPUTE_SIGNATURE = inspect.Signature([inspect.Parameter("context", inspect.Parameter.POSITIONAL_OR_KEYWORD)])
UNIQUE_ID_KEY = "dagster_dbt/unique_id"  # dagster-dbt's own metadata key for a node's (or test's) unique id


def dbt_assets(ctx: BuildContext) -> list[AssetsDefinition]:
    """Every dbt project's multi-assets."""
    out: list[AssetsDefinition] = []
    for dbt_project in ctx.project.dbt_projects:
        steps = [s for s in ctx.project.dbt_steps if s.project == dbt_project.path]
        if steps:
            out.extend(project_assets(dbt_project, steps, ctx))
    return out


def _spec(s: DbtStep, ctx: BuildContext, kinds: set[str], pdef: Any, root: Path) -> AssetSpec:
    keys = ctx.keys
    meta = asset_metadata(s, s.uri, root, keys)
    meta["dagster/table_name"] = s.relation
    meta[UNIQUE_ID_KEY] = s.unique_id
    if s.default_profile:  # the model's relation is a warehouse table the lineage I/O manager loads
        meta["dagster/io_manager_key"] = IO_MANAGER_KEY  # what AssetSpec.with_io_manager_key sets, without a copy per model
    return AssetSpec(
        key=keys.asset_key(s.uri),
        deps=[ctx.dep(d.uri, pdef) for d in s.deps],
        description=keys.describe(s, s.uri),
        group_name=keys.group_name(s),
        metadata=meta,
        kinds=kinds,
        tags={t: "" for t in s.tags},
        skippable=True,
        automation_condition=ctx.conditions.get(s.name),
        code_version=s.code_version,  # the model's checksum, config, macros and the project's vars
    )


def _checks(s: DbtStep, ctx: BuildContext) -> list[AssetCheckSpec]:
    key = ctx.keys.asset_key(s.uri)
    return [
        AssetCheckSpec(
            name=t.name,
            asset=ctx.keys.asset_key(t.asset) if t.asset else key,
            # a source test checks the asset the source is, run by dbt with this project's models
            blocking=t.severity == Severity.ERROR and not t.asset,
            description=f"dbt test {t.name} (severity={t.severity})" + (f" on the dbt source that is {t.asset}" if t.asset else ""),
            metadata={UNIQUE_ID_KEY: t.unique_id},
        )
        for t in s.tests
    ]


def project_assets(project: DbtProject, steps: Sequence[DbtStep], ctx: BuildContext) -> list[AssetsDefinition]:
    """The multi-assets of one dbt project (models cascade like `trigger any` scripts)."""
    # Dagster kind tags: dbt, and DuckDB where the default profile builds the models into the embedded warehouse
    kinds = {Kind.DBT.dagster_kind, Kind.DUCKDB.dagster_kind} if project.default_profile else {Kind.DBT.dagster_kind}
    parts = groups(steps)
    root = ctx.root
    out = []
    for suffix, group in parts:
        pdef = ctx.pdefs.get(group[0].uri) if suffix else None
        specs = [_spec(s, ctx, kinds, pdef, root) for s in group]
        checks = [c for s in group for c in _checks(s, ctx)]
        selection = selection_args(project, group, whole_project=len(parts) == 1)

        def _compute(context: Any, _group: Sequence[DbtStep] = group, _selection: list[str] = selection) -> Iterator[Any]:
            from lineage_defs.dbt.execute import DbtRun  # dagster-dbt and dbt: imported when a dbt asset runs
            from lineage_defs.openlineage.observe import JobType, observed

            run = DbtRun(context, project, _group, ctx).execute(_selection)
            yield from observed(context, {ctx.keys.asset_key(s.uri): s for s in _group}, run, JobType.DBT_MODEL)

        _compute.__signature__ = _COMPUTE_SIGNATURE  # type: ignore[attr-defined]
        out.append(
            multi_asset(
                name=project.op_name + suffix,
                specs=specs,
                check_specs=checks,
                can_subset=True,
                partitions_def=pdef,
                backfill_policy=BackfillPolicy.single_run() if pdef is not None else None,
                op_tags={"lineage/dbt_project": project.path},
                required_resource_keys={"lineage"},
                allow_arbitrary_check_specs=True,
            )(_compute)
        )
    return out
