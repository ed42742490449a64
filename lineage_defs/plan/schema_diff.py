"""Column-by-column classification of changed steps: breaking, non-breaking, metadata only.

The input is the plan now, the columns (with types where known) of each
step before, and a way to read files; the output is plain data. ``Before``
comes from the plan at a git ref or from the Dagster instance's last
``dagster/column_schema`` (``lineage_defs.diff``).

- **breaking**: a column removed, renamed or retyped that a step or a data
  test reads — each reader named with the file and line that reads it;
- **non-breaking**: a column added, or a change to a column nothing reads;
- **metadata only**: the code changed in comments or layout alone (its
  canonical form, ``plan.canonical``, is equal) and so did no column.

A step's ``-- breaking ok <column>`` accepts a breaking change of that column.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from lineage_defs.plan.impact import ColumnGraph
from lineage_defs.plan.spec import AnyStep, DbtStep, Project, ScriptStep

BREAKING, NON_BREAKING, METADATA = "breaking", "non-breaking", "metadata"


@dataclass(frozen=True)
class StepBefore:
    """One step's output as it was: its columns (name → type or None), its code's canonical form if known."""

    columns: Mapping[str, str | None] | None  # None: unknown (never materialized with a schema, not planned)
    canonical: str | None = None
    code_version: str | None = None
    sources: Mapping[str, frozenset[str]] = field(default_factory=dict)  # column → the columns it was made from


@dataclass(frozen=True)
class Reader:
    asset: str  # the asset reading the column, or the asset a data test checks
    file: str
    line: int  # 0: the file reads it, the line is not known (`SELECT *`)
    test: str = ""  # the data test's name, when the reader is a data test


@dataclass(frozen=True)
class ColumnChange:
    column: str
    change: str  # added | removed | renamed | retyped
    verdict: str  # breaking | non-breaking
    renamed_to: str = ""
    old_type: str | None = None
    new_type: str | None = None
    readers: tuple[Reader, ...] = ()
    accepted: bool = False  # `-- breaking ok <column>` on the step


@dataclass(frozen=True)
class StepChange:
    asset: str
    file: str
    status: str  # changed | new | removed
    verdict: str  # breaking | non-breaking | metadata
    changes: tuple[ColumnChange, ...] = ()
    note: str = ""


def _fold(name: str) -> str:
    return name.lower()


class Readers:
    """Who reads a column of an asset now: steps (by column edges, found in their file) and data tests."""

    def __init__(self, project: Project, before: Project | None, read_text: Callable[[str], str | None]) -> None:
        self.graph = ColumnGraph.build(project)
        self.old = ColumnGraph.build(before) if before is not None else None
        self.by_uri: dict[str, AnyStep] = {u: s for s in project.steps for u in s.outputs}
        self.read_text = read_text

    def of(self, asset: str, column: str) -> tuple[Reader, ...]:
        node = f"{asset}.{column}"
        readers = set(self.graph.readers(node))
        maybe = set(self.old.readers(node)) - readers if self.old else set()  # its edge may be gone now the column is
        out: list[Reader] = []
        for uri in sorted(readers | maybe):
            step = self.by_uri.get(uri)
            if step is None or uri == asset:
                continue
            line = self._line(step, column)
            if line or uri in readers:
                out.append(Reader(uri, step.path, line))
        for t in self.graph.tests.get(node, ()):
            line = t.line or self._yaml_line(t.path, column)
            out.append(Reader(t.asset, t.path, line, t.name))
        return tuple(sorted(set(out), key=lambda r: (r.file, r.line, r.test)))

    def _line(self, step: AnyStep, column: str) -> int:
        """The first line of the step's code naming ``column`` (0 if none does)."""
        text = self.read_text(step.path) or ""
        body_line = step.body_line if isinstance(step, ScriptStep) else 1
        word = re.compile(rf"(?<![\w$]){re.escape(column)}(?!\w)", re.I)
        for i, line in enumerate(text.splitlines()[body_line - 1 :], start=body_line):
            code = line.split("--", 1)[0] if not isinstance(step, ScriptStep) or step.language.is_sql or isinstance(step, DbtStep) else line
            if word.search(code):
                return i
        return 0

    def _yaml_line(self, path: str, column: str) -> int:
        text = self.read_text(path) or ""
        pattern = re.compile(rf"^\s*-?\s*name:\s*[\"']?{re.escape(column)}[\"']?\s*$", re.I)
        return next((i for i, line in enumerate(text.splitlines(), start=1) if pattern.match(line)), 0)


