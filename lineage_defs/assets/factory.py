"""Script steps → Dagster multi-assets with their checks; partitions per output."""

from __future__ import annotations

import datetime as dt
import inspect
from collections.abc import Callable, Iterator
from typing import Any

from dagster import (
    AssetCheckSpec,
    AssetKey,
    AssetsDefinition,
    AssetSpec,
    Backoff,
    BackfillPolicy,
    FreshnessPolicy,
    PartitionsDefinition,
    RetryPolicy,
    multi_asset,
)

from lineage_defs import uris
from lineage_defs.assets import metadata as md
from lineage_defs.assets.context import BuildContext
from lineage_defs.assets.partitions import partitions_def
from lineage_defs.assets.resources import IO_MANAGER_KEY
from lineage_defs.assets.translator import LineageTranslator
from lineage_defs.parse.model import DataTest, PartitionKind, Severity, TestKind
from lineage_defs.plan.spec import Project, ScriptStep

_COMPUTE_SIGNATURE = inspect.Signature([inspect.Parameter("context", inspect.Parameter.POSITIONAL_OR_KEYWORD)])


# Each kind's description, made once per module (a dict of every kind's text per check cost a
# 2,000-script load 4,500 x 7 strings): only the check's own kind formats its text.
_DESCRIBE: dict[TestKind, Callable[[DataTest], str]] = {
    TestKind.UNIQUE: lambda t: f"{t.column} is unique in the written slice",
    TestKind.NOT_NULL: lambda t: f"{t.column} has no nulls in the written slice",
    TestKind.ACCEPTED_VALUES: lambda t: f"{t.column} in ({', '.join(t.values)})",
    TestKind.RELATIONSHIPS: lambda t: f"{t.column} → {t.ref_uri}.{t.ref_column}",
    TestKind.ROW_COUNT: lambda t: f"row count in [{t.min if t.min is not None else '-∞'}, {t.max if t.max is not None else '∞'}]",
    TestKind.CUSTOM: lambda t: f"{t.script} returns no rows",
    TestKind.TYPE: lambda t: f"test type {t.type_name}({', '.join(f'{b.name}={b.text!r}' for b in t.bound)}) finds no failing rows",
}


def _check_description(t: DataTest) -> str:
    return _DESCRIBE[t.kind](t)


def check_specs(step: ScriptStep, key: AssetKey, translator: LineageTranslator) -> list[AssetCheckSpec]:
    return [
        AssetCheckSpec(
            name=t.name,
            asset=key,
            description=f"{_check_description(t)} (severity={t.severity})",
            blocking=t.severity == Severity.ERROR,
            additional_deps=[translator.asset_key(t.ref_uri)] if t.kind == TestKind.RELATIONSHIPS and t.ref_uri else [],
        )
        for t in step.tests
    ]


def script_assets(ctx: BuildContext) -> list[AssetsDefinition]:
    """Every script step's multi-asset."""
    return [step_assets(s, ctx) for s in ctx.project.scripts]


def step_assets(step: ScriptStep, ctx: BuildContext) -> AssetsDefinition:
    keys = ctx.keys
    pdef = ctx.pdefs.get(step.uri)
    deps = [ctx.dep(d.uri, pdef) for d in step.deps]
    freshness = None
    if step.freshness:
        f = step.freshness
        freshness = FreshnessPolicy.time_window(
            fail_window=dt.timedelta(seconds=f.fail_after),
            warn_window=dt.timedelta(seconds=f.warn_after) if f.warn_after else None,
        )
    kinds = md.kinds(step)
    root = ctx.root
    tags = {t: "" for t in step.tags}
    specs = [
        AssetSpec(
            key=keys.asset_key(uri),
            deps=deps,
            description=keys.describe(step, uri),
            group_name=keys.group_name(step),
            metadata=loaded_by_io_manager(md.asset_metadata(step, uri, root, keys), uri),
            kinds=kinds,
            tags=tags,
            owners=list(step.owners),
            partitions_def=pdef,
            freshness_policy=freshness,
            automation_condition=ctx.conditions.get(step.name),
            # outputs are reported per partition (a failed partition in a range
            # run must not be recorded as materialized), so none is required
            skippable=True,
            code_version=step.code_version,
        )
        for uri in step.outputs
    ]
    retry = None
    if step.retry:
        r = step.retry
        retry = RetryPolicy(max_retries=r.max_retries, delay=r.delay, backoff=Backoff.EXPONENTIAL if r.exponential else None)
    # SQL steps can take a partition range in one run (one transaction per partition).
    ranged = pdef is not None and step.language.is_sql and step.partitioning is not None and step.partitioning.kind != PartitionKind.DYNAMIC
    def _compute(context: Any) -> Iterator[Any]:
        from lineage_defs.assets.execute import execute  # the run layer: imported when a step runs
        from lineage_defs.openlineage.observe import JobType, observed

        yield from observed(context, {specs[0].key: step}, execute(context, step, keys), JobType.SCRIPT)

    # Dagster inspects the compute function's signature ~16 times per asset;
    # a precomputed one makes that a lookup (load time is paid by every run).
    _compute.__signature__ = _COMPUTE_SIGNATURE  # type: ignore[attr-defined]

    return multi_asset(
        name=step.name,
        specs=specs,
        check_specs=check_specs(step, specs[0].key, keys),
        # no partitions_def: every spec carries it, and given here too Dagster copies each spec to set it again
        retry_policy=retry,
        pool=step.pool,
        backfill_policy=BackfillPolicy.single_run() if ranged else None,
        op_tags={"lineage/script": step.path},
        required_resource_keys={"lineage"},
    )(_compute)


# ``AssetSpec.with_io_manager_key``'s documented metadata key, set in the first spec instead of a copy
IO_MANAGER_METADATA = "dagster/io_manager_key"


def loaded_by_io_manager(metadata: dict[str, Any], uri: str) -> dict[str, Any]:
    """A table's spec loads through the lineage I/O manager: a hand-written asset's input gets the table as a DataFrame."""
    if uris.is_table(uri):
        metadata[IO_MANAGER_METADATA] = IO_MANAGER_KEY
    return metadata


def partition_defs(project: Project) -> dict[str, PartitionsDefinition | None]:
    """Each output URI's PartitionsDefinition (one object per step, shared by its outputs)."""
    pdefs: dict[str, PartitionsDefinition | None] = {}
    alike: dict[tuple[Any, ...], PartitionsDefinition | None] = {}  # steps partitioned alike share one (a dynamic one is the step's own)
    for s in project.steps:
        live = isinstance(s, ScriptStep) and bool(s.events)  # fed by events: today's events build today
        p = s.partitioning
        shape = (p, live) if p is None or p.kind != PartitionKind.DYNAMIC else (p, live, s.name)
        pdef = alike.get(shape)
        if pdef is None:
            pdef = alike[shape] = partitions_def(p, s.name, live=live)
        for u in s.outputs:
            pdefs[u] = pdef
    return pdefs
