"""A pipelines folder → its ``Project``: the scripts (``plan``) and the dbt projects (``dbt``), one list of problems.

Above both rooms: ``plan`` holds the data and the rules and never imports
``dbt``; this module finds the scripts, loads the dbt projects
(``lineage_defs.dbt.load``) and hands both to ``plan.project.plan_folder``.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from lineage_defs.dbt.load import load_dbt
from lineage_defs.errors import LineageDefsError, Location, SpecError
from lineage_defs.plan.cache import PlanCache
from lineage_defs.plan import snapshot
from lineage_defs.plan.discover import SKIP_DIRS, discover, pipeline_folders, script_files, stray_steps
from lineage_defs.plan.files import FileResult
from lineage_defs.plan.project import plan_folder
from lineage_defs.plan.spec import Project
from lineage_defs.plan.workers import load_files
from lineage_defs.settings import LineageSettings


def load_project(root: str | Path, settings: LineageSettings | None = None) -> Project:
    """Load and validate a pipelines folder. Never raises for user errors: they are in ``errors``.

    ``settings`` say where the caches and the embedded default (for dbt
    projects without a profiles.yml) live; without them nothing is cached.
    """
    root = Path(root)
    settings = settings or LineageSettings(use_cache=False)
    scripts = list(discover(root))  # first: a missing folder is this error, not one from the dbt search
    dbt = load_dbt(root, SKIP_DIRS, settings)
    libraries = [Path(d) for d in settings.library_dirs]
    # the folder as the last load planned it, when no file of it (nor the rest the plan is made of) changed since
    key = None
    if settings.cache_dir is not None:
        key = snapshot.key(
            [*(path for _, path in scripts), *(f for d in libraries if d.is_dir() for f in script_files(d))],
            str(root.absolute()), dbt.fingerprint(), repr([(str(d.absolute()), d.is_dir()) for d in libraries]),
        )
    kept = snapshot.read(settings.cache_dir, key)
    if kept is not None:
        project = kept.project(str(root), dbt.projects)
        test_types = set(kept.test_type_pipelines)
    else:
        cache = PlanCache(settings.cache_dir)
        files: dict[str, FileResult] = {}
        pipelines: dict[str, str] = {}
        catalogs = dbt.catalogs()  # `shop.main.customers` in a script is a model of the project whose database is `shop`
        for (pipeline, _), fr in zip(scripts, load_files(root, [path for _, path in scripts], cache, catalogs)):
            files[fr.header.path] = fr
            pipelines[fr.header.path] = pipeline
        project = plan_folder(root, files, pipelines, cache, dbt, settings.library_dirs)
        cache.save()
        test_types = {pipelines[p] for p, fr in files.items() if fr.header.test_type is not None}  # a folder of test types is no empty pipeline
        snapshot.write(settings.cache_dir, key, snapshot.Snapshot.of(project, test_types))
    # A folder that yields no step must not pass `check` silently.
    strays = stray_steps(root)
    empty: list[LineageDefsError] = []
    invalid = set(project.invalid_paths)
    with_steps = {s.pipeline for s in project.steps} | {pipeline for pipeline, path in scripts if invalid and path.relative_to(root).as_posix() in invalid} | dbt.pipelines | test_types
    for folder in pipeline_folders(root):
        if folder.name not in with_steps and not (folder / "dbt_project.yml").exists():
            empty.append(SpecError("this pipeline folder holds no step", Location(folder.name), "add a script with a '-- pipeline' line, or remove the folder", severity="warning"))
    if not project.steps and not strays and not empty:
        empty.append(SpecError("the pipelines folder holds no step", Location(str(root)), "add <pipeline>/<name>.sql with a '-- pipeline' line (lineage-defs new scaffolds one)", severity="warning"))
    if strays or empty:
        errors = (*project.errors, *strays)
        project = dataclasses.replace(project, errors=errors, warnings=(*project.warnings, *empty), invalid_paths=tuple(sorted({e.path for e in errors if e.path})))
    return project
