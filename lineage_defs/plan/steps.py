"""Step assembly: one script's header and analysis, resolved against the graph, → a ``ScriptStep``."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from lineage_defs.errors import AnnotationError, LineageDefsError, Location, SpecError
from lineage_defs.parse.model import DataTest, Materialize, TestKind
from lineage_defs.plan.batching import batching_errors
from lineage_defs.plan.cache import content_hash
from lineage_defs.plan.declared import declared_edges, declared_outputs
from lineage_defs.plan.files import FileResult
from lineage_defs.plan.names import op_name
from lineage_defs.plan.refs import match_template
from lineage_defs.plan.spec import Analysis, ColumnEdge, Dep, EdgeKind, ScriptStep, Strategy


def strategy_of(m: Materialize | None, partitioned: bool) -> Strategy:
    """SPEC section 4: the first row that applies wins."""
    if m is None or m.manual:
        return Strategy.MANUAL
    if m.history:
        return Strategy.SCD2
    if m.append:
        return Strategy.APPEND
    if m.key:
        return Strategy.MERGE
    if partitioned:
        return Strategy.PARTITION_REPLACE
    return Strategy.REPLACE


@dataclass
class Graph:
    """What assembling a step needs to know of the others, and where its problems go."""

    files: Mapping[str, FileResult]  # every script by path (as parsed: macro libraries, test scripts)
    producer: Mapping[str, str]  # asset URI → the path producing it
    resolve: Callable[[str], str]  # a read's URI → the asset it is (scd2 `_current` views, dbt relations)
    macros: Mapping[str, Sequence[str]]  # pipeline → its macro libraries
    names: set[str] = field(default_factory=set)  # op names taken
    tests: Mapping[str, tuple[DataTest, ...]] = field(default_factory=dict)  # per path: its data tests, test type uses bound (``plan.test_types``)
    errors: list[LineageDefsError] = field(default_factory=list)
    warnings: list[LineageDefsError] = field(default_factory=list)


def build_step(rel: str, fr: FileResult, outs: tuple[str, ...], pipeline: str, g: Graph) -> ScriptStep:
    """One script's step; its problems go to ``g.errors`` / ``g.warnings``."""
    errors, warnings, producer, files = g.errors, g.warnings, g.producer, g.files
    pipeline_macros = g.macros.get(pipeline, ())
    h = fr.header
    a = fr.analysis or Analysis()
    res = g.resolve
    # reads: explicit `on` first (wins, carries debounce), then inferred; `mute` removes inferred ones
    deps: dict[str, Dep] = {}
    for u in h.upstreams:
        uri = res(u.uri)
        deps[uri] = Dep(uri, True, u.debounce, u.at.line)
    inferred = a.reads
    mutes = {res(m) for m in h.mutes}
    for raw in inferred:
        uri = res(raw)
        if uri in outs or uri in deps or h.mute_all or uri in mutes:
            continue
        deps[uri] = Dep(uri, False)
    # URIs a Python step builds at run time name the produced assets of their shape, or nothing
    for template in a.read_templates:
        for uri in match_template(template, [*producer, *outs]):
            if uri not in outs and uri not in deps and not h.mute_all and uri not in mutes:
                deps[uri] = Dep(uri, False)
    for t in h.tests:  # relationships: the referenced producer runs first
        if t.kind == TestKind.RELATIONSHIPS and t.ref_uri and t.ref_uri not in outs and t.ref_uri not in deps and t.ref_uri in producer:
            deps[t.ref_uri] = Dep(t.ref_uri, False)

    # managed SQL needs a trailing SELECT for the runtime to write
    m = h.materialize
    if m and not m.manual and h.language.is_sql and not a.trailing_select:
        errors.append(AnnotationError("a managed 'materialize' needs the script to end with a SELECT", m.at, f"end the script with the SELECT to write, or write 'materialize manual {m.uri}' if the script writes it itself"))
    # What sqlglot cannot parse or trace may still be valid DuckDB/PostgreSQL:
    # the engine has the last word at run time, so these are warnings that the
    # inferred reads and lineage of that statement are incomplete.
    for sp in a.problems:
        warnings.append(SpecError(sp.message, Location(rel, sp.line, sp.col), sp.fix, severity="warning"))

    # column lineage: inferred, then declared `column` lines win per output column (plan.declared)
    edges: list[ColumnEdge] = []
    declared = {c.output for c in h.columns}
    for e in a.edges:
        if e.target_column in declared:
            continue
        src_uri = res(e.source_uri)
        target = outs[0] if e.target_column is None else f"{outs[0]}.{e.target_column}"
        edges.append(ColumnEdge(f"{src_uri}.{e.source_column}", target, EdgeKind(e.kind), e.subtypes))
    inputs = {*deps, *(res(r) for r in inferred)}  # a muted read is still read: its columns may flow
    edges += declared_edges(h, a, outs[0], inputs, res, errors, warnings)
    out_cols = a.output_columns
    if out_cols is None and h.columns:
        out_cols = declared_outputs(h.columns)

    # macro libraries: the pipeline's own, then `use` targets
    folder = rel.rsplit("/", 1)[0]
    uses: list[str] = list(pipeline_macros)
    for use in h.uses:
        found = find(rel, use, files)
        line = next((i + 1 for i, t in enumerate(fr.text_lines) if re.search(r"\buse\s+" + re.escape(use), t)), 1)
        if found is None:
            errors.append(AnnotationError(f"'use {use}': no such script", fr.loc(line, use), f"the path is relative to {folder}/ or the pipelines folder"))
        elif not files[found].header.is_macros:
            errors.append(AnnotationError(f"'use {use}': that script is not a macros library", fr.loc(line, use), f"add '-- macros' to {found}"))
        elif found not in uses:
            uses.append(found)
    for t in h.tests:
        if t.kind == TestKind.CUSTOM and t.script and t.at:
            found = find(rel, t.script, files, any_file=True)
            decl = files[found].header.test_type if found else None
            if found is None:
                errors.append(AnnotationError(f"data_test script '{t.script}' not found", t.at, f"the path is relative to {folder}/ or the pipelines folder"))
            elif decl is not None:
                args = " ".join(f"<{p.name}>" for p in decl.params)
                errors.append(AnnotationError(f"'{t.script}' is a test type: it is used by its name", t.at, f"write data_test {decl.name} {args}".rstrip()))

    statements = a.statements
    errors.extend(batching_errors(rel, h.partitioned, statements, h.language))
    return ScriptStep(
        name=op_name(pipeline, rel, g.names),
        pipeline=pipeline,
        path=rel,
        language=h.language,
        description=h.description,
        outputs=outs,
        materialize=m,
        strategy=strategy_of(m, h.partitioned is not None),
        deps=tuple(deps.values()),
        partitioning=h.partitioned,
        trigger=h.trigger,
        debounce=h.debounce,
        schedules=h.schedules,
        events=h.events,
        tests=g.tests.get(rel, h.tests),
        column_edges=tuple(dict.fromkeys(edges)),
        column_decls=h.columns,
        output_columns=tuple(out_cols) if out_cols is not None else None,
        statements=statements,
        uses=tuple(uses),
        freshness=h.freshness,
        retry=h.retry,
        tags=h.tags,
        owners=h.owners,
        pool=h.pool,
        body_line=h.body_line,
        content_hash=code_hash(rel, fr, uses, files),
        file_hash=fr.key,  # the whole file: a run checks it executes what was planned (run.script)
    )


def code_hash(rel: str, fr: FileResult, uses: Sequence[str], files: Mapping[str, FileResult]) -> str:
    """What decides a script's output: its text (annotations included) and the macro libraries it uses — its asset's code version."""
    return content_hash(fr.key or rel, *(files[u].key for u in uses if u in files))  # each key hashes a file's path and text


def find(rel: str, target: str, files: Mapping[str, FileResult], any_file: bool = False) -> str | None:
    folder = rel.rsplit("/", 1)[0]
    for cand in (f"{folder}/{target}", target):
        norm = Path(cand).as_posix()
        if norm in files:
            return norm
    return None
