"""Build the Definitions of a pipelines folder: the public entry point."""

from __future__ import annotations

import gc
import logging
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from dagster import AssetsDefinition, AssetSpec, Definitions

from lineage_defs.assets.context import BuildContext
from lineage_defs.assets.factory import external_specs, partition_defs, script_assets
from lineage_defs.assets.resources import LineageResource
from lineage_defs.assets.translator import CachedKeys, LineageTranslator
from lineage_defs.dbt.assets import dbt_assets
from lineage_defs.errors import ProjectErrors
from lineage_defs.plan.project import load_project, without_invalid
from lineage_defs.plan.schemas import captured_schemas, column_warnings
from lineage_defs.plan.spec import Project
from lineage_defs.sensors import trigger_definitions
from lineage_defs.sensors.cascade import condition_for
from lineage_defs.settings import LineageSettings, OnInvalid

log = logging.getLogger("lineage_defs")

# Each kind of step builds its own assets: scripts one multi-asset each, dbt projects theirs.
BUILDERS: Sequence[Callable[[BuildContext], Sequence[AssetsDefinition | AssetSpec]]] = (script_assets, dbt_assets, external_specs)


def load(settings: LineageSettings) -> Project:
    """The folder's project, with the same problems ``lineage-defs check`` reports; raises or skips on errors."""
    project = load_project(settings.pipelines_dir, settings)
    for w in (*project.warnings, *column_warnings(project, captured_schemas(settings))):
        log.warning(w.render())
    if project.errors:
        if settings.on_invalid == OnInvalid.RAISE:
            raise ProjectErrors(project.errors)
        for e in project.errors:
            log.error(e.render())
        project = without_invalid(project)
    return project


def build_definitions(
    pipelines_dir: str | Path | None = None,
    *,
    settings: LineageSettings | None = None,
    translator: LineageTranslator | None = None,
) -> Definitions:
    """Every annotated script and dbt model under the pipelines folder as one Dagster asset graph.

    ``pipelines_dir`` (if given) overrides ``settings.pipelines_dir``.

    >>> defs = build_definitions("examples/pipelines", settings=LineageSettings(state_dir=".lineage"))  # doctest: +SKIP
    """
    settings = settings or LineageSettings()
    if pipelines_dir is not None:
        settings = settings.replace(pipelines_dir=str(pipelines_dir))
    settings = settings.absolute()
    # Loading creates tens of thousands of small objects and frees almost none:
    # the cyclic GC's passes over them are a fifth of load time, so pause it.
    paused = gc.isenabled()
    gc.disable()
    try:
        project = load(settings)
        keys = CachedKeys(translator or LineageTranslator())
        pdefs = partition_defs(project)
        key_of = {u: keys.asset_key(u) for s in project.steps for u in s.outputs}
        memo: dict[Any, Any] = {}
        conditions = {s.name: condition_for(s, pdefs, key_of, memo) for s in project.steps}
        ctx = BuildContext(project, settings, keys, pdefs, conditions)
        conditioned = [key_of[u] for s in project.steps if conditions[s.name] is not None for u in s.outputs]
        sensors, schedules = trigger_definitions(project, key_of, pdefs, conditioned, settings)
        defs = Definitions(
            assets=[a for build in BUILDERS for a in build(ctx)],
            sensors=sensors,
            schedules=schedules,
            resources={"lineage": LineageResource.for_settings(settings)},
        )
        # Dagster resolves the repository (asset graph, resource binding) on first use, which
        # every code server and run process makes at once: do it while the GC is paused too.
        defs.get_repository_def()
        return defs
    finally:
        if paused:
            gc.enable()
