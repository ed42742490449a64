"""The code location, assembled: a pipelines folder's Definitions (the public ``build_definitions``).

Above ``assets`` (script assets), ``dbt`` (dbt assets) and ``sensors`` (trigger
sensors, cascade conditions): it loads the plan, hands it to each builder and
binds the resources, so none of those rooms imports another's builder.
"""

from __future__ import annotations

import gc
import logging
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from dagster import AssetKey, AssetsDefinition, AssetSpec, Definitions, PartitionsDefinition

from lineage_defs.assets.context import BuildContext
from lineage_defs.assets.executor import executor_for
from lineage_defs.assets.factory import partition_defs, script_assets
from lineage_defs.assets.resources import LineageResource, RunSettingsConfig
from lineage_defs.assets.translator import CachedKeys, LineageTranslator
from lineage_defs.dbt.assets import dbt_assets
from lineage_defs.errors import ProjectErrors
from lineage_defs.openlineage.config import configured as openlineage_configured
from lineage_defs.plan.project import without_invalid
from lineage_defs.project import load_project
from lineage_defs.plan.schemas import column_warnings, reference_schemas
from lineage_defs.plan.spec import Project
from lineage_defs.sensors import trigger_definitions
from lineage_defs.sensors.cascade import condition_for
from lineage_defs.sensors.hooks import hook_definitions
from lineage_defs.settings import LineageSettings, OnInvalid

log = logging.getLogger("lineage_defs")
_FROZEN: list[bool] = []  # whether a load of this process froze what it made (build_definitions)

# Each kind of step builds its own assets: scripts one multi-asset each, dbt projects theirs.
# Inputs no step produces get no spec: Dagster draws them from the dependencies (``BuildContext.dep``).
BUILDERS: Sequence[Callable[[BuildContext], Sequence[AssetsDefinition | AssetSpec]]] = (script_assets, dbt_assets)


def load(settings: LineageSettings, asset_key: Callable[[str], AssetKey] | None = None) -> Project:
    """The folder's project, with the same problems ``lineage-defs check`` reports; raises or skips on errors."""
    project = load_project(settings.pipelines_dir, settings)
    for w in (*project.warnings, *column_warnings(project, reference_schemas(settings, project, asset_key or LineageTranslator().asset_key))):
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
    defs: Definitions | Sequence[Definitions] | None = None,
) -> Definitions:
    """Every annotated script and dbt model under the pipelines folder as one Dagster asset graph.

    ``pipelines_dir`` (if given) overrides ``settings.pipelines_dir``. ``defs``:
    your own Definitions, merged in (``merge_definitions``): a hand-written asset
    keyed like a table the scripts read (``ducklake/main/orders_summary``) is that
    node of the graph. The result carries the ``lineage`` resource, a
    ``DuckDBResource`` on the same state (``lineage_duckdb``) and the I/O manager
    every table asset loads through (``lineage_io_manager``).

    >>> defs = build_definitions("examples/pipelines", settings=LineageSettings(state_dir=".lineage"))  # doctest: +SKIP
    """
    settings = settings or LineageSettings()
    if pipelines_dir is not None:
        settings = settings.replace(pipelines_dir=str(pipelines_dir))
    settings = settings.absolute()
    if openlineage_configured():
        from lineage_defs.openlineage.emitter import prepare as prepare_openlineage  # (not imported by a location without it)

        prepare_openlineage()  # the client's import, in the background: a step then finds it loaded
    # Loading creates tens of thousands of small objects and frees almost none:
    # the cyclic GC's passes over them are a fifth of load time, so pause it.
    paused = gc.isenabled()
    gc.disable()
    try:
        keys = CachedKeys(translator or LineageTranslator(), settings.docs_link)
        project = load(settings, keys.asset_key)
        pdefs = partition_defs(project)
        key_of = {u: keys.asset_key(u) for s in project.steps for u in s.outputs}
        theirs = [defs] if isinstance(defs, Definitions) else list(defs or ())
        # A table the scripts read that one of your assets produces: its partitions map to the
        # readers' and it updates, so the readers cascade from it like from a step.
        produced = _produced(theirs)
        for uri in project.externals:
            key = keys.asset_key(uri)
            if key in produced:
                key_of[uri], pdefs[uri] = key, produced[key]
        memo: dict[Any, Any] = {}
        conditions = {s.name: condition_for(s, pdefs, key_of, memo) for s in project.steps}
        ctx = BuildContext(project, settings, keys, pdefs, conditions)
        conditioned = [key_of[u] for s in project.steps if conditions[s.name] is not None for u in s.outputs]
        sensors, schedules = trigger_definitions(project, key_of, pdefs, conditioned, settings)
        hook_jobs, hook_sensors = hook_definitions(project, key_of, settings)
        ours = Definitions(
            assets=[a for build in BUILDERS for a in build(ctx)],
            jobs=hook_jobs,
            sensors=[*sensors, *hook_sensors],
            schedules=schedules,
            resources=resources(settings),
            executor=executor_for(settings, theirs),
        )
        merged = merge_definitions(ours, *theirs) if theirs else ours
        # Dagster resolves the repository (asset graph, resource binding) on first use, which
        # every code server and run process makes at once: do it while the GC is paused too.
        merged.get_repository_def()
        return merged
    finally:
        if paused:
            # What the first load of a process made lives as long as it (a code server, a run worker):
            # moved out of the collector's generations (gc.freeze), it is not walked again. Left in
            # them, the first collections after the load walk it three times over, young, middle and
            # old (0.5 s at 2,000 scripts, paid by whatever the process does next). The price: cyclic
            # garbage made before this point is never freed — the load's own is Dagster's
            # resource-dependency closures, some 3 KB per asset — so a process that loads again (a
            # notebook, a test session) does not freeze again.
            if not _FROZEN:
                gc.freeze()
                _FROZEN.append(True)
            gc.enable()


