"""Stage 2: a pipelines folder → a ``Project`` of ``StepSpec``s, with every problem.

Per file: parse the header, infer reads/writes and column lineage (cached by
content hash). Across files: duplicate producers, cycles, references to assets
nothing produces, `use` and custom test paths, scd2 `_current` views.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from lineage_defs import uris
from lineage_defs.errors import AnnotationError, LineageDefsError, Location, SpecError
from lineage_defs.parse import Header, language_of, parse_header
from lineage_defs.parse.header import split_body
from lineage_defs.plan.cache import PlanCache, content_hash
from lineage_defs.plan.refs import bash_uris, python_uris
from lineage_defs.plan.spec import (
    PARTITION_COLUMN,
    SCD2_COLUMNS,
    Analysis,
    ColumnEdge,
    Dep,
    Problem,
    Project,
    RawEdge,
    Statement,
    StepSpec,
    strategy_of,
)

SKIP_DIRS = {"target", "dbt_packages", "logs", "node_modules", "__pycache__", ".venv", "venv"}


@dataclass(frozen=True)
class _FileResult:
    header: Header
    errors: tuple[AnnotationError, ...]
    analysis: Analysis | None
    text_lines: tuple[str, ...]  # the header's lines, for error carets in cross-file checks
    key: str = ""  # content hash


def discover(root: Path) -> Iterator[tuple[str, Path]]:
    """(pipeline, file) for every script under each pipeline sub-folder, in path order."""
    if not root.is_dir():
        raise SpecError(f"pipelines folder '{root}' does not exist", Location(str(root)), "set LINEAGE_PIPELINES_DIR or pass the folder")
    for sub in sorted(p for p in root.iterdir() if p.is_dir()):
        if sub.name.startswith(".") or sub.name in SKIP_DIRS:
            continue
        for path in _walk(sub):
            yield sub.name, path


def _walk(folder: Path) -> Iterator[Path]:
    if (folder / "dbt_project.yml").exists():
        return  # dbt projects are loaded by the dbt integration, not as scripts
    for p in sorted(folder.iterdir()):
        if p.name.startswith("."):
            continue
        if p.is_dir():
            if p.name not in SKIP_DIRS:
                yield from _walk(p)
        elif language_of(p.name):
            yield p


def _analyze(header: Header, body: str, pg_connection: str, schemas: Mapping[str, Sequence[str]] | None = None) -> Analysis:
    if header.language in ("duckdb", "postgres"):
        from lineage_defs.plan.sql import analyze_sql

        a = analyze_sql(body, header.language, body_line=header.body_line, pg_connection=pg_connection, schemas=schemas)
        return Analysis(
            reads=tuple(a.reads),
            writes=tuple(a.writes),
            trailing_select=a.trailing_select,
            output_columns=tuple(a.output_columns) if a.output_columns is not None else None,
            edges=tuple(RawEdge(e.source_uri, e.source_column, e.target_column, e.kind) for e in a.edges),
            needs_schemas=tuple(a.needs_schemas),
            problems=tuple(Problem(p.message, p.line, p.col, p.fix) for p in a.problems),
            statements=tuple(Statement(s.sql, s.line, s.kind) for s in a.statements),
        )
    if header.language == "python":
        return Analysis(reads=python_uris(body))
    return Analysis(reads=bash_uris(body))


def _pg_connection(header: Header) -> str:
    m = header.materialize
    if m and m.uri.startswith("datatable://"):
        return uris.parse(m.uri).authority
    return "default"


def load_project(root: str | Path, cache_dir: Path | None = None) -> Project:
    """Load and validate a pipelines folder. Never raises for user errors: they are in ``errors``."""
    root = Path(root)
    cache = PlanCache(cache_dir)
    files: dict[str, _FileResult] = {}
    pipelines: dict[str, str] = {}
    for pipeline, path in discover(root):
        rel = path.relative_to(root).as_posix()
        text = path.read_text(encoding="utf-8", errors="replace")
        key = content_hash(rel, text)
        hit = cache.get(key)
        if hit is None:
            language = language_of(path.name) or "duckdb"
            header, errs = parse_header(rel, text, language)
            analysis = _analyze(header, split_body(text, header.language)[0], _pg_connection(header)) if header.is_step else None
            hit = _FileResult(header, tuple(errs), analysis, tuple(text.splitlines()[: header.body_line]), key)
            cache.put(key, hit)
        files[rel] = hit
        pipelines[rel] = pipeline
    project = _plan(root, files, pipelines, cache)
    cache.save()
    return project


def _loc(fr: _FileResult, line: int, needle: str = "") -> Location:
    text = fr.text_lines[line - 1] if 0 < line <= len(fr.text_lines) else ""
    col = text.find(needle) + 1 if needle and needle in text else 1
    return Location(fr.header.path, line, col, text, len(needle) if needle and needle in text else 1)


def _plan(root: Path, files: dict[str, _FileResult], pipelines: dict[str, str], cache: PlanCache) -> Project:
    errors: list[LineageDefsError] = []
    warnings: list[LineageDefsError] = []
    for fr in files.values():
        errors.extend(fr.errors)
    macros = tuple(p for p, fr in files.items() if fr.header.is_macros)
    step_files = {p: fr for p, fr in files.items() if fr.header.is_step and not fr.header.is_macros}
    for p, fr in files.items():
        h = fr.header
        if not h.is_step and not h.is_macros and (h.materialize or h.upstreams or h.partitioned or h.tests):
            warnings.append(SpecError("has annotations but no 'pipeline' line, so it is not a step", Location(p, 1), "add '-- pipeline' to make it an asset"))

    # 1. outputs of each step
    outputs: dict[str, tuple[str, ...]] = {}
    for p, fr in step_files.items():
        h = fr.header
        inferred_writes = tuple(getattr(fr.analysis, "writes", ()))
        if h.materialize:
            outs = (h.materialize.uri, *[w for w in inferred_writes if w != h.materialize.uri and h.materialize.manual])
        else:
            outs = inferred_writes
        if not outs:
            if fr.errors:  # a broken `materialize` line is already reported; don't pile a wrong fix on it
                continue
            errors.append(SpecError("this step produces no asset", _loc(fr, 1), "add '-- materialize <uri>' (or 'materialize manual <uri>' if the script writes it itself)"))
            continue
        outputs[p] = outs

    # 2. duplicate producers
    producer: dict[str, str] = {}
    for p, outs in outputs.items():
        for uri in outs:
            if uri in producer:
                fr = step_files[p]
                m = fr.header.materialize
                # the URI as written (`ducklake:///x`) may differ from its normal form: use the parsed location
                loc = m.at if m and m.at and m.uri == uri else _loc(fr, m.at.line if m and m.at else 1, uri)
                errors.append(SpecError(f"{uri} is already materialized by {producer[uri]}", loc, "each asset has one producer: remove one, or write to another table"))
            else:
                producer[uri] = p

    # 3. schemas known from producers, for `*` expansion in a second lineage pass
    schemas: dict[str, tuple[str, ...]] = {}
    for p, outs in outputs.items():
        a = step_files[p].analysis
        cols = getattr(a, "output_columns", None)
        mat = step_files[p].header.materialize
        if cols and mat and not mat.manual:
            # the managed columns the runtime adds are part of the target too
            if mat.history:
                managed: tuple[str, ...] = SCD2_COLUMNS
            elif step_files[p].header.partitioned:
                managed = (PARTITION_COLUMN,)
            else:
                managed = ()
            schemas[outs[0]] = (*cols, *managed)
            if mat.history:
                schemas[outs[0] + "_current"] = schemas[outs[0]]  # the view of open versions
        declared = [c.output for c in step_files[p].header.columns]
        if outs[0] not in schemas and declared:
            schemas[outs[0]] = tuple(declared)
    for p, fr in step_files.items():
        need = tuple(getattr(fr.analysis, "needs_schemas", ()))
        known = {u: schemas[u] for u in need if u in schemas}
        if known:
            key = content_hash("schemas", fr.key, repr(sorted(known.items())))
            hit = cache.get(key)
            if hit is None:
                text = (root / p).read_text(encoding="utf-8", errors="replace")
                hit = _analyze(fr.header, split_body(text, fr.header.language)[0], _pg_connection(fr.header), known)
                cache.put(key, hit)
            step_files[p] = _FileResult(fr.header, fr.errors, hit, fr.text_lines, fr.key)

    # scd2 targets keep a `<t>_current` view: reading it is reading `<t>`
    scd2: set[str] = set()
    for p, outs in outputs.items():
        mat = step_files[p].header.materialize
        if mat and mat.history:
            scd2.add(outs[0])

    def resolve(uri: str) -> str:
        if uri.endswith("_current") and uri not in producer and uri[: -len("_current")] in scd2:
            return uri[: -len("_current")]
        return uri

    # 4. step specs
    names: set[str] = set()
    steps: list[StepSpec] = []
    libs: dict[str, list[str]] = {}
    for p in macros:
        libs.setdefault(pipelines[p], []).append(p)
    for p, fr in step_files.items():
        if p not in outputs:
            continue
        steps.append(_step(p, fr, outputs[p], pipelines[p], names, resolve, files, errors, warnings, producer, libs.get(pipelines[p], [])))

    # 5. external assets, cycles
    produced = set(producer)
    externals = sorted({d.uri for s in steps for d in s.deps if d.uri not in produced})
    errors.extend(_cycles(steps, step_files))
    for s in steps:
        fr = step_files[s.path]
        for t in s.tests:
            if t.kind == "relationships" and t.ref_uri not in produced and t.at:
                warnings.append(SpecError(f"relationships target {t.ref_uri} is not produced by any step", t.at, "it is treated as external; check the URI if it should be a step's output", severity="warning"))
        for c in fr.header.columns:
            for src in c.sources:
                if src.uri not in produced and c.at:  # underline the source, not the output column
                    warnings.append(SpecError(f"column source {src.uri} is not produced by any step", _loc(fr, c.at.line, src.uri), "it is treated as external; check the URI if it should be a step's output", severity="warning"))
    return Project(str(root), tuple(steps), tuple(externals), macros, tuple(errors), tuple(warnings), tuple(sorted({e.path for e in errors if e.path})))


def _op_name(pipeline: str, rel: str, names: set[str]) -> str:
    stem = rel.split("/", 1)[1] if "/" in rel else rel
    for suffix in (".pg.sql", ".sql", ".py", ".sh"):
        if stem.endswith(suffix):
            stem = stem[: -len(suffix)]
            break
    base = re.sub(r"[^A-Za-z0-9_]", "_", f"{pipeline}__{stem}")
    if base[0].isdigit():
        base = "_" + base
    name, i = base, 2
    while name in names:
        name, i = f"{base}_{i}", i + 1
    names.add(name)
    return name


def _step(
    rel: str,
    fr: _FileResult,
    outs: tuple[str, ...],
    pipeline: str,
    names: set[str],
    resolve: Callable[[str], str],
    files: Mapping[str, _FileResult],
    errors: list[LineageDefsError],
    warnings: list[LineageDefsError],
    producer: Mapping[str, str],
    pipeline_macros: Sequence[str],
) -> StepSpec:
    h = fr.header
    a = fr.analysis
    res = resolve
    # reads: explicit `on` first (wins, carries debounce), then inferred; `mute` removes inferred ones
    deps: dict[str, Dep] = {}
    for u in h.upstreams:
        uri = res(u.uri)
        deps[uri] = Dep(uri, True, u.debounce, u.at.line)
    inferred = tuple(getattr(a, "reads", ()))
    mutes = {res(m) for m in h.mutes}
    for raw in inferred:
        uri = res(raw)
        if uri in outs or uri in deps or h.mute_all or uri in mutes:
            continue
        deps[uri] = Dep(uri, False)
    for t in h.tests:  # relationships: the referenced producer runs first
        if t.kind == "relationships" and t.ref_uri and t.ref_uri not in outs and t.ref_uri not in deps and t.ref_uri in producer:
            deps[t.ref_uri] = Dep(t.ref_uri, False)

    # managed SQL needs a trailing SELECT for the runtime to write
    m = h.materialize
    if m and not m.manual and h.language in ("duckdb", "postgres") and a is not None and not getattr(a, "trailing_select", True):
        errors.append(AnnotationError("a managed 'materialize' needs the script to end with a SELECT", m.at, f"end the script with the SELECT to write, or write 'materialize manual {m.uri}' if the script writes it itself"))
    # What sqlglot cannot parse or trace may still be valid DuckDB/PostgreSQL:
    # the engine has the last word at run time, so these are warnings that the
    # inferred reads and lineage of that statement are incomplete.
    for sp in getattr(a, "problems", ()):
        warnings.append(SpecError(sp.message, Location(rel, sp.line, sp.col), sp.fix, severity="warning"))

    # column lineage: inferred, then declared `column` lines win per output column
    edges: list[ColumnEdge] = []
    declared = {c.output for c in h.columns}
    for e in getattr(a, "edges", ()):
        if e.target_column in declared:
            continue
        src_uri = res(e.source_uri)
        target = outs[0] if e.target_column is None else f"{outs[0]}.{e.target_column}"
        edges.append(ColumnEdge(f"{src_uri}.{e.source_column}", target, e.kind))
    for c in h.columns:
        kind = "copy" if len(c.sources) == 1 and c.sources[0].column == c.output else "mod"
        for src in c.sources:
            edges.append(ColumnEdge(f"{res(src.uri)}.{src.column}", f"{outs[0]}.{c.output}", kind))
    out_cols = getattr(a, "output_columns", None)
    if out_cols is None and h.columns:
        out_cols = tuple(c.output for c in h.columns)

    # macro libraries: the pipeline's own, then `use` targets
    folder = rel.rsplit("/", 1)[0]
    uses: list[str] = list(pipeline_macros)
    for use in h.uses:
        found = _find(rel, use, files)
        line = next((i + 1 for i, t in enumerate(fr.text_lines) if re.search(r"\buse\s+" + re.escape(use), t)), 1)
        if found is None:
            errors.append(AnnotationError(f"'use {use}': no such script", _loc(fr, line, use), f"the path is relative to {folder}/ or the pipelines folder"))
        elif not files[found].header.is_macros:
            errors.append(AnnotationError(f"'use {use}': that script is not a macros library", _loc(fr, line, use), f"add '-- macros' to {found}"))
        elif found not in uses:
            uses.append(found)
    for t in h.tests:
        if t.kind == "custom" and t.script and _find(rel, t.script, files, any_file=True) is None and t.at:
            errors.append(AnnotationError(f"data_test script '{t.script}' not found", t.at, f"the path is relative to {folder}/ or the pipelines folder"))

    statements = tuple(getattr(a, "statements", ()))
    return StepSpec(
        name=_op_name(pipeline, rel, names),
        pipeline=pipeline,
        path=rel,
        language=h.language,
        description=h.description,
        outputs=outs,
        materialize=m,
        strategy=strategy_of(m, h.partitioned is not None) if m else "manual",
        deps=tuple(deps.values()),
        partitioning=h.partitioned,
        trigger=h.trigger,
        debounce=h.debounce,
        schedules=h.schedules,
        kafka=h.kafka,
        webhooks=h.webhooks,
        tests=h.tests,
        column_edges=tuple(dict.fromkeys(edges)),
        output_columns=tuple(out_cols) if out_cols is not None else None,
        statements=statements,
        uses=tuple(uses),
        freshness=h.freshness,
        retry=h.retry,
        tags=h.tags,
        owners=h.owners,
        pool=h.pool,
        body_line=h.body_line,
        content_hash=content_hash(rel, "\n".join(fr.text_lines)),
    )


def _find(rel: str, target: str, files: Mapping[str, _FileResult], any_file: bool = False) -> str | None:
    folder = rel.rsplit("/", 1)[0]
    for cand in (f"{folder}/{target}", target):
        norm = Path(cand).as_posix()
        if norm in files:
            return norm
    return None


def _cycles(steps: Sequence[StepSpec], files: Mapping[str, _FileResult]) -> list[SpecError]:
    by_uri = {u: s for s in steps for u in s.outputs}
    graph = {s.name: [by_uri[d.uri].name for d in s.deps if d.uri in by_uri] for s in steps}
    by_name = {s.name: s for s in steps}
    out: list[SpecError] = []
    color: dict[str, int] = {}
    seen_cycles: set[frozenset[str]] = set()
    for start in graph:
        if color.get(start):
            continue
        stack: list[tuple[str, Iterator[str]]] = [(start, iter(graph[start]))]
        path = [start]
        color[start] = 1
        while stack:
            node, it = stack[-1]
            nxt = next(it, None)
            if nxt is None:
                color[node] = 2
                stack.pop()
                path.pop()
                continue
            if color.get(nxt) == 1:
                cyc = path[path.index(nxt):]
                if frozenset(cyc) not in seen_cycles:
                    seen_cycles.add(frozenset(cyc))
                    first = by_name[cyc[0]]
                    chain = " → ".join(by_name[n].path for n in [*cyc, cyc[0]])
                    nxt_uri = by_name[cyc[1 % len(cyc)]].uri
                    dep = next((d for d in first.deps if d.uri in by_name[cyc[1 % len(cyc)]].outputs), None)
                    fr = files[first.path]
                    loc = _loc(fr, dep.line, nxt_uri) if dep and dep.line else Location(first.path, 1)
                    out.append(SpecError(f"dependency cycle: {chain}", loc, "break the cycle: add 'mute <uri>' for a read that must not be an edge"))
            elif not color.get(nxt):
                color[nxt] = 1
                path.append(nxt)
                stack.append((nxt, iter(graph[nxt])))
    return out
