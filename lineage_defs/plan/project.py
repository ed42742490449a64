"""Stage 2: a pipelines folder → a ``Project`` of steps, with every problem.

Per file (``files``): parse the header, infer reads/writes and column lineage,
cached by content hash. Across files (``graph``): duplicate producers, cycles,
references to assets nothing produces, scd2 `_current` views, trigger names.
Per step (``steps``): dependencies, lineage, macro libraries and test paths
resolved. dbt projects come from the dbt room (``lineage_defs.dbt.load``).
Every load-time rule is here, so ``lineage-defs check`` and the code location
report the same list.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from lineage_defs.dbt.load import DbtLoad, load_dbt
from lineage_defs.errors import LineageDefsError, Location, SpecError
from lineage_defs.parse import Header
from lineage_defs.parse.model import Language
from lineage_defs.plan import graph
from lineage_defs.plan.cache import PlanCache
from lineage_defs.plan.discover import SKIP_DIRS, discover, pipeline_folders, stray_steps
from lineage_defs.plan.files import FileResult, analyze, load_file, with_schemas
from lineage_defs.plan.spec import AnyStep, Project
from lineage_defs.plan.steps import Graph, build_step
from lineage_defs.settings import LineageSettings


def load_project(root: str | Path, settings: LineageSettings | None = None) -> Project:
    """Load and validate a pipelines folder. Never raises for user errors: they are in ``errors``.

    ``settings`` say where the caches and the embedded default (for dbt
    projects without a profiles.yml) live; without them nothing is cached.
    """
    root = Path(root)
    settings = settings or LineageSettings(use_cache=False)
    cache = PlanCache(settings.cache_dir)
    files: dict[str, FileResult] = {}
    pipelines: dict[str, str] = {}
    scripts = list(discover(root))  # first: a missing folder is this error, not one from the dbt search
    dbt = load_dbt(root, SKIP_DIRS, settings)
    catalogs = dbt.catalogs()  # `shop.main.customers` in a script is a model of the project whose database is `shop`
    for pipeline, path in scripts:
        fr = load_file(root, path, cache, catalogs)
        files[fr.header.path] = fr
        pipelines[fr.header.path] = pipeline
    project = _plan(root, files, pipelines, cache, dbt)
    cache.save()
    # A folder that yields no step must not pass `check` silently.
    strays = stray_steps(root)
    empty: list[LineageDefsError] = []
    with_steps = {s.pipeline for s in project.steps} | {pipelines[p] for p in project.invalid_paths if p in pipelines} | dbt.pipelines
    for folder in pipeline_folders(root):
        if folder.name not in with_steps and not (folder / "dbt_project.yml").exists():
            empty.append(SpecError("this pipeline folder holds no step", Location(folder.name), "add a script with a '-- pipeline' line, or remove the folder", severity="warning"))
    if not project.steps and not strays and not empty:
        empty.append(SpecError("the pipelines folder holds no step", Location(str(root)), "add <pipeline>/<name>.sql with a '-- pipeline' line (lineage-defs new scaffolds one)", severity="warning"))
    if strays or empty:
        errors = (*project.errors, *strays)
        project = dataclasses.replace(project, errors=errors, warnings=(*project.warnings, *empty), invalid_paths=tuple(sorted({e.path for e in errors if e.path})))
    return project


def without_invalid(project: Project) -> Project:
    """The project with the steps of invalid scripts left out (``on_invalid="skip"``)."""
    bad = set(project.invalid_paths)
    steps = tuple(s for s in project.steps if s.path not in bad)
    produced = {u for s in steps for u in s.outputs}
    externals = tuple(sorted({d.uri for s in steps for d in s.deps if d.uri not in produced}))
    return dataclasses.replace(project, steps=steps, externals=externals)


def _plan(root: Path, files: dict[str, FileResult], pipelines: dict[str, str], cache: PlanCache, dbt: DbtLoad) -> Project:
    errors: list[LineageDefsError] = list(dbt.errors)
    warnings: list[LineageDefsError] = list(dbt.warnings)
    for fr in files.values():
        errors.extend(fr.errors)
    macros = tuple(p for p, fr in files.items() if fr.header.is_macros)
    step_files = {p: fr for p, fr in files.items() if fr.header.is_step and not fr.header.is_macros}
    for p, fr in files.items():
        h = fr.header
        if not h.is_step and not h.is_macros and (h.materialize or h.upstreams or h.partitioned or h.tests):
            warnings.append(SpecError("has annotations but no 'pipeline' line, so it is not a step", fr.loc(1), "add '-- pipeline' to make it an asset"))

    # 1. what each step produces, and one producer per asset
    outputs = graph.outputs_of(step_files, errors)
    producer = graph.producers(outputs, step_files, errors)
    producer.update(graph.dbt_producers(dbt.steps, dbt.aliases, producer, step_files, errors))

    # 2. a second lineage pass where upstream columns resolve a `*` or an ambiguous name
    schemas = graph.promised_schemas(outputs, step_files)
    for p, fr in step_files.items():
        need = fr.analysis.needs_schemas if fr.analysis else ()
        known = {u: schemas[u] for u in need if u in schemas}
        if known:
            step_files[p] = with_schemas(root, fr, known, cache, dbt.catalogs())
    resolve = graph.current_view_resolver(outputs, step_files, producer, dbt.aliases)

    # 3. step specs
    steps: list[AnyStep] = list(dbt.with_lineage(schemas, resolve, lambda sql, known: analyze(Header("", Language.DUCKDB), sql, "default", known), cache))
    libs: dict[str, list[str]] = {}
    for p in macros:
        libs.setdefault(pipelines[p], []).append(p)
    g = Graph(files, producer, resolve, libs, names={s.name for s in steps}, errors=errors, warnings=warnings)
    for p, fr in step_files.items():
        if p in outputs:
            steps.append(dbt.attach_databases(build_step(p, fr, outputs[p], pipelines[p], g), errors))

    # 4. external assets, cycles, references to nothing, trigger names
    produced = set(producer)
    externals = sorted({d.uri for s in steps for d in s.deps if d.uri not in produced})
    errors.extend(graph.cycles(steps, step_files))
    errors.extend(graph.trigger_name_errors(steps))
    warnings.extend(graph.unproduced_warnings(steps, step_files, produced))
    invalid = tuple(sorted({e.path for e in errors if e.path}))
    return Project(str(root), tuple(steps), tuple(externals), macros, tuple(errors), tuple(warnings), invalid, dbt.projects)
