"""Hook references (SPEC section 13) resolved and checked: each step's hooks and the hook scripts they name.

A script step's hooks are its own ``on_failure|on_success|on_recovery`` lines and those of its pipeline's
``_pipeline`` file (``<pipeline>/_pipeline.sql``, ``.py`` or ``.sh``: hook lines only, for every step of
the folder). A hook's path is relative to the naming script's folder, then to the pipelines folder.
Problems are located errors: a missing script, one not marked ``-- hook``, a hook that is also a step
(an asset), a ``_pipeline`` file with other annotations, hooks naming each other in a circle.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

from lineage_defs.errors import AnnotationError, LineageDefsError
from lineage_defs.parse import Header
from lineage_defs.parse.model import HookRef, Language
from lineage_defs.plan.files import FileResult
from lineage_defs.plan.spec import AnyStep, HookScript, ScriptStep, StepHook
from lineage_defs.plan.steps import find

PIPELINE_FILE = "_pipeline"


def pipeline_file(rel: str, pipeline: str) -> bool:
    """Whether ``rel`` is its pipeline's ``_pipeline`` file (at the top of the pipeline folder)."""
    folder, _, name = rel.rpartition("/")
    return folder == pipeline and name.split(".", 1)[0] == PIPELINE_FILE


def _only_hooks(h: Header) -> bool:
    """Whether the header says nothing but hook lines (and prose)."""
    return dataclasses.replace(h, hooks=(), description="", body_line=1) == Header(h.path, h.language)


def resolve(
    files: Mapping[str, FileResult], pipelines: Mapping[str, str], steps: Sequence[AnyStep], errors: list[LineageDefsError]
) -> tuple[tuple[tuple[str, tuple[StepHook, ...]], ...], tuple[HookScript, ...]]:
    """(step name → its hooks, the hook scripts named), every problem appended to ``errors``."""
    by_pipeline: dict[str, str] = {}
    for rel, fr in files.items():
        h = fr.header
        if h.is_hook and h.is_step:
            errors.append(AnnotationError("a hook script is not an asset: it has both 'hook' and 'pipeline'", h.hook_at, "drop '-- pipeline' (a hook runs on a step's events) or drop '-- hook'"))
        if pipeline_file(rel, pipelines.get(rel, "")):
            if not _only_hooks(h):
                errors.append(AnnotationError(f"a {PIPELINE_FILE} file holds only hook lines (on_failure, on_success, on_recovery)", fr.loc(1), "move the other annotations into a step's script"))
            by_pipeline[pipelines[rel]] = rel
    resolved: dict[str, tuple[StepHook, ...]] = {}  # a file naming hooks → them, resolved

    def refs_of(rel: str) -> tuple[StepHook, ...]:
        if rel not in resolved:
            resolved[rel] = tuple(_resolve_one(rel, ref, files, errors) for ref in files[rel].header.hooks) if rel in files else ()
            resolved[rel] = tuple(h for h in resolved[rel] if h.script)
        return resolved[rel]

    out: list[tuple[str, tuple[StepHook, ...]]] = []
    for step in steps:
        if not isinstance(step, ScriptStep):
            continue  # a dbt project's models run in one op of the project: no run tells one model's outcome
        own = refs_of(step.path) if step.path in files else ()
        shared = refs_of(by_pipeline[step.pipeline]) if step.pipeline in by_pipeline else ()
        hooks = tuple(dict.fromkeys((*own, *shared)))
        if hooks:
            out.append((step.name, hooks))
    named = sorted({h.script for _, hooks in out for h in hooks})
    scripts: dict[str, HookScript] = {}
    todo = list(named)
    while todo:
        path = todo.pop()
        if path in scripts:
            continue
        own = refs_of(path)
        scripts[path] = HookScript(path, files[path].header.language, own)
        todo.extend(h.script for h in own)
    errors.extend(_cycles(scripts, files))
    return tuple(out), tuple(scripts[p] for p in sorted(scripts))


def _resolve_one(rel: str, ref: HookRef, files: Mapping[str, FileResult], errors: list[LineageDefsError]) -> StepHook:
    """The ref's hook, or one with an empty script once an error is reported."""
    folder = rel.rsplit("/", 1)[0]
    found = find(rel, ref.script, files)
    if found is None:
        errors.append(AnnotationError(f"{ref.event} script '{ref.script}' not found", ref.at, f"the path is relative to {folder}/ or the pipelines folder"))
        return StepHook(ref.event, "", ref.after)
    h = files[found].header
    if not h.is_hook:
        errors.append(AnnotationError(f"'{found}' is not a hook script", ref.at, f"add a '-- hook' line to {found}'s header"))
        return StepHook(ref.event, "", ref.after)
    if h.language is Language.POSTGRES:
        errors.append(AnnotationError(f"'{found}': hooks run in DuckDB SQL, Python or Bash", ref.at, "write the hook as a .sql (DuckDB), .py or .sh script"))
        return StepHook(ref.event, "", ref.after)
    return StepHook(ref.event, found, ref.after)


def _cycles(scripts: Mapping[str, HookScript], files: Mapping[str, FileResult]) -> list[LineageDefsError]:
    """One error per circle of hook scripts naming each other (a failed hook run would start the next forever)."""
    out: list[LineageDefsError] = []
    state: dict[str, int] = {}  # 1: on the path, 2: done
    path: list[str] = []

    def visit(p: str) -> None:
        state[p] = 1
        path.append(p)
        for h in scripts[p].hooks:
            if state.get(h.script) == 1:
                circle = path[path.index(h.script):] + [h.script]
                at = next((r.at for r in files[p].header.hooks if find(p, r.script, files) == h.script), None)
                out.append(AnnotationError(f"hooks name each other in a circle: {' → '.join(circle)}", at, "a hook's own hooks must not lead back to it: drop one of these lines"))
            elif h.script in scripts and h.script not in state:
                visit(h.script)
        path.pop()
        state[p] = 2

    for p in sorted(scripts):
        if p not in state:
            visit(p)
    return out