def classify(
    step: AnyStep,
    now_columns: Mapping[str, str | None] | None,
    before: StepBefore,
    canonical_now: str | None,
    readers: Readers,
    accepted: Sequence[str] = (),
    now_sources: Mapping[str, frozenset[str]] | None = None,
) -> StepChange:
    """One changed step's column changes and its verdict."""
    ok = {_fold(c) for c in accepted}
    if now_columns is None or before.columns is None:
        note = "its columns are not known now" if now_columns is None else "its columns were not known before"
        return StepChange(step.uri, step.path, "changed", NON_BREAKING, note=note)
    old = {_fold(k): (k, v) for k, v in before.columns.items()}
    new = {_fold(k): (k, v) for k, v in now_columns.items()}
    removed = [k for k in old if k not in new]
    added = [k for k in new if k not in old]
    renames: dict[str, str] = {}
    if now_sources is not None:  # a removed and an added column made from the same columns: a rename
        for r in removed:
            src = before.sources.get(old[r][0])
            match = [a for a in added if src and now_sources.get(new[a][0]) == src and a not in renames.values()]
            if len(match) == 1:
                renames[r] = match[0]
    changes: list[ColumnChange] = []

    def breaking(col: str, change: str, **kw: object) -> None:
        rd = readers.of(step.uri, col)
        verdict = BREAKING if rd else NON_BREAKING
        changes.append(ColumnChange(col, change, verdict, readers=rd, accepted=bool(rd) and _fold(col) in ok, **kw))  # type: ignore[arg-type]

    for r in removed:
        if r in renames:
            breaking(old[r][0], "renamed", renamed_to=new[renames[r]][0])
        else:
            breaking(old[r][0], "removed", old_type=old[r][1])
    for key, (name, new_type) in new.items():
        old_type = old[key][1] if key in old else None
        if key in old and old_type and new_type and old_type != new_type:
            breaking(old[key][0], "retyped", old_type=old_type, new_type=new_type)
    for a in added:
        if a not in renames.values():
            changes.append(ColumnChange(new[a][0], "added", NON_BREAKING, new_type=new[a][1]))
    if not changes and before.canonical is not None and canonical_now is not None and before.canonical == canonical_now:
        return StepChange(step.uri, step.path, "changed", METADATA, note="comments and layout only: the canonical code is unchanged")
    verdict = BREAKING if any(c.verdict == BREAKING and not c.accepted for c in changes) else NON_BREAKING
    note = "" if changes else "no output column changed"
    return StepChange(step.uri, step.path, "changed", verdict, tuple(changes), note)


def render(changes: Sequence[StepChange]) -> list[str]:
    """The text report: a line per step, a line per column change, a line per reader."""
    lines: list[str] = []
    for sc in changes:
        lines.append(f"{sc.verdict:13} {sc.file}  {sc.asset}  ({sc.status}{'; ' + sc.note if sc.note else ''})")
        for c in sc.changes:
            what = {
                "renamed": f"renamed {c.column} → {c.renamed_to}",
                "retyped": f"retyped {c.column}: {c.old_type} → {c.new_type}",
            }.get(c.change, f"{c.change} {c.column}{' ' + c.new_type if c.change == 'added' and c.new_type else ''}")
            tag = f"{c.verdict}{' (accepted: breaking ok)' if c.accepted else ''}"
            lines.append(f"    {tag:13} {what}")
            for r in c.readers:
                where = f"{r.file}:{r.line}" if r.line else r.file
                lines.append(f"        {'data test ' + r.test + ' on ' + r.asset if r.test else 'read by ' + r.asset} at {where}")
    return lines


def as_json(changes: Sequence[StepChange], against: str) -> dict[str, object]:
    """The ``--json`` document (docs/impact.md)."""
    return {
        "version": 1,
        "against": against,
        "breaking": sum(1 for sc in changes for c in sc.changes if c.verdict == BREAKING and not c.accepted),
        "steps": [
            {
                "asset": sc.asset,
                "file": sc.file,
                "status": sc.status,
                "verdict": sc.verdict,
                "note": sc.note,
                "changes": [
                    {
                        "column": c.column,
                        "change": c.change,
                        "verdict": c.verdict,
                        "accepted": c.accepted,
                        "renamed_to": c.renamed_to or None,
                        "old_type": c.old_type,
                        "new_type": c.new_type,
                        "readers": [{"asset": r.asset, "file": r.file, "line": r.line, "test": r.test or None} for r in c.readers],
                    }
                    for c in sc.changes
                ],
            }
            for sc in changes
        ],
    }
