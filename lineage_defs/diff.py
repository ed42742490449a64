"""``lineage-defs diff``: what the changed steps do to their output columns, and who that breaks.

``--since REF`` plans the pipelines folder as it was at a git commit (a
``git archive`` of it in a temporary folder) and compares each step whose
code version differs; ``--against-instance`` compares with the columns (and
types) each asset's last materialization recorded (``dagster/column_schema``
in ``$DAGSTER_HOME``). ``plan.schema_diff`` classifies. Exit codes: 0 no
change, non-breaking or metadata only; 1 a breaking change not accepted with
``-- breaking ok <column>``; 2 a usage error or a project that does not plan.
"""

from __future__ import annotations

import dataclasses
import io
import json
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

from lineage_defs import uris
from lineage_defs.errors import LineageDefsError, RunError
from lineage_defs.parse import parse_header
from lineage_defs.parse.model import Language
from lineage_defs.plan.canonical import canonical, normalize_type, planned_types
from lineage_defs.plan.impact import ColumnGraph
from lineage_defs.plan.schema_diff import BREAKING, Readers, StepBefore, StepChange, as_json, classify, render
from lineage_defs.plan.spec import MANAGED_DESCRIPTIONS, AnyStep, Project, ScriptStep
from lineage_defs.settings import LineageSettings

COLUMN_SCHEMA = "dagster/column_schema"


def _reader(folder: Path) -> Callable[[str], str | None]:
    def read(path: str) -> str | None:
        try:
            return (folder / path).read_text()
        except (OSError, UnicodeDecodeError):
            return None

    return read


def step_columns(step: AnyStep) -> dict[str, str | None] | None:
    """The step's planned output columns, with the types its SQL spells out."""
    if step.output_columns is None:
        return None
    types: dict[str, str] = {}
    if isinstance(step, ScriptStep) and step.language.is_sql and step.statements:
        dialect = "postgres" if step.language is Language.POSTGRES else "duckdb"
        types = planned_types(";\n".join(s.sql for s in step.statements if s.kind == "query"), dialect)
    return {c: types.get(c.lower()) for c in step.output_columns}


def _canonical(step: AnyStep, read: Callable[[str], str | None]) -> str | None:
    text = read(step.path)
    return canonical(text, step.language) if text is not None else None


def _sources(graph: ColumnGraph, uri: str) -> dict[str, frozenset[str]]:
    prefix = uri + "."
    out: dict[str, set[str]] = {}
    for target, hops in graph.in_edges.items():
        if target.startswith(prefix):
            out.setdefault(target[len(prefix) :], set()).update(h.source for h in hops)
    return {k: frozenset(v) for k, v in out.items()}


def _accepted(step: AnyStep, read: Callable[[str], str | None]) -> tuple[str, ...]:
    if not isinstance(step, ScriptStep):
        return ()
    text = read(step.path)
    return parse_header(step.path, text, step.language)[0].breaking_ok if text is not None else ()


def compare(project: Project, before: Mapping[str, StepBefore], read_now: Callable[[str], str | None], old: Project | None) -> list[StepChange]:
    """Every step whose code version differs from ``before`` (by its primary asset), classified; new and removed steps too."""
    readers = Readers(project, old, read_now)
    out: list[StepChange] = []
    now_uris = {s.uri for s in project.steps}
    for s in project.steps:
        b = before.get(s.uri)
        if b is None:
            out.append(StepChange(s.uri, s.path, "new", "non-breaking", note="a new step"))
            continue
        if b.code_version is not None and b.code_version == s.code_version:
            continue
        out.append(classify(s, step_columns(s), b, _canonical(s, read_now), readers, _accepted(s, read_now), _sources(readers.graph, s.uri)))
    if old is not None:
        for s in old.steps:
            if s.uri not in now_uris:
                cols = before[s.uri].columns or {}
                gone = StepBefore(cols, None, s.code_version)
                sc = classify(s, {}, gone, None, readers)
                out.append(StepChange(sc.asset, sc.file, "removed", sc.verdict, sc.changes, "the step is gone"))
    return out


