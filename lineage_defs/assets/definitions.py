"""Build the Definitions of a pipelines folder: the public entry point."""

from __future__ import annotations

import gc
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dagster import Definitions

from lineage_defs.assets.factory import CachedKeys, all_assets, partition_defs
from lineage_defs.assets.resources import LineageResource
from lineage_defs.assets.translator import LineageTranslator
from lineage_defs.errors import ProjectErrors
from lineage_defs.plan.dbt_manifest import DbtEnv
from lineage_defs.plan.project import load_project
from lineage_defs.plan.schemas import captured_schemas, column_warnings
from lineage_defs.plan.spec import Project
from lineage_defs.sensors import TriggerSettings, trigger_definitions
from lineage_defs.sensors.cascade import condition_for

log = logging.getLogger("lineage_defs")


@dataclass(frozen=True)
class LineageSettings:
    """How a folder is loaded. ``on_invalid``: "raise" refuses to load while any error exists; "skip" loads the valid scripts."""

    on_invalid: str = "raise"
    state_dir: str = ".lineage"
    use_cache: bool = True
    triggers: TriggerSettings = field(default_factory=TriggerSettings)  # sensor intervals, Kafka brokers


def load(pipelines_dir: str | Path, settings: LineageSettings = LineageSettings()) -> Project:
    cache = Path(settings.state_dir) / "cache" if settings.use_cache else None
    project = load_project(Path(pipelines_dir), cache_dir=cache, dbt_env=DbtEnv(settings.state_dir))
    for w in (*project.warnings, *column_warnings(project, captured_schemas(settings.state_dir))):
        log.warning(w.render())
    if project.errors:
        if settings.on_invalid == "raise":
            raise ProjectErrors(project.errors)
        for e in project.errors:
            log.error(e.render())
        bad = set(project.invalid_paths)
        steps = tuple(s for s in project.steps if s.path not in bad)
        produced = {u for s in steps for u in s.outputs}
        externals = tuple(sorted({d.uri for s in steps for d in s.deps if d.uri not in produced}))
        project = Project(project.root, steps, externals, project.macros, project.errors, project.warnings, project.invalid_paths, project.dbt_projects)
    return project


def build_definitions(
    pipelines_dir: str | Path,
    *,
    settings: LineageSettings = LineageSettings(),
    translator: LineageTranslator | None = None,
    resource: LineageResource | None = None,
) -> Definitions:
    """Every annotated script under ``pipelines_dir`` as one Dagster asset graph.

    >>> defs = build_definitions("examples/pipelines")  # doctest: +SKIP
    """
    # Loading creates tens of thousands of small objects and frees almost none:
    # the cyclic GC's passes over them are a fifth of load time, so pause it.
    paused = gc.isenabled()
    gc.disable()
    try:
        project = load(pipelines_dir, settings)
        keys = CachedKeys(translator or LineageTranslator())
        resource = resource or LineageResource(pipelines_dir=str(pipelines_dir), state_dir=settings.state_dir)
        pdefs = partition_defs(project)
        key_of = {u: keys.asset_key(u) for s in project.steps for u in s.outputs}
        memo: dict[Any, Any] = {}
        conditions = {s.name: condition_for(s, pdefs, key_of, memo) for s in project.steps}
        conditioned = [key_of[u] for s in project.steps if conditions[s.name] is not None for u in s.outputs]
        sensors, schedules = trigger_definitions(project, key_of, pdefs, conditioned, settings.triggers, resource.state_dir)
        defs = Definitions(
            assets=all_assets(project, keys, pdefs, conditions),
            sensors=sensors,
            schedules=schedules,
            resources={"lineage": resource},
        )
        # Dagster resolves the repository (asset graph, resource binding) on first use, which
        # every code server and run process makes at once: do it while the GC is paused too.
        defs.get_repository_def()
        return defs
    finally:
        if paused:
            gc.enable()
