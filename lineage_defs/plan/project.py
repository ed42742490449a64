"""Stage 2: a pipelines folder's files → a ``Project`` of steps, with every problem.

Per file (``files``): parse the header, infer reads/writes and column lineage,
cached by content hash. Across files (``graph``): duplicate producers, cycles,
references to assets nothing produces, scd2 `_current` views, trigger names.
Per step (``steps``): dependencies, lineage, macro libraries and test paths
resolved. dbt projects come from the dbt room as a ``DbtPart`` (what
``lineage_defs.dbt.load`` gives): ``plan`` never imports ``dbt``;
``lineage_defs.project.load_project`` loads both and calls ``plan_folder``.
Every load-time rule is here, so ``lineage-defs check`` and the code location
report the same list.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from lineage_defs.errors import LineageDefsError, SpecError
from lineage_defs.parse import Header
from lineage_defs.parse.model import Language, TestKind
from lineage_defs.plan import graph, hooks
from lineage_defs.plan.cache import PlanCache
from lineage_defs.plan.files import FileResult, analyze, with_schemas
from lineage_defs.plan.spec import Analysis, AnyStep, DbtStep, Project, ScriptStep
from lineage_defs.plan.steps import Graph, build_step
from lineage_defs.plan.test_types import bind_all, registry

if TYPE_CHECKING:  # the dbt room builds on this module, never the other way round
    from lineage_defs.dbt.project import DbtProject


class DbtPart(Protocol):
    """What the plan takes from the folder's dbt projects (``lineage_defs.dbt.load.DbtLoad`` is one)."""

    @property
    def steps(self) -> tuple[DbtStep, ...]: ...
    @property
    def aliases(self) -> Mapping[str, str]: ...
    @property
    def projects(self) -> tuple[DbtProject, ...]: ...
    @property
    def errors(self) -> tuple[LineageDefsError, ...]: ...
    @property
    def warnings(self) -> tuple[LineageDefsError, ...]: ...
    @property
    def pipelines(self) -> frozenset[str]: ...
    def catalogs(self) -> tuple[str, ...]: ...
    def fingerprint(self) -> str: ...
    def attach_databases(self, step: ScriptStep, errors: list[LineageDefsError]) -> ScriptStep: ...
    def with_lineage(
        self, schemas: dict[str, tuple[str, ...]], resolve: Callable[[str], str],
        analyze: Callable[[str, Mapping[str, Sequence[str]] | None], Analysis], cache: PlanCache,
    ) -> list[DbtStep]: ...  # fmt: skip


def without_invalid(project: Project) -> Project:
    """The project with the steps of invalid scripts left out (``on_invalid="skip"``)."""
    bad = set(project.invalid_paths)
    steps = tuple(s for s in project.steps if s.path not in bad)
    produced = {u for s in steps for u in s.outputs}
    externals = tuple(sorted({d.uri for s in steps for d in s.deps if d.uri not in produced}))
    return dataclasses.replace(project, steps=steps, externals=externals)


def plan_folder(root: Path, files: dict[str, FileResult], pipelines: dict[str, str], cache: PlanCache, dbt: DbtPart, library_dirs: Sequence[str] = ()) -> Project:
    """The ``Project`` of the folder's loaded script files and its dbt projects' part;
    ``library_dirs`` are shared folders of test types (``LINEAGE_LIBRARY_DIRS``)."""
    errors: list[LineageDefsError] = list(dbt.errors)
    warnings: list[LineageDefsError] = list(dbt.warnings)
    for fr in files.values():
        errors.extend(fr.errors)
    # every script's uses of test types bound (reported even where the script has other errors)
    test_types = registry(root, files, library_dirs, errors)
    bound = {p: bind_all(fr.header.tests, test_types, errors) for p, fr in files.items() if any(t.kind is TestKind.TYPE for t in fr.header.tests)}
    macros = tuple(p for p, fr in files.items() if fr.header.is_macros)
    step_files = {p: fr for p, fr in files.items() if fr.header.is_step and not fr.header.is_macros}
    for p, fr in files.items():
        h = fr.header
        if not h.is_step and not h.is_macros and h.test_type is None and (h.materialize or h.upstreams or h.partitioned or h.tests):
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
    g = Graph(files, producer, resolve, libs, names={s.name for s in steps}, errors=errors, warnings=warnings, tests=bound)
    for p, fr in step_files.items():
        if p in outputs:
            steps.append(dbt.attach_databases(build_step(p, fr, outputs[p], pipelines[p], g), errors))

    # 4. external assets, cycles, references to nothing, trigger names
    produced = set(producer)
    externals = sorted({d.uri for s in steps for d in s.deps if d.uri not in produced})
    errors.extend(graph.cycles(steps, step_files))
    errors.extend(graph.trigger_name_errors(steps))
    warnings.extend(graph.unproduced_warnings(steps, step_files, produced))
    step_hooks, hook_scripts = hooks.resolve(files, pipelines, steps, errors)
    invalid = tuple(sorted({e.path for e in errors if e.path}))
    return Project(str(root), tuple(steps), tuple(externals), macros, tuple(errors), tuple(warnings), invalid, dbt.projects, step_hooks, hook_scripts)
