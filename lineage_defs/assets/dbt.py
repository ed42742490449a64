"""dbt steps → Dagster multi-assets; dagster-dbt runs them (``assets/dbt_execute.py``).

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
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from dagster import AssetCheckSpec, AssetDep, AssetsDefinition, AssetSpec, AutomationCondition, BackfillPolicy, PartitionsDefinition, multi_asset

from lineage_defs.assets.factory import asset_metadata
from lineage_defs.assets.partitions import partition_mapping
from lineage_defs.assets.translator import LineageTranslator
from lineage_defs.plan.dbt import DbtProject, DbtTest, project_op_name
from lineage_defs.plan.spec import Project, StepSpec

_COMPUTE_SIGNATURE = inspect.Signature([inspect.Parameter("context", inspect.Parameter.POSITIONAL_OR_KEYWORD)])
UNIQUE_ID_KEY = "dagster_dbt/unique_id"  # dagster-dbt's own metadata key for a node's (or test's) unique id


def _groups(steps: Sequence[StepSpec]) -> list[tuple[str, list[StepSpec]]]:
    """(suffix, steps): the unpartitioned models together, each microbatch model on its own."""
    plain = [s for s in steps if s.partitioning is None]
    out: list[tuple[str, list[StepSpec]]] = [("", plain)] if plain else []
    out.extend((f"__{s.uri.rsplit('/', 1)[-1]}", [s]) for s in steps if s.partitioning is not None)
    return out


def selection_args(project: DbtProject, group: Sequence[StepSpec], whole_project: bool) -> list[str]:
    """The dbt selection of a non-subset run of this group: lineage.yml's, or the group's models by name."""
    if whole_project:
        cfg = project.config
        if cfg.selector:
            return ["--selector", cfg.selector]
        return ["--select", cfg.select] + (["--exclude", cfg.exclude] if cfg.exclude else [])
    return by_name(group, source_tests(group))


def source_tests(steps: Sequence[StepSpec]) -> list[DbtTest]:
    """The tests on dbt sources these steps carry (checks of the assets the sources are)."""
    return [t for s in steps if s.dbt for t in s.dbt.tests if t.select]


def by_name(models: Sequence[StepSpec], tests: Sequence[DbtTest]) -> list[str]:
    """`--select` of these models by fqn, and of these source tests (a model's selection does not reach them)."""
    return ["--select", " ".join([f"fqn:{s.dbt.fqn}" for s in models if s.dbt] + [t.select for t in tests])]

def dbt_assets_for(
    project: DbtProject,
    steps: Sequence[StepSpec],
    plan: Project,
    pdefs: Mapping[str, PartitionsDefinition | None],
    translator: LineageTranslator,
    conditions: Mapping[str, AutomationCondition | None] | None = None,
) -> list[AssetsDefinition]:
    """The multi-assets of one dbt project; ``conditions`` by step name (models cascade like `trigger any` scripts)."""
    root = Path(plan.root)
    kinds = {"dbt", "duckdb"} if project.default_profile else {"dbt"}
    groups = _groups(steps)
    out = []
    for suffix, group in groups:
        pdef = pdefs.get(group[0].uri) if suffix else None
        specs: list[AssetSpec] = []
        checks: list[AssetCheckSpec] = []
        for s in group:
            assert s.dbt is not None
            key = translator.asset_key(s.uri)
            meta = asset_metadata(s, s.uri, root, translator)
            meta["dagster/table_name"] = s.dbt.relation
            meta[UNIQUE_ID_KEY] = s.dbt.unique_id
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
                    automation_condition=(conditions or {}).get(s.name),
                )
            )
            checks.extend(
                AssetCheckSpec(
                    name=t.name,
                    asset=translator.asset_key(t.asset) if t.asset else key,
                    # a source test checks the asset the source is, run by dbt with this project's models
                    blocking=t.severity == "error" and not t.asset,
                    description=f"dbt test {t.name} (severity={t.severity})" + (f" on the dbt source that is {t.asset}" if t.asset else ""),
                    metadata={UNIQUE_ID_KEY: t.unique_id},
                )
                for t in s.dbt.tests
            )

        whole = len(groups) == 1

        def _compute(context: Any, _group: Sequence[StepSpec] = group, _whole: bool = whole) -> Iterator[Any]:
            from lineage_defs.assets.dbt_execute import execute_dbt

            yield from execute_dbt(context, project, _group, plan, translator, selection_args(project, _group, _whole))

        _compute.__signature__ = _COMPUTE_SIGNATURE  # type: ignore[attr-defined]
        out.append(
            multi_asset(
                name=project_op_name(project) + suffix,
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