@contextmanager
def project_at(settings: LineageSettings, ref: str) -> Iterator[tuple[Project | None, Path]]:
    """The pipelines folder planned as it was at git ``ref`` (None: it did not exist), and where its files are."""
    from lineage_defs.changed import _git
    from lineage_defs.project import load_project

    folder = Path(settings.pipelines_dir).resolve()
    top = _git(folder, "rev-parse", "--show-toplevel").strip()
    rel = folder.relative_to(Path(top).resolve()).as_posix()
    _git(folder, "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}", fix=f"'{ref}' is not a commit of the repository at {top}: give a branch, tag or commit")
    with tempfile.TemporaryDirectory(prefix="lineage-diff-") as tmp:
        old_folder = Path(tmp) / rel
        listing = _git(Path(top), "ls-tree", "-d", "--name-only", ref, "--", rel) if rel != "." else "."
        if not listing.strip():
            yield None, old_folder
            return
        archive = subprocess.run(["git", "-C", top, "archive", "--format=tar", ref, "--", rel], capture_output=True, check=False)
        if archive.returncode != 0:
            raise RunError(f"git archive {ref} -- {rel} failed: {archive.stderr.decode(errors='replace').strip()}", fix="check the ref and the repository")
        with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
            tar.extractall(tmp, filter="data")
        # its own state dir: the caches of the working tree stay as they are
        yield load_project(old_folder, settings.replace(pipelines_dir=str(old_folder), state_dir=str(Path(tmp) / ".state"))), old_folder


def before_git(old: Project, old_folder: Path) -> dict[str, StepBefore]:
    read = _reader(old_folder)
    graph = ColumnGraph.build(old)
    return {s.uri: StepBefore(step_columns(s), _canonical(s, read), s.code_version, _sources(graph, s.uri)) for s in old.steps}


def before_instance(project: Project) -> dict[str, StepBefore]:
    """Each step's columns and types as its primary asset's last materialization recorded them."""
    import os

    from dagster import AssetKey, DagsterInstance, TableSchema

    from lineage_defs.changed import CODE_VERSION_TAG

    if not os.environ.get("DAGSTER_HOME"):
        raise RunError("no Dagster instance to compare with: DAGSTER_HOME is not set", fix="set DAGSTER_HOME to the instance's folder, or compare with a commit: --since <git-ref>")
    out: dict[str, StepBefore] = {}
    with DagsterInstance.get() as instance:
        for s in project.steps:
            event = instance.get_latest_materialization_event(AssetKey(list(uris.key_path(s.uri))))
            m = event.asset_materialization if event is not None else None
            if m is None:
                continue  # never materialized: a new step
            schema = m.metadata.get(COLUMN_SCHEMA)
            value = getattr(schema, "schema", None)
            cols = None
            if isinstance(value, TableSchema):  # the columns the runtime manages are not the script's
                planned = {c.lower() for c in s.output_columns or ()}
                cols = {c.name: normalize_type(c.type) for c in value.columns if c.name not in MANAGED_DESCRIPTIONS or c.name.lower() in planned}
            out[s.uri] = StepBefore(cols, None, (m.tags or {}).get(CODE_VERSION_TAG))
    return out


def breaking_against_instance(project: Project, settings: LineageSettings) -> int:
    """``lineage-defs check --against-instance``: the breaking changes on stderr; 1 if any, 2 on an error."""
    try:
        changes = compare(project, before_instance(project), _reader(Path(settings.pipelines_dir)), None)
    except LineageDefsError as e:
        print(f"lineage-defs check: {e.render()}", file=sys.stderr)
        return 2
    breaking = [dataclasses.replace(sc, changes=tuple(c for c in sc.changes if c.verdict == BREAKING)) for sc in changes if sc.verdict == BREAKING]
    for line in render(breaking):
        print(line, file=sys.stderr)
    n = sum(1 for sc in breaking for c in sc.changes if c.verdict == BREAKING and not c.accepted)
    print(f"{n} breaking column change{'s' * (n != 1)} against the instance")
    return 1 if n else 0


def run_diff(settings: LineageSettings, since: str | None, against_instance: bool, as_json_out: bool) -> int:
    """The command; see the module docstring for the exit codes."""
    from lineage_defs.project import load_project

    project = load_project(settings.pipelines_dir, settings)
    if project.errors:
        for e in project.errors:
            print(e.render(), file=sys.stderr)
        print("lineage-defs diff: the project does not plan; fix the errors above (lineage-defs check)", file=sys.stderr)
        return 2
    read_now = _reader(Path(settings.pipelines_dir))
    try:
        if since is not None:
            with project_at(settings, since) as (old, old_folder):
                before = before_git(old, old_folder) if old is not None else {}
                changes = compare(project, before, read_now, old)
            against = f"git:{since}"
        else:
            changes = compare(project, before_instance(project), read_now, None)
            against = "instance"
    except LineageDefsError as e:
        print(f"lineage-defs diff: {e.render()}", file=sys.stderr)
        return 2
    breaking = sum(1 for sc in changes for c in sc.changes if c.verdict == BREAKING and not c.accepted)
    if as_json_out:
        print(json.dumps(as_json(changes, against), indent=2))
    else:
        for line in render(changes):
            print(line)
        print(f"{len(changes)} step{'s' * (len(changes) != 1)} changed, {breaking} breaking column change{'s' * (breaking != 1)}", file=sys.stderr)
    return 1 if breaking else 0