def _produced(defs: Sequence[Definitions]) -> dict[AssetKey, PartitionsDefinition | None]:
    """Each materializable asset of ``defs`` → its partitions."""
    out: dict[AssetKey, PartitionsDefinition | None] = {}
    for d in defs:
        for a in d.assets or ():
            if isinstance(a, AssetsDefinition) and a.is_materializable:
                out.update(dict.fromkeys(a.keys, a.partitions_def))
    return out


def resources(settings: LineageSettings) -> dict[str, Any]:
    """The run settings (``lineage``), and dagster-duckdb's resource and I/O manager on the same state."""
    from lineage_defs.duckdb_io import IO_MANAGER_KEY, RESOURCE_KEY
    from lineage_defs.duckdb_io.io_manager import LineageDuckDBIOManager
    from lineage_defs.duckdb_io.resource import LineageDuckDBResource

    run = RunSettingsConfig.for_settings(settings)
    warehouse = str(settings.database_file("warehouse"))
    return {
        "lineage": LineageResource.for_settings(settings),
        RESOURCE_KEY: LineageDuckDBResource(database=warehouse, lineage=run),
        IO_MANAGER_KEY: LineageDuckDBIOManager(database=warehouse, lineage=run),
    }


def merge_definitions(*defs: Definitions) -> Definitions:
    """``Definitions.merge``: kept for projects that call it (``Definitions.merge`` itself does the same).

    ``build_definitions`` declares no asset for a table the scripts read but none
    produces (Dagster draws it from the dependencies), so a hand-written asset with
    its key (from your own Definitions, or a ``dg`` defs folder) is that node, and
    the scripts reading it depend on it::

        @dg.definitions
        def defs():
            return dg.Definitions.merge(lineage_defs.definitions.defs, dg.load_from_defs_folder(path_within_project=Path(__file__).parent))
    """
    return Definitions.merge(*defs)
